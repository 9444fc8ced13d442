"""apache-iggy 0.9.0 (the official Python SDK, a PyO3 wrapper of the Rust
SDK 0.11.0) against the real iggyd: login, streams and topics, 10,000
messages with user headers round-tripped by offset and by next with
auto-commit, and a consumer group join and poll."""

import asyncio

from apache_iggy import (
    Consumer,
    IggyClient,
    PollingStrategy,
    SendMessage,
)

from iggyd_daemon import ROOT_PASSWORD, ROOT_USERNAME

MESSAGES = 10_000
BATCH = 500


def run(coroutine):
    return asyncio.run(coroutine)


async def connect(daemon) -> IggyClient:
    client = IggyClient(daemon.address)
    await client.connect()
    await client.login_user(ROOT_USERNAME, ROOT_PASSWORD)
    return client


def headers_of(index: int) -> dict:
    return {"index": index, "kind": "compat", "even": index % 2 == 0, "raw": bytes([index % 256, 7])}


def payload_of(index: int) -> bytes:
    return f"message-{index:05}-".encode() + bytes(range(index % 64))


def assert_message(message, index: int) -> None:
    assert message.offset() == index
    assert message.payload() == payload_of(index), index
    headers = message.user_headers()
    assert headers is not None, index
    assert headers.to_scalar_dict() == headers_of(index), index


def test_login_create_stream_and_topic(daemon):
    """Proves login, stream and topic creation and their reads: names, ids,
    partition counts and topic listing come back as created."""

    async def scenario():
        client = await connect(daemon)
        await client.ping()
        await client.create_stream("py-stream")
        stream = await client.get_stream("py-stream")
        assert stream is not None and stream.name == "py-stream"
        await client.create_topic("py-stream", "py-topic", partitions_count=3)
        topic = await client.get_topic("py-stream", "py-topic")
        assert topic is not None
        assert topic.name == "py-topic"
        assert topic.partitions_count == 3
        topics = await client.get_topics("py-stream")
        assert [t.name for t in topics] == ["py-topic"]
        assert await client.get_stream("missing") is None
        stats = await client.get_stats()
        assert stats.streams_count == 1 and stats.partitions_count == 3
        await client.logout_user()

    run(scenario())


def test_ten_thousand_messages_with_headers_by_offset_and_next(daemon):
    """Proves 10,000 messages with user headers, sent in batches of 500, read
    back identical (payload, headers, offsets) by offset, and by next with
    auto-commit: every message exactly once, then nothing, and the stored
    offset is the last one."""

    async def scenario():
        client = await connect(daemon)
        await client.create_stream("bulk")
        await client.create_topic("bulk", "t", partitions_count=1)
        for start in range(0, MESSAGES, BATCH):
            batch = [
                SendMessage(payload_of(index), user_headers=headers_of(index))
                for index in range(start, start + BATCH)
            ]
            await client.send_messages("bulk", "t", 0, batch)

        by_offset = Consumer.Single("by-offset")
        seen = 0
        while seen < MESSAGES:
            polled = await client.poll_messages(
                "bulk",
                "t",
                consumer=by_offset,
                polling_strategy=PollingStrategy.Offset(seen),
                count=1000,
                auto_commit=False,
                partition_id=0,
            )
            assert polled, f"poll by offset {seen} came back empty"
            for message in polled:
                assert_message(message, seen)
                seen += 1
        assert seen == MESSAGES

        by_next = Consumer.Single("by-next")
        seen = 0
        while True:
            polled = await client.poll_messages(
                "bulk",
                "t",
                consumer=by_next,
                polling_strategy=PollingStrategy.Next(),
                count=777,
                auto_commit=True,
                partition_id=0,
            )
            if not polled:
                break
            for message in polled:
                assert_message(message, seen)
                seen += 1
        assert seen == MESSAGES
        topic = await client.get_topic("bulk", "t")
        assert topic.messages_count == MESSAGES

    run(scenario())


def test_consumer_group_join_and_poll(daemon):
    """Proves a consumer group through the Python SDK: create, join (one
    member owns every partition), group polls with auto-commit read every
    message of every partition exactly once, and the high-level consumer
    created with `consumer_group()` reads what arrives next."""

    async def scenario():
        client = await connect(daemon)
        await client.create_stream("grp")
        await client.create_topic("grp", "t", partitions_count=3)
        for partition in range(3):
            batch = [SendMessage(f"p{partition}-{index}") for index in range(20)]
            await client.send_messages("grp", "t", partition, batch)
        await client.create_consumer_group("grp", "t", "workers")
        await client.join_consumer_group("grp", "t", "workers")
        group = await client.get_consumer_group("grp", "t", "workers")
        assert group is not None
        assert group.members_count == 1
        assert sorted(group.members[0].partitions) == [0, 1, 2]

        consumer = Consumer.Group("workers")
        received = {}
        empty_rounds = 0
        while empty_rounds <= 3:
            polled = await client.poll_messages(
                "grp",
                "t",
                consumer=consumer,
                polling_strategy=PollingStrategy.Next(),
                count=7,
                auto_commit=True,
            )
            if not polled:
                empty_rounds += 1
                continue
            empty_rounds = 0
            for message in polled:
                received.setdefault(message.partition_id(), []).append(message.payload().decode())
        assert sorted(received) == [0, 1, 2]
        for partition, payloads in received.items():
            assert payloads == [f"p{partition}-{index}" for index in range(20)]
        await client.leave_consumer_group("grp", "t", "workers")

        # The high-level consumer joins by itself and resumes from the
        # group's stored offsets: only the new messages arrive.
        await client.send_messages("grp", "t", 1, [SendMessage("late-1"), SendMessage("late-2")])
        worker = await client.consumer_group(
            "workers",
            "grp",
            "t",
            polling_strategy=PollingStrategy.Next(),
            batch_length=10,
        )
        late = []
        async for message in worker.iter_messages():
            late.append(message.payload().decode())
            if len(late) == 2:
                break
        assert late == ["late-1", "late-2"]

    run(asyncio.wait_for(scenario(), timeout=120))
