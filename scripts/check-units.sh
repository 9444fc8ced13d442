#!/usr/bin/env bash
# Checks the systemd units shipped in systemd/ and the packaged configuration:
#   - systemd-analyze verify (in a temporary root holding the unit, the host's
#     units and an iggyd binary), failing on ANY output: verify exits 0 on
#     most warnings;
#   - systemd-analyze security --offline=yes: exposure must be <= 1.7;
#   - the system call filter still allows what the shards need (pinning, NUMA
#     binding, io_uring), by expanding the groups with systemd-analyze;
#   - sysusers.d and tmpfiles.d files apply cleanly to a scratch root;
#   - packaging/iggyd.toml passes `iggyd --config packaging/iggyd.toml config`;
#   - packaging/examples/cluster/: the three nodes' files differ only in
#     cluster.node_id and the node's certificate and key, and with
#     certificates made by its README's OpenSSL recipe (run as written) each
#     passes `iggyd config` and the three form a cluster on loopback
#     (scripts/cluster-configs-check.py).
#
# Usage: scripts/check-units.sh            (builds target/debug/iggyd when missing)
#        IGGYD_BIN=path/to/iggyd scripts/check-units.sh
set -euo pipefail
cd "$(dirname "$0")/.."

MAX_EXPOSURE=1.7
UNIT=systemd/iggyd.service
REQUIRED_SYSCALLS=(sched_setaffinity sched_getaffinity mbind set_mempolicy get_mempolicy
  io_uring_setup io_uring_enter io_uring_register)

log() { printf '\n== %s\n' "$*"; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

if ! command -v systemd-analyze >/dev/null 2>&1; then
  log "installing systemd (systemd-analyze)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi
systemd-analyze --version | head -n1

bin=${IGGYD_BIN:-}
# The daemon reads every IGGYD_* variable as a configuration key.
unset IGGYD_BIN
if [ -z "$bin" ]; then
  bin=${CARGO_TARGET_DIR:-target}/debug/iggyd
  if [ ! -x "$bin" ]; then
    log "building $bin"
    ./scripts/setup-debian.sh
    cargo build --locked -p iggyd --bin iggyd
  fi
fi
[ -x "$bin" ] || die "no iggyd binary at $bin"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

log "systemd-analyze verify $UNIT"
# A root with the host's units (for the dependencies), the unit under test,
# /usr/bin/iggyd and /bin/kill (ExecStart=, ExecReload=).
root=$scratch/root
mkdir -p "$root/usr/bin" "$root/usr/lib/systemd" "$root/etc/systemd/system"
ln -s usr/bin "$root/bin"
cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
cp -l "$bin" "$root/usr/bin/iggyd" 2>/dev/null || cp "$bin" "$root/usr/bin/iggyd"
cp /bin/kill "$root/usr/bin/kill"
cp "$UNIT" "$root/etc/systemd/system/"
out=$(systemd-analyze verify --root="$root" iggyd.service 2>&1) || die "verify failed: $out"
[ -z "$out" ] || die "verify printed warnings:
$out"
echo "ok: no output"

log "systemd-analyze security --offline=yes $UNIT"
report=$(systemd-analyze security --offline=yes "$UNIT" 2>&1 || true)
printf '%s\n' "$report" | grep '✗' || true
score=$(printf '%s\n' "$report" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
[ -n "$score" ] || die "no exposure score in: $report"
echo "exposure: $score (maximum $MAX_EXPOSURE)"
awk -v s="$score" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s <= m) }' ||
  die "exposure $score is above $MAX_EXPOSURE"

log "system call filter keeps ${REQUIRED_SYSCALLS[*]}"
# Expand @groups recursively with systemd-analyze syscall-filter.
expand() {
  local item
  for item in "$@"; do
    if [[ $item == @* ]]; then
      # shellcheck disable=SC2046
      expand $(systemd-analyze syscall-filter "$item" 2>/dev/null |
        sed -e '1d' -e 's/^[[:space:]]*//' -e '/^#/d' -e '/^$/d')
    else
      printf '%s\n' "$item"
    fi
  done
}
allow=() deny=()
while IFS= read -r line; do
  value=${line#SystemCallFilter=}
  if [[ $value == ~* ]]; then
    read -r -a words <<<"${value#\~}"
    deny+=("${words[@]}")
  else
    read -r -a words <<<"$value"
    allow+=("${words[@]}")
  fi
done < <(grep '^SystemCallFilter=' "$UNIT")
[ "${#allow[@]}" -gt 0 ] || die "no SystemCallFilter= allow list in $UNIT"
echo "allow: ${allow[*]}"
echo "deny:  ${deny[*]}"
expand "${allow[@]}" | sort -u >"$scratch/allowed"
if [ "${#deny[@]}" -gt 0 ]; then expand "${deny[@]}" | sort -u >"$scratch/denied"; else : >"$scratch/denied"; fi
for syscall in "${REQUIRED_SYSCALLS[@]}"; do
  grep -qx "$syscall" "$scratch/allowed" || die "$syscall is not in the allow list"
  ! grep -qx "$syscall" "$scratch/denied" || die "$syscall is denied"
  echo "ok: $syscall allowed"
done

log "sysusers.d and tmpfiles.d"
sysroot=$scratch/sysroot
mkdir -p "$sysroot/etc" "$sysroot/usr/lib/sysusers.d" "$sysroot/usr/lib/tmpfiles.d"
cp systemd/iggyd.sysusers "$sysroot/usr/lib/sysusers.d/iggyd.conf"
cp systemd/iggyd.tmpfiles "$sysroot/usr/lib/tmpfiles.d/iggyd.conf"
out=$(systemd-sysusers --root="$sysroot" iggyd.conf 2>&1) || die "sysusers: $out"
printf '%s\n' "$out"
if printf '%s\n' "$out" | grep -v -e '^Creating ' -e '^$' | grep -q .; then die "sysusers warned"; fi
grep '^iggyd:' "$sysroot/etc/passwd" || die "sysusers did not create the iggyd user"
out=$(systemd-tmpfiles --root="$sysroot" --create iggyd.conf 2>&1) || die "tmpfiles: $out"
[ -z "$out" ] || die "tmpfiles printed: $out"
ids=$(awk -F: '$1 == "iggyd" { print $3 ":" $4 }' "$sysroot/etc/passwd")
for dir in var/lib/iggyd var/log/iggyd run/iggyd; do
  echo "/$dir $(stat -c '%a %u:%g' "$sysroot/$dir") (iggyd is $ids)"
  [ "$(stat -c '%a %u:%g' "$sysroot/$dir")" = "750 $ids" ] || die "/$dir is not 0750 iggyd:iggyd"
done

log "packaging/iggyd.toml"
"$bin" --config packaging/iggyd.toml config >"$scratch/effective.toml" ||
  die "iggyd rejects packaging/iggyd.toml"
for want in 'data_dir = "/var/lib/iggyd"' 'socket = "/run/iggyd/iggyd.sock"' 'dir = "/var/log/iggyd"'; do
  grep -qxF "$want" "$scratch/effective.toml" || die "effective config lacks: $want"
done
echo "ok: accepted, packaged paths in effect"

log "packaging/examples/cluster"
examples=packaging/examples/cluster
python3 - "$examples" <<'PY' || die "the cluster examples disagree (they may differ only in node_id and the node's certificate and key)"
import copy, sys, tomllib
examples = sys.argv[1]
configs = {n: tomllib.load(open(f"{examples}/node-{n}.toml", "rb")) for n in (1, 2, 3)}
def common(config):
    config = copy.deepcopy(config)
    del config["cluster"]["node_id"]
    del config["cluster"]["tls"]["cert_file"]
    del config["cluster"]["tls"]["key_file"]
    return config
failed = False
for n, config in configs.items():
    cluster = config["cluster"]
    ok = (cluster["node_id"] == n and common(config) == common(configs[1])
          and cluster["tls"]["cert_file"] == f"/etc/iggyd/tls/node-{n}.pem"
          and cluster["tls"]["key_file"] == f"/etc/iggyd/tls/node-{n}.key"
          and [node["id"] for node in cluster["nodes"]] == [1, 2, 3])
    print(("ok:   " if ok else "FAIL: ") + f"node-{n}.toml is node {n}, like the others but for node_id and its certificate and key")
    failed |= not ok
sys.exit(1 if failed else 0)
PY
# The README's OpenSSL recipe, as written, in a scratch directory.
certs=$scratch/cluster-certs
mkdir "$certs"
awk '/^With OpenSSL/ { found = 1 } found && /^```sh$/ { inside = 1; next } inside && /^```$/ { exit } inside' \
  "$examples/README.md" >"$certs/recipe.sh"
[ -s "$certs/recipe.sh" ] || die "no OpenSSL recipe in $examples/README.md"
(cd "$certs" && bash -euo pipefail recipe.sh >recipe.log 2>&1) ||
  die "the README's OpenSSL recipe failed: $(cat "$certs/recipe.log")"
echo "ok: the README's OpenSSL recipe made $(cd "$certs" && echo cluster-ca.pem node-?.pem)"
nodes=()
for file in "$examples"/node-*.toml; do
  sed "s|/etc/iggyd/tls/|$certs/|" "$file" >"$scratch/$(basename "$file")"
  nodes+=("$scratch/$(basename "$file")")
done
[ "${#nodes[@]}" -eq 3 ] || die "expected node-1.toml to node-3.toml in $examples"
python3 scripts/cluster-configs-check.py "$bin" "${nodes[@]}" ||
  die "the cluster examples do not work with the README's certificates"

printf '\nall unit checks passed (exposure %s)\n' "$score"
