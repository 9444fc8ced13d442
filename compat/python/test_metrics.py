"""The Prometheus endpoint of a live iggyd: scraped while the official Python
SDK sends messages, parsed with `prometheus_client`'s own text parser,
checked by `promtool check metrics` (Debian's `prometheus` package), and
compared number by number with the admin socket's snapshot once the load
has stopped. Also: bearer and basic authentication of scrapes."""

import asyncio
import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request

from apache_iggy import Consumer, IggyClient, PollingStrategy, SendMessage
from prometheus_client.parser import text_string_to_metric_families

from iggyd_daemon import ROOT_PASSWORD, ROOT_USERNAME

MESSAGES = 12_000
BATCH = 400
PARTITIONS = 3
SETTLE_TIMEOUT_S = 15.0


def scrape(address: str, headers: dict | None = None) -> tuple[int, str, str]:
    """(status, Content-Type, body); a 401 must carry a challenge."""
    request = urllib.request.Request(f"http://{address}/metrics", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        if error.code == 401:
            assert error.headers.get("WWW-Authenticate", "").endswith('realm="iggyd"')
        return error.code, error.headers.get("Content-Type", ""), error.read().decode()


def parse(page: str) -> dict:
    """{(sample name, frozenset of labels): value} and the family types."""
    samples = {}
    types = {}
    for family in text_string_to_metric_families(page):
        types[family.name] = family.type
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"duplicate sample {key}"
            samples[key] = sample.value
    return {"samples": samples, "types": types}


def admin_snapshot(daemon) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect(str(daemon.admin_socket()))
        client.sendall(b'{"v":1,"op":"snapshot"}\n')
        line = b""
        while not line.endswith(b"\n"):
            chunk = client.recv(1 << 16)
            assert chunk, "admin socket closed early"
            line += chunk
    response = json.loads(line)
    assert response["ok"], response
    return response["snapshot"]


def shard_labels(shard: dict) -> frozenset:
    numa = shard["numa_node"]
    return frozenset(
        {
            "shard": str(shard["shard"]),
            "cpu": str(shard["pu"]),
            "core": str(shard["core"]),
            "numa_node": "unknown" if numa is None else str(numa),
        }.items()
    )


def promtool_check(page: str) -> None:
    """`promtool check metrics` on the page; required under CI=true."""
    promtool = shutil.which("promtool")
    if promtool is None:
        assert os.environ.get("CI") != "true", "promtool is missing (apt-get install prometheus)"
        return
    result = subprocess.run(
        [promtool, "check", "metrics"], input=page, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, f"promtool check metrics:\n{result.stdout}{result.stderr}"


async def produce_and_consume(daemon) -> None:
    client = IggyClient(daemon.address)
    await client.connect()
    await client.login_user(ROOT_USERNAME, ROOT_PASSWORD)
    await client.create_stream("metrics-stream")
    await client.create_topic("metrics-stream", "load", partitions_count=PARTITIONS)
    await client.create_consumer_group("metrics-stream", "load", "readers")
    for start in range(0, MESSAGES, BATCH):
        batch = [SendMessage(f"m-{index:06}".encode() * 4) for index in range(start, start + BATCH)]
        await client.send_messages("metrics-stream", "load", (start // BATCH) % PARTITIONS, batch)
    # The group reads part of the topic, so it lags on every partition.
    await client.join_consumer_group("metrics-stream", "load", "readers")
    for _ in range(6):
        await client.poll_messages(
            "metrics-stream",
            "load",
            consumer=Consumer.Group("readers"),
            polling_strategy=PollingStrategy.Next(),
            count=500,
            auto_commit=True,
        )


def test_scrape_under_load_agrees_with_the_admin_snapshot(daemon_with):
    """Proves /metrics under load: every scrape parses, counters never go
    back, histograms count requests and fsyncs, promtool accepts the page,
    and once the load stops each number equals the admin snapshot's."""
    daemon = daemon_with({"IGGYD_METRICS__ADDRESS": "127.0.0.1:0"})
    address = daemon.metrics_address()

    async def scenario():
        load = asyncio.create_task(produce_and_consume(daemon))
        previous = {}
        scrapes = 0
        while not load.done() or scrapes < 3:
            status, content_type, page = await asyncio.to_thread(scrape, address)
            assert status == 200, page
            assert content_type.startswith("text/plain; version=0.0.4"), content_type
            samples = parse(page)["samples"]
            for key, value in samples.items():
                if key[0].endswith("_total") and key in previous:
                    assert value >= previous[key], f"{key} went back"
            previous = samples
            scrapes += 1
            await asyncio.sleep(0.05)
        await load

    asyncio.run(asyncio.wait_for(scenario(), timeout=120))

    # Wait for the once-a-second reports to show the whole load, fsynced
    # (a `replicated` topic is fsynced within storage.flush_interval).
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        snapshot = admin_snapshot(daemon)
        appended = sum(shard["messages_in_total"] for shard in snapshot["shards"])
        stored = sum(topic["messages"] for topic in snapshot["topics"])
        lag = sum(group["lag"] for topic in snapshot["topics"] for group in topic["consumer_groups"])
        samples = parse(scrape(address)[2])["samples"]
        offsets = {}
        for (name, labels), value in samples.items():
            if name in ("iggyd_partition_current_offset", "iggyd_partition_durable_offset"):
                offsets.setdefault(labels, {})[name] = value
        synced = len(offsets) == PARTITIONS and all(
            pair.get("iggyd_partition_current_offset") == pair.get("iggyd_partition_durable_offset")
            for pair in offsets.values()
        )
        if appended == MESSAGES and stored == MESSAGES and 0 < lag < MESSAGES and synced:
            break
        assert time.monotonic() < deadline, f"the reports never settled: {snapshot}"
        time.sleep(0.2)

    before = admin_snapshot(daemon)
    status, _, page = scrape(address)
    after = admin_snapshot(daemon)
    assert status == 200
    promtool_check(page)
    parsed = parse(page)
    samples, types = parsed["samples"], parsed["types"]
    assert types["iggyd_shard_messages_in"] == "counter"
    assert types["iggyd_shard_request_duration_seconds"] == "histogram"

    def metric(name: str, **labels) -> float:
        return samples[(name, frozenset((key, str(value)) for key, value in labels.items()))]

    for shard_before, shard_after in zip(before["shards"], after["shards"]):
        labels = shard_labels(shard_before)
        for series, field in [
            ("iggyd_shard_messages_in_total", "messages_in_total"),
            ("iggyd_shard_messages_out_total", "messages_out_total"),
            ("iggyd_shard_in_bytes_total", "bytes_in_total"),
            ("iggyd_shard_out_bytes_total", "bytes_out_total"),
            ("iggyd_shard_partitions", "partitions"),
        ]:
            value = samples[(series, labels)]
            assert shard_before[field] == value == shard_after[field], (series, labels)
        assert samples[("iggyd_shard_connections", labels)] == shard_after["connections"]
    total_in = sum(
        value for (name, _), value in samples.items() if name == "iggyd_shard_messages_in_total"
    )
    assert total_in == MESSAGES
    requests = sum(
        value
        for (name, _), value in samples.items()
        if name == "iggyd_shard_request_duration_seconds_count"
    )
    fsyncs = sum(
        value
        for (name, _), value in samples.items()
        if name == "iggyd_shard_fsync_duration_seconds_count"
    )
    assert requests >= MESSAGES // BATCH, requests
    assert fsyncs > 0

    for topic in after["topics"]:
        for partition in topic["partitions"]:
            labels = dict(stream=topic["stream"], topic=topic["topic"], partition=partition["partition_id"])
            assert metric("iggyd_partition_messages", **labels) == partition["messages"]
            assert metric("iggyd_partition_size_bytes", **labels) == partition["bytes"]
            assert metric("iggyd_partition_segments", **labels) == partition["segments"]
            assert metric("iggyd_partition_current_offset", **labels) == partition["current_offset"]
            # Everything was fsynced before the comparison (see above).
            assert metric("iggyd_partition_durable_offset", **labels) == partition["current_offset"]
        for group in topic["consumer_groups"]:
            lags = [
                metric(
                    "iggyd_consumer_group_lag_messages",
                    stream=topic["stream"],
                    topic=topic["topic"],
                    group=group["name"],
                    partition=partition["partition_id"],
                )
                for partition in topic["partitions"]
            ]
            assert sum(lags) == group["lag"] == before_lag(before, topic, group)
            assert metric(
                "iggyd_consumer_group_members",
                stream=topic["stream"],
                topic=topic["topic"],
                group=group["name"],
            ) == group["members"]
    assert metric("iggyd_process_resident_memory_bytes") > 0
    assert metric("iggyd_process_open_fds") > 0
    uptime = metric("iggyd_process_uptime_seconds")
    assert before["process"]["uptime_ms"] / 1000 <= uptime <= after["process"]["uptime_ms"] / 1000


def before_lag(snapshot: dict, topic: dict, group: dict) -> int:
    for candidate in snapshot["topics"]:
        if candidate["topic_id"] == topic["topic_id"] and candidate["stream_id"] == topic["stream_id"]:
            for found in candidate["consumer_groups"]:
                if found["group_id"] == group["group_id"]:
                    return found["lag"]
    raise AssertionError(f"group {group} missing before")


def test_scrapes_need_the_configured_credentials(daemon_with, tmp_path):
    """Proves bearer and basic authentication: no or wrong credentials get
    401 with a challenge, the right ones the page; other paths 404."""
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    daemon = daemon_with(
        {"IGGYD_METRICS__ADDRESS": "127.0.0.1:0", "IGGYD_METRICS__BEARER_TOKEN_FILE": str(token)}
    )
    address = daemon.metrics_address()
    status, _, _ = scrape(address)
    assert status == 401
    status, _, _ = scrape(address, {"Authorization": "Bearer wrong"})
    assert status == 401
    status, _, page = scrape(address, {"Authorization": "Bearer s3cret-token"})
    assert status == 200 and "iggyd_build_info" in page
    status, _, _ = scrape_path(address, "/other")
    assert status == 404

    basic = tmp_path / "basic"
    basic.write_text("prometheus:pa:ss\n")
    daemon = daemon_with(
        {"IGGYD_METRICS__ADDRESS": "127.0.0.1:0", "IGGYD_METRICS__BASIC_AUTH_FILE": str(basic)}
    )
    address = daemon.metrics_address()
    good = base64.b64encode(b"prometheus:pa:ss").decode()
    bad = base64.b64encode(b"prometheus:wrong").decode()
    assert scrape(address, {"Authorization": f"Basic {bad}"})[0] == 401
    assert scrape(address, {"Authorization": f"Basic {good}"})[0] == 200


def scrape_path(address: str, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, "", error.read().decode()
