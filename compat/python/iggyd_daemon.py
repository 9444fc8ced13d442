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


def start_daemon(directory: Path, env: dict | None = None) -> Daemon:
    """Spawn iggyd (with `env` added, e.g. `IGGYD_*` keys) and wait for
    READY=1; return where it listens."""
    notify_path = directory / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    log = open(directory / "daemon.log", "ab")
    command = [
        str(_binary()),
        "--listen",
        "127.0.0.1:0",
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
