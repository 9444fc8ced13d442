# NixOS module: services.iggyd.
#
#   services.iggyd = {
#     enable = true;
#     settings.tcp.address = "0.0.0.0:8090";
#     openFirewall = true;
#   };
#
# The unit is the one in systemd/iggyd.service (notify, watchdog, hardening to
# an exposure of about 1.2), with the Nix store paths. `tls.*` passes a
# certificate and key as systemd credentials (LoadCredential=) and points
# settings.tcp.tls at them; every other key ([limits] included) goes through
# `settings`.
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
  tlsEnabled = cfg.tls.certificateFile != null;
  # The credentials' names inside $CREDENTIALS_DIRECTORY.
  credentials = [
    "tls.crt:${toString cfg.tls.certificateFile}"
    "tls.key:${toString cfg.tls.keyFile}"
  ]
  ++ lib.optional (cfg.tls.clientCaFile != null) "tls-clients-ca.pem:${cfg.tls.clientCaFile}";
  tlsSettings = lib.optionalAttrs tlsEnabled {
    tcp.tls = {
      enabled = true;
      cert_file = "$CREDENTIALS_DIRECTORY/tls.crt";
      key_file = "$CREDENTIALS_DIRECTORY/tls.key";
    }
    // lib.optionalAttrs (cfg.tls.clientCaFile != null) {
      client_ca_file = "$CREDENTIALS_DIRECTORY/tls-clients-ca.pem";
    };
  };
  configFile = settingsFormat.generate "iggyd.toml" (lib.recursiveUpdate cfg.settings tlsSettings);
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
          limits.max_connections = 50000;
          limits.login_timeout = "10 s";
        }
      '';
      description = ''
        Contents of iggyd.toml. Every key and its default is documented in
        packaging/iggyd.toml, [tcp.tls] and [limits] included (use
        `services.iggyd.tls` to pass the certificate and key as systemd
        credentials); unknown keys stop the daemon (exit 78).
      '';
    };

    tls = {
      certificateFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/var/lib/acme/broker/fullchain.pem";
        description = ''
          PEM certificate chain (leaf first) for TLS on the Iggy listener. A
          path as a string, outside the Nix store; systemd hands it to the
          service as a credential (LoadCredential=), so it may stay readable
          by root only. Setting it enables TLS (settings.tcp.tls). A renewed
          file takes a restart (credentials are copied at start).
        '';
      };
      keyFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/var/lib/acme/broker/key.pem";
        description = "PEM private key of the certificate (PKCS#8, PKCS#1 or SEC1), passed like the certificate.";
      };
      clientCaFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "PEM CA certificates: when set, only clients presenting a certificate issued by one of them complete the TLS handshake.";
      };
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = "Open the TCP port of `settings.tcp.address` in the firewall.";
    };
  };

  config = lib.mkIf cfg.enable {
    assertions = [
      {
        assertion = (cfg.tls.certificateFile == null) == (cfg.tls.keyFile == null);
        message = "services.iggyd.tls: certificateFile and keyFile go together.";
      }
    ];

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
        # The listening sockets outlive a restart (see systemd/iggyd.service).
        FileDescriptorStoreMax = 1024;

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
      }
      // lib.optionalAttrs tlsEnabled {
        LoadCredential = credentials;
      }
      // {
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
