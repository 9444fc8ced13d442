#!/usr/bin/env bash
# Builds release, starts a fresh iggyd on a temp directory (readiness via
# NOTIFY_SOCKET, done by `iggyd-bench --spawn`), runs the standard load
# scenarios with raw loopback baselines, prints the summary with ratios and
# stops the daemon; then the TLS row (the same load over TLS, as a ratio to
# plaintext; `iggyd-bench --tls-ratio`). Then, unless --no-storage, runs the storage benchmark on
# the same disk (a temp dir under the current directory).
#
# usage: scripts/bench.sh [--repeat N] [--duration SECONDS] [--no-storage] [--json]
# Numbers are ratios against baselines measured in the same run; other heavy
# processes on the machine distort them, hence the repetitions and medians.
set -euo pipefail
cd "$(dirname "$0")/.."

repeat=3
duration=3
storage=1
json=()
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --no-storage) storage=0; shift ;;
    --json) json=(--json); shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -p iggyd -p iggyd-bench >&2

# io_uring rings are locked memory on older kernels.
ulimit -l unlimited 2>/dev/null || true

echo "== load: 1 KB messages, 1000 per batch, 2 producers; medians of $repeat runs" >&2
"$CARGO_TARGET_DIR/release/iggyd-bench" --spawn "$CARGO_TARGET_DIR/release/iggyd" \
  --standard --producers 2 --message-size 1000 --messages-per-batch 1000 \
  --duration "$duration" --repeat "$repeat" "${json[@]}"

echo "== TLS: the same producers, then consumers, over TLS and over plaintext (two spawned daemons); medians of $repeat runs" >&2
"$CARGO_TARGET_DIR/release/iggyd-bench" --spawn "$CARGO_TARGET_DIR/release/iggyd" \
  --tls-ratio --producers 2 --message-size 1000 --messages-per-batch 1000 \
  --duration "$duration" --repeat "$repeat" "${json[@]}"

if [ "$storage" = 1 ]; then
  echo "== storage: same disk as $PWD; medians of $repeat runs" >&2
  "$CARGO_TARGET_DIR/release/iggyd-storage-bench" --dir . --repeat "$repeat" "${json[@]}"
fi
