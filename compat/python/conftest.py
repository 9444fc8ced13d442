"""pytest fixtures: `daemon`, a fresh iggyd per test, and `daemon_with`, a
factory for one started with extra environment (see iggyd_daemon.py)."""

import shutil
import tempfile
from pathlib import Path

import pytest

from iggyd_daemon import start_cluster, start_daemon, stop_daemon


@pytest.fixture
def daemon():
    directory = Path(tempfile.mkdtemp(prefix="iggyd-py-"))
    running = start_daemon(directory)
    try:
        yield running
    finally:
        if running.process.poll() is None:
            stop_daemon(running)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def daemon_with():
    """Start iggyd with extra `IGGYD_…` variables; stopped (cleanly) after
    the test."""
    started = []

    def start(env: dict):
        directory = Path(tempfile.mkdtemp(prefix="iggyd-py-"))
        running = start_daemon(directory, env)
        started.append(running)
        return running

    try:
        yield start
    finally:
        for running in started:
            if running.process.poll() is None:
                stop_daemon(running)
            shutil.rmtree(running.directory, ignore_errors=True)


@pytest.fixture
def cluster():
    """A fresh three-node cluster (iggyd_daemon.start_cluster); every node
    stopped cleanly after the test."""
    directory = Path(tempfile.mkdtemp(prefix="iggyd-py-cluster-"))
    nodes = start_cluster(directory)
    try:
        yield nodes
    finally:
        for running in nodes:
            if running.process.poll() is None:
                stop_daemon(running)
        shutil.rmtree(directory, ignore_errors=True)
