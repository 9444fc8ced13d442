#!/usr/bin/env bash
# Smoke-runs every cargo-fuzz target in daemon/fuzz/ for a short fixed time
# (FUZZ_SECONDS, default 20 s each), seeded with the golden SDK frames in
# daemon/tests/golden/frames/ (and the message batches inside their sends).
# Installs cargo-fuzz into target/tools if missing. Uses the nightly
# toolchain when rustup has one, else the pinned stable toolchain with
# RUSTC_BOOTSTRAP=1. A crash fails the script and leaves the input in
# daemon/fuzz/artifacts/<target>/; reproduce with
#   cd daemon && cargo +nightly fuzz run --target-dir ../target/fuzz <target> <artifact>
#
# Usage: scripts/fuzz-smoke.sh [TARGET...]   (default: all six)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=${FUZZ_SECONDS:-20}
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(frame_decode command_decode roundtrip batch_validate segment_recovery poll_reads)
fi

export PATH="$root/target/tools/bin:$PATH"
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz into target/tools"
  cargo install cargo-fuzz --locked --root "$root/target/tools"
fi

if rustup toolchain list | grep -q '^nightly'; then
  cargo=(cargo +nightly)
else
  # libFuzzer needs -Z flags; the stable compiler accepts them with this.
  export RUSTC_BOOTSTRAP=1
  cargo=(cargo)
fi

# Seeds: whole frames for the frame and command decoders, the batch record
# of each SendMessages frame for the batch validator.
corpus=$root/daemon/fuzz/corpus
mkdir -p "$corpus"/{frame_decode,command_decode,roundtrip,batch_validate,segment_recovery,poll_reads}
cp daemon/tests/golden/frames/*.bin "$corpus/frame_decode/"
cp daemon/tests/golden/frames/*.bin "$corpus/command_decode/"
python3 - "$root/daemon/tests/golden/frames" "$corpus/batch_validate" <<'PY'
import pathlib, struct, sys
source, target = map(pathlib.Path, sys.argv[1:])
for path in sorted(source.glob("*.bin")):
    frame = path.read_bytes()
    if frame[176] == 160:  # SendMessages: [metadata_length u32][metadata][batch]
        metadata_length = struct.unpack_from("<I", frame, 256)[0]
        (target / path.name).write_bytes(frame[256 + 4 + metadata_length:])
PY

cd daemon
start=$(date +%s)
"${cargo[@]}" fuzz build --target-dir ../target/fuzz
echo "== build: $(( $(date +%s) - start )) s"
for target in "${targets[@]}"; do
  log=$root/target/fuzz/smoke-$target.log
  start=$(date +%s)
  if ! "${cargo[@]}" fuzz run --target-dir ../target/fuzz "$target" "$corpus/$target" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
    tail -60 "$log"
    echo "== $target FAILED (log: $log)"
    exit 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  echo "== $target: $runs runs in $(( $(date +%s) - start )) s"
done
