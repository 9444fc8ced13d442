#!/usr/bin/env bash
# Builds and runs iggyd in the foreground with its embedded defaults:
# 127.0.0.1:8090, data in ./local_data, root user iggy/iggy.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-debian.sh
exec cargo run --release --locked --bin iggyd -- "$@"
