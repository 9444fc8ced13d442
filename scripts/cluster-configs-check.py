#!/usr/bin/env python3
"""Checks the configurations of one cluster's nodes the way they ship:

  1. each is accepted by `iggyd --config FILE config`;
  2. the nodes form a cluster: each is started on loopback (its addresses
     moved to free ports of 127.0.0.1, its directories and admin socket into
     a temporary directory, one shard) with its own TLS files, and
     `iggyd cluster status` on the first node must report a leader for every
     group within 30 s. This is what reads the certificates: `config` checks
     only that the three files are set.

Usage: scripts/cluster-configs-check.py IGGYD CONFIG[:CREDENTIALS_DIRECTORY]...

A CREDENTIALS_DIRECTORY is exported to that node (and its `config` run) as
systemd would: files named "$CREDENTIALS_DIRECTORY/NAME" are read from it.
Used by scripts/check-nix.sh (the NixOS module's cluster example) and
scripts/check-units.sh (packaging/examples/cluster/). Exit 0 when all holds.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib

STATUS_TIMEOUT = 30.0
STOP_TIMEOUT = 45.0


def toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def to_toml(settings, prefix=""):
    """Tables as [a.b] sections, lists of tables inline (valid TOML)."""
    lines = [f"{k} = {toml_value(v)}" for k, v in settings.items() if not isinstance(v, dict)]
    for k, v in settings.items():
        if isinstance(v, dict):
            lines.append(f"\n[{prefix}{k}]")
            lines.append(to_toml(v, f"{prefix}{k}."))
    return "\n".join(lines) + "\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    # Absolute: each node runs in its own directory.
    iggyd = os.path.abspath(sys.argv[1])
    nodes = []
    for arg in sys.argv[2:]:
        path, _, credentials = arg.partition(":")
        nodes.append((path, credentials or None))
    failures = []

    def check(cond, what):
        print(("ok:   " if cond else "FAIL: ") + what)
        if not cond:
            failures.append(what)
        return cond

    def env_for(credentials):
        # Every IGGYD_* variable would be read as a configuration key.
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("IGGYD_")}
        env.pop("CREDENTIALS_DIRECTORY", None)
        if credentials:
            env["CREDENTIALS_DIRECTORY"] = credentials
        return env

    for path, credentials in nodes:
        run = subprocess.run([iggyd, "--config", path, "config"], capture_output=True, text=True,
                             env=env_for(credentials))
        check(run.returncode == 0,
              f"iggyd config accepts {os.path.basename(path)}"
              + (f": {run.stderr.strip()}" if run.returncode else ""))
    if failures:
        sys.exit(1)

    scratch = tempfile.mkdtemp(prefix="iggyd-cluster-check.")
    procs = []
    try:
        configs = [tomllib.load(open(path, "rb")) for path, _ in nodes]
        moved = {}  # "ip:port" as written -> "127.0.0.1:free"
        for config in configs:
            for node in config["cluster"]["nodes"]:
                for field in ("address", "replication_address"):
                    moved.setdefault(node[field], f"127.0.0.1:{free_port()}")
        started = []
        for index, ((path, credentials), config) in enumerate(zip(nodes, configs)):
            cluster = config["cluster"]
            this = next(n for n in cluster["nodes"] if n["id"] == cluster.get("node_id", 1))
            home = os.path.join(scratch, f"node-{cluster.get('node_id', 1)}")
            os.makedirs(home)
            config["data_dir"] = os.path.join(home, "data")
            config.setdefault("logging", {})["dir"] = os.path.join(home, "log")
            config.setdefault("admin", {})["socket"] = os.path.join(home, "iggyd.sock")
            config.setdefault("sharding", {})["cpu_allocation"] = "1"
            config.setdefault("tcp", {})["address"] = moved[this["address"]]
            for node in cluster["nodes"]:
                for field in ("address", "replication_address"):
                    node[field] = moved[node[field]]
            moved_path = os.path.join(home, "iggyd.toml")
            open(moved_path, "w").write(to_toml(config))
            stderr = open(os.path.join(home, "stderr.log"), "w")
            proc = subprocess.Popen([iggyd, "--config", moved_path], stdout=subprocess.DEVNULL,
                                    stderr=stderr, env=env_for(credentials), cwd=home)
            procs.append(proc)
            started.append((os.path.basename(path), moved_path, home, proc))

        deadline = time.monotonic() + STATUS_TIMEOUT
        first = started[0]
        status = None
        while time.monotonic() < deadline:
            exited = [(name, home, p.returncode) for name, _, home, p in started if p.poll() is not None]
            if exited:
                for name, home, code in exited:
                    lines = open(os.path.join(home, "stderr.log")).read().strip().splitlines()
                    errors = [line for line in lines if " ERROR " in line]
                    check(False, f"{name}'s node exited ({code}) before the cluster formed: "
                                 + ((errors or lines or ["no output"])[-1]))
                break
            status = subprocess.run([iggyd, "--config", first[1], "cluster", "status"],
                                    capture_output=True, text=True)
            if status.returncode == 0:
                break
            time.sleep(0.5)
        if not failures:
            check(status is not None and status.returncode == 0,
                  f"the {len(nodes)} nodes form a cluster (iggyd cluster status on "
                  f"{first[0]}'s node: every group has a leader)"
                  + ("" if status and status.returncode == 0 else
                     f": {(status.stdout + status.stderr).strip() if status else 'no answer'}"))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
