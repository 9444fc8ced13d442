"""pytest fixture `daemon`: a fresh iggyd per test (see iggyd_daemon.py)."""

import shutil
import tempfile
from pathlib import Path

import pytest

from iggyd_daemon import start_daemon, stop_daemon


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
