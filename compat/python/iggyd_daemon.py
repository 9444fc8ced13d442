"""Start and stop a real iggyd for the compat suites (pytest and the CLI
driver): `target/debug/iggyd` (or `$IGGYD_BINARY`) with a temp data
directory, `--listen 127.0.0.1:0` and `NOTIFY_SOCKET` pointed at a datagram
socket we own. Ready means `READY=1` arrived; the bound address is read from
`STATUS=serving on ADDR: ...`. No sleeps. The notify socket stays open, so a
test can wait for later notifications (a reload's `RELOADING=1`, `READY=1`).
Stopping sends SIGTERM and requires exit 0 and a log without ERROR or panic
lines.
"""

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
ROOT_USERNAME = "iggy"
ROOT_PASSWORD = "iggy"


@dataclass
class Daemon:
    address: str
    process: subprocess.Popen
    directory: Path
    notify: socket.socket

    def log(self) -> str:
        return (self.directory / "daemon.log").read_text(errors="replace")

    def admin_socket(self) -> Path:
        return self.directory / "data" / "iggyd.sock"

    def metrics_address(self) -> str:
        """The address the daemon logged for its metrics endpoint (it logs it
        before READY=1, so it is there once start_daemon returns)."""
        for line in self.log().splitlines():
            if "metrics endpoint ready" in line:
                return line.split("address=")[1].split()[0]
        raise AssertionError("no metrics endpoint in the log:\n" + self.log())
    def wait_notification(self, needle: str, timeout_s: float = 10.0) -> str:
        """Wait until a notification datagram contains `needle`."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no notification with {needle!r} within {timeout_s} s")
            self.notify.settimeout(min(left, 0.5))
            try:
                message = self.notify.recv(4096).decode(errors="replace")
            except socket.timeout:
                continue
            if needle in message:
                return message

    def reload(self) -> None:
        """SIGHUP, and wait until the reload finished (`READY=1` again)."""
        self.process.send_signal(signal.SIGHUP)
        self.wait_notification("RELOADING=1")
        self.wait_notification("READY=1")


def _binary() -> Path:
    binary = Path(os.environ.get("IGGYD_BINARY", REPO / "target" / "debug" / "iggyd"))
    if not binary.is_file():
        raise RuntimeError(f"{binary} is missing: build it first (cargo build -p iggyd)")
    return binary


def _hermetic_env(notify_path: Path, extra: dict) -> dict:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("IGGYD_", "IGGY_ROOT_", "HWLOC_"))
        and key not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "JOURNAL_STREAM")
    }
    env["NOTIFY_SOCKET"] = str(notify_path)
    env["IGGY_ROOT_USERNAME"] = ROOT_USERNAME
    env["IGGY_ROOT_PASSWORD"] = ROOT_PASSWORD
    env.update(extra)
    return env


def start_daemon(directory: Path, env: dict | None = None, listen: str = "127.0.0.1:0") -> Daemon:
    """Spawn iggyd (with `env` added, e.g. `IGGYD_*` keys) listening on
    `listen` and wait for READY=1; return where it listens."""
    notify_path = directory / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    log = open(directory / "daemon.log", "ab")
    command = [
        str(_binary()),
        "--listen",
        listen,
        "--data-dir",
        str(directory / "data"),
    ]
    process = subprocess.Popen(
        command,
        env=_hermetic_env(notify_path, env or {}),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"no READY=1 within {START_TIMEOUT_S} s")
            if process.poll() is not None:
                raise RuntimeError(f"iggyd exited with {process.returncode} before READY=1")
            notify.settimeout(min(left, 0.5))
            try:
                message = notify.recv(4096).decode(errors="replace")
            except socket.timeout:
                continue
            if "READY=1" not in message:
                continue
            status = next(
                line[len("STATUS=") :]
                for line in message.splitlines()
                if line.startswith("STATUS=")
            )
            assert status.startswith("serving on "), status
            host, port = status[len("serving on ") :].split(":")[:2]
            return Daemon(f"{host}:{int(port)}", process, directory, notify)
    except Exception:
        notify.close()
        process.kill()
        process.wait()
        raise RuntimeError(
            f"iggyd did not become ready: {command}\n--- log\n"
            + (directory / "daemon.log").read_text(errors="replace")
        )


def stop_daemon(daemon: Daemon, allowed: tuple = ()) -> None:
    """SIGTERM, bounded wait, clean exit and a clean log (ERROR lines
    containing one of `allowed` excepted)."""
    daemon.notify.close()
    daemon.process.send_signal(signal.SIGTERM)
    try:
        code = daemon.process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        daemon.process.kill()
        daemon.process.wait()
        raise AssertionError(f"iggyd did not stop within {STOP_TIMEOUT_S} s\n{daemon.log()}")
    log = daemon.log()
    bad = [
        line
        for line in log.splitlines()
        if ("ERROR" in line or "panicked" in line) and not any(a in line for a in allowed)
    ]
    assert code == 0, f"iggyd exited with {code}\n{log}"
    assert not bad, "unexpected error lines:\n" + "\n".join(bad)


CLUSTER_NODES = 3


def _free_ports(count: int) -> list:
    """Free loopback ports, all held until each is known (no repeats)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for held in sockets:
            held.bind(("127.0.0.1", 0))
        return [held.getsockname()[1] for held in sockets]
    finally:
        for held in sockets:
            held.close()


def start_cluster(directory: Path) -> list:
    """Three nodes on loopback, each with its own data directory under
    `directory`, mutual TLS from certificates made for the run by the
    peer crate's `cluster-certs` example (`$IGGYD_CLUSTER_CERTS`, built by
    scripts/python-compat.sh), 500 ms elections. Returns the nodes once
    every one sent READY=1 (joined)."""
    certs_binary = Path(
        os.environ.get(
            "IGGYD_CLUSTER_CERTS", REPO / "target" / "debug" / "examples" / "cluster-certs"
        )
    )
    if not certs_binary.is_file():
        raise RuntimeError(
            f"{certs_binary} is missing: cargo build -p iggyd-peer --example cluster-certs"
        )
    certs = directory / "certs"
    ids = list(range(1, CLUSTER_NODES + 1))
    subprocess.run(
        [str(certs_binary), "pycompat", str(certs), *map(str, ids)],
        check=True,
        capture_output=True,
    )
    ports = _free_ports(2 * CLUSTER_NODES)
    clients = {node: f"127.0.0.1:{ports[node - 1]}" for node in ids}
    peers = {node: f"127.0.0.1:{ports[CLUSTER_NODES + node - 1]}" for node in ids}
    roster = "[" + ",".join(
        f'{{id={node},address="{clients[node]}",replication_address="{peers[node]}"}}'
        for node in ids
    ) + "]"
    nodes = []
    try:
        for node in ids:
            node_dir = directory / f"node-{node}"
            node_dir.mkdir()
            env = {
                "IGGYD_SHARDING__CPU_ALLOCATION": "1",
                "IGGYD_CLUSTER__ENABLED": "true",
                "IGGYD_CLUSTER__NAME": "pycompat",
                "IGGYD_CLUSTER__NODE_ID": str(node),
                "IGGYD_CLUSTER__NODES": roster,
                "IGGYD_CLUSTER__ELECTION_TIMEOUT": "500ms",
                "IGGYD_CLUSTER__HEARTBEAT_INTERVAL": "100ms",
                "IGGYD_CLUSTER__TLS__CA_FILE": str(certs / "ca.pem"),
                "IGGYD_CLUSTER__TLS__CERT_FILE": str(certs / f"node-{node}.pem"),
                "IGGYD_CLUSTER__TLS__KEY_FILE": str(certs / f"node-{node}.key"),
            }
            # READY=1 does not wait for the peers: nodes start one by one.
            nodes.append(start_daemon(node_dir, env, clients[node]))
        return nodes
    except Exception:
        for running in nodes:
            running.process.kill()
            running.process.wait()
        raise

