#!/usr/bin/env bash
# End-to-end test of the RPM under a real systemd (252, Debian bookworm) as
# PID 1 in systemd-nspawn, runnable by hand and from CI (as root):
#
#   scripts/nspawn-e2e.sh [--rpm FILE.rpm [--upgrade-rpm FILE.rpm]] [--load BIN] [--keep]
#
# 1. builds the RPM with the fault switch (packaging/rpm/build.sh
#    --with-fault-injection) unless --rpm is given, and the same build as a
#    newer package (RPM_DIST=.upgrade) for the `rpm -U` check; builds the
#    hand-over load (compat/examples/handover_load.rs, the official SDK)
#    unless --load is given;
# 2. builds once and caches a minimal bookworm tree with mmdebstrap
#    (IGGYD_NSPAWN_CACHE, default /var/cache/iggyd-nspawn), with the mirror
#    taken from this machine's apt sources;
# 3. copies it, installs the RPM into the copy with `rpm -i --nodeps --root`
#    (its scriptlets run chrooted: systemd-sysusers creates the iggyd user,
#    systemd-tmpfiles the directories), and bakes in a oneshot unit that runs
#    the checks (/host/run.sh) and powers the container off;
# 4. boots it with `systemd-nspawn --volatile=overlay -b` and prints the
#    transcript. Exit status 0 when no check failed (skipped checks, for
#    daemon features not built yet, do not fail the run).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

rpm_file=
upgrade_file=
load_bin=
keep=no
while [ $# -gt 0 ]; do
  case $1 in
    --rpm) rpm_file=$2; shift 2 ;;
    --upgrade-rpm) upgrade_file=$2; shift 2 ;;
    --load) load_bin=$2; shift 2 ;;
    --keep) keep=yes; shift ;;
    *) echo "usage: $0 [--rpm FILE.rpm [--upgrade-rpm FILE.rpm]] [--load BIN] [--keep]" >&2; exit 2 ;;
  esac
done

[ "$(id -u)" = 0 ] || { echo "run as root (mmdebstrap, systemd-nspawn, rpm --root)" >&2; exit 1; }
started=$(date +%s)
log() { printf '== [%3ss] %s\n' "$(($(date +%s) - started))" "$*"; }

need=()
command -v systemd-nspawn >/dev/null 2>&1 || need+=(systemd-container)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v rpm >/dev/null 2>&1 || need+=(rpm)
if [ "${#need[@]}" -gt 0 ]; then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ -z "$rpm_file" ]; then
  log "building the RPM with the fault switch (packaging/rpm/build.sh --with-fault-injection)"
  rpm_file=$(packaging/rpm/build.sh --with-fault-injection 2>"${TMPDIR:-/tmp}/iggyd-nspawn-rpmbuild.log" | tail -n1) || {
    tail -n 30 "${TMPDIR:-/tmp}/iggyd-nspawn-rpmbuild.log" >&2
    exit 1
  }
  # The same build as a newer release: what `rpm -U` installs over it.
  log "building it again as a newer package (RPM_DIST=.upgrade) for rpm -U"
  upgrade_file=$(RPM_DIST=.upgrade packaging/rpm/build.sh --with-fault-injection 2>>"${TMPDIR:-/tmp}/iggyd-nspawn-rpmbuild.log" | tail -n1) || {
    tail -n 30 "${TMPDIR:-/tmp}/iggyd-nspawn-rpmbuild.log" >&2
    exit 1
  }
fi
[ -f "$rpm_file" ] || { echo "no RPM at $rpm_file" >&2; exit 1; }
log "RPM: $(basename "$rpm_file")${upgrade_file:+, upgrade: $(basename "$upgrade_file")}"
if [ -z "$load_bin" ]; then
  log "building the hand-over load (cargo build -p iggyd-compat --example handover_load)"
  cargo build --locked -q -p iggyd-compat --example handover_load
  load_bin=${CARGO_TARGET_DIR:-$repo/target}/debug/examples/handover_load
  case $load_bin in /*) ;; *) load_bin=$repo/$load_bin ;; esac
fi
[ -x "$load_bin" ] || { echo "no hand-over load at $load_bin" >&2; exit 1; }

# --- the cached base tree -------------------------------------------------
suite=bookworm
# procps: /bin/kill for ExecReload= (util-linux has it on Fedora/EL);
# socat: a client for the admin Unix socket. rpm: `rpm -U` of the upgrade
# inside the container (its scriptlets restart the service).
include=systemd,systemd-sysv,dbus,libhwloc15,libudev1,procps,socat,rpm
cache=${IGGYD_NSPAWN_CACHE:-/var/cache/iggyd-nspawn}
mkdir -p "$cache"
mirror() {
  # The URI of this machine's Debian source for $suite (deb822 or one-line).
  local files=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
  awk -v suite="$suite" '
    /^deb[ \t]/ { for (i = 2; i <= NF; i++) if ($i !~ /^\[/) break; if ($(i + 1) == suite) { print $i; exit } }
    /^URIs:/ { uri = $2 }
    /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite && uri != "") { print uri; exit } }
    /^$/ { uri = "" }
  ' "${files[@]}" 2>/dev/null | head -n1 || true
}
key=$(printf '%s %s' "$suite" "$include" | sha256sum | cut -c1-12)
base=$cache/$suite-$key
exec 9>"$cache/.lock"
flock 9
if [ ! -x "$base/usr/lib/systemd/systemd" ]; then
  url=$(mirror)
  url=${url:-http://deb.debian.org/debian}
  log "building the $suite tree ($include) from $url into $base"
  rm -rf "$base.tmp"
  mmdebstrap --quiet --variant=apt --include="$include" "$suite" "$base.tmp" "$url"
  rm -rf "$base"
  mv "$base.tmp" "$base"
else
  log "cached $suite tree: $base"
fi

# --- the tree for this run ------------------------------------------------
run=$(mktemp -d "$cache/run.XXXXXX")
share=$run/share
tree=$run/tree
cleanup() {
  if [ "$keep" = yes ]; then echo "kept: $run" >&2; else rm -rf "$run"; fi
}
trap cleanup EXIT
mkdir -p "$share"
cp "$load_bin" "$share/handover_load"
if [ -n "$upgrade_file" ]; then cp "$upgrade_file" "$share/upgrade.rpm"; fi
log "copying the tree"
cp -a --reflink=auto "$base" "$tree"
flock -u 9

log "rpm -i --nodeps --root (scriptlets run chrooted)"
set +e
rpm -i --nodeps --root "$tree" "$rpm_file" >"$run/rpm.log" 2>&1
rpm_rc=$?
set -e
grep -v -e 'use Alien instead' -e 'you know what you are doing' "$run/rpm.log" | sed 's/^/   rpm: /' || true
[ "$rpm_rc" = 0 ] || { echo "rpm -i failed ($rpm_rc)" >&2; exit 1; }
echo "   installed: $(rpm --root "$tree" -q iggyd)"
echo "   unit state after %post (preset): $(systemctl --root="$tree" is-enabled iggyd.service 2>/dev/null || true)"
# The checks start the service themselves.
systemctl --root="$tree" disable iggyd.service >/dev/null 2>&1 || true

cat >"$tree/etc/systemd/system/iggyd-e2e.service" <<'UNIT'
[Unit]
Description=iggyd end-to-end checks (/host/run.sh)
After=basic.target dbus.service

[Service]
Type=oneshot
ExecStart=/bin/bash /host/run.sh
ExecStopPost=/bin/systemctl --no-block poweroff
TimeoutStartSec=600
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
UNIT
systemctl --root="$tree" enable iggyd-e2e.service >/dev/null 2>&1

# --- the checks, run inside the container -------------------------------
cat >"$share/run.sh" <<'CHECKS'
#!/bin/bash
# Runs inside the container as root under systemd; writes /host/out.log.
set -u
exec >/host/out.log 2>&1
pass=0 fail=0 skip=0
now_ms() { echo $(($(date +%s%N) / 1000000)); }
since_ms() { local ms=$(($(now_ms) - $1)); printf '%d.%03d s' $((ms / 1000)) $((ms % 1000)); }
ok() { pass=$((pass + 1)); echo "PASS  $*"; }
ko() { fail=$((fail + 1)); echo "FAIL  $*"; }
sk() { skip=$((skip + 1)); echo "SKIP  $*"; }
note() { echo "      $*"; }
prop() { systemctl show -p "$1" --value iggyd.service; }
finish() {
  echo
  echo "RESULT pass=$pass fail=$fail skip=$skip"
  echo "RESULT pass=$pass fail=$fail skip=$skip" >/host/result
  exit 0
}
wait_for() { # seconds, command...
  local deadline=$(($(date +%s) + $1)); shift
  until "$@"; do [ "$(date +%s)" -lt "$deadline" ] || return 1; sleep 0.2; done
}

echo "== container: $(. /etc/os-release; echo "$PRETTY_NAME"), $(systemctl --version | head -n1), $(nproc) CPUs"

# -- installation
if id iggyd >/dev/null 2>&1; then ok "sysusers scriptlet created the user: $(id iggyd)"; else ko "no iggyd user"; fi
for entry in "/var/lib/iggyd 750 iggyd:iggyd" "/var/log/iggyd 750 iggyd:iggyd" "/etc/iggyd/iggyd.toml 640 root:iggyd"; do
  set -- $entry
  got="$(stat -c '%a %U:%G' "$1" 2>/dev/null)"
  if [ "$got" = "$2 $3" ]; then ok "$1 is $got"; else ko "$1 is '$got', expected $2 $3"; fi
done

# -- start and readiness
echo; echo "== systemctl start iggyd"
start0=$(now_ms)
if timeout 100 systemctl start iggyd.service; then ok "systemctl start returned (READY=1 received) after $(since_ms "$start0")"; else ko "systemctl start failed"; fi
state=$(systemctl is-active iggyd.service)
[ "$state" = active ] && ok "is-active: active" || ko "is-active: $state"
status_text=$(prop StatusText)
case $status_text in
  "serving on "*) ok "STATUS= $status_text" ;;
  *) ko "STATUS= is '$status_text'" ;;
esac
systemctl status iggyd.service --no-pager --lines=0 | sed 's/^/      | /'
if systemctl status iggyd.service --no-pager --lines=0 | grep -q "Status: \"serving on"; then
  ok "systemctl status shows the live STATUS= line"
else
  ko "systemctl status does not show the STATUS= line"
fi
case $status_text in *"(io_uring)"*) note "driver: io_uring" ;; *) note "driver is not io_uring: $status_text" ;; esac
main_pid=$(prop MainPID)
shards=$(echo "$status_text" | sed -n 's/.*: \([0-9][0-9]*\) shards.*/\1/p')
shards=${shards:-1}

# -- watchdog pings
echo; echo "== watchdog (WatchdogSec=$(prop WatchdogUSec))"
wd0=$(prop WatchdogTimestampMonotonic)
watchdog=no
if wait_for 8 sh -c "[ \"\$(systemctl show -p WatchdogTimestampMonotonic --value iggyd.service)\" != '$wd0' ]"; then
  watchdog=yes
  ok "WATCHDOG=1 pings arrive (WatchdogTimestamp advanced)"
else
  ko "WATCHDOG=1 pings: missing (no ping in 8 s)"
  # Without pings the unit's watchdog must still do its job: kill and restart.
  if wait_for 15 sh -c '[ "$(systemctl show -p NRestarts --value iggyd.service)" -gt 0 ]'; then
    ok "the unit enforces the watchdog: a daemon that never pings is killed and restarted (NRestarts=$(prop NRestarts))"
    journalctl -u iggyd.service -o cat --no-pager | grep -E 'Watchdog timeout|Killing|Main process exited|Scheduled restart' | head -n4 | sed 's/^/      | /'
  else
    ko "no watchdog restart within 15 s although the daemon never pings"
  fi
  note "the rest runs with WatchdogSec=0 (runtime drop-in)"
  mkdir -p /run/systemd/system/iggyd.service.d
  printf '[Service]\nWatchdogSec=0\n' >/run/systemd/system/iggyd.service.d/e2e-no-watchdog.conf
  systemctl daemon-reload
  if [ "$(systemctl is-active iggyd.service)" != active ] || [ "$(prop NRestarts)" != 0 ]; then
    note "the daemon was already killed by the watchdog: restarting it"
  fi
  systemctl restart iggyd.service
  main_pid=$(prop MainPID)
fi

# -- a client: the protocol's PING
echo; echo "== PING over TCP"
address=$(echo "$status_text" | sed -n 's/^serving on \([^ ]*\): .*/\1/p')
host=${address%:*}; port=${address##*:}
host=${host#[}; host=${host%]}
zeros() { local i; for ((i = 0; i < $1; i++)); do printf '\0'; done; }
ping_frame() {
  zeros 48; printf '\x00\x01\x00\x00'   # size = 256, u32 LE at 48
  zeros 8; printf '\x05'                # command byte 5 at 60
  zeros 115; printf '\x02'              # operation byte 2 at 176
  zeros 19; printf '\x01\x00\x00\x00'   # command code 1 (PING), u32 LE at 196..200
  zeros 56
}
ping_frame >/tmp/ping.bin
note "request: $(stat -c %s /tmp/ping.bin) bytes to $host:$port"
if exec 3<>"/dev/tcp/$host/$port"; then
  cat /tmp/ping.bin >&3
  timeout 5 head -c 256 <&3 >/tmp/reply.bin
  exec 3<&- 3>&-
  size=$(stat -c %s /tmp/reply.bin)
  if [ "$size" = 0 ]; then
    ko "PING: missing (connection closed without a reply)"
  elif [ "$size" = 256 ]; then
    byte60=$(od -An -tu1 -j60 -N1 /tmp/reply.bin | tr -d ' ')
    status=$(od -An -tu4 -j216 -N4 /tmp/reply.bin | tr -d ' ')
    if [ "$byte60" = 8 ] && [ "$status" = 0 ]; then ok "PING answered: 256 bytes, byte 60 = 8, status = 0"
    else ko "PING reply: byte 60 = $byte60, status = $status"; fi
  else
    ko "PING reply of $size bytes"
  fi
else
  ko "cannot connect to $host:$port"
fi

# -- admin socket
echo; echo "== root credentials"
creds=/var/lib/iggyd/root-credentials
if [ -f "$creds" ]; then
  mode=$(stat -c '%a %U' "$creds")
  [ "$mode" = "600 iggyd" ] && ok "$creds is $mode (generated at first start)" || ko "$creds is $mode, expected 600 iggyd"
  if journalctl -u iggyd -o cat | grep -F "$(sed -n 's/^password: //p' "$creds")" >/dev/null; then
    ko "the generated root password appears in the journal"
  else
    ok "the generated root password is not in the journal"
  fi
else
  ko "no $creds after the first start"
fi

echo; echo "== admin socket"
sock=/run/iggyd/iggyd.sock
admin=no
if [ -S "$sock" ]; then
  admin=yes
  mode=$(stat -c '%a %U:%G' "$sock")
  [ "${mode%% *}" = 660 ] && ok "$sock is $mode" || ko "$sock is $mode, expected 660"
  hello=$(printf '%s\n' '{"v":1,"op":"hello"}' | timeout 5 socat -t 2 - "UNIX-CONNECT:$sock" | head -n1)
  case $hello in *'"v":1'*|*'"v": 1'*) ok "hello: $hello" ;; *) ko "hello answered '$hello'" ;; esac
  # No terminal in here: the one-shot JSON mode is what a script uses.
  if top=$(timeout 5 iggy-top --once --json 2>&1) && printf '%s' "$top" | grep -q '"shards"'; then
    ok "iggy-top --once --json attaches: $(printf '%s' "$top" | head -c 120)…"
  else
    ko "iggy-top --once --json: $top"
  fi
else
  ko "admin socket: missing (no $sock)"
fi
if version=$(iggy-top --version 2>&1); then ok "iggy-top runs: $version"; else ko "iggy-top --version: $version"; fi

# -- reload
echo; echo "== systemctl reload iggyd"
since_reload=$(date +%s)
if systemctl reload iggyd.service; then ok "systemctl reload returned 0"; else ko "systemctl reload failed"; fi
sleep 1
if [ "$(systemctl is-active iggyd.service)" = active ] && [ "$(prop MainPID)" = "$main_pid" ]; then
  ok "still active, same MainPID $main_pid"
else
  ko "after reload: $(systemctl is-active iggyd.service), MainPID $(prop MainPID) (was $main_pid)"
fi
if journalctl -u iggyd.service --since "@$since_reload" -o cat | grep -q 'signal ignored'; then
  ko "SIGHUP reload (RELOADING=1): missing (the daemon logs 'signal ignored')"
fi

# -- a frozen shard gets the service killed and restarted
echo; echo "== freeze a shard through the admin socket"
if [ "$admin" != yes ]; then
  ko "freeze_shard: missing (no admin socket)"
elif [ "$watchdog" != yes ]; then
  ko "freeze_shard: missing (no watchdog pings)"
else
  victim=$((shards - 1))
  restarts0=$(prop NRestarts)
  since=$(date +%s)
  answer=$(printf '{"v":1,"op":"fault","fault":"freeze_shard","shard":%d}\n' "$victim" |
    timeout 5 socat -t 2 - "UNIX-CONNECT:$sock" | head -n1)
  note "fault answer: $answer"
  case $answer in
    *'"error"'*|"") ko "freeze_shard: missing ($answer)" ;;
    *)
      if wait_for 40 sh -c "[ \"\$(systemctl show -p NRestarts --value iggyd.service)\" -gt $restarts0 ]"; then
        ok "systemd restarted the service: NRestarts $restarts0 -> $(prop NRestarts)"
      else
        ko "no restart within 40 s after freezing shard $victim"
      fi
      journal=$(journalctl -u iggyd.service --since "@$since" -o cat --no-pager)
      grep -E 'Watchdog timeout|watchdog' <<<"$journal" | head -n3 | sed 's/^/      | /'
      if grep -q 'Watchdog timeout' <<<"$journal"; then ok "journal: watchdog timeout"; else ko "journal has no 'Watchdog timeout'"; fi
      named=$(grep -E "shard[ =:]*$victim\\b" <<<"$journal" | head -n2)
      if [ -n "$named" ]; then ok "journal names the shard:"; sed 's/^/      | /' <<<"$named"; else ko "journal does not name shard $victim"; fi
      if wait_for 30 sh -c '[ "$(systemctl is-active iggyd.service)" = active ]'; then ok "active again after the restart"; else ko "not active after the restart"; fi
      ;;
  esac
fi

# -- restarts that refuse no client: the file descriptor store
echo; echo "== hand-over restarts (FileDescriptorStoreMax=$(prop FileDescriptorStoreMax))"
# The unit allows 5 starts in 2 minutes (StartLimitBurst=); 10 restarts, a
# SIGKILL and an upgrade within a minute are more, so this part lifts it.
mkdir -p /run/systemd/system/iggyd.service.d
printf '[Unit]\nStartLimitIntervalSec=0\n' >/run/systemd/system/iggyd.service.d/e2e-no-start-limit.conf
systemctl daemon-reload
systemctl reset-failed iggyd.service 2>/dev/null
note "runtime drop-in for this part: StartLimitIntervalSec=0"
main_pid=$(prop MainPID)
daemon_env=$(tr '\0' '\n' </proc/"$main_pid"/environ 2>/dev/null | grep -E '^(FDSTORE|SYSTEMD_EXEC_PID|LISTEN_FDS|LISTEN_FDNAMES)=' | tr '\n' ' ')
note "the daemon's environment: ${daemon_env:-none of FDSTORE, SYSTEMD_EXEC_PID, LISTEN_FDS}"
case $daemon_env in
  *FDSTORE=*) note "systemd announces the store (FDSTORE=, systemd >= 254)" ;;
  *) note "no FDSTORE= (systemd < 254): the daemon relies on SYSTEMD_EXEC_PID" ;;
esac
preserve=$(prop FileDescriptorStorePreserve 2>/dev/null)
note "FileDescriptorStorePreserve: ${preserve:-not a property of this systemd ($(systemctl --version | head -n1))}"
stored=$(prop NFileDescriptorStore 2>/dev/null)
if [ "$stored" = "$((shards + 1))" ]; then
  ok "the store holds $stored descriptors ($shards shards' listeners and the admin socket)"
else
  ko "the store holds '${stored}' descriptors, expected $((shards + 1))"
fi
if journalctl -u iggyd.service -o cat --no-pager | grep -q 'file descriptor store: .*started by systemd'; then
  ok "the daemon sees the store (started by systemd)"
else
  journalctl -u iggyd.service -o cat --no-pager | grep 'file descriptor store' | tail -n2 | sed 's/^/      | /'
fi
password=$(sed -n 's/^password: //p' /var/lib/iggyd/root-credentials 2>/dev/null)
username=$(sed -n 's/^username: //p' /var/lib/iggyd/root-credentials 2>/dev/null)
rm -f /tmp/ho.ready /tmp/ho.stop /tmp/ho.windows
: >/tmp/ho.windows
/host/handover_load --address "$address" --username "${username:-iggy}" --password "$password" \
  --ready /tmp/ho.ready --stop /tmp/ho.stop --windows /tmp/ho.windows --report /host/handover.report \
  >/host/handover.out 2>/host/handover.err &
load_pid=$!
if wait_for 60 test -f /tmp/ho.ready; then
  ok "the load runs: IggyProducer, a plain-client producer, a consumer, new connections (official SDK iggy 0.11.0)"
  sleep 3
  restart_ok=0
  for round in 1 2 3 4 5 6 7 8 9 10; do
    old=$(prop MainPID)
    begin=$(now_ms)
    if systemctl restart iggyd.service; then
      ready=$(now_ms)
      new=$(prop MainPID)
      echo "restart-$round $begin $ready $((ready - begin))" >>/tmp/ho.windows
      if [ "$new" != "$old" ] && [ "$(systemctl is-active iggyd.service)" = active ]; then
        restart_ok=$((restart_ok + 1))
      else
        ko "restart $round: MainPID $old -> $new, $(systemctl is-active iggyd.service)"
      fi
    else
      ko "systemctl restart $round failed"
    fi
    # Restarts apart by more than the SDK's reestablish_after (5 s), as real
    # ones are (README, restarts).
    sleep 6
  done
  [ "$restart_ok" = 10 ] && ok "10 x systemctl restart: a new process each time, active"
  taken=$(journalctl -u iggyd.service -o cat --no-pager | grep -c 'Iggy listener taken from the file descriptor store')
  anew=$(journalctl -u iggyd.service -o cat --no-pager | grep -c 'binding the Iggy listener anew')
  if [ "$taken" -ge $((10 * shards)) ] && [ "$anew" = 0 ]; then
    ok "every restart took the $shards listeners back from the store ($taken taken, none bound anew)"
  else
    ko "listeners taken from the store: $taken, bound anew: $anew (expected $((10 * shards)) and 0)"
  fi
  # The watchdog-style restart: SIGKILL, then Restart=on-failure.
  restarts0=$(prop NRestarts)
  old=$(prop MainPID)
  begin=$(now_ms)
  systemctl kill -s KILL iggyd.service
  if wait_for 60 sh -c "[ \"\$(systemctl show -p NRestarts --value iggyd.service)\" -gt $restarts0 ] && [ \"\$(systemctl is-active iggyd.service)\" = active ]"; then
    ready=$(now_ms)
    echo "kill $begin $ready $((ready - begin))" >>/tmp/ho.windows
    ok "systemctl kill -s KILL: restarted by Restart= (NRestarts $restarts0 -> $(prop NRestarts)) in $((ready - begin)) ms (RestartSec=$(prop RestartUSec))"
  else
    ko "no restart within 60 s after SIGKILL"
  fi
  sleep 6
  # An upgrade: rpm -U of a newer package; %postun try-restarts the service.
  if [ -f /host/upgrade.rpm ] && command -v rpm >/dev/null; then
    old=$(prop MainPID)
    begin=$(now_ms)
    if rpm -U --nodeps /host/upgrade.rpm >/tmp/rpm-u.log 2>&1; then
      ready=$(now_ms)
      echo "upgrade $begin $ready $((ready - begin))" >>/tmp/ho.windows
      if [ "$(prop MainPID)" != "$old" ] && [ "$(systemctl is-active iggyd.service)" = active ]; then
        ok "rpm -U $(rpm -q iggyd): the scriptlet restarted the service in $((ready - begin)) ms"
      else
        ko "rpm -U did not restart the service (MainPID $old -> $(prop MainPID))"
      fi
    else
      ko "rpm -U failed: $(tail -n3 /tmp/rpm-u.log)"
    fi
    grep -v -e 'use Alien instead' -e 'you know what you are doing' /tmp/rpm-u.log | sed 's/^/      rpm: /' || true
    sleep 6
  else
    sk "rpm -U: no upgrade package (run without --rpm, or pass --upgrade-rpm)"
  fi
  touch /tmp/ho.stop
  if wait_for 180 sh -c "! kill -0 $load_pid 2>/dev/null"; then
    wait "$load_pid"; load_rc=$?
  else
    load_rc=timeout
  fi
  sed 's/^/      | /' /host/handover.out
  value() { sed -n "s/^$1=\([0-9]*\).*/\1/p" /host/handover.out | head -n1; }
  field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" /host/handover.out | head -n1; }
  [ "$(value lost)" = 0 ] && ok "acknowledged messages lost: 0 (every one read back)" || ko "acknowledged messages lost: $(value lost)"
  [ "$(value app_errors)" = 0 ] && ok "errors returned to the application: 0" || ko "errors returned to the application: $(value app_errors)"
  [ "$(field refused)" = 0 ] && ok "refused connections: 0 of $(value new_connections)" || ko "refused connections: $(field refused)"
  outside=$(sed -n 's/^outside_kill broken=\([0-9]*\) transport_errors=\([0-9]*\)/\1 \2/p' /host/handover.out)
  [ "$outside" = "0 0" ] && ok "outside the SIGKILL: no broken connection, no transport error" || ko "outside the SIGKILL: broken, transport errors = $outside"
  [ "$load_rc" = 0 ] && ok "the load's verdict: clean" || ko "the load exited $load_rc"
  [ -s /host/handover.err ] && tail -n 5 /host/handover.err | sed 's/^/      stderr: /'
  journalctl -u iggyd.service -o short-unix --no-pager >/host/iggyd-journal.txt 2>&1
else
  ko "the load did not start: $(tail -n 5 /host/handover.err)"
  kill "$load_pid" 2>/dev/null
fi

# -- stop
echo; echo "== systemctl stop iggyd"
stop0=$(now_ms)
stop_since=$(date +%s)
if systemctl stop iggyd.service; then ok "systemctl stop returned after $(since_ms "$stop0")"; else ko "systemctl stop failed"; fi
result=$(prop Result); code=$(prop ExecMainCode); status=$(prop ExecMainStatus)
note "Result=$result ExecMainCode=$code ExecMainStatus=$status NRestarts=$(prop NRestarts)"
if [ "$result" = success ] && [ "$status" = 0 ]; then ok "clean exit (status 0)"; else ko "unclean stop: Result=$result status=$status"; fi
if journalctl -u iggyd.service --since "@$stop_since" -o cat | grep -qE 'SIGKILL|Killing process'; then ko "systemd had to kill the daemon on stop"; else ok "no SIGKILL needed on stop"; fi
# The store is emptied by a stop: a stopped service refuses connections.
if timeout 5 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null; then
  ko "$host:$port still accepts connections after systemctl stop"
else
  ok "after systemctl stop, $host:$port refuses connections (the store was emptied)"
fi

# -- journal
echo; echo "== journal"
journalctl -u iggyd.service -o json --no-pager >/tmp/journal.json
priorities=$(grep -o '"PRIORITY":"[0-7]"' /tmp/journal.json | sort | uniq -c | tr -s ' ' | tr '\n' ' ')
note "PRIORITY values: $priorities"
daemon_lines=$(grep -c '"SYSLOG_IDENTIFIER":"iggyd"' /tmp/journal.json || true)
if [ "$daemon_lines" -gt 0 ]; then ok "$daemon_lines journal entries from iggyd, each with a PRIORITY"; else ko "no journal entries from iggyd"; fi
# iggyd writes `<N>`-prefixed lines to the journal stream (see
# daemon/src/logging/journal.rs): journald turns them into PRIORITY=N.
if grep '"SYSLOG_IDENTIFIER":"iggyd"' /tmp/journal.json | grep -o '"PRIORITY":"[0-7]"' | grep -qv '"PRIORITY":"6"'; then
  ok "journald priorities from the daemon (not just the stream default 6)"
  grep '"SYSLOG_IDENTIFIER":"iggyd"' /tmp/journal.json | grep -o '"PRIORITY":"[0-7]"' | sort -u | tr '\n' ' ' | sed 's/^/      /'; echo
else
  ko "journald logging with priorities: missing (stderr stream, every line PRIORITY=6)"
fi
if journalctl -u iggyd.service -o cat --no-pager | grep -q $'\x1b'; then ko "ANSI escape bytes in the journal"; else ok "no ANSI escape bytes in the journal"; fi
journalctl -u iggyd.service -o short-monotonic --no-pager | tail -n 12 | sed 's/^/      | /'

# -- the syscall filter
echo; echo "== system call filter"
if journalctl -u iggyd.service -o cat --no-pager | grep -qE 'status=31/SYS|SIGSYS'; then
  ko "the daemon was killed by the syscall filter (SIGSYS)"
else
  ok "no SIGSYS / status=31/SYS"
fi
note "SystemCallFilter applied: $(prop SystemCallFilter | cut -c1-60)…"

finish
CHECKS
chmod +x "$share/run.sh"

log "booting the container (systemd-nspawn --volatile=overlay -b)"
set +e
timeout 700 systemd-nspawn --quiet --volatile=overlay -D "$tree" -b --register=no --keep-unit \
  --console=pipe --bind="$share:/host" </dev/null >"$share/console.log" 2>&1
nspawn_rc=$?
set -e
log "container exited ($nspawn_rc)"
echo
if [ -f "$share/out.log" ]; then
  cat "$share/out.log"
else
  echo "no transcript; console:"
  tail -n 40 "$share/console.log"
fi
echo
log "done in $(($(date +%s) - started)) s"
if ! grep -q 'fail=0' "$share/result" 2>/dev/null; then
  [ -f "$share/result" ] || { echo "the checks did not finish; console:" >&2; tail -n 40 "$share/console.log" >&2; }
  exit 1
fi
