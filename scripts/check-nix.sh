#!/usr/bin/env bash
# Offline checks of the Nix packaging (flake.nix, nix/*.nix). nixpkgs cannot
# be fetched here, so this checks what needs no nixpkgs:
#   1. every .nix file parses (nix-instantiate --parse);
#   2. nix/module.nix evaluates with a stub lib/pkgs (nix/stub/), and its
#      service is the same unit as systemd/iggyd.service (same directives and
#      values, store paths aside), scores <= 1.7 in systemd-analyze security,
#      opens the firewall port only when asked, and its settings are a
#      configuration iggyd accepts;
#   3. services.iggyd.cluster: the module header's 3-node example evaluated
#      for each node (LoadCredential= carries the three cluster files,
#      settings.cluster.tls points at them, the nodes differ only in
#      node_id), openFirewall opens this node's replication port too and
#      only when set, the assertions catch missing TLS files, a certificate
#      without its key and a node_id not among the nodes; with an iggyd
#      binary, certificates from the cluster-certs example are loaded as
#      systemd would (one credentials directory per node), each node's
#      iggyd.toml passes `iggyd config` and the three nodes, started on
#      loopback, elect leaders (scripts/cluster-configs-check.py);
#   4. the flake's outputs have the right shape:
#      nix flake check --no-build --override-input nixpkgs path:nix/stub
# The full check (build + NixOS VM test) needs network: see packaging/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

log() { printf '\n== %s\n' "$*"; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

if ! command -v nix >/dev/null 2>&1; then
  log "installing nix-bin"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nix-bin >/dev/null
fi
export NIX_CONFIG=$'experimental-features = nix-command flakes\nbuild-users-group =\nsubstituters =\nwarn-dirty = false'
nix --version

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

log "nix-instantiate --parse"
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.nix')
[ "${#files[@]}" -gt 0 ] || die "no .nix files"
for file in "${files[@]}"; do
  nix-instantiate --parse "$file" >/dev/null || die "$file does not parse"
  echo "ok: $file"
done

log "nix/package.nix takes every workspace member"
python3 - <<'PY' || die "nix/package.nix's fileset misses a workspace member (cargo cannot load the workspace without it)"
import re, sys, tomllib
members = tomllib.load(open("Cargo.toml", "rb"))["workspace"]["members"]
package = open("nix/package.nix").read()
missing = [m for m in members if not re.search(r"^\s*\.\./" + re.escape(m) + r"\s*$", package, re.M)]
for member in members:
    print(("FAIL: " if member in missing else "ok:   ") + f"../{member} in the source fileset")
sys.exit(1 if missing else 0)
PY

log "nix/module.nix with the stub lib and pkgs"
eval_module() {
  nix eval --impure --json --expr "import $repo/nix/stub/eval-module.nix $1"
}
eval_module '{ }' >"$scratch/default.json"
eval_module '{ openFirewall = true; settings = { tcp.address = "0.0.0.0:9090"; sharding.cpu_allocation = "physical"; logging.level = "info,iggyd::shard=debug"; shutdown.drain_timeout = "30 s"; limits.max_connections = 50000; limits.login_timeout = "5 s"; }; }' >"$scratch/custom.json"
eval_module '{ tls = { certificateFile = "/etc/pki/iggyd/fullchain.pem"; keyFile = "/etc/pki/iggyd/privkey.pem"; clientCaFile = "/etc/pki/iggyd/clients.pem"; }; }' >"$scratch/tls.json"

iggyd_bin=${IGGYD_BIN:-${CARGO_TARGET_DIR:-target}/debug/iggyd}
# The daemon reads every IGGYD_* variable as a configuration key.
unset IGGYD_BIN
python3 - "$scratch" systemd/iggyd.service "$iggyd_bin" <<'PY'
import importlib.util, json, os, re, subprocess, sys
scratch, unit_path, iggyd = sys.argv[1:]
def toml_writer():
    spec = importlib.util.spec_from_file_location("cluster_configs_check", "scripts/cluster-configs-check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.to_toml
default = json.load(open(f"{scratch}/default.json"))
custom = json.load(open(f"{scratch}/custom.json"))
tls = json.load(open(f"{scratch}/tls.json"))
failures = []
def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)

def norm(value):
    if value is True: return ["yes"]
    if value is False: return ["no"]
    if isinstance(value, list): return [" ".join(str(v) for v in value)] if all(not str(v).startswith(("@", "~")) for v in value) else [str(v) for v in value]
    return [str(value)]

# The unit file's [Service] section, directive -> list of values.
unit = {}
section = None
for line in open(unit_path):
    line = line.strip()
    if not line or line.startswith("#"): continue
    if line.startswith("["): section = line; continue
    if section != "[Service]": continue
    key, _, value = line.partition("=")
    unit.setdefault(key, []).append(value)

svc = default["service"]["serviceConfig"]
paths = {"ExecStart", "ExecReload", "ReadWritePaths"}
for key, values in unit.items():
    if key in paths: continue
    check(key in svc and norm(svc[key]) == values, f"module {key} = {svc.get(key)!r} matches the unit ({' | '.join(values)})")
for key in svc:
    if key not in paths:
        check(key in unit, f"unit has module directive {key}")
check(svc["ExecStart"].endswith("/bin/iggyd --config /etc/iggyd/iggyd.toml"), "ExecStart runs the package's iggyd with /etc/iggyd/iggyd.toml")
check(re.search(r"/bin/kill -HUP \$MAINPID$", svc["ExecReload"]) is not None, "ExecReload sends SIGHUP to the main PID")
check(svc["ReadWritePaths"] == [], "no extra ReadWritePaths for the default directories")
check(not any("@resources" in f and f.startswith("~") for f in svc["SystemCallFilter"]), "SystemCallFilter does not deny @resources")
check(default["firewall"] == [], "firewall closed by default")
check(custom["firewall"] == [9090], f"openFirewall opens the listener port: {custom['firewall']}")
check(default["users"] == ["iggyd"] and default["groups"] == ["iggyd"], "iggyd user and group")
check(default["disabledIsEmpty"], "enable = false adds nothing")
check(default["etc"] == ["iggyd/iggyd.toml"], "/etc/iggyd/iggyd.toml from settings")
check("LoadCredential" not in svc, "no credentials without tls.*")
check(tls["service"]["serviceConfig"].get("LoadCredential") == [
      "tls.crt:/etc/pki/iggyd/fullchain.pem", "tls.key:/etc/pki/iggyd/privkey.pem",
      "tls-clients-ca.pem:/etc/pki/iggyd/clients.pem"],
      f"tls.* become LoadCredential= lines: {tls['service']['serviceConfig'].get('LoadCredential')}")
check(tls["rendered"]["tcp"]["tls"] == {"enabled": True, "cert_file": "$CREDENTIALS_DIRECTORY/tls.crt",
      "key_file": "$CREDENTIALS_DIRECTORY/tls.key", "client_ca_file": "$CREDENTIALS_DIRECTORY/tls-clients-ca.pem"},
      f"tls.* point tcp.tls at the credentials: {tls['rendered']['tcp'].get('tls')}")
check(custom["rendered"]["limits"] == {"max_connections": 50000, "login_timeout": "5 s"}, "[limits] passes through settings")
check(default["settings"] == {"data_dir": "/var/lib/iggyd", "tcp": {"address": "127.0.0.1:8090"},
      "admin": {"socket": "/run/iggyd/iggyd.sock"}, "logging": {"dir": "/var/log/iggyd"}},
      f"default settings are the packaged defaults: {default['settings']}")

# The rendered unit through systemd-analyze security.
unit_text = ["[Unit]", "Description=" + default["service"]["description"], "[Service]"]
for key, value in svc.items():
    if key == "ReadWritePaths" and not value: continue
    for v in norm(value):
        unit_text.append(f"{key}={v}")
path = f"{scratch}/iggyd.service"
open(path, "w").write("\n".join(unit_text) + "\n")
out = subprocess.run(["systemd-analyze", "security", "--offline=yes", path], capture_output=True, text=True).stdout
score = re.search(r"Overall exposure level for [^:]*: ([0-9.]+)", out)
check(score is not None and float(score.group(1)) <= 1.7, f"module unit exposure {score.group(1) if score else '?'} <= 1.7")

# The rendered configuration as TOML (tables nested as [a.b]), through
# iggyd's own validation; the writer is the cluster check's.
toml = toml_writer()
if os.access(iggyd, os.X_OK):
    for name, result in (("default", default), ("custom", custom), ("tls", tls)):
        cfg = f"{scratch}/{name}.toml"
        open(cfg, "w").write(toml(result["rendered"]))
        run = subprocess.run([iggyd, "--config", cfg, "config"], capture_output=True, text=True)
        check(run.returncode == 0, f"iggyd accepts the {name} module settings{': ' + run.stderr.strip() if run.returncode else ''}")
else:
    print(f"skip: no iggyd binary at {iggyd} to validate the settings")
sys.exit(1 if failures else 0)
PY

log "nix/module.nix: services.iggyd.cluster and its 3-node example"
# The header's example (between BEGIN/END iggydNode), uncommented and
# evaluated for each node as written.
{
  echo "let"
  sed -n '/# BEGIN iggydNode/,/# END iggydNode/p' nix/module.nix | sed -e '1d' -e '$d' -e 's/^#   //'
  echo "in iggydNode"
} >"$scratch/example.nix"
for id in 1 2 3; do
  eval_module "((import $scratch/example.nix) $id).services.iggyd" >"$scratch/node-$id.json" ||
    die "the module's cluster example does not evaluate for node $id"
done
# Node 2 of a cluster whose nodes replicate on different ports, with the
# firewall opened or not, and the cluster off; then the mistakes the
# assertions catch, and the TLS files given through settings instead.
nodes='[ { id = 1; address = "10.0.0.1:9090"; replication_address = "10.0.0.1:9101"; } { id = 2; address = "10.0.0.2:9090"; replication_address = "10.0.0.2:9102"; } { id = 3; address = "10.0.0.3:9090"; replication_address = "10.0.0.3:9103"; } ]'
files='cluster = { caFile = "/etc/pki/c/ca.pem"; certificateFile = "/etc/pki/c/n.pem"; keyFile = "/etc/pki/c/n.key"; };'
eval_module "{ openFirewall = true; settings.tcp.address = \"0.0.0.0:9090\"; settings.cluster = { enabled = true; node_id = 2; nodes = $nodes; }; $files }" >"$scratch/cluster-open.json"
eval_module "{ settings.tcp.address = \"0.0.0.0:9090\"; settings.cluster = { enabled = true; node_id = 2; nodes = $nodes; }; $files }" >"$scratch/cluster-closed.json"
eval_module "{ openFirewall = true; settings.tcp.address = \"0.0.0.0:9090\"; settings.cluster = { enabled = false; node_id = 2; nodes = $nodes; }; }" >"$scratch/cluster-off.json"
eval_module "{ settings.cluster = { enabled = true; nodes = $nodes; }; }" >"$scratch/no-files.json"
eval_module "{ settings.cluster = { enabled = true; nodes = $nodes; }; cluster = { caFile = \"/c\"; certificateFile = \"/n.pem\"; }; }" >"$scratch/no-key.json"
eval_module "{ settings.cluster = { enabled = true; node_id = 4; nodes = $nodes; }; $files }" >"$scratch/not-listed.json"
eval_module "{ settings.cluster = { enabled = true; nodes = $nodes; tls = { ca_file = \"/c\"; cert_file = \"/n.pem\"; key_file = \"/n.key\"; }; }; }" >"$scratch/settings-files.json"

python3 - "$scratch" <<'PY'
import json, sys
scratch = sys.argv[1]
load = lambda name: json.load(open(f"{scratch}/{name}.json"))
failures = []
def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)

nodes = {n: load(f"node-{n}") for n in (1, 2, 3)}
for n, node in nodes.items():
    creds = node["service"]["serviceConfig"].get("LoadCredential")
    check(creds == [f"cluster-ca.pem:/etc/iggyd/cluster/ca.pem", f"cluster.crt:/etc/iggyd/cluster/node-{n}.pem",
                    f"cluster.key:/etc/iggyd/cluster/node-{n}.key"],
          f"example node {n}: LoadCredential= carries the CA, its certificate and key: {creds}")
    check(node["rendered"]["cluster"]["tls"] == {"ca_file": "$CREDENTIALS_DIRECTORY/cluster-ca.pem",
          "cert_file": "$CREDENTIALS_DIRECTORY/cluster.crt", "key_file": "$CREDENTIALS_DIRECTORY/cluster.key"},
          f"example node {n}: cluster.tls points at the credentials")
    check(node["rendered"]["cluster"]["node_id"] == n, f"example node {n}: node_id = {n}")
    check(node["failedAssertions"] == [], f"example node {n}: no assertion fails {node['failedAssertions']}")
    check(node["firewall"] == [8090, 8091], f"example node {n}: openFirewall opens 8090 and 8091: {node['firewall']}")
    same = lambda r: {**r, "cluster": {k: v for k, v in r["cluster"].items() if k != "node_id"}}
    check(same(node["rendered"]) == same(nodes[1]["rendered"]), f"example node {n}: iggyd.toml is node 1's but for node_id")

open_, closed, off = load("cluster-open"), load("cluster-closed"), load("cluster-off")
check(open_["firewall"] == [9090, 9102], f"openFirewall opens the client port and this node's replication port: {open_['firewall']}")
check(closed["firewall"] == [], f"no openFirewall, no port: {closed['firewall']}")
check(off["firewall"] == [9090], f"cluster off: only the client port: {off['firewall']}")
check(closed["service"]["serviceConfig"]["LoadCredential"] == [
      "cluster-ca.pem:/etc/pki/c/ca.pem", "cluster.crt:/etc/pki/c/n.pem", "cluster.key:/etc/pki/c/n.key"],
      "cluster.* become LoadCredential= lines")
def fails(name, words):
    messages = load(name)["failedAssertions"]
    check(any(words in m for m in messages), f"{name}: an assertion says {words!r}: {messages}")
fails("no-files", "needs caFile, certificateFile and keyFile")
fails("no-key", "cluster: certificateFile and keyFile go together")
fails("not-listed", "node_id 4 is not the id of one of settings.cluster.nodes")
check(load("settings-files")["failedAssertions"] == [], "the TLS files may come through settings.cluster.tls instead")
check(closed["failedAssertions"] == [] and off["failedAssertions"] == [], "a complete node passes the assertions")
sys.exit(1 if failures else 0)
PY

# The example's three nodes, as systemd would run them: certificates made by
# the cluster-certs example into the paths LoadCredential= names, copied into
# a credentials directory per node; each iggyd.toml through `iggyd config`
# (with the credential paths as written and substituted), then the three
# started on loopback until they elect leaders (scripts/cluster-configs-check.py).
if [ -x "$iggyd_bin" ]; then
  certs=$scratch/cluster-certs
  cargo run -q --locked -p iggyd-peer --example cluster-certs -- orders "$certs" 1 2 3 >/dev/null ||
    die "cluster-certs failed"
  python3 - "$scratch" "$certs" "$iggyd_bin" <<'PY'
import importlib.util, json, os, shutil, subprocess, sys
scratch, certs, iggyd = sys.argv[1:]
def toml_writer():
    spec = importlib.util.spec_from_file_location("cluster_configs_check", "scripts/cluster-configs-check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.to_toml
failures = []
def check(cond, what):
    print(("ok:   " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)
toml = toml_writer()
args = []
for n in (1, 2, 3):
    node = json.load(open(f"{scratch}/node-{n}.json"))
    credentials = f"{scratch}/credentials-{n}"
    os.mkdir(credentials)
    for line in node["service"]["serviceConfig"]["LoadCredential"]:
        name, _, path = line.partition(":")
        shutil.copy(path.replace("/etc/iggyd/cluster/", certs + "/"), f"{credentials}/{name}")
    rendered = node["rendered"]
    as_written = f"{scratch}/node-{n}.toml"
    open(as_written, "w").write(toml(rendered))
    substituted = f"{scratch}/node-{n}-substituted.toml"
    open(substituted, "w").write(toml(rendered).replace("$CREDENTIALS_DIRECTORY/", credentials + "/"))
    run = subprocess.run([iggyd, "--config", substituted, "config"], capture_output=True, text=True)
    check(run.returncode == 0, f"iggyd config accepts example node {n}'s iggyd.toml, credential paths substituted"
          + (f": {run.stderr.strip()}" if run.returncode else ""))
    args.append(f"{as_written}:{credentials}")
run = subprocess.run([sys.executable, "scripts/cluster-configs-check.py", iggyd, *args])
check(run.returncode == 0, "the example's three nodes form a cluster with their credentials")
sys.exit(1 if failures else 0)
PY
else
  echo "skip: no iggyd binary at $iggyd_bin to start the cluster example"
fi

log "nix flake check --no-build with the stub nixpkgs"
# Flakes see only files known to git: check a copy of the tree in a fresh repo.
copy=$scratch/flake
mkdir -p "$copy"
git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' |
  tar --null -T - -cf - | tar -C "$copy" -xf -
git -C "$copy" init -q
git -C "$copy" add -A
nix flake check --no-build --no-write-lock-file --override-input nixpkgs "path:$copy/nix/stub" "path:$copy" 2>&1 |
  grep -v "^warning: Git tree" || true
nix flake check --no-build --no-write-lock-file --override-input nixpkgs "path:$copy/nix/stub" "path:$copy" >/dev/null 2>&1 ||
  die "nix flake check failed"
echo "ok: nix flake check --no-build"
nix flake show --no-write-lock-file --override-input nixpkgs "path:$copy/nix/stub" "path:$copy" 2>/dev/null | sed "s/\x1b\[[0-9;]*m//g"
for attr in packages.x86_64-linux.iggyd-fault-injection.buildFeatures apps.x86_64-linux.default.program apps.x86_64-linux.iggy-top.program; do
  printf '%s = %s\n' "$attr" "$(nix eval --json --no-write-lock-file --override-input nixpkgs "path:$copy/nix/stub" "path:$copy#$attr" 2>/dev/null)"
done
[ "$(nix eval --json --no-write-lock-file --override-input nixpkgs "path:$copy/nix/stub" "path:$copy#packages.x86_64-linux.iggyd-fault-injection.buildFeatures" 2>/dev/null)" = '["iggyd/fault-injection"]' ] ||
  die "the fault-injection package does not enable the feature"

printf '\nall Nix checks passed (offline)\n'
