#!/usr/bin/env bash
# The CLI compatibility suite: the official `iggy-cli` 0.14.0 against the
# real daemon binary (compat/cli/cli_compat.py starts the daemon with the same
# NOTIFY_SOCKET readiness as the other suites and checks the CLI's output).
#
#   scripts/cli-compat.sh                 install the CLI if needed, run the suite
#   scripts/cli-compat.sh --install-only  install the CLI if needed (scripts/ci.sh
#                                         runs this in the background early)
#
# The CLI is cached outside the clone, keyed by version:
# ${IGGYD_CI_CACHE:-~/.cache/iggyd-ci}/iggy-cli-0.14.0/bin/iggy, reused while
# `iggy --version` says 0.14.0, so only a fresh machine pays the install. The
# install (`cargo install --locked`, ~400 crates) builds with the release
# profile at opt-level 0 and without LTO or debug info (the suite only needs
# a correct CLI, not a fast one; release semantics keep overflow checks and
# debug assertions off, as in the published binary): measured at about
# 7 CPU-minutes. Its build directory (~1 GB) is removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

CLI_VERSION=0.14.0
CACHE="${IGGYD_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/iggyd-ci}"
ROOT="$CACHE/iggy-cli-$CLI_VERSION"
CLI="$ROOT/bin/iggy"

install_cli() {
  if "$CLI" --version 2>/dev/null | grep -q "$CLI_VERSION"; then
    return 0
  fi
  echo "== installing iggy-cli $CLI_VERSION into $ROOT (once per machine)"
  mkdir -p "$CACHE"
  local build="$CACHE/build-iggy-cli-$CLI_VERSION"
  local started
  started=$(date +%s)
  CARGO_TARGET_DIR="$build" \
    CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
    CARGO_PROFILE_RELEASE_LTO=false \
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 \
    CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_INCREMENTAL=false \
    cargo install --quiet --locked --root "$ROOT" iggy-cli --version "$CLI_VERSION"
  rm -rf "$build"
  echo "== iggy-cli installed in $(($(date +%s) - started)) s"
}

install_cli
if [ "${1:-}" = "--install-only" ]; then
  exit 0
fi

cargo build --quiet --locked -p iggyd
exec python3 compat/cli/cli_compat.py "$CLI"
