#!/usr/bin/env python3
# Captures the request frames the official Python SDK (apache-iggy 0.9.0)
# really sends. A small recording TCP proxy sits in front of a running
# iggyd; a scripted client session goes through it (login, streams, topics,
# send with user headers, polls, offsets, consumer groups, users, PATs,
# logout). Every client -> server frame ([256-byte header][body], total size
# at header offset 48) is written to OUT_DIR as NN-<name>.bin, and
# OUT_DIR/manifest.txt lists each frame with the status of the reply it got
# (byte 60 = 13 means an eviction). Byte-identical repeats are kept once.
# Driven by scripts/capture-frames.sh.
#
# Usage: capture-frames.py DAEMON_PORT OUT_DIR

import asyncio
import socket
import struct
import sys
import threading
from pathlib import Path

import apache_iggy as iggy

OPERATIONS = {
    1: "login", 3: "logout", 128: "create-stream", 129: "update-stream",
    130: "delete-stream", 131: "purge-stream", 132: "create-topic",
    133: "update-topic", 134: "delete-topic", 135: "purge-topic",
    136: "create-partitions", 137: "delete-partitions", 138: "delete-segments",
    139: "create-group", 140: "delete-group", 141: "create-user",
    142: "update-user", 143: "delete-user", 144: "change-password",
    145: "update-permissions", 146: "create-pat", 147: "delete-pat",
    148: "join-group", 149: "leave-group", 160: "send", 161: "store-offset",
    162: "delete-offset",
}
CODES = {
    1: "ping", 10: "get-stats", 12: "get-cluster-metadata", 20: "get-me",
    22: "get-clients", 31: "get-user", 32: "get-users", 41: "get-pats",
    100: "poll", 120: "get-offset", 200: "get-stream", 201: "get-streams",
    300: "get-topic", 301: "get-topics", 600: "get-group", 601: "get-groups",
    606: "sync-group",
}


def frame_name(header: bytes) -> str:
    operation = header[176]
    if operation == 2:
        code = struct.unpack_from("<I", header, 196)[0]
        return CODES.get(code, f"code-{code}")
    return OPERATIONS.get(operation, f"op-{operation}")


def read_frame(sock: socket.socket):
    header = b""
    while len(header) < 256:
        chunk = sock.recv(256 - len(header))
        if not chunk:
            return None
        header += chunk
    size = struct.unpack_from("<I", header, 48)[0]
    body = b""
    while len(body) < size - 256:
        chunk = sock.recv(size - 256 - len(body))
        if not chunk:
            return None
        body += chunk
    return header + body


class Recorder:
    """Proxies one client connection at a time and records its frames."""

    def __init__(self, daemon_port: int, out_dir: Path):
        self.daemon_port = daemon_port
        self.out_dir = out_dir
        self.frames = []  # (file name, reply command byte, reply status)
        self.lock = threading.Lock()
        self.seen = set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while True:
            client, _ = self.listener.accept()
            threading.Thread(target=self.serve, args=(client,), daemon=True).start()

    def serve(self, client: socket.socket):
        upstream = socket.create_connection(("127.0.0.1", self.daemon_port))
        with client, upstream:
            while True:
                request = read_frame(client)
                if request is None:
                    return
                upstream.sendall(request)
                reply = read_frame(upstream)
                if reply is None:
                    return
                status = struct.unpack_from("<I", reply, 216)[0]
                with self.lock:
                    # Byte-identical repeats (the heartbeat ping, the two
                    # cluster-metadata reads after login) add nothing.
                    if request not in self.seen:
                        self.seen.add(request)
                        name = f"{len(self.frames):02d}-{frame_name(request)}.bin"
                        (self.out_dir / name).write_bytes(request)
                        self.frames.append((name, reply[60], status))
                # Recorded before the client sees the reply, so the manifest
                # written when the session ends is complete.
                client.sendall(reply)

    def manifest(self) -> str:
        lines = ["# file reply_command reply_status"]
        lines += [f"{name} {command} {status}" for name, command, status in self.frames]
        return "\n".join(lines) + "\n"


def identifier(value) -> bytes:
    if isinstance(value, int):
        return bytes([1, 4]) + struct.pack("<I", value)
    raw = value.encode()
    return bytes([2, len(raw)]) + raw


def offset_target(consumer: str) -> bytes:
    # [kind 1][Identifier][stream][topic][has_partition 1][partition 0]
    return (bytes([1]) + identifier(consumer) + identifier("golden")
            + identifier("events") + bytes([1]) + struct.pack("<I", 0))


async def session(port: int):
    client = iggy.IggyClient(f"127.0.0.1:{port}")
    await client.connect()
    await client.ping()
    await client.login_user("iggy", "iggy")
    await client.create_stream("golden")
    await client.get_streams()
    await client.get_stream("golden")
    await client.create_topic("golden", "events", 2)
    await client.get_topic("golden", "events")
    await client.get_topics("golden")
    messages = [
        iggy.SendMessage("hello"),
        iggy.SendMessage(b"\x00\x01binary", user_headers={
            iggy.HeaderKey.String("trace"): iggy.HeaderValue.String("abc-123"),
            iggy.HeaderKey.String("n"): iggy.HeaderValue.Int32(7),
        }),
    ]
    await client.send_messages("golden", "events", 0, messages)
    await client.poll_messages(
        "golden", "events", consumer=iggy.Consumer.Single("reader"),
        polling_strategy=iggy.PollingStrategy.Offset(0), count=10,
        auto_commit=False, partition_id=0)
    await client.poll_messages(
        "golden", "events", consumer=iggy.Consumer.Single("reader"),
        polling_strategy=iggy.PollingStrategy.Next(), count=10,
        auto_commit=True, partition_id=0)
    # Offsets have no typed method in the Python SDK: the SDK's raw path
    # still frames them (operation byte, checksum rules) as it does for its
    # own requests.
    await client.send_binary_request(
        121, offset_target("manual") + struct.pack("<Q", 1) + bytes([1]))
    await client.send_binary_request(120, offset_target("manual"))
    await client.send_binary_request(122, offset_target("manual") + bytes([1]))
    await client.create_consumer_group("golden", "events", "workers")
    await client.join_consumer_group("golden", "events", "workers")
    await client.get_consumer_group("golden", "events", "workers")
    await client.get_consumer_groups("golden", "events")
    await client.leave_consumer_group("golden", "events", "workers")
    await client.delete_consumer_group("golden", "events", "workers")
    await client.create_user(
        "alice", "secret-1", iggy.UserStatus.Active,
        iggy.Permissions(iggy.GlobalPermissions(read_streams=True, poll_messages=True)))
    await client.get_users()
    await client.get_user("alice")
    await client.update_user("alice", username="alice2")
    await client.change_password("alice2", "secret-1", "secret-2")
    await client.update_permissions("alice2", None)
    await client.delete_user("alice2")
    pat = bytes([6]) + b"ci-pat" + struct.pack("<Q", 0)
    await client.send_binary_request(42, pat)
    await client.send_binary_request(41, b"")
    await client.send_binary_request(43, bytes([6]) + b"ci-pat")
    await client.get_stats()
    await client.delete_topic("golden", "events")
    await client.delete_stream("golden")
    await client.logout_user()


def main():
    daemon_port = int(sys.argv[1])
    out_dir = Path(sys.argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.bin"):
        old.unlink()
    recorder = Recorder(daemon_port, out_dir)
    asyncio.run(session(recorder.port))
    (out_dir / "manifest.txt").write_text(recorder.manifest())
    failed = [f for f in recorder.frames if f[1] != 8 or f[2] != 0]
    print(f"captured {len(recorder.frames)} frames into {out_dir}")
    for name, command, status in failed:
        print(f"  not ok: {name} reply command {command} status {status}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
