//! The one table of configuration keys. Each [`Key`] says everything about a
//! key except the field of [`super::Config`] that holds its value: its dotted
//! name, the form of value it accepts (with the bounds, written in
//! `crate::limits`), its built-in default, and whether a reload applies it.
//!
//! Derived from this table, and nowhere else written: the schema and the
//! unknown-key check with its suggestions (`layers`), which environment values
//! are taken verbatim, the defaults layer, the validation and its messages
//! (`read`), `iggyd config`'s output (`print`), the keys a SIGHUP applies, and
//! the checks that `packaging/iggyd.toml` and the README document exactly
//! these keys (`tests`). Adding a key is one entry here plus its field in
//! `Config` (serde names the field like the key's last segment); a nested
//! table such as `tcp.tls.cert_file` is just a longer name, and an array of
//! tables (`[[cluster.nodes]]`) is one key whose kind lists the fields.
//!
//! Must not: read values or know about figment (this is data, not code).

use crate::limits;
use std::time::Duration;

/// One configuration key.
pub(super) struct Key {
    /// Dotted path, as a TOML file nests it: `tcp.address`.
    pub name: &'static str,
    /// What the key accepts.
    pub kind: Kind,
    /// What it holds when no source sets it.
    pub default: BuiltIn,
    /// Whether SIGHUP applies a change to the running daemon.
    pub reload: Reload,
}

/// The forms of value a key accepts. Bounds come from `crate::limits`; the
/// "like …" example of an error message is the key's default.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    /// A non-empty path.
    Path,
    /// A path a Unix socket is bound at: also at most
    /// `limits::UNIX_SOCKET_PATH_BYTES_MAX` bytes.
    SocketPath,
    /// `ip:port`.
    Address,
    /// `true` or `false`.
    Bool,
    /// A string of `min..=max` characters. `secret` values are shown in
    /// errors by length only; `empty` is what an empty string means, when it
    /// is accepted at all.
    Text {
        min: usize,
        max: usize,
        secret: bool,
        empty: Option<&'static str>,
    },
    /// A size in bytes: `0` meaning `zero` when that is accepted, otherwise
    /// at least `min` (and at most `max` when there is one).
    Size {
        min: u64,
        max: Option<u64>,
        zero: Option<&'static str>,
    },
    /// `"auto"` (derived at start) or a size of at least `min`.
    Budget { min: u64, example: &'static str },
    /// A duration: `0` meaning `zero` when that is accepted, otherwise in
    /// `min..=max` (no upper bound when `max` is `None`).
    Duration {
        min: Duration,
        max: Option<Duration>,
        zero: Option<&'static str>,
    },
    /// A whole number in `min..=max`, or `"auto"` (derived at start; the
    /// field is `None`) when `auto` says what that means.
    Count {
        min: u64,
        max: u64,
        auto: Option<&'static str>,
    },
    /// A log level or a tracing `EnvFilter` directive list.
    Level,
    /// `sharding.cpu_allocation`'s forms (see `units::CPU_ALLOCATION_FORMS`).
    CpuAllocation,
    /// One of these words (the `Config` field deserializes from the word).
    Choice(&'static [&'static str]),
    /// A cluster name (`iggyd_peer::identity::ClusterName`): 1 to `max` (at
    /// most 63) characters of `a`–`z`, `0`–`9` and `-`, starting with a
    /// letter and not ending with `-`: one DNS label that certificate
    /// verifiers accept as the last label of a host name.
    Label { max: usize },
    /// An array of tables (`[[cluster.nodes]]` in a file), each holding
    /// exactly `fields`; the `Config` field is a `Vec` of a struct with a
    /// field per entry. Errors name one field of one table as
    /// `key[index].field`, the index counting from 0.
    TableArray { fields: &'static [Field] },
    /// `""`, meaning `empty` (the `Config` field is an `Option` and holds
    /// `None`), or a value of the `inner` kind.
    Optional {
        inner: &'static Kind,
        empty: &'static str,
    },
}

impl Kind {
    /// Whether an environment value is taken as the string it is rather than
    /// parsed like figment's `Env` (a password of `0123` must not become the
    /// number 123).
    pub(super) fn env_verbatim(self) -> bool {
        match self {
            Kind::Optional { inner, .. } => inner.env_verbatim(),
            _ => matches!(
                self,
                Kind::Path
                    | Kind::SocketPath
                    | Kind::Address
                    | Kind::Text { .. }
                    | Kind::Level
                    | Kind::Label { .. }
            ),
        }
    }

    /// Whether error messages must not echo the value.
    pub(super) fn is_secret(self) -> bool {
        match self {
            Kind::Optional { inner, .. } => inner.is_secret(),
            _ => matches!(self, Kind::Text { secret: true, .. }),
        }
    }
}

/// One field of the tables of a [`Kind::TableArray`] key.
#[derive(Debug)]
pub(super) struct Field {
    /// The field's name inside a table, like `replication_address`.
    pub name: &'static str,
    /// What the field accepts.
    pub kind: Kind,
    /// The "like …" of its error messages.
    pub example: &'static str,
    /// What a table that leaves the field out gets; `None`: it is required.
    pub omitted: Option<Omitted>,
}

/// The value of a field a table leaves out.
#[derive(Debug, Clone, Copy)]
pub(super) enum Omitted {
    /// `prefix` followed by the value of the field `field`, which comes
    /// earlier in the table's fields: `node-` and `id` name node 3
    /// `node-3`.
    Prefixed {
        prefix: &'static str,
        field: &'static str,
    },
}

/// A key's built-in default.
#[derive(Debug, Clone, Copy)]
pub(super) enum BuiltIn {
    /// This text, as a file would hold it.
    Text(&'static str),
    Bool(bool),
    /// A duration written in `crate::limits` (printed exactly).
    Duration(Duration),
    /// A size written in `crate::limits` (printed exactly).
    Size(u64),
    /// A count written in `crate::limits`.
    Count(u64),
    /// This name under the final `data_dir`, so that `--data-dir` moves it.
    InDataDir(&'static str),
    /// An empty array (of a [`Kind::TableArray`] key: no tables).
    EmptyArray,
}

/// What a SIGHUP does with a changed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reload {
    /// Applied to the running daemon.
    Live,
    /// Logged as needing a restart.
    Restart,
}

const fn key(name: &'static str, kind: Kind, default: BuiltIn, reload: Reload) -> Key {
    Key {
        name,
        kind,
        default,
        reload,
    }
}

// The forms with parameters, named for the table below.

const BUDGET: Kind = Kind::Budget {
    min: limits::MEMORY_BUDGET_MIN_BYTES,
    example: "8 GiB",
};
const USERNAME: Kind = Kind::Text {
    min: limits::metadata::USERNAME_LEN_MIN,
    max: limits::metadata::USERNAME_LEN_MAX,
    secret: false,
    empty: None,
};
const PASSWORD: Kind = Kind::Text {
    min: limits::metadata::PASSWORD_LEN_MIN,
    max: limits::metadata::PASSWORD_LEN_MAX,
    secret: true,
    empty: Some("generate one at first start"),
};
const LOG_FILE_SIZE: Kind = Kind::Size {
    min: limits::LOG_FILE_SIZE_MIN_BYTES,
    max: None,
    zero: Some("no per-file limit"),
};
const LOG_TOTAL_SIZE: Kind = Kind::Size {
    min: 0,
    max: None,
    zero: Some("no total limit"),
};
const LOG_RETENTION: Kind = Kind::Duration {
    min: Duration::ZERO,
    max: None,
    zero: Some("keep"),
};
const LOG_ROTATION_CHECK: Kind = Kind::Duration {
    min: limits::LOG_ROTATION_CHECK_INTERVAL_MIN,
    max: None,
    zero: None,
};
const DRAIN_TIMEOUT: Kind = Kind::Duration {
    min: limits::DRAIN_TIMEOUT_MIN,
    max: Some(limits::DRAIN_TIMEOUT_MAX),
    zero: None,
};
const RETENTION_CHECK: Kind = Kind::Duration {
    min: limits::RETENTION_CHECK_INTERVAL_MIN,
    max: Some(limits::RETENTION_CHECK_INTERVAL_MAX),
    zero: None,
};
const FLUSH_INTERVAL: Kind = Kind::Duration {
    min: limits::FLUSH_INTERVAL_MIN,
    max: Some(limits::FLUSH_INTERVAL_MAX),
    zero: Some("off"),
};
const DURABILITY: Kind = Kind::Choice(&["persisted", "replicated"]);
const IO_MODE: Kind = Kind::Choice(&["direct", "buffered"]);
const METRICS_ADDRESS: Kind = Kind::Optional {
    inner: &Kind::Address,
    empty: "no metrics endpoint",
};
const METRICS_BEARER_FILE: Kind = Kind::Optional {
    inner: &Kind::Path,
    empty: "no bearer token",
};
const METRICS_BASIC_FILE: Kind = Kind::Optional {
    inner: &Kind::Path,
    empty: "no basic authentication",
};
const CONNECTIONS: Kind = Kind::Count {
    min: 1,
    max: limits::CONNECTIONS_LIMIT,
    auto: Some("derived from RLIMIT_NOFILE"),
};
const LOGIN_FRAME: Kind = Kind::Size {
    min: limits::LOGIN_FRAME_BYTES_MIN,
    max: None,
    zero: None,
};
const LOGIN_TIMEOUT: Kind = Kind::Duration {
    min: limits::LOGIN_TIMEOUT_MIN,
    max: Some(limits::LOGIN_TIMEOUT_MAX),
    zero: None,
};
const IDLE_TIMEOUT: Kind = Kind::Duration {
    min: limits::IDLE_TIMEOUT_MIN,
    max: None,
    zero: Some("never"),
};
const LOGIN_THREADS: Kind = Kind::Count {
    min: 1,
    max: limits::LOGIN_THREADS_MAX,
    auto: None,
};
const LOGINS_QUEUED: Kind = Kind::Count {
    min: 1,
    max: limits::LOGINS_QUEUED_LIMIT,
    auto: None,
};
const LOGIN_BACKOFF: Kind = Kind::Duration {
    min: limits::LOGIN_BACKOFF_MIN,
    max: Some(limits::LOGIN_BACKOFF_MAX),
    zero: Some("no delay"),
};
const LOGIN_BACKOFF_CAP: Kind = Kind::Duration {
    min: limits::LOGIN_BACKOFF_CAP_MIN,
    max: Some(limits::LOGIN_BACKOFF_CAP_MAX),
    zero: None,
};
const LOGIN_FAILURES: Kind = Kind::Count {
    min: 1,
    max: limits::LOGIN_FAILURES_BEFORE_CLOSE_MAX,
    auto: None,
};
const APPEND_BYTES: Kind = Kind::Size {
    min: limits::APPEND_BYTES_IN_FLIGHT_MIN,
    max: None,
    zero: None,
};
const POLL_REPLY_BYTES: Kind = Kind::Size {
    min: limits::POLL_REPLY_BYTES_MIN,
    max: Some(limits::POLL_REPLY_BYTES_MAX),
    zero: None,
};
const POLL_REPLY_IN_FLIGHT: Kind = Kind::Size {
    min: limits::POLL_REPLY_BYTES_IN_FLIGHT_MIN,
    max: None,
    zero: None,
};
const CONSUMER_OFFSETS: Kind = Kind::Count {
    min: 1,
    max: limits::CONSUMER_OFFSETS_PER_PARTITION_MAX,
    auto: None,
};

const GROUPS_PER_TOPIC: Kind = Kind::Count {
    min: 1,
    max: limits::metadata::GROUPS_PER_TOPIC_MAX as u64,
    auto: None,
};
const METADATA_SNAPSHOT: Kind = Kind::Count {
    min: limits::CLUSTER_METADATA_SNAPSHOT_ENTRIES_MIN,
    max: limits::CLUSTER_METADATA_SNAPSHOT_ENTRIES_MAX,
    auto: None,
};
const METADATA_SNAPSHOT_DEFAULT: BuiltIn =
    BuiltIn::Count(limits::CLUSTER_METADATA_SNAPSHOT_ENTRIES);
const MEMBERS_PER_GROUP: Kind = Kind::Count {
    min: 1,
    max: limits::metadata::GROUP_MEMBERS_MAX as u64,
    auto: None,
};
const METADATA_RECORD: Kind = Kind::Size {
    min: limits::metadata::METADATA_RECORD_BYTES_MIN,
    max: Some(limits::metadata::RECORD_PAYLOAD_MAX_BYTES as u64),
    zero: None,
};
const TLS_FILE: Kind = Kind::Optional {
    inner: &Kind::Path,
    empty: "none",
};
const REBALANCE_TIMEOUT: Kind = Kind::Duration {
    min: limits::REBALANCE_TIMEOUT_MIN,
    max: Some(limits::REBALANCE_TIMEOUT_MAX),
    zero: None,
};
const CLUSTER_NAME: Kind = Kind::Label {
    max: limits::CLUSTER_NAME_LEN_MAX,
};
const NODE_ID: Kind = Kind::Count {
    min: 1,
    max: limits::CLUSTER_NODE_ID_MAX,
    auto: None,
};
const ELECTION_TIMEOUT: Kind = Kind::Duration {
    min: limits::CLUSTER_ELECTION_TIMEOUT_MIN,
    max: Some(limits::CLUSTER_ELECTION_TIMEOUT_MAX),
    zero: None,
};
const HEARTBEAT_INTERVAL: Kind = Kind::Duration {
    min: limits::CLUSTER_HEARTBEAT_INTERVAL_MIN,
    max: Some(limits::CLUSTER_HEARTBEAT_INTERVAL_MAX),
    zero: None,
};
/// `[[cluster.nodes]]`: every node of the cluster, this one included.
const CLUSTER_NODES: Kind = Kind::TableArray {
    fields: &[
        Field {
            name: "id",
            kind: NODE_ID,
            example: "1",
            omitted: None,
        },
        Field {
            name: "name",
            kind: Kind::Text {
                min: 1,
                max: limits::CLUSTER_NODE_NAME_LEN_MAX,
                secret: false,
                empty: None,
            },
            example: "node-1",
            omitted: Some(Omitted::Prefixed {
                prefix: "node-",
                field: "id",
            }),
        },
        Field {
            name: "address",
            kind: Kind::Address,
            example: "10.0.0.1:8090",
            omitted: None,
        },
        Field {
            name: "replication_address",
            kind: Kind::Address,
            example: "10.0.0.1:8091",
            omitted: None,
        },
    ],
};
const ELECTION_TIMEOUT_DEFAULT: BuiltIn = BuiltIn::Duration(limits::CLUSTER_ELECTION_TIMEOUT);
const HEARTBEAT_INTERVAL_DEFAULT: BuiltIn = BuiltIn::Duration(limits::CLUSTER_HEARTBEAT_INTERVAL);
const RETENTION_CHECK_DEFAULT: BuiltIn = BuiltIn::Duration(limits::RETENTION_CHECK_INTERVAL);
const FLUSH_INTERVAL_DEFAULT: BuiltIn = BuiltIn::Duration(limits::FLUSH_INTERVAL);
const REBALANCE_TIMEOUT_DEFAULT: BuiltIn = BuiltIn::Duration(limits::REBALANCE_TIMEOUT);
const LOGIN_TIMEOUT_DEFAULT: BuiltIn = BuiltIn::Duration(limits::LOGIN_TIMEOUT);
const IDLE_TIMEOUT_DEFAULT: BuiltIn = BuiltIn::Duration(limits::IDLE_TIMEOUT);
const LOGIN_BACKOFF_DEFAULT: BuiltIn = BuiltIn::Duration(limits::LOGIN_BACKOFF);
const LOGIN_BACKOFF_CAP_DEFAULT: BuiltIn = BuiltIn::Duration(limits::LOGIN_BACKOFF_CAP);
const LOGIN_FRAME_DEFAULT: BuiltIn = BuiltIn::Size(limits::LOGIN_FRAME_BYTES_MAX);
const GROUPS_PER_TOPIC_DEFAULT: BuiltIn =
    BuiltIn::Count(limits::metadata::GROUPS_PER_TOPIC_DEFAULT as u64);
const MEMBERS_PER_GROUP_DEFAULT: BuiltIn =
    BuiltIn::Count(limits::metadata::GROUP_MEMBERS_DEFAULT as u64);
const METADATA_RECORD_DEFAULT: BuiltIn =
    BuiltIn::Size(limits::metadata::METADATA_RECORD_BYTES_DEFAULT);
const APPEND_BYTES_DEFAULT: BuiltIn = BuiltIn::Size(limits::APPEND_BYTES_IN_FLIGHT);
const POLL_REPLY_BYTES_DEFAULT: BuiltIn = BuiltIn::Size(limits::POLL_REPLY_BYTES);
const POLL_REPLY_IN_FLIGHT_DEFAULT: BuiltIn = BuiltIn::Size(limits::POLL_REPLY_BYTES_IN_FLIGHT);
const CONSUMER_OFFSETS_DEFAULT: BuiltIn = BuiltIn::Count(limits::CONSUMER_OFFSETS_PER_PARTITION);
const LOGIN_THREADS_DEFAULT: BuiltIn = BuiltIn::Count(limits::LOGIN_THREADS);
const LOGINS_QUEUED_DEFAULT: BuiltIn = BuiltIn::Count(limits::LOGINS_QUEUED_MAX);
const LOGIN_FAILURES_DEFAULT: BuiltIn = BuiltIn::Count(limits::LOGIN_FAILURES_BEFORE_CLOSE);

use BuiltIn::{InDataDir, Text};
use Reload::{Live, Restart};

/// Every key, in the order `iggyd config` prints them and errors are looked
/// for. `data_dir` comes first: the `InDataDir` defaults hang off it.
#[rustfmt::skip]
pub(super) const KEYS: &[Key] = &[
    key("data_dir",                        Kind::Path,          Text("local_data"),      Restart),
    key("tcp.address",                     Kind::Address,       Text("127.0.0.1:8090"),  Restart),
    key("tcp.tls.enabled",                 Kind::Bool,          BuiltIn::Bool(false),    Restart),
    key("tcp.tls.cert_file",               TLS_FILE,            Text(""),                Live),
    key("tcp.tls.key_file",                TLS_FILE,            Text(""),                Live),
    key("tcp.tls.client_ca_file",          TLS_FILE,            Text(""),                Live),
    key("admin.socket",                    Kind::SocketPath,    InDataDir("iggyd.sock"), Restart),
    key("sharding.cpu_allocation",         Kind::CpuAllocation, Text("physical"),        Restart),
    key("sharding.require_io_uring",       Kind::Bool,          BuiltIn::Bool(false),    Restart),
    key("memory.budget",                   BUDGET,              Text("auto"),            Restart),
    key("root.username",                   USERNAME,            Text("iggy"),            Restart),
    key("root.password",                   PASSWORD,            Text("iggy"),            Restart),
    key("logging.level",                   Kind::Level,         Text("info"),            Live),
    key("logging.dir",                     Kind::Path,          InDataDir("logs"),       Restart),
    key("logging.max_file_size",           LOG_FILE_SIZE,       Text("500 MB"),          Live),
    key("logging.max_total_size",          LOG_TOTAL_SIZE,      Text("4 GiB"),           Live),
    key("logging.retention",               LOG_RETENTION,       Text("7 days"),          Live),
    key("logging.rotation_check_interval", LOG_ROTATION_CHECK,  Text("1 m"),             Live),
    key("shutdown.drain_timeout",          DRAIN_TIMEOUT,       Text("30 s"),            Live),
    key("retention.check_interval",        RETENTION_CHECK,     RETENTION_CHECK_DEFAULT, Restart),
    key("storage.default_durability",      DURABILITY,          Text("persisted"),       Restart),
    key("storage.flush_interval",          FLUSH_INTERVAL,      FLUSH_INTERVAL_DEFAULT,  Restart),
    key("storage.io_mode",                 IO_MODE,             Text("direct"),          Restart),
    key("metrics.address",                 METRICS_ADDRESS,     Text(""),                Restart),
    key("metrics.bearer_token_file",       METRICS_BEARER_FILE, Text(""),                Restart),
    key("metrics.basic_auth_file",         METRICS_BASIC_FILE,  Text(""),                Restart),
    key("consumer_groups.rebalance_timeout", REBALANCE_TIMEOUT, REBALANCE_TIMEOUT_DEFAULT, Restart),
    key("limits.max_connections",          CONNECTIONS,         Text("auto"),            Restart),
    key("limits.max_connections_per_address", CONNECTIONS,      Text("auto"),            Restart),
    key("limits.max_login_frame_size",     LOGIN_FRAME,         LOGIN_FRAME_DEFAULT,     Restart),
    key("limits.login_timeout",            LOGIN_TIMEOUT,       LOGIN_TIMEOUT_DEFAULT,   Restart),
    key("limits.idle_timeout",             IDLE_TIMEOUT,        IDLE_TIMEOUT_DEFAULT,    Restart),
    key("limits.login_threads",            LOGIN_THREADS,       LOGIN_THREADS_DEFAULT,   Restart),
    key("limits.max_queued_logins",        LOGINS_QUEUED,       LOGINS_QUEUED_DEFAULT,   Restart),
    key("limits.login_backoff",            LOGIN_BACKOFF,       LOGIN_BACKOFF_DEFAULT,   Restart),
    key("limits.max_login_backoff",        LOGIN_BACKOFF_CAP,   LOGIN_BACKOFF_CAP_DEFAULT, Restart),
    key("limits.login_failures_before_close", LOGIN_FAILURES,   LOGIN_FAILURES_DEFAULT,  Restart),
    key("limits.max_append_bytes_in_flight", APPEND_BYTES,      APPEND_BYTES_DEFAULT,    Restart),
    key("limits.max_poll_reply_bytes",     POLL_REPLY_BYTES,    POLL_REPLY_BYTES_DEFAULT, Restart),
    key("limits.max_poll_reply_bytes_in_flight", POLL_REPLY_IN_FLIGHT, POLL_REPLY_IN_FLIGHT_DEFAULT, Restart),
    key("limits.max_consumer_offsets_per_partition", CONSUMER_OFFSETS, CONSUMER_OFFSETS_DEFAULT, Restart),
    key("limits.max_consumer_groups_per_topic", GROUPS_PER_TOPIC, GROUPS_PER_TOPIC_DEFAULT, Restart),
    key("limits.max_members_per_group",    MEMBERS_PER_GROUP,   MEMBERS_PER_GROUP_DEFAULT, Restart),
    key("limits.max_metadata_record_size", METADATA_RECORD,     METADATA_RECORD_DEFAULT, Restart),
    key("cluster.enabled",                 Kind::Bool,          BuiltIn::Bool(false),    Restart),
    key("cluster.name",                    CLUSTER_NAME,        Text("iggyd"),           Restart),
    key("cluster.node_id",                 NODE_ID,             BuiltIn::Count(1),       Restart),
    key("cluster.join",                    Kind::Bool,          BuiltIn::Bool(false),    Restart),
    key("cluster.nodes",                   CLUSTER_NODES,       BuiltIn::EmptyArray,     Restart),
    key("cluster.election_timeout",        ELECTION_TIMEOUT,    ELECTION_TIMEOUT_DEFAULT, Restart),
    key("cluster.heartbeat_interval",      HEARTBEAT_INTERVAL,  HEARTBEAT_INTERVAL_DEFAULT, Restart),
    key("cluster.allow_even_voters",       Kind::Bool,          BuiltIn::Bool(false),    Restart),
    key("cluster.metadata_snapshot_entries", METADATA_SNAPSHOT, METADATA_SNAPSHOT_DEFAULT, Restart),
    key("cluster.tls.ca_file",             TLS_FILE,            Text(""),                Live),
    key("cluster.tls.cert_file",           TLS_FILE,            Text(""),                Live),
    key("cluster.tls.key_file",            TLS_FILE,            Text(""),                Live),
];

/// The key named `name`, if there is one.
pub(super) fn find(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|key| key.name == name)
}

/// Whether `path` is a table (a proper prefix of some key).
pub(super) fn is_table(path: &str) -> bool {
    is_table_in(KEYS, path)
}

/// The full paths directly under table `path` (`""` = the top level), in
/// table order: keys and sub-tables alike.
pub(super) fn children(path: &str) -> Vec<String> {
    children_in(KEYS, path)
}

/// Every table and key path, each after the tables it is in, in table order:
/// the candidates for a "did you mean" on an unknown top-level key (`address`
/// or `tcp_address` both mean `tcp.address`).
pub(super) fn all_paths() -> Vec<String> {
    all_paths_in(KEYS)
}

fn is_table_in(keys: &[Key], path: &str) -> bool {
    keys.iter().any(|key| {
        key.name
            .strip_prefix(path)
            .is_some_and(|rest| rest.starts_with('.'))
    })
}

fn children_in(keys: &[Key], path: &str) -> Vec<String> {
    let mut children: Vec<String> = Vec::new();
    for key in keys {
        let rest = if path.is_empty() {
            Some(key.name)
        } else {
            key.name
                .strip_prefix(path)
                .and_then(|rest| rest.strip_prefix('.'))
        };
        let Some(rest) = rest else { continue };
        let first = rest.split('.').next().unwrap_or(rest);
        let child = if path.is_empty() {
            first.to_string()
        } else {
            format!("{path}.{first}")
        };
        if !children.contains(&child) {
            children.push(child);
        }
    }
    children
}

fn all_paths_in(keys: &[Key]) -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    for key in keys {
        let mut path = String::new();
        for segment in key.name.split('.') {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(segment);
            if !paths.contains(&path) {
                paths.push(path.clone());
            }
        }
    }
    paths
}

/// Whether a SIGHUP applies a change of `name` without a restart.
pub fn applies_live(name: &str) -> bool {
    find(name).is_some_and(|key| key.reload == Reload::Live)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves every field of an array of tables that is named after another
    // field names one that comes earlier (the reader fills fields in order),
    // and that field names are unique within their table.
    #[test]
    fn omitted_fields_name_an_earlier_field() {
        for key in KEYS {
            let Kind::TableArray { fields } = key.kind else {
                continue;
            };
            for (index, field) in fields.iter().enumerate() {
                assert!(
                    !fields[..index].iter().any(|other| other.name == field.name),
                    "{}: `{}` twice",
                    key.name,
                    field.name
                );
                if let Some(Omitted::Prefixed { field: source, .. }) = field.omitted {
                    assert!(
                        fields[..index].iter().any(|other| other.name == source),
                        "{}: `{}` is named after `{source}`, which must come before it",
                        key.name,
                        field.name
                    );
                }
            }
        }
    }

    // Proves the schema helpers handle tables nested deeper than one level
    // (`tcp.tls.cert_file`), which is all a nested key needs from this table.
    #[test]
    fn nested_tables() {
        let path = |name| key(name, Kind::Path, BuiltIn::Text("x"), Reload::Restart);
        let keys = [
            path("data_dir"),
            path("tcp.address"),
            path("tcp.tls.cert_file"),
            path("tcp.tls.key_file"),
        ];
        assert_eq!(children_in(&keys, ""), ["data_dir", "tcp"]);
        assert_eq!(children_in(&keys, "tcp"), ["tcp.address", "tcp.tls"]);
        assert_eq!(
            children_in(&keys, "tcp.tls"),
            ["tcp.tls.cert_file", "tcp.tls.key_file"]
        );
        assert!(is_table_in(&keys, "tcp"));
        assert!(is_table_in(&keys, "tcp.tls"));
        assert!(!is_table_in(&keys, "tcp.tls.cert_file"));
        assert!(!is_table_in(&keys, "tc"));
        assert_eq!(
            all_paths_in(&keys),
            [
                "data_dir",
                "tcp",
                "tcp.address",
                "tcp.tls",
                "tcp.tls.cert_file",
                "tcp.tls.key_file"
            ]
        );
    }
}
