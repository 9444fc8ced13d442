# A stand-in for nixpkgs' package set, for offline checks only: every package
# is a derivation that cannot be built (it is only instantiated by
# `nix flake check --no-build`), and the builders check their arguments.
{ system }:
let
  lib = import ./lib.nix;
  stub =
    name: extra:
    derivation {
      inherit name system;
      builder = "/bin/sh";
      args = [
        "-c"
        "echo 'stub derivation: needs the real nixpkgs' >&2; exit 1"
      ];
    }
    // extra;
  dev = name: stub name { dev = stub "${name}-dev" { }; };
  pkgs = rec {
    inherit lib;
    stdenv.hostPlatform.system = system;
    callPackage =
      fn: args:
      let
        f = if builtins.isFunction fn then fn else import fn;
      in
      f (builtins.intersectAttrs (builtins.functionArgs f) pkgs // args);
    pkg-config = stub "pkg-config" { };
    hwloc = dev "hwloc";
    systemd = dev "systemd";
    coreutils = stub "coreutils" { };
    cargo = stub "cargo" { };
    rustc = stub "rustc" { };
    clippy = stub "clippy" { };
    rustfmt = stub "rustfmt" { };
    cargo-nextest = stub "cargo-nextest" { };
    rust-analyzer = stub "rust-analyzer" { };
    tmux = stub "tmux" { };
    nixfmt-rfc-style = stub "nixfmt" { };
    rustPlatform.buildRustPackage =
      attrs:
      assert builtins.pathExists attrs.cargoLock.lockFile;
      assert builtins.elem hwloc.dev attrs.buildInputs;
      assert builtins.elem pkg-config attrs.nativeBuildInputs;
      assert builtins.isString attrs.postInstall;
      stub "${attrs.pname}-${attrs.version}" {
        inherit (attrs) pname version meta;
        buildFeatures = attrs.buildFeatures or [ ];
      };
    writeShellApplication =
      { name, text, runtimeInputs ? [ ] }:
      stub name { inherit text; };
    mkShell = attrs: stub "shell" { };
    testers.runNixOSTest =
      { name, nodes, testScript }:
      assert builtins.isFunction nodes.machine;
      assert builtins.isString testScript;
      stub "nixos-test-${name}" { };
    formats.toml =
      { }:
      {
        type = { name = "toml-value"; };
        generate = name: value: builtins.toFile name (builtins.toJSON value);
      };
  };
in
pkgs
