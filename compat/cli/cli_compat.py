"""iggy-cli 0.14.0 against the real iggyd: starts a daemon (iggyd_daemon.py:
temp dir, port 0, NOTIFY_SOCKET readiness), runs the official CLI binary for
streams, topics, messages, consumer offsets, snapshots and cleanup, and
checks what it prints (and, for a snapshot, the ZIP it writes); then TLS as
far as CLI 0.14.0 goes: it has `--tcp-tls-enabled` and a domain but no CA
file option (it trusts only the webpki roots), so against a daemon serving a
certificate of a private CA the CLI must refuse the handshake promptly, and
a plaintext CLI on the TLS port, or a TLS CLI on a plaintext port, must fail
at once with the daemon's log naming the mistake. Exits non-zero on the
first mismatch, with the command and its output.

Usage: cli_compat.py PATH_TO_IGGY_CLI
"""

import os
import shutil
import subprocess
import sys
import re
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from iggyd_daemon import ROOT_PASSWORD, ROOT_USERNAME, start_daemon, stop_daemon  # noqa: E402
from certs import issue_server, make_ca  # noqa: E402

CLI_TIMEOUT_S = 60

passed = 0
failed = 0


class Cli:
    def __init__(self, binary: str, address: str, home: Path):
        self.binary = binary
        self.address = address
        # The CLI keeps contexts and sessions under $HOME: keep it hermetic.
        self.env = dict(os.environ, HOME=str(home), NO_COLOR="1")

    def run(self, *args: str, expect_ok: bool = True, tls: bool = False) -> str:
        command = [
            self.binary,
            "--transport",
            "tcp",
            "--tcp-server-address",
            self.address,
            *(["--tcp-tls-enabled", "--tcp-tls-domain", "localhost"] if tls else []),
            "--username",
            ROOT_USERNAME,
            "--password",
            ROOT_PASSWORD,
            *args,
        ]
        result = subprocess.run(
            command,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
        )
        output = result.stdout + result.stderr
        if (result.returncode == 0) != expect_ok:
            raise AssertionError(
                f"{' '.join(command)} exited {result.returncode}, expected "
                f"{'success' if expect_ok else 'failure'}:\n{output}"
            )
        return output


def check(name: str, condition: bool, output: str) -> None:
    global passed, failed
    if condition:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}\n{output}")


def scenario(cli: Cli) -> None:
    out = cli.run("ping")
    check("ping", True, out)

    cli.run("stream", "create", "cli-stream")
    cli.run("stream", "create", "cli-other")
    out = cli.run("stream", "list")
    check("stream list shows both streams", "cli-stream" in out and "cli-other" in out, out)
    out = cli.run("stream", "get", "cli-stream")
    check("stream get names the stream", "cli-stream" in out, out)
    out = cli.run("stream", "create", "cli-stream", expect_ok=False)
    check("duplicate stream is refused", "already exists" in out.lower() or "1012" in out, out)

    cli.run("topic", "create", "cli-stream", "cli-topic", "2", "none")
    out = cli.run("topic", "list", "cli-stream")
    check("topic list shows the topic", "cli-topic" in out, out)
    out = cli.run("topic", "get", "cli-stream", "cli-topic")
    check("topic get shows 2 partitions", "cli-topic" in out and "2" in out, out)

    cli.run("message", "send", "--partition-id", "1", "cli-stream", "cli-topic", "hello", "world")
    cli.run("message", "send", "--partition-id", "0", "cli-stream", "cli-topic", "elsewhere")
    out = cli.run(
        "message", "poll", "--offset", "0", "--message-count", "10",
        "cli-stream", "cli-topic", "1",
    )
    check(
        "poll partition 1 returns what was sent there",
        "hello" in out and "world" in out and "elsewhere" not in out,
        out,
    )
    out = cli.run(
        "message", "poll", "--first", "--message-count", "10", "cli-stream", "cli-topic", "0",
    )
    check("poll partition 0 returns its message", "elsewhere" in out and "hello" not in out, out)

    out = cli.run("stats")
    check("stats", "Streams" in out or "streams" in out, out)

    consumer_offsets(cli)
    group_offsets(cli)
    snapshots(cli)

    cli.run("topic", "delete", "cli-stream", "cli-topic")
    out = cli.run("topic", "list", "cli-stream")
    check("deleted topic is gone", "cli-topic" not in out, out)
    cli.run("stream", "delete", "cli-stream")
    out = cli.run("stream", "list")
    check("deleted stream is gone", "cli-stream" not in out and "cli-other" in out, out)


def table_value(output: str, row: str) -> str:
    """The value cell of a `| Property | Value |` table row."""
    match = re.search(rf"\|\s*{re.escape(row)}\s*\|\s*([^|]*?)\s*\|", output)
    return match.group(1) if match else ""


def consumer_offsets(cli: Cli) -> None:
    out = cli.run("consumer-offset", "get", "reader", "cli-stream", "cli-topic", "1")
    check("consumer-offset get before any commit says not found", "not found" in out, out)
    cli.run("consumer-offset", "set", "reader", "cli-stream", "cli-topic", "1", "1")
    out = cli.run("consumer-offset", "get", "reader", "cli-stream", "cli-topic", "1")
    check(
        "consumer-offset set then get shows the stored and current offsets",
        table_value(out, "Stored offset") == "1" and table_value(out, "Current offset") == "1",
        out,
    )
    out = cli.run(
        "message", "poll", "--next", "--message-count", "10", "--consumer", "reader",
        "cli-stream", "cli-topic", "1",
    )
    check("poll next resumes after the stored offset", "world" not in out, out)


def group_offsets(cli: Cli) -> None:
    """A lag monitor's view: a consumer group's offsets are read by a client
    that is not a member (`--kind consumer-group`), as Apache serves them;
    an answer, not an error, before the group committed anything. (That a
    member's commit then reads back is the Rust SDK suite's groups test.)"""
    cli.run("consumer-group", "create", "cli-stream", "cli-topic", "lagmon")
    out = cli.run(
        "consumer-offset", "get", "lagmon", "cli-stream", "cli-topic", "1", "-k", "consumer-group"
    )
    check(
        "consumer-offset get --kind consumer-group by a non-member answers (not found yet)",
        "was not found" in out,
        out,
    )


def snapshots(cli: Cli) -> None:
    for compression, types, expected in [
        ("deflated", [], ["summary.json", "filesystem_overview.txt", "process_list.txt",
                          "resource_usage.json"]),
        # Python's zipfile reads stored, deflated and bzip2 (zstd and xz are
        # opened by the daemon's own tests).
        ("bzip2", ["server_config", "test"], ["summary.json", "server_config.toml", "plan.json",
                                             "metadata.json", "test.txt"]),
        ("stored", ["all"], ["summary.json", "server_config.toml", "process_list.txt"]),
    ]:
        out_dir = Path(tempfile.mkdtemp(prefix="iggyd-cli-snapshot-"))
        try:
            args = ["snapshot", "--compression", compression, "--out-dir", str(out_dir)]
            if types:
                args += ["--snapshot-types", *types]
            out = cli.run(*args)
            written = sorted(out_dir.glob("snapshot_*.zip"))
            ok = len(written) == 1 and table_value(out, "File Size (bytes)") == str(
                written[0].stat().st_size if written else -1
            )
            names = []
            if ok:
                with zipfile.ZipFile(written[0]) as archive:
                    ok = archive.testzip() is None
                    names = archive.namelist()
                    methods = {info.compress_type for info in archive.infolist()}
                    wanted = {
                        "deflated": zipfile.ZIP_DEFLATED,
                        "stored": zipfile.ZIP_STORED,
                        "bzip2": zipfile.ZIP_BZIP2,
                    }[compression]
                    ok = ok and methods == {wanted}
                    config = (
                        archive.read("server_config.toml").decode()
                        if "server_config.toml" in names
                        else ""
                    )
                    ok = ok and (not config or 'password = "<redacted>"' in config)
            check(
                f"snapshot {compression} {' '.join(types) or '(default types)'} writes a ZIP "
                "with the asked-for files",
                ok and all(name in names for name in expected),
                f"{out}\nentries: {names}",
            )
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
    out = cli.run("snapshot", "--compression", "lzma", expect_ok=False)
    check("snapshot with lzma is refused as unavailable", "5" in out or "unavailable" in out.lower(), out)


def quick_failure(cli: Cli, tls: bool) -> tuple[str, float]:
    """`iggy ping` that must fail, without reconnect retries: its output and
    how long it took."""
    started = time.monotonic()
    out = cli.run("--tcp-reconnection-max-retries", "0", "ping", expect_ok=False, tls=tls)
    return out, time.monotonic() - started


def tls_checks(binary: str, plain_address: str, plain_log, home: Path, directory: Path) -> None:
    certificates = directory / "tls"
    certificates.mkdir()
    ca = make_ca(certificates, "private-ca")
    cert, key = certificates / "server.pem", certificates / "server.key"
    issue_server(certificates, ca, cert, key)
    (directory / "tls-daemon").mkdir()
    daemon = start_daemon(
        directory / "tls-daemon",
        env={
            "IGGYD_TCP__TLS__ENABLED": "true",
            "IGGYD_TCP__TLS__CERT_FILE": str(cert),
            "IGGYD_TCP__TLS__KEY_FILE": str(key),
        },
    )
    try:
        tls_cli = Cli(binary, daemon.address, home)
        out, took = quick_failure(tls_cli, tls=True)
        log = daemon.log()
        check(
            "TLS CLI refuses a certificate of a CA it does not trust, promptly (the daemon "
            "logs the failed handshake)",
            took < 10 and "tls handshake failed" in log.lower(),
            f"{took:.1f} s\n{out}\n--- log ---\n{log[-2000:]}",
        )
        out, took = quick_failure(tls_cli, tls=False)
        log = daemon.log()
        check(
            "plaintext CLI on the TLS port fails at once, the log names the mistake",
            took < 10 and "plaintext" in log.lower(),
            f"{took:.1f} s\n{out}\n--- log ---\n{log[-2000:]}",
        )
    finally:
        stop_daemon(daemon)
    out, took = quick_failure(Cli(binary, plain_address, home), tls=True)
    log = plain_log()
    check(
        "TLS CLI on a plaintext port fails at once, the log names the mistake",
        took < 10 and "tls" in log.lower(),
        f"{took:.1f} s\n{out}\n--- log ---\n{log[-2000:]}",
    )


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    directory = Path(tempfile.mkdtemp(prefix="iggyd-cli-"))
    home = directory / "home"
    home.mkdir()
    daemon = start_daemon(directory)
    try:
        scenario(Cli(sys.argv[1], daemon.address, home))
        tls_checks(sys.argv[1], daemon.address, daemon.log, home, directory)
    except (AssertionError, subprocess.TimeoutExpired) as error:
        global failed
        failed += 1
        print(f"FAIL {error}")
    finally:
        try:
            stop_daemon(daemon)
        except AssertionError as error:
            failed += 1
            print(f"FAIL clean stop: {error}")
        shutil.rmtree(directory, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
