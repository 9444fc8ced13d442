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
# settings.tcp.tls at them; `cluster.*` does the same for the node-to-node
# TLS files (settings.cluster.tls); every other key ([limits] and the rest of
# [cluster] included) goes through `settings`.
#
# A 3-node cluster: three hosts, the same `services.iggyd` on each but for
# settings.cluster.node_id and the TLS files. Every node's certificate is
# issued by the cluster's CA and names the DNS name node-<id>.<cluster name>
# (packaging/examples/cluster/README.md says how to make them). Start the
# three in any order; they elect a leader once two of them run.
# scripts/check-nix.sh evaluates `iggydNode` below, so keep it in this form.
#
#   # flake.nix of the three hosts
#   {
#     inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";
#     inputs.iggyd.url = "github:iggyd/iggyd";
#     outputs = { nixpkgs, iggyd, ... }:
#       let
#         # BEGIN iggydNode
#         iggydNode = id: {
#           services.iggyd = {
#             enable = true;
#             openFirewall = true;  # 8090 (clients) and this node's 8091 (replication)
#             settings = {
#               tcp.address = "0.0.0.0:8090";
#               cluster = {
#                 enabled = true;
#                 name = "orders";
#                 node_id = id;
#                 nodes = [
#                   { id = 1; address = "10.0.0.1:8090"; replication_address = "10.0.0.1:8091"; }
#                   { id = 2; address = "10.0.0.2:8090"; replication_address = "10.0.0.2:8091"; }
#                   { id = 3; address = "10.0.0.3:8090"; replication_address = "10.0.0.3:8091"; }
#                 ];
#               };
#             };
#             # Outside the Nix store (strings, not paths), readable by root only.
#             cluster = {
#               caFile = "/etc/iggyd/cluster/ca.pem";
#               certificateFile = "/etc/iggyd/cluster/node-${toString id}.pem";  # SAN node-<id>.orders
#               keyFile = "/etc/iggyd/cluster/node-${toString id}.key";
#             };
#           };
#           # The root user's password, the same on every node (each node
#           # creates the root user at start), kept out of the Nix store:
#           # the file holds IGGY_ROOT_PASSWORD=...
#           systemd.services.iggyd.serviceConfig.EnvironmentFile = "/etc/iggyd/root.env";
#         };
#         # END iggydNode
#         host = id: nixpkgs.lib.nixosSystem {
#           system = "x86_64-linux";
#           modules = [ iggyd.nixosModules.default (iggydNode id) ./hosts/iggyd-${toString id}.nix ];
#         };
#       in
#       {
#         nixosConfigurations = { iggyd-1 = host 1; iggyd-2 = host 2; iggyd-3 = host 3; };
#       };
#   }
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
  # [cluster] as the daemon reads it (its defaults: off, node 1, no nodes).
  clusterSettings = cfg.settings.cluster or { };
  clusterEnabled = clusterSettings.enabled or false;
  nodeId = clusterSettings.node_id or 1;
  thisNode = lib.findFirst (node: (node.id or null) == nodeId) null (clusterSettings.nodes or [ ]);
  clusterTlsSet = key: (clusterSettings.tls or { }).${key} or "" != "";
  # The credentials' names inside $CREDENTIALS_DIRECTORY.
  credentials =
    lib.optionals tlsEnabled [
      "tls.crt:${toString cfg.tls.certificateFile}"
      "tls.key:${toString cfg.tls.keyFile}"
    ]
    ++ lib.optional (tlsEnabled && cfg.tls.clientCaFile != null) "tls-clients-ca.pem:${cfg.tls.clientCaFile}"
    ++ lib.optional (cfg.cluster.caFile != null) "cluster-ca.pem:${cfg.cluster.caFile}"
    ++ lib.optionals (cfg.cluster.certificateFile != null) [
      "cluster.crt:${cfg.cluster.certificateFile}"
      "cluster.key:${toString cfg.cluster.keyFile}"
    ];
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
  clusterTlsSettings =
    lib.optionalAttrs (cfg.cluster.caFile != null) { ca_file = "$CREDENTIALS_DIRECTORY/cluster-ca.pem"; }
    // lib.optionalAttrs (cfg.cluster.certificateFile != null) {
      cert_file = "$CREDENTIALS_DIRECTORY/cluster.crt";
      key_file = "$CREDENTIALS_DIRECTORY/cluster.key";
    };
  configFile = settingsFormat.generate "iggyd.toml" (
    lib.recursiveUpdate cfg.settings (
      tlsSettings // lib.optionalAttrs (clusterTlsSettings != { }) { cluster.tls = clusterTlsSettings; }
    )
  );
  # "127.0.0.1:8090" / "[::]:8090" -> 8090
  portOf = address: lib.toInt (lib.last (lib.splitString ":" address));
  port = portOf cfg.settings.tcp.address;
  # This node's replication listener, when it runs one.
  replicationPorts = lib.optional (clusterEnabled && thisNode != null && thisNode ? replication_address) (
    portOf thisNode.replication_address
  );
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
        packaging/iggyd.toml, [tcp.tls], [limits] and [cluster] included (use
        `services.iggyd.tls` and `services.iggyd.cluster` to pass the
        certificates and keys as systemd credentials); unknown keys stop the
        daemon (exit 78).
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

    cluster = {
      caFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/etc/iggyd/cluster/ca.pem";
        description = ''
          PEM CA certificates that issued every node's certificate, for the
          node-to-node mutual TLS of a cluster (settings.cluster.enabled). A
          path as a string, outside the Nix store, passed as a systemd
          credential (LoadCredential=) like `tls.*`; settings.cluster.tls
          points at the copy. Files are read at start: a new one takes a
          restart.
        '';
      };
      certificateFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/etc/iggyd/cluster/node-1.pem";
        description = ''
          PEM certificate chain of this node (leaf first), issued by
          `caFile`'s CA for serverAuth and clientAuth, with the DNS name
          `node-<settings.cluster.node_id>.<settings.cluster.name>` among its
          subject alternative names. Passed like `caFile`.
        '';
      };
      keyFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/etc/iggyd/cluster/node-1.key";
        description = "PEM private key of `certificateFile` (PKCS#8, PKCS#1 or SEC1), passed like `caFile`.";
      };
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = ''
        Open the TCP port of `settings.tcp.address` in the firewall and, when
        settings.cluster.enabled, the port of this node's
        `replication_address` (its `settings.cluster.nodes` entry).
      '';
    };
  };

  config = lib.mkIf cfg.enable {
    assertions = [
      {
        assertion = (cfg.tls.certificateFile == null) == (cfg.tls.keyFile == null);
        message = "services.iggyd.tls: certificateFile and keyFile go together.";
      }
      {
        assertion = (cfg.cluster.certificateFile == null) == (cfg.cluster.keyFile == null);
        message = "services.iggyd.cluster: certificateFile and keyFile go together.";
      }
      {
        assertion =
          !clusterEnabled
          || (cfg.cluster.caFile != null || clusterTlsSet "ca_file")
            && (cfg.cluster.certificateFile != null || clusterTlsSet "cert_file")
            && (cfg.cluster.keyFile != null || clusterTlsSet "key_file");
        message = "services.iggyd.cluster: settings.cluster.enabled needs caFile, certificateFile and keyFile (the nodes' mutual TLS).";
      }
      {
        assertion = !clusterEnabled || thisNode != null;
        message = "services.iggyd.settings.cluster: node_id ${toString nodeId} is not the id of one of settings.cluster.nodes (every node lists itself).";
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

    networking.firewall.allowedTCPPorts = lib.optionals cfg.openFirewall (lib.unique ([ port ] ++ replicationPorts));

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
        RestartSec = "1s";
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
      // lib.optionalAttrs (credentials != [ ]) {
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
