# Stand-in for nixpkgs, used offline by scripts/check-nix.sh:
#   nix flake check --no-build --override-input nixpkgs path:nix/stub
{
  description = "offline stub of nixpkgs (lib subset, unbuildable packages)";
  outputs =
    { self }:
    {
      lib = import ./lib.nix;
      legacyPackages = self.lib.genAttrs [
        "x86_64-linux"
        "aarch64-linux"
      ] (system: import ./pkgs.nix { inherit system; });
    };
}
