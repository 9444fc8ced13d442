# Evaluates nix/module.nix with the stub lib and pkgs (no nixpkgs needed) for
# `services.iggyd.enable = true` plus the given options (settings, tls,
# cluster, openFirewall: any `services.iggyd` attributes), and returns what
# the checks look at: the systemd service, users, firewall ports, the
# settings, the configuration file rendered from them and the messages of
# the assertions that fail.
{
  system ? "x86_64-linux",
  ...
}@args:
let
  lib = import ./lib.nix;
  pkgs = import ./pkgs.nix { inherit system; };
  module = import ../module.nix;
  isOption = x: builtins.isAttrs x && (x._type or null) == "option";
  defaultsOf = options: builtins.mapAttrs (_: option: if isOption option then valueOf option else defaultsOf option) options;
  valueOf =
    option:
    if (option.type.name or null) == "submodule" then
      lib.recursiveUpdate (defaultsOf option.type.options) (option.default or { })
    else
      option.default or (throw "option without default");
  options =
    (module {
      config = throw "options must not depend on config";
      inherit lib pkgs;
    }).options.services.iggyd;
  cfg = lib.recursiveUpdate (defaultsOf options) (builtins.removeAttrs args [ "system" ] // { enable = true; });
  result = module {
    config.services.iggyd = cfg;
    inherit lib pkgs;
  };
  config =
    assert result.config._type == "if";
    assert result.config.condition;
    result.config.content;
  disabled =
    (module {
      config.services.iggyd = cfg // { enable = false; };
      inherit lib pkgs;
    }).config;
in
{
  inherit (cfg) settings;
  disabledIsEmpty = !disabled.condition;
  service = config.systemd.services.iggyd;
  users = builtins.attrNames config.users.users;
  groups = builtins.attrNames config.users.groups;
  firewall = config.networking.firewall.allowedTCPPorts;
  etc = builtins.attrNames config.environment.etc;
  failedAssertions = map (a: a.message) (builtins.filter (a: !a.assertion) config.assertions);
  # The stub's TOML format writes JSON: the file as the daemon would read it.
  rendered = builtins.fromJSON (builtins.readFile config.environment.etc."iggyd/iggyd.toml".source);
}
