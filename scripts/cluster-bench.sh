#!/usr/bin/env bash
# A 3-node iggyd cluster against one iggyd node on this machine, one shard
# per node, with Apache's own iggy-bench (the peer build ab.sh uses):
# producers `replicated` and `persisted` (iggy-bench --enforce-fsync),
# consumers, throughput, p99 and the servers' CPU seconds per GB (all the
# cluster's nodes counted), interleaved rounds, medians.
#
#   cargo build --release -p iggyd && ./scripts/cluster-bench.sh
#   ROUNDS=5 TOTAL=2GB ACTORS=2 ./scripts/cluster-bench.sh [path/to/iggyd]
#
# The cluster is scripts/cluster-local.sh (three processes on loopback,
# generated certificates); the SDK in iggy-bench moves to the leader. Both
# servers start empty for each round. KEEP=1 keeps the scratch directory.
set -euo pipefail
cd "$(dirname "$0")/.."
IGGYD=${1:-target/release/iggyd}
[ -x "$IGGYD" ] || { echo "cluster-bench: no iggyd binary at $IGGYD (cargo build --release -p iggyd first)" >&2; exit 2; }
IGGYD=$(realpath "$IGGYD")
ROUNDS=${ROUNDS:-3}; TOTAL=${TOTAL:-1GB}; ACTORS=${ACTORS:-2}; MSG_SIZE=${MSG_SIZE:-1000}; BATCH=${BATCH:-1000}

CACHE=${IGGYD_PEER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/iggyd-peer}
PEER=$CACHE/apache-iggy-cc269ef
if [ ! -x "$PEER/iggy-bench" ]; then
  mkdir -p "$CACHE" && tar -xJf ../shared/peer/apache-iggy-cc269ef.tar.xz -C "$CACHE" 2>/dev/null \
    || { echo "cluster-bench: no iggy-bench in $PEER (../shared/peer/ab.sh unpacks it)" >&2; exit 2; }
fi

T=$(mktemp -d); PIDS=()
stop_all() {
  for p in "${PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
cleanup() { stop_all; if [ "${KEEP:-0}" = 1 ]; then echo "cluster-bench: raw output kept in $T" >&2; else rm -rf "$T"; fi; }
trap cleanup EXIT
trap 'exit 130' INT TERM
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
cpu_ticks() { local sum=0; for p in "$@"; do sum=$((sum + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$sum"; }

# Starts one node (single) or three (cluster) from empty; sets ADDR and SERVERS.
start() {
  local who=$1 dir=$T/$who.$2
  if [ "$who" = single ]; then
    local port; port=$(free_port)
    env IGGYD_DATA_DIR="$dir/data" IGGYD_TCP__ADDRESS=127.0.0.1:$port IGGYD_ADMIN__SOCKET="$dir/iggyd.sock" \
        IGGYD_SHARDING__CPU_ALLOCATION=1 IGGYD_STORAGE__DEFAULT_DURABILITY=replicated \
        IGGY_ROOT_USERNAME=iggy IGGY_ROOT_PASSWORD=iggy setsid "$IGGYD" >"$T/$who.$2.log" 2>&1 &
    PIDS+=($!); ADDR=127.0.0.1:$port
    wait_port "$port" || { echo "cluster-bench: iggyd did not start: $(tail -3 "$T/$who.$2.log")" >&2; exit 1; }
    SERVERS=$!
  else
    local base=$((20000 + RANDOM % 20000))
    DIR="$dir" BASE_PORT=$base BIN="$IGGYD" IGGYD_STORAGE__DEFAULT_DURABILITY=replicated \
        setsid ./scripts/cluster-local.sh >"$T/$who.$2.log" 2>&1 &
    PIDS+=($!); ADDR=127.0.0.1:$((base + 1))
    for id in 1 2 3; do
      wait_port $((base + id)) || { echo "cluster-bench: node $id did not start: $(tail -3 "$T/$who.$2.log")" >&2; exit 1; }
    done
    # The cluster serves once the metadata group has a leader.
    for _ in $(seq 1 100); do
      grep -q "the metadata group's leader leader=Some" "$dir"/node-*/log/* 2>/dev/null && break
      sleep 0.1
    done
    SERVERS=$(pgrep -f "$dir/node-[123]/iggyd.toml" | tr '\n' ' ')
  fi
}

bench() { # out kind fsync
  local fs=(); [ "$3" = 1 ] && fs=(--enforce-fsync)
  sync; sleep 1
  local c0; c0=$(cpu_ticks $SERVERS)
  # shellcheck disable=SC2046
  "$PEER/iggy-bench" -u iggy -p iggy -m "$MSG_SIZE" -P "$BATCH" -T "$TOTAL" "${fs[@]}" \
      "$2" $([ "$2" = pinned-producer ] && echo -p || echo -c) "$ACTORS" tcp --server-address "$ADDR" >"$1" 2>&1 || true
  echo "cpu_s $(( $(cpu_ticks $SERVERS) - c0 )) $(getconf CLK_TCK)" >>"$1"
}
fig() { sed -n "s/^\(Producers\|Consumers\) Results:.*$2: \([0-9.]*\).*/\2/p" "$1" | head -1; }

for r in $(seq 1 "$ROUNDS"); do
  for who in single cluster; do
    start "$who" "$r"
    bench "$T/$who.replicated.send.$r" pinned-producer 0
    bench "$T/$who.replicated.poll.$r" pinned-consumer 0
    bench "$T/$who.persisted.send.$r" pinned-producer 1
    echo "round $r $who: replicated $(fig "$T/$who.replicated.send.$r" 'Total throughput') MB/s p99 $(fig "$T/$who.replicated.send.$r" 'p99 latency') ms | poll $(fig "$T/$who.replicated.poll.$r" 'Total throughput') MB/s p99 $(fig "$T/$who.replicated.poll.$r" 'p99 latency') ms | persisted $(fig "$T/$who.persisted.send.$r" 'Total throughput') MB/s p99 $(fig "$T/$who.persisted.send.$r" 'p99 latency') ms"
    stop_all
    rm -rf "${T:?}/$who.$r"   # the servers' data (GBs); the logs and figures stay
  done
done

python3 - "$T" "$ROUNDS" <<'PY'
import re, statistics, sys
t, rounds = sys.argv[1], int(sys.argv[2])
def fig(path, what):
    try: text = open(path, errors='replace').read()
    except OSError: return None
    if what == 'cpu':
        c = re.search(r'^cpu_s (\d+) (\d+)', text, re.M)
        return int(c.group(1)) / int(c.group(2)) if c and int(c.group(1)) > 0 else None
    m = re.search(r'^(?:Producers|Consumers) Results:.*', text, re.M)
    v = m and re.search({'mb': r'Total throughput: ([0-9.]+)', 'p99': r'p99 latency: ([0-9.]+)'}[what], m.group(0))
    return float(v.group(1)) if v else None
def median(who, run, what):
    vs = [v for v in (fig(f'{t}/{who}.{run}.{r}', what) for r in range(1, rounds + 1)) if v]
    return statistics.median(vs) if vs else 0.0
out = []
for run, name in [('replicated.send', 'replicated'), ('replicated.poll', 'poll'), ('persisted.send', 'persisted')]:
    s, c = median('single', run, 'mb'), median('cluster', run, 'mb')
    sp, cp = median('single', run, 'p99'), median('cluster', run, 'p99')
    sc, cc = median('single', run, 'cpu'), median('cluster', run, 'cpu')
    out.append(f'{name} {c:.0f}/{s:.0f} MB/s ({c / s if s else 0:.2f}x), p99 {cp:.1f}/{sp:.1f} ms, cpu {cc:.2f}/{sc:.2f} s')
print('cluster-bench (3 nodes / 1 node, medians of %d rounds; cpu: server CPU seconds for the run): ' % rounds + '; '.join(out))
PY
