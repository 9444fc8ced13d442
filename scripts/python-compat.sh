#!/usr/bin/env bash
# The Python compatibility suite: the official `apache-iggy` 0.9.0 wheel
# (PyO3 over the Rust SDK 0.11.0) against the real daemon binary.
#
# Creates (or reuses) the virtualenv target/py-venv with apache-iggy==0.9.0,
# pytest and prometheus-client (whose text parser reads the daemon's
# /metrics page), builds target/debug/iggyd if needed, and runs
# compat/python/. Extra arguments go to pytest (e.g. `-k consumer_group`).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=target/py-venv
SDK_VERSION=0.9.0
PROMETHEUS_CLIENT_VERSION=0.26.0

version_of() {
  "$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || true
}

if ! "$VENV/bin/python" -c 'import pytest' >/dev/null 2>&1 ||
  [ "$(version_of apache-iggy)" != "$SDK_VERSION" ] ||
  [ "$(version_of prometheus-client)" != "$PROMETHEUS_CLIENT_VERSION" ]; then
  echo "== creating $VENV with apache-iggy==$SDK_VERSION"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "apache-iggy==$SDK_VERSION" \
    "prometheus-client==$PROMETHEUS_CLIENT_VERSION" pytest
fi

# The suite drives the debug binary; `cargo nextest run --workspace` has
# usually built it already, and then this is a no-op.
cargo build --quiet --locked -p iggyd
# The cluster tests make their certificates with the peer crate's example.
cargo build --quiet --locked -p iggyd-peer --example cluster-certs

exec "$VENV/bin/python" -m pytest -p no:cacheprovider compat/python/ "$@"
