#!/usr/bin/env bash
# The CLI compatibility suite: the official `iggy-cli` 0.14.0 against the
# real daemon binary (compat/cli/cli_compat.py starts the daemon with the same
# NOTIFY_SOCKET readiness as the other suites and checks the CLI's output).
#
# The CLI is installed once into target/tools/ (cargo install --locked, its
# build cached in target/tools-build/) and reused while `iggy --version` says
# 0.14.0. The install compiles ~400 crates: tens of minutes on a 2-core
# machine, which is why scripts/ci.sh does not run this script.
set -euo pipefail
cd "$(dirname "$0")/.."

CLI_VERSION=0.14.0
TOOLS=target/tools
CLI="$TOOLS/bin/iggy"

if ! "$CLI" --version 2>/dev/null | grep -q "$CLI_VERSION"; then
  echo "== installing iggy-cli $CLI_VERSION into $TOOLS (slow: once)"
  started=$(date +%s)
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/tools-build}" \
    cargo install --quiet --locked --root "$TOOLS" iggy-cli --version "$CLI_VERSION"
  echo "== iggy-cli installed in $(($(date +%s) - started)) s"
fi

cargo build --quiet --locked -p iggyd
exec python3 compat/cli/cli_compat.py "$CLI"
