#!/usr/bin/env bash
# Re-captures the golden request frames in daemon/tests/golden/frames/ from
# the official Python SDK (apache-iggy 0.9.0): builds iggyd, starts it on a
# free loopback port with a throwaway data directory, and runs
# scripts/capture-frames.py (a recording proxy plus a scripted SDK session)
# against it. Creates its own venv in target/py-venv. Also copies the frames
# into daemon/fuzz/corpus/frame_decode/ as fuzz seeds.
#
# Usage: scripts/capture-frames.sh [OUT_DIR]   (default daemon/tests/golden/frames)
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir=${1:-daemon/tests/golden/frames}
venv=target/py-venv

if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import apache_iggy' 2>/dev/null; then
  "$venv/bin/pip" install --quiet 'apache-iggy==0.9.0'
fi

cargo build --locked -p iggyd --bin iggyd
work=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
target/debug/iggyd --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/iggyd.log" 2>&1 &
daemon=$!
cleanup() {
  kill "$daemon" 2>/dev/null || true
  wait "$daemon" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Bounded wait for the listener (the daemon logs nothing we could wait on
# more precisely without a notify socket).
for _ in $(seq 1 300); do
  if python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.1).close()" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$daemon" 2>/dev/null; then
    cat "$work/iggyd.log"
    exit 1
  fi
  sleep 0.1
done

"$venv/bin/python" scripts/capture-frames.py "$port" "$out_dir"
mkdir -p daemon/fuzz/corpus/frame_decode
cp "$out_dir"/*.bin daemon/fuzz/corpus/frame_decode/
echo "frames: $(ls "$out_dir"/*.bin | wc -l), $(cat "$out_dir"/*.bin | wc -c) bytes"
