#!/usr/bin/env bash
# Checks the iggyd RPM: builds it with packaging/rpm/build.sh (or takes the
# one given), then checks its file list with modes and owners (rpm -qlvp),
# its config and ghost flags, its scriptlets, and that rpmlint reports 0 errors.
#
# Usage: packaging/rpm/check.sh [PATH.rpm]
set -euo pipefail
cd "$(dirname "$0")/../.."

die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
log() { printf '\n== %s\n' "$*"; }

if [ $# -ge 1 ]; then
  rpm_file=$1
else
  log "building the RPM"
  rpm_file=$(packaging/rpm/build.sh | tail -n1)
fi
[ -f "$rpm_file" ] || die "no RPM at $rpm_file"
command -v rpmlint >/dev/null 2>&1 ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rpm rpmlint >/dev/null
echo "$rpm_file"

log "rpm -qip"
rpm -qip "$rpm_file" 2>/dev/null | grep -E '^(Name|Version|Release|Architecture|License|Summary)'

log "rpm -qlvp"
listing=$(rpm -qlvp "$rpm_file")
printf '%s\n' "$listing"

# mode owner group path; the doc directory depends on the distribution's
# %_pkgdocdir, so it is matched by name.
expected=(
  "-rwxr-xr-x root root /usr/bin/iggyd"
  "-rwxr-xr-x root root /usr/bin/iggy-top"
  "-rw-r--r-- root root /usr/lib/systemd/system/iggyd.service"
  "-rw-r--r-- root root /usr/lib/sysusers.d/iggyd.conf"
  "-rw-r--r-- root root /usr/lib/tmpfiles.d/iggyd.conf"
  "drwxr-xr-x root root /etc/iggyd"
  "-rw-r----- root iggyd /etc/iggyd/iggyd.toml"
  "drwxr-x--- root iggyd /etc/iggyd/tls"
  "drwxr-x--- iggyd iggyd /var/lib/iggyd"
  "drwxr-x--- iggyd iggyd /var/log/iggyd"
  "drwxr-x--- iggyd iggyd /run/iggyd"
  "-rw-r--r-- root root /usr/share/iggyd/grafana/iggyd.json"
  "-rw-r--r-- root root */licenses/iggyd*/LICENSE"
  "-rw-r--r-- root root */doc/iggyd*/README.md"
  "-rw-r--r-- root root */doc/iggyd*/README.packaging.md"
  "-rw-r--r-- root root */doc/iggyd*/ARCHITECTURE.md"
  "-rw-r--r-- root root */doc/iggyd*/examples/cluster/README.md"
  "-rw-r--r-- root root */doc/iggyd*/examples/cluster/node-1.toml"
  "-rw-r--r-- root root */doc/iggyd*/examples/cluster/node-2.toml"
  "-rw-r--r-- root root */doc/iggyd*/examples/cluster/node-3.toml"
)
log "expected files and modes"
table=$(printf '%s\n' "$listing" | awk '{ print $1, $3, $4, $NF }')
for want in "${expected[@]}"; do
  read -r mode owner group path <<<"$want"
  found=no
  while read -r m o g p; do
    # shellcheck disable=SC2053
    if [[ $p == $path && $m == "$mode" && $o == "$owner" && $g == "$group" ]]; then found=yes; break; fi
  done <<<"$table"
  [ $found = yes ] || die "missing or wrong: $want"
  echo "ok: $want"
done

log "flags: %config(noreplace) and %ghost"
rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$rpm_file" | grep -E '^[a-z]+ ' || true
rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$rpm_file" | grep -qx 'cn /etc/iggyd/iggyd.toml' ||
  die "/etc/iggyd/iggyd.toml is not %config(noreplace)"
rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$rpm_file" | grep -qx 'g /run/iggyd' ||
  die "/run/iggyd is not %ghost"
echo "ok"

log "scriptlets"
scripts=$(rpm -qp --scripts "$rpm_file")
for want in 'preinstall scriptlet' 'postinstall scriptlet' 'preuninstall scriptlet' 'postuninstall scriptlet' \
  'iggyd' 'iggyd.service'; do
  grep -qF "$want" <<<"$scripts" || die "scriptlets lack: $want"
done
echo "ok: pre (sysusers), post, preun, postun present"

log "rpmlint"
set +e
lint=$(rpmlint -c packaging/rpm/rpmlint.toml "$rpm_file" 2>&1)
set -e
printf '%s\n' "$lint"
summary=$(printf '%s\n' "$lint" | grep -E '[0-9]+ errors?, [0-9]+ warnings?' | tail -n1)
errors=$(printf '%s\n' "$summary" | sed -n 's/.* \([0-9][0-9]*\) errors\{0,1\},.*/\1/p')
[ -n "$errors" ] || die "no rpmlint summary"
[ "$errors" -eq 0 ] || die "rpmlint: $summary"
printf '\nRPM checks passed: %s\n' "$summary"
