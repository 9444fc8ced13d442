#!/usr/bin/env python3
"""Measure iggyd's start-to-ready time, idle RSS and SIGTERM-to-exit time.

Starts the daemon N times on an empty data directory with NOTIFY_SOCKET
pointed at a socket this script owns, times spawn -> READY=1, reads VmRSS
after readiness (and after a short idle period), then times SIGTERM -> exit.
As a baseline in the same run it times spawn -> exit of `/bin/true`, so the
numbers can be read as "daemon start-up minus process spawn cost".

usage: scripts/startup-bench.py [--runs N] [--binary PATH] [--idle SECONDS]
"""
import argparse, os, signal, socket, statistics, subprocess, tempfile, time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def one_run(binary, idle):
    with tempfile.TemporaryDirectory() as tmp:
        notify_path = os.path.join(tmp, "notify.sock")
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        notify.settimeout(30)
        env = {k: v for k, v in os.environ.items() if not k.startswith("IGGYD_")}
        env["NOTIFY_SOCKET"] = notify_path
        started = time.perf_counter()
        proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "data")],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while True:
            message = notify.recv(4096).decode()
            if "READY=1" in message:
                break
        ready = time.perf_counter() - started
        rss_ready = rss_kib(proc.pid)
        time.sleep(idle)
        rss_idle = rss_kib(proc.pid)
        stop_at = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        stopped = time.perf_counter() - stop_at
        notify.close()
        return ready, rss_ready, rss_idle, stopped, code


def spawn_baseline(runs):
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(["/bin/true"])
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--binary", default="target/release/iggyd")
    parser.add_argument("--idle", type=float, default=1.0)
    args = parser.parse_args()
    results = [one_run(args.binary, args.idle) for _ in range(args.runs)]
    ready = [r[0] * 1000 for r in results]
    stopped = [r[3] * 1000 for r in results]
    baseline = spawn_baseline(args.runs) * 1000
    print(f"runs: {args.runs}, exit codes: {sorted(set(r[4] for r in results))}")
    print(f"start -> READY=1 ms: median {statistics.median(ready):.1f}, "
          f"min {min(ready):.1f}, max {max(ready):.1f} "
          f"(baseline spawn of /bin/true: {baseline:.1f} ms)")
    print(f"RSS at ready KiB: median {statistics.median(r[1] for r in results)}; "
          f"after {args.idle:.0f} s idle: median {statistics.median(r[2] for r in results)}")
    print(f"SIGTERM -> exit ms: median {statistics.median(stopped):.1f}, max {max(stopped):.1f}")


if __name__ == "__main__":
    main()
