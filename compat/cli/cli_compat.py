"""iggy-cli 0.14.0 against the real iggyd: starts a daemon (iggyd_daemon.py:
temp dir, port 0, NOTIFY_SOCKET readiness), runs the official CLI binary for
streams, topics, messages and cleanup, and checks what it prints. Exits
non-zero on the first mismatch, with the command and its output.

Usage: cli_compat.py PATH_TO_IGGY_CLI
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from iggyd_daemon import ROOT_PASSWORD, ROOT_USERNAME, start_daemon, stop_daemon  # noqa: E402

CLI_TIMEOUT_S = 60

passed = 0
failed = 0


class Cli:
    def __init__(self, binary: str, address: str, home: Path):
        self.binary = binary
        self.address = address
        # The CLI keeps contexts and sessions under $HOME: keep it hermetic.
        self.env = dict(os.environ, HOME=str(home), NO_COLOR="1")

    def run(self, *args: str, expect_ok: bool = True) -> str:
        command = [
            self.binary,
            "--transport",
            "tcp",
            "--tcp-server-address",
            self.address,
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

    cli.run("topic", "delete", "cli-stream", "cli-topic")
    out = cli.run("topic", "list", "cli-stream")
    check("deleted topic is gone", "cli-topic" not in out, out)
    cli.run("stream", "delete", "cli-stream")
    out = cli.run("stream", "list")
    check("deleted stream is gone", "cli-stream" not in out and "cli-other" in out, out)


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
