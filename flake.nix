{
  description = "iggyd: Apache Iggy-compatible message-streaming daemon (thread-per-core, io_uring, systemd)";

  # Rust >= 1.95 is needed (edition 2024): nixos-unstable.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = f: lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
    in
    {
      packages = forAllSystems (pkgs: {
        iggyd = pkgs.callPackage ./nix/package.nix { };
        iggyd-fault-injection = pkgs.callPackage ./nix/package.nix { withFaultInjection = true; };
        default = self.packages.${pkgs.stdenv.hostPlatform.system}.iggyd;
      });

      apps = forAllSystems (
        pkgs:
        let
          iggyd = self.packages.${pkgs.stdenv.hostPlatform.system}.iggyd;
          # `nix run`: the daemon in the foreground, data under
          # $XDG_STATE_HOME/iggyd when XDG_STATE_HOME is set, else ./local_data.
          run = pkgs.writeShellApplication {
            name = "iggyd-run";
            runtimeInputs = [ iggyd ];
            text = ''
              if [ -n "''${XDG_STATE_HOME:-}" ]; then
                data_dir="$XDG_STATE_HOME/iggyd"
              else
                data_dir="$PWD/local_data"
              fi
              mkdir -p "$data_dir"
              echo "iggyd: data in $data_dir" >&2
              exec iggyd --data-dir "$data_dir" "$@"
            '';
          };
        in
        {
          default = {
            type = "app";
            program = "${run}/bin/iggyd-run";
          };
          iggy-top = {
            type = "app";
            program = "${iggyd}/bin/iggy-top";
          };
        }
      );

      nixosModules = {
        iggyd =
          { pkgs, lib, ... }:
          {
            imports = [ ./nix/module.nix ];
            services.iggyd.package = lib.mkDefault self.packages.${pkgs.stdenv.hostPlatform.system}.iggyd;
          };
        default = self.nixosModules.iggyd;
      };

      overlays.default = final: _prev: { iggyd = final.callPackage ./nix/package.nix { }; };

      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          inputsFrom = [ self.packages.${pkgs.stdenv.hostPlatform.system}.iggyd ];
          packages = with pkgs; [
            cargo
            rustc
            clippy
            rustfmt
            cargo-nextest
            rust-analyzer
            hwloc
            tmux
          ];
        };
      });

      checks = forAllSystems (pkgs: {
        package = self.packages.${pkgs.stdenv.hostPlatform.system}.iggyd;
        vm-test = import ./nix/vm-test.nix { inherit pkgs self; };
      });

      formatter = forAllSystems (pkgs: pkgs.nixfmt-rfc-style);
    };
}
