# iggyd and iggy-top, built from this source tree with nixpkgs' Rust platform.
# Needs rustc >= 1.95 (edition 2024, rust-version in Cargo.toml): nixos-unstable.
{
  lib,
  rustPlatform,
  pkg-config,
  hwloc,
  systemd,
  # Compile the admin-socket fault switch into the release binary (tests only).
  withFaultInjection ? false,
}:

let
  workspace = lib.importTOML ../Cargo.toml;
in
rustPlatform.buildRustPackage {
  pname = "iggyd";
  inherit (workspace.workspace.package) version;

  # Every workspace member must be here (cargo loads them all, even to
  # build two packages); scripts/check-nix.sh checks that.
  src = lib.fileset.toSource {
    root = ../.;
    fileset = lib.fileset.unions [
      ../Cargo.toml
      ../Cargo.lock
      ../wire
      ../storage
      ../peer
      ../metadata
      ../raft
      ../daemon
      ../admin-api
      ../testkit
      ../tui
      ../compat
      ../bench
      ../systemd
      ../packaging/iggyd.toml
      ../packaging/grafana
      ../LICENSE
      ../README.md
    ];
  };

  cargoLock.lockFile = ../Cargo.lock;

  # hwlocality links the system hwloc through pkg-config; hwloc.pc is in the
  # `dev` output and links libudev (systemd).
  nativeBuildInputs = [ pkg-config ];
  buildInputs = [
    hwloc.dev
    hwloc
    systemd
  ];

  buildFeatures = lib.optionals withFaultInjection [ "iggyd/fault-injection" ];

  # The test suite pins threads, binds NUMA memory, drives io_uring and times
  # real daemons; it runs in scripts/ci.sh, not in the build sandbox.
  doCheck = false;

  postInstall = ''
    install -Dm0644 systemd/iggyd.service $out/lib/systemd/system/iggyd.service
    substituteInPlace $out/lib/systemd/system/iggyd.service \
      --replace-fail /usr/bin/iggyd $out/bin/iggyd
    install -Dm0644 systemd/iggyd.sysusers $out/lib/sysusers.d/iggyd.conf
    install -Dm0644 systemd/iggyd.tmpfiles $out/lib/tmpfiles.d/iggyd.conf
    install -Dm0644 packaging/iggyd.toml $out/share/iggyd/iggyd.toml
    install -Dm0644 packaging/grafana/iggyd.json $out/share/iggyd/grafana/iggyd.json
  '';

  meta = {
    description = "Apache Iggy-compatible message-streaming daemon: thread-per-core, durable, a systemd citizen";
    homepage = "https://github.com/iggyd/iggyd";
    license = lib.licenses.asl20;
    mainProgram = "iggyd";
    platforms = lib.platforms.linux;
  };
}
