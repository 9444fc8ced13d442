#!/usr/bin/env bash
# Offline checks of the Nix packaging (flake.nix, nix/*.nix). nixpkgs cannot
# be fetched here, so this checks what needs no nixpkgs:
#   1. every .nix file parses (nix-instantiate --parse);
#   2. nix/module.nix evaluates with a stub lib/pkgs (nix/stub/), and its
#      service is the same unit as systemd/iggyd.service (same directives and
#      values, store paths aside), scores <= 1.7 in systemd-analyze security,
#      opens the firewall port only when asked, and its settings are a
#      configuration iggyd accepts;
#   3. the flake's outputs have the right shape:
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
python3 - "$scratch" systemd/iggyd.service "$iggyd_bin" <<'PY'
import json, os, re, subprocess, sys
scratch, unit_path, iggyd = sys.argv[1:]
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
# iggyd's own validation.
def toml(settings, prefix=""):
    lines = [f"{k} = {json.dumps(v)}" for k, v in settings.items() if not isinstance(v, dict)]
    for k, v in settings.items():
        if isinstance(v, dict):
            lines.append(f"\n[{prefix}{k}]")
            lines.append(toml(v, f"{prefix}{k}."))
    return "\n".join(lines) + "\n"
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
