//! Tests of the configuration as an operator meets it: every layer and its
//! precedence, every key's accepted and refused values with the exact error
//! lines, unknown keys and suggestions, `iggyd config`'s round trip, and that
//! the key table agrees with `Config`, `packaging/iggyd.toml` and the README.
//! Every load passes a config file, so the machine's `/etc/iggyd/iggyd.toml`
//! is never read. The `[cluster]` keys have their own file
//! (`cluster_tests`).

use super::*;
use std::io::Write;

/// A config file with `text`, kept alive by the returned handle.
fn file(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

/// Loads `toml` as the config file plus `env`. Tests always pass a file so
/// that `/etc/iggyd/iggyd.toml` on the test machine is never read.
pub(super) fn load(toml: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let file = file(toml);
    Config::load(&Sources {
        file: Some(file.path().to_path_buf()),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Sources::default()
    })
}

pub(super) fn load_err(toml: &str, env: &[(&str, &str)]) -> String {
    load(toml, env).unwrap_err().to_string()
}

/// With nothing set, every key has the repository default and the derived
/// paths hang off `data_dir`.
#[test]
fn defaults() {
    let config = load("", &[]).unwrap();
    assert_eq!(config.data_dir, PathBuf::from("local_data"));
    assert_eq!(config.tcp.address, "127.0.0.1:8090".parse().unwrap());
    assert_eq!(config.admin.socket, PathBuf::from("local_data/iggyd.sock"));
    assert_eq!(config.sharding.cpu_allocation, CpuAllocation::Physical);
    assert!(!config.sharding.require_io_uring);
    assert_eq!(config.memory.budget_bytes, None);
    assert_eq!(config.root.username, "iggy");
    assert_eq!(config.root.password, "iggy");
    assert_eq!(config.logging.level, "info");
    assert_eq!(config.logging.dir, PathBuf::from("local_data/logs"));
    assert_eq!(config.logging.max_file_size_bytes, 500_000_000);
    assert_eq!(config.logging.max_total_size_bytes, 4 << 30);
    assert_eq!(config.logging.retention, Duration::from_secs(7 * 86_400));
    assert_eq!(
        config.logging.rotation_check_interval,
        Duration::from_secs(60)
    );
    assert_eq!(config.shutdown.drain_timeout, Duration::from_secs(30));
    assert_eq!(config.retention.check_interval, Duration::from_secs(10));
}

/// Each layer beats the one below: defaults < file < env < flags, and
/// derived paths follow the final `data_dir`.
#[test]
fn precedence() {
    let toml = "data_dir = \"/from/file\"\n[tcp]\naddress = \"10.0.0.1:1\"\n\
                [logging]\nlevel = \"debug\"\nretention = \"1 day\"\n";
    let config = load(toml, &[]).unwrap();
    assert_eq!(config.data_dir, PathBuf::from("/from/file"));
    assert_eq!(config.tcp.address, "10.0.0.1:1".parse().unwrap());
    assert_eq!(config.logging.level, "debug");
    assert_eq!(config.admin.socket, PathBuf::from("/from/file/iggyd.sock"));
    // Untouched keys of a table the file names keep their defaults.
    assert_eq!(config.logging.max_file_size_bytes, 500_000_000);

    let env = [
        ("IGGYD_TCP__ADDRESS", "10.0.0.2:2"),
        ("IGGYD_DATA_DIR", "/from/env"),
        ("IGGYD_SHARDING__CPU_ALLOCATION", "4"),
        ("IGGYD_SHARDING__REQUIRE_IO_URING", "true"),
        ("PATH", "/usr/bin"),
    ];
    let config = load(toml, &env).unwrap();
    assert_eq!(config.tcp.address, "10.0.0.2:2".parse().unwrap());
    assert_eq!(config.data_dir, PathBuf::from("/from/env"));
    assert_eq!(config.sharding.cpu_allocation, CpuAllocation::Count(4));
    assert!(config.sharding.require_io_uring);
    assert_eq!(config.logging.level, "debug");
    assert_eq!(config.logging.retention, Duration::from_secs(86_400));

    let file = file(toml);
    let config = Config::load(&Sources {
        file: Some(file.path().to_path_buf()),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        listen: Some("127.0.0.1:0".parse().unwrap()),
        data_dir: Some(PathBuf::from("/from/flag")),
    })
    .unwrap();
    assert_eq!(config.tcp.address, "127.0.0.1:0".parse().unwrap());
    assert_eq!(config.data_dir, PathBuf::from("/from/flag"));
    assert_eq!(config.admin.socket, PathBuf::from("/from/flag/iggyd.sock"));
    assert_eq!(config.logging.dir, PathBuf::from("/from/flag/logs"));
}

/// `IGGY_ROOT_*` beat the file, `IGGYD_ROOT__*` beat `IGGY_ROOT_*`, and
/// environment strings for string keys are taken verbatim.
#[test]
fn root_credentials_from_env() {
    let toml = "[root]\nusername = \"file-user\"\npassword = \"file-pass\"\n";
    let config = load(
        toml,
        &[
            ("IGGY_ROOT_USERNAME", "admin"),
            ("IGGY_ROOT_PASSWORD", "0123"),
        ],
    )
    .unwrap();
    assert_eq!(config.root.username, "admin");
    assert_eq!(config.root.password, "0123");

    let config = load(
        toml,
        &[
            ("IGGYD_ROOT__PASSWORD", "winner"),
            ("IGGY_ROOT_PASSWORD", "loser"),
            ("IGGY_ROOT_USERNAME", "admin"),
        ],
    )
    .unwrap();
    assert_eq!(config.root.username, "admin");
    assert_eq!(config.root.password, "winner");
}

/// Environment values parse like figment's `Env`: integers, booleans,
/// `[0,2]` arrays, ranges and sizes as strings.
#[test]
fn env_value_forms() {
    let config = load(
        "",
        &[
            ("IGGYD_SHARDING__CPU_ALLOCATION", "[0,2]"),
            ("IGGYD_LOGGING__MAX_FILE_SIZE", "0"),
            ("IGGYD_LOGGING__RETENTION", "0"),
            ("IGGYD_MEMORY__BUDGET", "1.5 GiB"),
        ],
    )
    .unwrap();
    assert_eq!(
        config.sharding.cpu_allocation,
        CpuAllocation::List(vec![0, 2])
    );
    assert_eq!(config.logging.max_file_size_bytes, 0);
    assert_eq!(config.logging.retention, Duration::ZERO);
    assert_eq!(config.memory.budget_bytes, Some(1_610_612_736));
    let config = load("", &[("IGGYD_SHARDING__CPU_ALLOCATION", "0..4")]).unwrap();
    assert_eq!(
        config.sharding.cpu_allocation,
        CpuAllocation::List(vec![0, 1, 2, 3])
    );
}

/// Odd variable names neither panic nor leak in: a bare `IGGYD_`, names
/// with multi-byte characters and unrelated variables are ignored, and the
/// prefix ignores case like figment's `Env`.
#[test]
fn env_names() {
    let config = load(
        "",
        &[
            ("IGGYD_", "x"),
            ("IGGYé_X", "x"),
            ("éIGGYD_X", "x"),
            ("IGGY_OTHER", "x"),
            ("iggyd_tcp__address", "10.0.0.9:9"),
        ],
    )
    .unwrap();
    assert_eq!(config.tcp.address, "10.0.0.9:9".parse().unwrap());
}

/// Every `cpu_allocation` form from a file, and the bad ones.
#[test]
fn cpu_allocation_forms() {
    let cases: &[(&str, CpuAllocation)] = &[
        ("\"physical\"", CpuAllocation::Physical),
        ("\"all\"", CpuAllocation::All),
        ("3", CpuAllocation::Count(3)),
        ("\"3\"", CpuAllocation::Count(3)),
        ("\"0..4\"", CpuAllocation::List(vec![0, 1, 2, 3])),
        ("\"0..=4\"", CpuAllocation::List(vec![0, 1, 2, 3, 4])),
        ("[4, 0, 2]", CpuAllocation::List(vec![4, 0, 2])),
    ];
    for (text, expected) in cases {
        let config = load(&format!("[sharding]\ncpu_allocation = {text}\n"), &[]).unwrap();
        assert_eq!(&config.sharding.cpu_allocation, expected, "{text}");
    }
    for text in [
        "0",
        "-1",
        "70000",
        "\"none\"",
        "\"4..4\"",
        "\"4..=3\"",
        "[]",
        "[0, 0]",
        "[-1]",
        "[\"a\"]",
        "1.5",
        "true",
        "\"0..x\"",
    ] {
        let err = load_err(&format!("[sharding]\ncpu_allocation = {text}\n"), &[]);
        assert!(err.contains("`sharding.cpu_allocation`"), "{text}: {err}");
    }
}

/// Sizes from a file: integers are bytes, strings use units, and the
/// range rules of each size key hold.
#[test]
fn size_keys() {
    let config = load(
        "[logging]\nmax_file_size = 4096\nmax_total_size = \"1 GB\"\n\
         [memory]\nbudget = \"1 MiB\"\n",
        &[],
    )
    .unwrap();
    assert_eq!(config.logging.max_file_size_bytes, 4096);
    assert_eq!(config.logging.max_total_size_bytes, 1_000_000_000);
    assert_eq!(config.memory.budget_bytes, Some(1 << 20));
    // Zero disables both limits, and then no ordering applies.
    let config = load(
        "[logging]\nmax_file_size = 0\nmax_total_size = \"0\"\n",
        &[],
    )
    .unwrap();
    assert_eq!(config.logging.max_file_size_bytes, 0);
    assert_eq!(config.logging.max_total_size_bytes, 0);
    let config = load(
        "[logging]\nmax_file_size = \"8 GiB\"\nmax_total_size = 0\n",
        &[],
    );
    assert_eq!(config.unwrap().logging.max_file_size_bytes, 8 << 30);
    assert!(
        load("[memory]\nbudget = \"AUTO\"\n", &[])
            .unwrap()
            .memory
            .budget_bytes
            .is_none()
    );
}

/// The cross-key rule names `max_file_size` and shows the total limit and
/// its source.
#[test]
fn file_size_above_total_is_rejected() {
    let err = load_err(
        "[logging]\nmax_file_size = \"1 GiB\"\n",
        &[("IGGYD_LOGGING__MAX_TOTAL_SIZE", "500 MB")],
    );
    assert!(
        err.starts_with("config key `logging.max_file_size` from file `"),
        "{err}"
    );
    assert!(
        err.contains(
            "\"1 GiB\" is not accepted; expected at most `logging.max_total_size` (\"500 MB\" \
             from environment variable `IGGYD_LOGGING__MAX_TOTAL_SIZE`)"
        ),
        "{err}"
    );
}

/// Durations: zero where allowed, humantime strings, and range limits.
#[test]
fn duration_keys() {
    let config = load(
        "[logging]\nretention = 0\nrotation_check_interval = \"1 s\"\n\
         [shutdown]\ndrain_timeout = \"5 m\"\n",
        &[],
    )
    .unwrap();
    assert_eq!(config.logging.retention, Duration::ZERO);
    assert_eq!(
        config.logging.rotation_check_interval,
        Duration::from_secs(1)
    );
    assert_eq!(config.shutdown.drain_timeout, Duration::from_secs(300));
    let config = load("[logging]\nretention = \"1h 30m\"\n", &[]).unwrap();
    assert_eq!(config.logging.retention, Duration::from_secs(5_400));
}

/// The exact one-line message format, with the source named.
#[test]
fn error_message_format() {
    let err = load("", &[("IGGYD_LOGGING__ROTATION_CHECK_INTERVAL", "0 s")]).unwrap_err();
    assert_eq!(err.key(), "logging.rotation_check_interval");
    assert_eq!(
        err.to_string(),
        "config key `logging.rotation_check_interval` from environment variable \
         `IGGYD_LOGGING__ROTATION_CHECK_INTERVAL`: \"0 s\" is not accepted; expected a \
         duration of at least 1 s, like \"1 m\""
    );
    let err = load("[shutdown]\ndrain_timeout = \"10 m\"\n", &[]).unwrap_err();
    let message = err.to_string();
    assert!(!message.contains('\n'));
    assert!(message.contains("from file `"), "{message}");
    assert!(message.contains("\"10 m\" is not accepted; expected a duration from 1 s to 300 s"));
}

/// An empty root password means "generate one at first start".
#[test]
fn empty_root_password_means_generate() {
    let config = load("[root]\npassword = \"\"\n", &[]).unwrap();
    assert_eq!(config.root.password, "");
}

/// Passwords are never echoed, only their length.
#[test]
fn password_is_not_shown() {
    let err = load_err("[root]\npassword = \"ab\"\n", &[]);
    assert!(!err.contains("\"ab\""), "{err}");
    assert!(err.contains("a 2-character password (not shown)"), "{err}");
}

/// Log levels: plain levels in any case and directive lists pass; typos
/// that `EnvFilter` would take as a target name do not.
#[test]
fn logging_levels() {
    for level in [
        "trace",
        "DEBUG",
        "warn",
        "off",
        "info,iggyd::shard=debug",
        "iggyd=trace",
    ] {
        let config = load(&format!("[logging]\nlevel = \"{level}\"\n"), &[]).unwrap();
        assert_eq!(config.logging.level, level);
    }
    let err = load_err("[logging]\nlevel = \"infoo\"\n", &[]);
    assert!(err.ends_with("(did you mean \"info\"?)"), "{err}");
    for level in ["", "infoo", "verbose", "info,iggyd=loud", "[{"] {
        let err = load_err(&format!("[logging]\nlevel = \"{level}\"\n"), &[]);
        assert!(err.contains("`logging.level`"), "{level}: {err}");
    }
}

/// For every validated key, a bad value yields an error naming that key.
#[test]
fn every_key_rejects_bad_values_by_name() {
    let cases: &[(&str, &str)] = &[
        ("data_dir = \"\"", "data_dir"),
        ("data_dir = 5", "data_dir"),
        ("[tcp]\naddress = \"localhost\"", "tcp.address"),
        ("[tcp]\naddress = 8090", "tcp.address"),
        ("[admin]\nsocket = \"\"", "admin.socket"),
        (
            &format!("[admin]\nsocket = \"/{}\"", "s".repeat(200)),
            "admin.socket",
        ),
        (
            &format!("data_dir = \"/{}\"", "d".repeat(200)),
            "admin.socket",
        ),
        (
            "[sharding]\ncpu_allocation = \"most\"",
            "sharding.cpu_allocation",
        ),
        (
            "[sharding]\nrequire_io_uring = \"yes\"",
            "sharding.require_io_uring",
        ),
        ("[memory]\nbudget = \"512 KiB\"", "memory.budget"),
        ("[memory]\nbudget = \"lots\"", "memory.budget"),
        ("[root]\nusername = \"ab\"", "root.username"),
        (
            &format!("[root]\nusername = \"{}\"", "u".repeat(51)),
            "root.username",
        ),
        ("[root]\npassword = \"ab\"", "root.password"),
        (
            &format!("[root]\npassword = \"{}\"", "p".repeat(101)),
            "root.password",
        ),
        ("[logging]\nlevel = \"loud\"", "logging.level"),
        ("[logging]\ndir = \"\"", "logging.dir"),
        (
            "[logging]\nmax_file_size = \"4 K\"",
            "logging.max_file_size",
        ),
        ("[logging]\nmax_file_size = 4095", "logging.max_file_size"),
        ("[logging]\nmax_file_size = -1", "logging.max_file_size"),
        (
            "[logging]\nmax_total_size = \"lots\"",
            "logging.max_total_size",
        ),
        ("[logging]\nmax_total_size = 1.5", "logging.max_total_size"),
        ("[logging]\nretention = \"forever\"", "logging.retention"),
        ("[logging]\nretention = 7", "logging.retention"),
        (
            "[logging]\nrotation_check_interval = 0",
            "logging.rotation_check_interval",
        ),
        (
            "[logging]\nrotation_check_interval = \"500 ms\"",
            "logging.rotation_check_interval",
        ),
        (
            "[shutdown]\ndrain_timeout = \"0\"",
            "shutdown.drain_timeout",
        ),
        (
            "[shutdown]\ndrain_timeout = \"301 s\"",
            "shutdown.drain_timeout",
        ),
        (
            "[retention]\ncheck_interval = \"50 ms\"",
            "retention.check_interval",
        ),
        (
            "[retention]\ncheck_interval = \"2 h\"",
            "retention.check_interval",
        ),
        (
            "[storage]\ndefault_durability = \"sometimes\"",
            "storage.default_durability",
        ),
        (
            "[storage]\nflush_interval = \"1 ms\"",
            "storage.flush_interval",
        ),
        ("tcp = \"127.0.0.1:1\"", "tcp"),
        ("[metrics]\naddress = \"localhost\"", "metrics.address"),
        (
            "[metrics]\nbearer_token_file = 5",
            "metrics.bearer_token_file",
        ),
        (
            "[metrics]\nbearer_token_file = \"/t\"\nbasic_auth_file = \"/b\"",
            "metrics.basic_auth_file",
        ),
    ];
    for (toml, key) in cases {
        let err = load(toml, &[]).unwrap_err();
        assert_eq!(err.key(), *key, "{toml}: {err}");
        let message = err.to_string();
        assert!(
            message.contains(&format!("config key `{key}`")),
            "{toml}: {message}"
        );
        assert!(message.contains("expected"), "{toml}: {message}");
        assert!(!message.contains('\n'), "{message}");
    }
}

/// Unknown keys at the top level and in tables are errors, with the
/// closest known key suggested; from the environment the suggestion is the
/// variable to set.
#[test]
fn unknown_keys_and_suggestions() {
    let err = load("[tcp]\nadress = \"127.0.0.1:1\"\n", &[]).unwrap_err();
    assert_eq!(err.key(), "tcp.adress");
    let message = err.to_string();
    assert!(message.contains("did you mean `tcp.address`?"), "{message}");
    assert!(
        message.contains("the keys under `tcp` are tcp.address"),
        "{message}"
    );

    let message = load_err("[logging]\nmax_file = 5\n", &[]);
    assert!(
        message.contains("did you mean `logging.max_file_size`?"),
        "{message}"
    );

    let message = load_err("datadir = \"x\"\n", &[]);
    assert!(message.contains("did you mean `data_dir`?"), "{message}");

    let message = load_err("[loging]\nlevel = \"info\"\n", &[]);
    assert!(message.contains("did you mean `logging`?"), "{message}");

    let message = load_err("address = \"x\"\n", &[]);
    assert!(message.contains("did you mean `tcp.address`?"), "{message}");

    let message = load_err("completely_unrelated = 1\n", &[]);
    assert!(!message.contains("did you mean"), "{message}");
    assert!(
        message.contains("the top-level keys are data_dir, tcp"),
        "{message}"
    );

    let err = load("", &[("IGGYD_TCP_ADDRESS", "127.0.0.1:1")]).unwrap_err();
    assert_eq!(err.key(), "tcp_address");
    assert_eq!(
        err.to_string(),
        "config key `tcp_address` from environment variable `IGGYD_TCP_ADDRESS` is not \
         known; did you mean `IGGYD_TCP__ADDRESS`? the top-level keys are data_dir, tcp, \
         admin, sharding, memory, root, logging, shutdown, retention, storage, \
         metrics, consumer_groups, limits, cluster"
    );
}

/// File problems: a missing `--config`, broken TOML (one line, with a
/// position).
#[test]
fn file_errors() {
    let err = Config::load(&Sources {
        file: Some(PathBuf::from("/nonexistent/iggyd.toml")),
        ..Sources::default()
    })
    .unwrap_err();
    assert_eq!(err.key(), "--config");
    assert!(
        err.to_string()
            .starts_with("config file `/nonexistent/iggyd.toml`: ")
    );

    let err = load_err("[tcp\naddress = 1\n", &[]);
    assert!(err.contains("invalid TOML at line 1, column"), "{err}");
    assert!(!err.contains('\n'), "{err}");
}

/// `to_toml` prints a config file that loads back to an equal `Config`,
/// for the defaults and for a configuration touching every form.
#[test]
fn to_toml_round_trips() {
    let rich = "data_dir = \"/srv/iggyd\"\n\
        [tcp]\naddress = \"[::1]:9000\"\n\
        [admin]\nsocket = \"/run/iggyd/iggyd.sock\"\n\
        [sharding]\ncpu_allocation = \"2..=5\"\nrequire_io_uring = true\n\
        [memory]\nbudget = \"1.5 GiB\"\n\
        [root]\nusername = \"admin\"\npassword = \"s3cr\\\"et\"\n\
        [logging]\nlevel = \"info,iggyd::shard=debug\"\ndir = \"/var/log/iggyd\"\n\
        max_file_size = 12345\nmax_total_size = 0\nretention = \"1h 30m\"\n\
        rotation_check_interval = \"1500 ms\"\n\
        [shutdown]\ndrain_timeout = \"2 m\"\n\
        [metrics]\naddress = \"127.0.0.1:9464\"\nbasic_auth_file = \"/etc/iggyd/scrape\"\n\
        [cluster]\nenabled = true\nname = \"rich\"\nnode_id = 7\njoin = true\n\
        election_timeout = \"3 s\"\nheartbeat_interval = \"1 s\"\n\
        [[cluster.nodes]]\nid = 7\nname = \"seven\"\naddress = \"[::1]:9000\"\n\
        replication_address = \"[::1]:9001\"\n\
        [cluster.tls]\nca_file = \"$CREDENTIALS_DIRECTORY/ca\"\ncert_file = \"/c\"\n\
        key_file = \"/k\"\n";
    for source in ["", rich, "[sharding]\ncpu_allocation = 3\n"] {
        let config = load(source, &[]).unwrap();
        let printed = config.to_toml();
        let reloaded = load(&printed, &[]).unwrap_or_else(|e| panic!("{e}\n{printed}"));
        assert_eq!(reloaded, config, "{printed}");
    }
    let printed = load("", &[]).unwrap().to_toml();
    assert!(printed.contains("budget = \"auto\""), "{printed}");
    assert!(printed.contains("max_file_size = \"500 MB\""), "{printed}");
    assert!(printed.contains("retention = \"7 days\""), "{printed}");
}

/// Proves the redacted configuration hides the root password but keeps an
/// empty one (generated) and everything else as `to_toml` prints it.
#[test]
fn redacted_config_hides_the_password() {
    let config = load("[root]\npassword = \"hunter22\"\n", &[]).unwrap();
    let redacted = config.to_toml_redacted();
    assert!(!redacted.contains("hunter22"), "{redacted}");
    assert!(redacted.contains("password = \"<redacted>\""), "{redacted}");
    assert_eq!(
        redacted.replace("\"<redacted>\"", "\"hunter22\""),
        config.to_toml()
    );
    let generated = load("[root]\npassword = \"\"\n", &[]).unwrap();
    assert!(generated.to_toml_redacted().contains("password = \"\"\n"));
}

/// Proves the metrics keys: off (`""`, printed as such) by default, an
/// address and one credentials file from a file or the environment, and an
/// error that says `""` turns the endpoint off.
#[test]
fn metrics_keys() {
    let config = load("", &[]).unwrap();
    assert_eq!(config.metrics.address, None);
    assert_eq!(config.metrics.bearer_token_file, None);
    assert_eq!(config.metrics.basic_auth_file, None);
    assert!(config.to_toml().contains("[metrics]\naddress = \"\"\n"));
    let config = load(
        "[metrics]\naddress = \"127.0.0.1:9464\"\n",
        &[("IGGYD_METRICS__BEARER_TOKEN_FILE", "/run/credentials/token")],
    )
    .unwrap();
    assert_eq!(
        config.metrics.address,
        Some("127.0.0.1:9464".parse().unwrap())
    );
    assert_eq!(
        config.metrics.bearer_token_file,
        Some(PathBuf::from("/run/credentials/token"))
    );
    let error = load_err("[metrics]\naddress = \"nowhere\"", &[]);
    assert!(
        error.contains("expected \"\" (no metrics endpoint) or an IP address and port"),
        "{error}"
    );
}

/// Proves the storage keys: `persisted` by default with a 1 s interval
/// flush, `replicated` and `0` (interval flush off) accepted from a file.
#[test]
fn storage_defaults_and_overrides() {
    let config = load("", &[]).unwrap();
    assert_eq!(
        config.storage.default_durability,
        iggyd_metadata::Durability::Persisted
    );
    assert_eq!(config.storage.flush_interval, Duration::from_secs(1));
    let config = load(
        "[storage]\ndefault_durability = \"replicated\"\nflush_interval = 0\n",
        &[],
    )
    .unwrap();
    assert_eq!(
        config.storage.default_durability,
        iggyd_metadata::Durability::Replicated
    );
    assert_eq!(config.storage.flush_interval, Duration::ZERO);
    let printed = config.to_toml();
    assert!(
        printed.contains("default_durability = \"replicated\""),
        "{printed}"
    );
}

/// What the documentation says about the keys.
struct Documented {
    /// `packaging/iggyd.toml`'s keys (dotted, from its `[table]` headers and
    /// `key = value` lines, commented or not).
    packaged: Vec<String>,
    /// The README's key table (first column; `a.b` / `c` means `a.b` and
    /// `a.c`).
    readme: Vec<String>,
    /// The packaged file's commented lines, which say "the default".
    commented_defaults: Vec<(String, String)>,
    /// `(key, field)` of the packaged file's (commented) example tables of
    /// an array-of-tables key, `[[key]]`: fields, not keys.
    example_fields: Vec<(String, String)>,
}

fn documented_keys() -> Documented {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let packaged = std::fs::read_to_string(root.join("packaging/iggyd.toml")).unwrap();
    let mut table = String::new();
    let mut array: Option<String> = None;
    let mut packaged_keys = Vec::new();
    let mut commented_defaults = Vec::new();
    let mut example_fields = Vec::new();
    for line in packaged.lines() {
        let header = line.strip_prefix('#').unwrap_or(line);
        if let Some(name) = header.strip_prefix("[[").and_then(|l| l.strip_suffix("]]")) {
            array = Some(name.to_string());
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = name.to_string();
            array = None;
            continue;
        }
        let (commented, line) = match line.strip_prefix('#') {
            Some(rest) => (true, rest),
            None => (false, line),
        };
        let Some((name, value)) = line.split_once(" = ") else {
            continue;
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            continue;
        }
        if let Some(array) = &array {
            example_fields.push((array.clone(), name.to_string()));
            continue;
        }
        let key = if table.is_empty() {
            name.to_string()
        } else {
            format!("{table}.{name}")
        };
        if commented {
            commented_defaults.push((key.clone(), value.to_string()));
        }
        packaged_keys.push(key);
    }

    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let rows = readme
        .lines()
        .skip_while(|line| !line.starts_with("| key | default | accepted |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'));
    let mut readme_keys = Vec::new();
    for row in rows {
        let first = row.split('|').nth(1).unwrap().trim();
        let mut table = None;
        for item in first.split(" / ") {
            let item = item.trim().trim_matches('`');
            match (item.rsplit_once('.'), table) {
                (Some((section, _)), _) => {
                    table = Some(section);
                    readme_keys.push(item.to_string());
                }
                (None, Some(section)) => readme_keys.push(format!("{section}.{item}")),
                (None, None) => readme_keys.push(item.to_string()),
            }
        }
    }
    Documented {
        packaged: packaged_keys,
        readme: readme_keys,
        commented_defaults,
        example_fields,
    }
}

/// Proves the key table and the documentation agree: every key is in
/// `packaging/iggyd.toml` and in the README's key table, neither documents a
/// key the daemon does not have, each default the packaged file shows
/// commented out is the built-in default `iggyd config` prints, and its
/// example tables (`[[cluster.nodes]]`) use only fields their key has.
#[test]
fn key_table_matches_the_documentation() {
    let table: Vec<String> = keys::KEYS.iter().map(|key| key.name.to_string()).collect();
    let Documented {
        packaged,
        readme,
        commented_defaults,
        example_fields,
    } = documented_keys();
    assert!(!example_fields.is_empty());
    for (key, field) in example_fields {
        let fields = match keys::find(&key).map(|key| key.kind) {
            Some(keys::Kind::TableArray { fields }) => fields,
            _ => panic!("packaging/iggyd.toml has [[{key}]], not an array-of-tables key"),
        };
        assert!(
            fields.iter().any(|known| known.name == field),
            "packaging/iggyd.toml's [[{key}]] has `{field}`, not a field of it"
        );
    }
    for (documented, place) in [(&packaged, "packaging/iggyd.toml"), (&readme, "README.md")] {
        let mut documented = documented.clone();
        let mut expected = table.clone();
        documented.sort();
        expected.sort();
        assert_eq!(documented, expected, "{place} documents other keys");
    }
    let defaults: std::collections::BTreeMap<&str, String> = load("", &[])
        .unwrap()
        .entries()
        .into_iter()
        .map(|(key, value)| (key, value.to_string()))
        .collect();
    assert!(!commented_defaults.is_empty());
    for (key, value) in commented_defaults {
        assert_eq!(
            defaults.get(key.as_str()),
            Some(&value),
            "packaging/iggyd.toml shows `#{key} = {value}` as the default"
        );
    }
}

/// Proves the key table's own rules: names are unique, `data_dir` (which
/// `UnderDataDir` defaults hang off) comes first, no key is also a table, and
/// every key reaches `Config` and comes back out of `to_toml`, so the table
/// and the `Config` fields agree.
#[test]
fn key_table_is_consistent_with_config() {
    let names: Vec<&str> = keys::KEYS.iter().map(|key| key.name).collect();
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "duplicate key in {names:?}");
    assert_eq!(names.first(), Some(&"data_dir"));
    for name in &names {
        assert!(!keys::is_table(name), "{name} is a key and a table");
    }
    let printed: Vec<&str> = load("", &[])
        .unwrap()
        .entries()
        .iter()
        .map(|(key, _)| *key)
        .collect();
    assert_eq!(printed, names);
    // Reload flags as the supervisor relies on them.
    assert!(applies_live("logging.level"));
    assert!(applies_live("shutdown.drain_timeout"));
    assert!(!applies_live("logging.dir"));
    assert!(!applies_live("tcp.address"));
    assert!(!applies_live("no.such.key"));
}
