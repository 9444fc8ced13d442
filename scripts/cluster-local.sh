#!/usr/bin/env bash
# A local 3-node iggyd cluster for trying it: three processes on loopback,
# certificates generated for the run, one shard each, root iggy/iggy.
#
#   ./scripts/cluster-local.sh            # builds, starts, waits for Ctrl-C
#   DIR=/tmp/c3 BASE_PORT=9090 BIN=target/release/iggyd ./scripts/cluster-local.sh
#
# Clients dial any node (the SDK and CLI move to the leader):
#   iggy --tcp-server-address 127.0.0.1:8091 -u iggy -p iggy stream create s1
# Node N serves clients on BASE_PORT+N and its peers on BASE_PORT+100+N;
# its data, log and configuration are under $DIR/node-N. Ctrl-C stops all
# three (the data stays; run again to restart the same cluster).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${DIR:-$PWD/local_cluster}
BASE_PORT=${BASE_PORT:-8090}
NODES=3
BIN=${BIN:-target/debug/iggyd}

if [[ $BIN == target/debug/iggyd ]]; then
  cargo build -q -p iggyd
fi
mkdir -p "$DIR/certs"
if [[ ! -f $DIR/certs/ca.pem ]]; then
  cargo run -q -p iggyd-peer --example cluster-certs -- local "$DIR/certs" 1 2 3
fi

nodes_toml() {
  for id in $(seq 1 $NODES); do
    printf '[[cluster.nodes]]\nid = %d\naddress = "127.0.0.1:%d"\nreplication_address = "127.0.0.1:%d"\n' \
      "$id" $((BASE_PORT + id)) $((BASE_PORT + 100 + id))
  done
}

pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_all EXIT INT TERM

for id in $(seq 1 $NODES); do
  node="$DIR/node-$id"
  mkdir -p "$node"
  cat >"$node/iggyd.toml" <<EOF
data_dir = "$node/data"
[tcp]
address = "127.0.0.1:$((BASE_PORT + id))"
[admin]
socket = "$node/iggyd.sock"
[logging]
dir = "$node/log"
[root]
username = "iggy"
password = "iggy"
[sharding]
cpu_allocation = "1"
[cluster]
enabled = true
name = "local"
node_id = $id
$(nodes_toml)
[cluster.tls]
ca_file = "$DIR/certs/ca.pem"
cert_file = "$DIR/certs/node-$id.pem"
key_file = "$DIR/certs/node-$id.key"
EOF
  "$BIN" --config "$node/iggyd.toml" >"$node/stderr.log" 2>&1 &
  pids+=($!)
  echo "node $id: pid $!, clients 127.0.0.1:$((BASE_PORT + id)), peers 127.0.0.1:$((BASE_PORT + 100 + id)), $node"
done
echo "a 3-node cluster is starting; Ctrl-C stops it"
wait -n "${pids[@]}" || true
echo "a node exited; stopping the others (its log: $DIR/node-*/stderr.log)" >&2
