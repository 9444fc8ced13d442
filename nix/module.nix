# NixOS module: services.iggyd.
#
#   services.iggyd = {
#     enable = true;
#     settings.tcp.address = "0.0.0.0:8090";
#     openFirewall = true;
#   };
#
# The unit is the one in systemd/iggyd.service (notify, watchdog, hardening to
# an exposure of about 1.2), with the Nix store paths.
{
  config,
  lib,
  pkgs,
  ...
}:

let
  cfg = config.services.iggyd;
  inherit (lib) mkOption types;
  settingsFormat = pkgs.formats.toml { };
  configFile = settingsFormat.generate "iggyd.toml" cfg.settings;
  # "127.0.0.1:8090" / "[::]:8090" -> 8090
  port = lib.toInt (lib.last (lib.splitString ":" cfg.settings.tcp.address));
  stateDir = "/var/lib/iggyd";
  table =
    description: options:
    mkOption {
      type = types.submodule {
        freeformType = settingsFormat.type;
        inherit options;
      };
      default = { };
      inherit description;
    };
in
{
  options.services.iggyd = {
    enable = lib.mkEnableOption "iggyd, the Apache Iggy-compatible message-streaming daemon";

    package = mkOption {
      type = types.package;
      default = pkgs.callPackage ./package.nix { };
      defaultText = lib.literalExpression "pkgs.callPackage ./package.nix { }";
      description = "The iggyd package (provides iggyd and iggy-top).";
    };

    user = mkOption {
      type = types.str;
      default = "iggyd";
      description = "User the daemon runs as (created when left at the default).";
    };

    group = mkOption {
      type = types.str;
      default = "iggyd";
      description = "Group of the daemon; its members may use the admin socket (iggy-top).";
    };

    settings = mkOption {
      type = types.submodule {
        freeformType = settingsFormat.type;
        options = {
          data_dir = mkOption {
            type = types.str;
            default = stateDir;
            description = "Data directory (streams, topics, metadata, root-credentials).";
          };
          tcp = table "Iggy TCP listener." {
            address = mkOption {
              type = types.str;
              default = "127.0.0.1:8090";
              description = "ip:port of the Iggy TCP protocol listener.";
            };
          };
          admin = table "Admin socket." {
            socket = mkOption {
              type = types.str;
              default = "/run/iggyd/iggyd.sock";
              description = "Unix socket for iggy-top (mode 0660, group `services.iggyd.group`).";
            };
          };
          logging = table "Logging." {
            dir = mkOption {
              type = types.str;
              default = "/var/log/iggyd";
              description = "Directory of the rotated log files.";
            };
          };
        };
      };
      default = { };
      example = lib.literalExpression ''
        {
          tcp.address = "0.0.0.0:8090";
          sharding.cpu_allocation = "physical";
          logging.level = "info,iggyd::shard=debug";
          shutdown.drain_timeout = "30 s";
        }
      '';
      description = ''
        Contents of iggyd.toml. Every key and its default is documented in
        packaging/iggyd.toml; unknown keys stop the daemon (exit 78).
      '';
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = "Open the TCP port of `settings.tcp.address` in the firewall.";
    };
  };

  config = lib.mkIf cfg.enable {
    users.users = lib.optionalAttrs (cfg.user == "iggyd") {
      iggyd = {
        isSystemUser = true;
        inherit (cfg) group;
        home = stateDir;
        description = "iggyd streaming daemon";
      };
    };
    users.groups = lib.optionalAttrs (cfg.group == "iggyd") { iggyd = { }; };

    environment.systemPackages = [ cfg.package ];
    environment.etc."iggyd/iggyd.toml".source = configFile;

    networking.firewall.allowedTCPPorts = lib.optionals cfg.openFirewall [ port ];

    systemd.services.iggyd = {
      description = "iggyd message-streaming daemon (Apache Iggy protocol)";
      wantedBy = [ "multi-user.target" ];
      wants = [ "network-online.target" ];
      after = [ "network-online.target" ];
      startLimitIntervalSec = 120;
      startLimitBurst = 5;
      restartTriggers = [ configFile ];

      serviceConfig = {
        Type = "notify";
        NotifyAccess = "main";
        ExecStart = "${lib.getExe' cfg.package "iggyd"} --config /etc/iggyd/iggyd.toml";
        ExecReload = "${pkgs.coreutils}/bin/kill -HUP $MAINPID";
        WorkingDirectory = stateDir;
        User = cfg.user;
        Group = cfg.group;
        UMask = "0027";

        WatchdogSec = "10s";
        Restart = "on-failure";
        RestartSec = "2s";
        RestartPreventExitStatus = 78;
        TimeoutStartSec = "90s";
        TimeoutStopSec = "45s";

        StateDirectory = "iggyd";
        StateDirectoryMode = "0750";
        LogsDirectory = "iggyd";
        LogsDirectoryMode = "0750";
        RuntimeDirectory = "iggyd";
        RuntimeDirectoryMode = "0750";
        RuntimeDirectoryPreserve = "restart";
        ConfigurationDirectory = "iggyd";
        ConfigurationDirectoryMode = "0755";
        ReadWritePaths = lib.filter (path: !(lib.hasPrefix "/var/lib/iggyd" path || lib.hasPrefix "/var/log/iggyd" path || lib.hasPrefix "/run/iggyd" path)) [
          cfg.settings.data_dir
          cfg.settings.logging.dir
        ];

        LimitNOFILE = 1048576;
        LimitMEMLOCK = "infinity";

        CapabilityBoundingSet = "";
        AmbientCapabilities = "";
        NoNewPrivileges = true;
        PrivateTmp = true;
        PrivateDevices = true;
        DevicePolicy = "closed";
        PrivateMounts = true;
        PrivateIPC = true;
        ProtectSystem = "strict";
        ProtectHome = true;
        ProtectClock = true;
        ProtectHostname = true;
        ProtectKernelTunables = true;
        ProtectKernelModules = true;
        ProtectKernelLogs = true;
        ProtectControlGroups = true;
        ProtectProc = "invisible";
        RestrictAddressFamilies = [
          "AF_UNIX"
          "AF_INET"
          "AF_INET6"
        ];
        RestrictNamespaces = true;
        RestrictRealtime = true;
        RestrictSUIDSGID = true;
        LockPersonality = true;
        MemoryDenyWriteExecute = true;
        RemoveIPC = true;
        KeyringMode = "private";
        SystemCallArchitectures = "native";
        # @system-service keeps @resources (sched_setaffinity, mbind,
        # set_mempolicy) and io_uring: never add ~@resources.
        SystemCallFilter = [
          "@system-service"
          "~@privileged @obsolete @debug @mount @cpu-emulation @raw-io @reboot @swap @module @clock"
        ];
      };
    };
  };
}
