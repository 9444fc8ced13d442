#!/usr/bin/env bash
# Installs the system packages iggyd builds against (Debian/Ubuntu, as root or
# through sudo). Does nothing when they are already there.
set -euo pipefail
need=()
for package in libhwloc-dev libudev-dev pkg-config "$@"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || need+=("$package")
done
[ "${#need[@]}" -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "please install: ${need[*]} (hwloc development files and pkg-config)" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
echo "installing ${need[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
