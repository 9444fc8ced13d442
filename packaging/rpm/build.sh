#!/usr/bin/env bash
# Builds the iggyd RPM on this Debian machine with Debian's rpm, offline:
# the source tree and `cargo vendor` output become Source0/Source1, the
# macros Debian's rpm lacks come from packaging/rpm/debian.macros (--load).
#
# Usage: packaging/rpm/build.sh [--with-fault-injection]
# Prints the path of the built RPM on the last line of stdout.
#
# Environment:
#   CARGO_TARGET_DIR  cargo target directory shared with the build (default:
#                     the workspace's target/, so release artifacts are reused)
#   RPM_TOPDIR        rpmbuild tree (default: target/rpmbuild)
#   IGGYD_CACHE       where the vendor tarball is cached, keyed by Cargo.lock
#                     (default: /var/cache/iggyd-rpm, else target/rpm-cache)
#   RPM_DIST          a %{dist} suffix for the release (e.g. `.upgrade`: the
#                     same build as a newer package, for `rpm -U` tests)
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

with=()
if [ -n "${RPM_DIST:-}" ]; then
  with+=(--define "dist ${RPM_DIST}")
fi
for arg in "$@"; do
  case $arg in
    --with-fault-injection) with+=(--with fault_injection) ;;
    *) echo "usage: $0 [--with-fault-injection]" >&2; exit 2 ;;
  esac
done

log() { printf '== %s\n' "$*" >&2; }

need=()
command -v rpmbuild >/dev/null 2>&1 || need+=(rpm)
command -v rpmlint >/dev/null 2>&1 || need+=(rpmlint)
if [ "${#need[@]}" -gt 0 ]; then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
./scripts/setup-debian.sh >&2

spec=packaging/rpm/iggyd.spec
version=$(sed -n 's/^Version:[[:space:]]*//p' "$spec")
topdir=${RPM_TOPDIR:-$repo/target/rpmbuild}
target_dir=${CARGO_TARGET_DIR:-$repo/target}
case $target_dir in /*) ;; *) target_dir=$repo/$target_dir ;; esac
cache=${IGGYD_CACHE:-/var/cache/iggyd-rpm}
mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ] || cache=$repo/target/rpm-cache
mkdir -p "$cache" "$topdir"/{SOURCES,SPECS,BUILD,RPMS,SRPMS}

log "Source0: the working tree (tracked and untracked, not ignored files)"
git ls-files -z --cached --others --exclude-standard |
  xargs -0 -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' |
  tar --null -T - --transform "s|^|iggyd-$version/|" --owner=0 --group=0 --mtime="@$(git log -1 --format=%ct)" \
    -czf "$topdir/SOURCES/iggyd-$version.tar.gz"

lock_hash=$(sha256sum Cargo.lock | cut -c1-16)
vendor_tar=$cache/iggyd-vendor-$lock_hash.tar.gz
if [ ! -s "$vendor_tar" ]; then
  log "Source1: cargo vendor (Cargo.lock $lock_hash)"
  scratch=$(mktemp -d)
  cargo vendor --locked --versioned-dirs "$scratch/vendor" >/dev/null
  tar -C "$scratch" --owner=0 --group=0 -czf "$vendor_tar.tmp" vendor
  mv "$vendor_tar.tmp" "$vendor_tar"
  rm -rf "$scratch"
else
  log "Source1: cached $vendor_tar"
fi
ln -sf "$vendor_tar" "$topdir/SOURCES/iggyd-$version-vendor.tar.gz"
cp systemd/iggyd.sysusers "$topdir/SOURCES/iggyd.sysusers"
cp "$spec" "$topdir/SPECS/"

log "rpmbuild ${with[*]} (CARGO_TARGET_DIR=$target_dir)"
# rpm's scriptlets print the build; keep stdout for the result path.
rpmbuild -bb --nodeps \
  --load=packaging/rpm/debian.macros \
  --define "_topdir $topdir" \
  --define "cargo_target_dir $target_dir" \
  "${with[@]}" \
  "$topdir/SPECS/iggyd.spec" >&2

release=$(rpmspec -q --srpm --load=packaging/rpm/debian.macros "${with[@]}" \
  --qf '%{version}-%{release}.%{arch}' "$spec" 2>/dev/null || true)
rpm_file=$(ls -t "$topdir"/RPMS/*/iggyd-"$version"-*.rpm | { if [ -n "$release" ]; then grep -F "iggyd-$release" || true; else cat; fi; } | head -n1)
[ -n "$rpm_file" ] || { echo "no RPM found under $topdir/RPMS" >&2; exit 1; }
echo "$rpm_file"
