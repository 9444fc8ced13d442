#!/usr/bin/env bash
# Builds release, starts a fresh iggyd on a temp directory (readiness via
# NOTIFY_SOCKET, done by `iggyd-bench --spawn`), runs the standard load
# scenarios with raw loopback baselines, prints the summary with ratios and
# stops the daemon; then the TLS row (the same load over TLS, as a ratio to
# plaintext; `iggyd-bench --tls-ratio`). Then, unless --no-storage, runs the storage benchmark on
# the same disk (a temp dir under the current directory).
#
# usage: scripts/bench.sh [--repeat N] [--duration SECONDS] [--no-storage] [--json]
#                         [--scaling] [--guard]
#   --scaling  also runs the scaling matrix (1–8 producers and consumers,
#              1/8/64 busy partitions with persisted group commit, 100 B and
#              10 KB messages, a mixed run); the table in bench/README.md
#   --guard    runs only the CI regression guard (ratios above floors)
# Numbers are ratios against baselines measured in the same run; other heavy
# processes on the machine distort them, hence the repetitions and medians.
set -euo pipefail
cd "$(dirname "$0")/.."

repeat=3
duration=3
storage=1
json=()
scaling=0
guard=0
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --no-storage) storage=0; shift ;;
    --json) json=(--json); shift ;;
    --scaling) scaling=1; shift ;;
    --guard) guard=1; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -p iggyd -p iggyd-bench >&2

# io_uring rings are locked memory on older kernels.
ulimit -l unlimited 2>/dev/null || true

if [ "$guard" = 1 ]; then
  exec "$CARGO_TARGET_DIR/release/iggyd-bench" --spawn "$CARGO_TARGET_DIR/release/iggyd" \
    --spawn-dir "$CARGO_TARGET_DIR" --guard "${json[@]}"
fi

echo "== load: 1 KB messages, 1000 per batch, 2 producers; medians of $repeat runs" >&2
"$CARGO_TARGET_DIR/release/iggyd-bench" --spawn "$CARGO_TARGET_DIR/release/iggyd" \
  --standard --producers 2 --message-size 1000 --messages-per-batch 1000 \
  --duration "$duration" --repeat "$repeat" "${json[@]}"

if [ "$scaling" = 1 ]; then
  echo "== scaling matrix: medians of $repeat runs of $duration s" >&2
  "$CARGO_TARGET_DIR/release/iggyd-bench" --spawn "$CARGO_TARGET_DIR/release/iggyd" \
    --spawn-dir "$CARGO_TARGET_DIR" --scaling --duration "$duration" --repeat "$repeat" "${json[@]}"
fi

echo "== TLS: the same producers, then consumers, over TLS and over plaintext (two spawned daemons); medians of $repeat runs" >&2
"$CARGO_TARGET_DIR/release/iggyd-bench" --spawn "$CARGO_TARGET_DIR/release/iggyd" \
  --tls-ratio --producers 2 --message-size 1000 --messages-per-batch 1000 \
  --duration "$duration" --repeat "$repeat" "${json[@]}"

if [ "$storage" = 1 ]; then
  echo "== storage: same disk as $PWD; medians of $repeat runs" >&2
  "$CARGO_TARGET_DIR/release/iggyd-storage-bench" --dir . --repeat "$repeat" "${json[@]}"
fi
