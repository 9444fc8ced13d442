"""apache-iggy 0.9.0 over TLS: `TcpConfig(tls_enabled=True, tls_domain=...,
tls_ca_file=...)` against iggyd serving `[tcp.tls]` with certificates this
test makes with the openssl CLI. Send, poll and a consumer group over TLS;
the certificate rotated mid-test by SIGHUP (new connections get the new one,
the open connection continues); a client trusting another CA is refused."""

import asyncio
import datetime
import shutil
import tempfile
from pathlib import Path

import pytest
from apache_iggy import (
    Consumer,
    IggyClient,
    PollingStrategy,
    SendMessage,
    TcpConfig,
    TcpReconnectionConfig,
)

from certs import issue_server, make_ca
from iggyd_daemon import ROOT_PASSWORD, ROOT_USERNAME, start_daemon, stop_daemon


def tls_client(address: str, ca_file: Path) -> IggyClient:
    return IggyClient(
        TcpConfig(
            server_address=address,
            tls_enabled=True,
            tls_domain="localhost",
            tls_ca_file=str(ca_file),
            # One attempt: a refused handshake is an error, not a retry loop.
            reconnection=TcpReconnectionConfig(
                enabled=False, interval=datetime.timedelta(milliseconds=100)
            ),
        )
    )


async def logged_in(address: str, ca_file: Path) -> IggyClient:
    client = tls_client(address, ca_file)
    await client.connect()
    await client.login_user(ROOT_USERNAME, ROOT_PASSWORD)
    return client


def payloads(messages) -> list[bytes]:
    return [message.payload() for message in messages]


def test_send_poll_group_rotation_and_wrong_ca_over_tls():
    """Proves send, poll by offset and consumer-group polls with auto-commit
    over TLS; rotation by SIGHUP (a client trusting only the new CA
    connects, one trusting only the old CA no longer does, the connection
    opened before keeps working); a client trusting another CA is refused."""
    directory = Path(tempfile.mkdtemp(prefix="iggyd-py-tls-"))
    first_ca = make_ca(directory, "first-ca")
    second_ca = make_ca(directory, "second-ca")
    stranger_ca = make_ca(directory, "stranger-ca")
    cert, key = directory / "server.crt", directory / "server.key"
    issue_server(directory, first_ca, cert, key)
    daemon = start_daemon(
        directory,
        env={
            "IGGYD_TCP__TLS__ENABLED": "true",
            "IGGYD_TCP__TLS__CERT_FILE": str(cert),
            "IGGYD_TCP__TLS__KEY_FILE": str(key),
        },
    )

    async def before_rotation():
        client = await logged_in(daemon.address, first_ca[0])
        await client.create_stream("tls")
        await client.create_topic("tls", "events", 2)
        for partition in range(2):
            await client.send_messages(
                "tls", "events", partition,
                [SendMessage(f"before-{partition}-{index}") for index in range(10)],
            )
        polled = await client.poll_messages(
            "tls", "events", consumer=Consumer.Single("reader"),
            polling_strategy=PollingStrategy.Offset(0), count=100, auto_commit=False,
            partition_id=1,
        )
        assert payloads(polled) == [f"before-1-{index}".encode() for index in range(10)]
        await client.create_consumer_group("tls", "events", "workers")
        await client.join_consumer_group("tls", "events", "workers")
        seen = []
        for partition in range(2):
            seen += payloads(
                await client.poll_messages(
                    "tls", "events", consumer=Consumer.Group("workers"),
                    polling_strategy=PollingStrategy.Next(), count=100, auto_commit=True,
                    partition_id=partition,
                )
            )
        assert len(seen) == 20, seen
        return client

    async def after_rotation(client):
        fresh = await logged_in(daemon.address, second_ca[0])
        await fresh.send_messages("tls", "events", 0, [SendMessage("after")])
        with pytest.raises(Exception):
            await logged_in(daemon.address, first_ca[0])
        # The connection opened before the rotation continues.
        polled = await client.poll_messages(
            "tls", "events", consumer=Consumer.Group("workers"),
            polling_strategy=PollingStrategy.Next(), count=100, auto_commit=True,
            partition_id=0,
        )
        assert payloads(polled) == [b"after"]
        with pytest.raises(Exception):
            await logged_in(daemon.address, stranger_ca[0])

    try:
        loop = asyncio.new_event_loop()
        client = loop.run_until_complete(before_rotation())
        issue_server(directory, second_ca, cert, key)
        daemon.reload()
        assert "reload: TLS certificate applied" in daemon.log()
        loop.run_until_complete(after_rotation(client))
        loop.close()
    finally:
        if daemon.process.poll() is None:
            stop_daemon(daemon)
        shutil.rmtree(directory, ignore_errors=True)
