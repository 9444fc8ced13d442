//! Configuration: built-in defaults < TOML file < `IGGY_ROOT_*` < `IGGYD_*`
//! environment < flags, merged with figment, then validated once into a
//! `Config`. This module owns the typed configuration and its errors; it
//! reads no process state except the config file (the environment is
//! injected through `Sources`). Errors carry the dotted key, the value given,
//! what is accepted and where the value came from, in one line; they are
//! never printed here (the caller prints them and exits 78, EX_CONFIG).
//!
//! Layout: `keys` is the one table of keys (name, accepted form and bounds,
//! default, reload), `layers` builds the figment and rejects unknown keys,
//! `read` checks each key by its kind into a `Config` (`read/cluster` the
//! rules between the `[cluster]` keys), `print` writes a
//! `Config` back as a config file, and `units` parses and prints sizes,
//! durations and PU ranges exactly. Each field of `Config` is named (for
//! serde) like the last segment of its key.

mod keys;
mod layers;
mod print;
mod read;
mod units;

#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod tests;

pub use keys::applies_live;
pub use units::human_bytes;

use figment::value::Value;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How shards are placed on CPUs (`sharding.cpu_allocation`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CpuAllocation {
    /// One shard per physical core, on the lowest allowed PU of that core.
    Physical,
    /// Every allowed PU, SMT siblings included.
    All,
    /// The first N physical cores of the `Physical` plan.
    Count(usize),
    /// Explicit PU OS indexes (from `"a..b"` or a list).
    List(Vec<u32>),
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TcpConfig {
    pub address: SocketAddr,
    pub tls: TlsConfig,
}

/// `[tcp.tls]`: TLS on the Iggy TCP listener (`net::tls`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TlsConfig {
    /// Serve TLS 1.2/1.3 only; plaintext clients are closed.
    pub enabled: bool,
    /// PEM certificate chain, leaf first (required when enabled). A path
    /// starting with `$CREDENTIALS_DIRECTORY/` is read from the directory
    /// systemd's `LoadCredential=` fills.
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the leaf certificate.
    pub key_file: Option<PathBuf>,
    /// PEM CA certificates: when set, only clients presenting a certificate
    /// issued by one of them complete the handshake.
    pub client_ca_file: Option<PathBuf>,
}

/// `[limits]`: every bound a client can press on (`net/`). `None` counts are
/// `"auto"`, derived at start.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LimitsConfig {
    /// Client connections at once; `None` = RLIMIT_NOFILE minus the
    /// descriptors kept for storage (`net::admission`).
    pub max_connections: Option<u64>,
    /// Client connections from one source address; `None` = a quarter of
    /// the connection cap.
    pub max_connections_per_address: Option<u64>,
    /// Largest frame accepted before login, header included.
    #[serde(rename = "max_login_frame_size")]
    pub max_login_frame_size_bytes: u64,
    /// Time from accept to a successful login.
    pub login_timeout: Duration,
    /// A logged-in connection silent this long is closed; zero = never.
    pub idle_timeout: Duration,
    /// Threads verifying passwords, off the shards.
    pub login_threads: u64,
    /// Password logins waiting for a login thread before new ones are
    /// refused (status 58, which the SDK retries).
    pub max_queued_logins: u64,
    /// First delay after a failed login from an address (doubling); zero =
    /// none.
    pub login_backoff: Duration,
    /// Cap of that delay.
    pub max_login_backoff: Duration,
    /// Failed logins after which a connection is closed.
    pub login_failures_before_close: u64,
    /// Bytes of appends in flight to one owner shard.
    #[serde(rename = "max_append_bytes_in_flight")]
    pub max_append_bytes_in_flight_bytes: u64,
    /// Bytes of stored records one poll reply may hold beyond its first
    /// batch (a poll asking for more gets fewer messages).
    pub max_poll_reply_bytes: u64,
    /// Bytes of poll replies one shard's connections hold at once (built
    /// and not yet taken by the kernel); past it a poll gets one batch.
    pub max_poll_reply_bytes_in_flight: u64,
    /// Stored consumer offsets one partition may hold; storing one more is
    /// refused (TooManyConsumerOffsets, 3024).
    pub max_consumer_offsets_per_partition: u64,
    /// Consumer groups one topic may hold (any reader may create them).
    pub max_consumer_groups_per_topic: u64,
    /// Members one consumer group may hold.
    pub max_members_per_group: u64,
    /// Largest metadata journal record shard 0 admits (a permissions block,
    /// an option set).
    #[serde(rename = "max_metadata_record_size")]
    pub max_metadata_record_size_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AdminConfig {
    /// `admin.socket`; `<data_dir>/iggyd.sock` when not set. At most 107
    /// bytes, the room `sockaddr_un` has.
    pub socket: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShardingConfig {
    pub cpu_allocation: CpuAllocation,
    /// Refuse to start when io_uring is unavailable instead of falling back to epoll.
    pub require_io_uring: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryConfig {
    /// Total bytes the shards may use (`memory.budget`, at least 1 MiB);
    /// `None` (`"auto"`) = derived at start from MemAvailable and the cgroup's
    /// `memory.max`.
    #[serde(rename = "budget")]
    pub budget_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RootConfig {
    /// 3 to 50 characters.
    pub username: String,
    /// 3 to 100 characters, or empty: generate a random password on first
    /// start and write it once to `<data_dir>/root-credentials` (mode 0600;
    /// `metadata::bootstrap`), the packaged default.
    pub password: String,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoggingConfig {
    /// A level (`trace`, `debug`, `info`, `warn`, `error`, `off`) or an
    /// `EnvFilter` directive list (`info,iggyd::shard=debug`), already checked
    /// to parse with `EnvFilter::try_new`.
    pub level: String,
    /// `logging.dir`; `<data_dir>/logs` when not set.
    pub dir: PathBuf,
    /// `logging.max_file_size`: a file is rotated before it would exceed this.
    /// 0 = no per-file limit; otherwise at least 4 KiB and, when the total
    /// limit is set too, at most `max_total_size_bytes`.
    #[serde(rename = "max_file_size")]
    pub max_file_size_bytes: u64,
    /// `logging.max_total_size`: oldest files are deleted to stay under it.
    /// 0 = no total limit.
    #[serde(rename = "max_total_size")]
    pub max_total_size_bytes: u64,
    /// `logging.retention`: files older than this are deleted.
    /// Zero (`0`) = keep forever.
    pub retention: Duration,
    /// `logging.rotation_check_interval`: how often retention and the total
    /// size are enforced. At least 1 s, so the checker cannot spin.
    pub rotation_check_interval: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShutdownConfig {
    /// How long a graceful stop may take before the process exits non-zero
    /// (`shutdown.drain_timeout`, 1 s to 300 s).
    pub drain_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RetentionConfig {
    /// How often each shard deletes expired segments and enforces
    /// `max_topic_size` (`retention.check_interval`, 100 ms to 1 h).
    pub check_interval: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StorageConfig {
    /// Durability of topics whose creator does not say
    /// (`storage.default_durability`: `persisted` acknowledges after fsync,
    /// `replicated` after the write).
    #[serde(with = "durability_word")]
    pub default_durability: iggyd_metadata::Durability,
    /// `replicated` topics: unsynced data is fsynced at least this often
    /// (`storage.flush_interval`; `0` leaves it to the topic's size and
    /// count thresholds and to shutdown; otherwise 10 ms to 1 h).
    pub flush_interval: Duration,
    /// How segment data reaches the device (`storage.io_mode`): `direct`
    /// (`O_DIRECT` from aligned buffers, no page-cache copy; the default,
    /// with a logged fallback where the file system refuses it) or
    /// `buffered` (through the page cache).
    pub io_mode: IoMode,
}

/// `storage.io_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    Direct,
    Buffered,
}

impl IoMode {
    /// The storage access this mode asks for (before the start-up probe).
    pub fn access(self) -> iggyd_storage::Access {
        match self {
            IoMode::Direct => iggyd_storage::Access::Direct,
            IoMode::Buffered => iggyd_storage::Access::Buffered,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MetricsConfig {
    /// `metrics.address`: where `GET /metrics` (Prometheus text format) is
    /// served; `None` (`""`, the default) = no endpoint.
    pub address: Option<SocketAddr>,
    /// `metrics.bearer_token_file`: scrapes must send `Authorization:
    /// Bearer <the file's first line>`.
    pub bearer_token_file: Option<PathBuf>,
    /// `metrics.basic_auth_file`: scrapes must send basic credentials equal
    /// to the file's first line, `user:password`. At most one of the two
    /// files is set.
    pub basic_auth_file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConsumerGroupsConfig {
    /// A partition promised to a joining member moves after this long even
    /// if its owner never committed what it polled
    /// (`consumer_groups.rebalance_timeout`, 100 ms to 1 h).
    pub rebalance_timeout: Duration,
}

/// `[cluster]`: replication between iggyd nodes (off by default: one node,
/// and nothing else changes). When `enabled` is false the section may be
/// absent or leave keys out (they take their defaults); the values that are
/// given are still checked by their kind, but not against each other. Every
/// key needs a restart.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClusterConfig {
    /// `cluster.enabled`: run as a node of the Raft cluster `nodes` lists.
    pub enabled: bool,
    /// `cluster.name`: a DNS label of 1 to 63 characters (`a`–`z`, `0`–`9`,
    /// `-`; a letter first, not `-` last). It names the node certificates (SAN
    /// `node-<id>.<name>`) and is the name GetClusterMetadata reports.
    pub name: String,
    /// `cluster.node_id`: this node's id, 1 to `i64::MAX` (a TOML
    /// integer); when the cluster is on it is the id of one of `nodes`.
    pub node_id: u64,
    /// `cluster.join`: this node never initializes the cluster's groups with
    /// `nodes` as voters; it waits for the running cluster to add it
    /// (`cluster::ClusterSettings::join`). It still lists itself in `nodes`.
    pub join: bool,
    /// `cluster.nodes`: every node of the cluster, this one included
    /// (`[[cluster.nodes]]`). When the cluster is on: not empty, distinct
    /// ids and names, every address and replication address distinct and
    /// concrete (no unspecified IP, no port 0), an odd count unless
    /// `allow_even_voters`.
    pub nodes: Vec<ClusterNode>,
    /// `cluster.election_timeout`: a follower that hears no leader for a
    /// random time between this and twice this starts an election (150 ms
    /// to 60 s).
    pub election_timeout: Duration,
    /// `cluster.heartbeat_interval`: how often the leader sends heartbeats
    /// (20 ms to 10 s; when the cluster is on, below half of
    /// `election_timeout`).
    pub heartbeat_interval: Duration,
    /// `cluster.allow_even_voters`: accept an even number of nodes (a
    /// majority of 2k nodes survives no more failures than one of 2k - 1).
    pub allow_even_voters: bool,
    /// `cluster.metadata_snapshot_entries`: the metadata group snapshots
    /// its store every this many entries (16 to 1,000,000); a start applies
    /// at most about this many entries after the snapshot.
    pub metadata_snapshot_entries: u64,
    /// `[cluster.tls]`: the certificates nodes authenticate each other with.
    pub tls: ClusterTlsConfig,
}

/// One `[[cluster.nodes]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClusterNode {
    /// 1 to `i64::MAX`, unique among the nodes (the Raft node id).
    pub id: u64,
    /// 1 to 255 characters, unique among the nodes; `node-<id>` when
    /// omitted. GetClusterMetadata reports it.
    pub name: String,
    /// The node's Iggy TCP address as clients reach it (GetClusterMetadata
    /// reports it); a concrete IP, not `0.0.0.0` or `::`. For this node its
    /// port is `tcp.address`'s.
    pub address: SocketAddr,
    /// The node-to-node (Raft) address; this node listens on its own
    /// entry's.
    pub replication_address: SocketAddr,
}

/// `[cluster.tls]`: mutual TLS between nodes. All three files must be set
/// when the cluster is on. As for `[tcp.tls]`, the configuration checks
/// that they are set, not that they exist: the files are read where they
/// are used (`net::tls` reads the client port's at start), because a path
/// starting with `$CREDENTIALS_DIRECTORY/` names a file of the directory
/// systemd's `LoadCredential=` fills, which only the running service has.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClusterTlsConfig {
    /// PEM CA certificates that issued every node's certificate.
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain of this node, leaf first (SAN
    /// `node-<node_id>.<name>`).
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of that certificate.
    pub key_file: Option<PathBuf>,
}

/// The validated, immutable configuration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Config {
    pub data_dir: PathBuf,
    pub tcp: TcpConfig,
    pub admin: AdminConfig,
    pub sharding: ShardingConfig,
    pub memory: MemoryConfig,
    pub root: RootConfig,
    pub logging: LoggingConfig,
    pub shutdown: ShutdownConfig,
    pub retention: RetentionConfig,
    pub storage: StorageConfig,
    pub metrics: MetricsConfig,
    pub consumer_groups: ConsumerGroupsConfig,
    pub limits: LimitsConfig,
    pub cluster: ClusterConfig,
}

/// Where configuration comes from, besides the built-in defaults.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// `--config PATH`; when `None`, `/etc/iggyd/iggyd.toml` is read if it exists.
    pub file: Option<PathBuf>,
    /// The process environment (only `IGGYD_*`, `IGGY_ROOT_USERNAME` and
    /// `IGGY_ROOT_PASSWORD` are looked at). Injected so tests need not touch
    /// the real environment.
    pub env: Vec<(String, String)>,
    /// Flag overrides, highest precedence.
    pub listen: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
}

impl Sources {
    /// `Sources` with `env` filled from the process environment (only the
    /// variables this module looks at), for the binary. Non-UTF-8 values are
    /// converted lossily, so they fail validation instead of vanishing.
    pub fn from_process_env() -> Sources {
        let env = std::env::vars_os()
            .filter_map(|(name, value)| {
                let name = name.into_string().ok()?;
                let wanted = name.starts_with("IGGY_ROOT_")
                    || name
                        .get(..6)
                        .is_some_and(|p| p.eq_ignore_ascii_case("IGGYD_"));
                wanted.then(|| (name, value.to_string_lossy().into_owned()))
            })
            .collect();
        Sources {
            env,
            ..Sources::default()
        }
    }
}

/// Why the configuration was rejected. `Display` is one line naming the key,
/// the value, what is accepted and, when known, where the value came from:
///
/// ``config key `logging.rotation_check_interval` from environment variable
/// `IGGYD_LOGGING__ROTATION_CHECK_INTERVAL`: "0 s" is not accepted; expected a
/// duration of at least 1 s, like "1 m"``
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A known key holds a value that is not accepted.
    #[error("config key `{key}`{}: {value} is not accepted; expected {expected}", from(.origin))]
    Invalid {
        /// Full dotted key, like `logging.max_file_size`.
        key: String,
        /// The value as given (TOML-like: strings quoted). Passwords are not
        /// shown, only their length.
        value: String,
        /// What is accepted.
        expected: String,
        /// Where the value came from (`file `…``, `environment variable `…``,
        /// `flag `…``); `None` for built-in defaults.
        origin: Option<String>,
    },
    /// A key the schema does not have, at the top level or in a table.
    #[error(
        "config key `{key}`{} is not known; {}{accepted}",
        from(.origin),
        suggestion.as_ref().map(|s| format!("did you mean `{s}`? ")).unwrap_or_default()
    )]
    UnknownKey {
        key: String,
        /// The closest known key (as an environment variable name when the
        /// unknown key came from the environment).
        suggestion: Option<String>,
        /// The keys accepted at that level.
        accepted: String,
        origin: Option<String>,
    },
    /// The config file is missing, unreadable or not valid TOML.
    #[error("config file `{}`: {message}", .path.display())]
    File { path: PathBuf, message: String },
}

fn from(origin: &Option<String>) -> String {
    origin
        .as_ref()
        .map(|origin| format!(" from {origin}"))
        .unwrap_or_default()
}

impl ConfigError {
    /// The full dotted key the error is about (`logging.max_file_size`); for
    /// a file that cannot be read or parsed, `--config`, the flag that names it.
    pub fn key(&self) -> &str {
        match self {
            ConfigError::Invalid { key, .. } | ConfigError::UnknownKey { key, .. } => key,
            ConfigError::File { .. } => "--config",
        }
    }
}

impl Config {
    /// Merges `sources` over the built-in defaults and validates every key.
    pub fn load(sources: &Sources) -> Result<Config, ConfigError> {
        let figment = layers::figment(sources)?;
        // `Layer::data` never fails, so the merged value always exists; the
        // error arm is kept typed rather than unwrapped all the same.
        let root = figment.find_value("").map_err(|error| ConfigError::File {
            path: sources.file.clone().unwrap_or_default(),
            message: error.to_string().replace('\n', " "),
        })?;
        let dict = root.as_dict().cloned().unwrap_or_default();
        layers::check_keys(&figment, &dict)?;
        read::Reader {
            figment: &figment,
            root: &root,
        }
        .config()
    }

    /// The effective configuration as TOML, in the shape a config file takes
    /// (see `print`). The root password is included: the output is a config
    /// file, handle it like one.
    pub fn to_toml(&self) -> String {
        print::document(print::entries(self))
    }

    /// `to_toml` with every secret value (the root password) replaced by
    /// `"<redacted>"`, for diagnostics that leave the host. An empty
    /// password stays `""`: it says one was generated, not what it is.
    pub fn to_toml_redacted(&self) -> String {
        let entries = print::entries(self)
            .into_iter()
            .map(|(key, value)| {
                let secret = keys::find(key).is_some_and(|found| found.kind.is_secret());
                if secret && value.as_str() != Some("") {
                    (key, toml::Value::from("<redacted>"))
                } else {
                    (key, value)
                }
            })
            .collect();
        print::document(entries)
    }

    /// `(dotted key, value as TOML)` for every key with a value, in the order
    /// `to_toml` prints them (for reload diffs).
    pub fn entries(&self) -> Vec<(&'static str, toml::Value)> {
        print::entries(self)
    }
}

/// The path a configured file (`[tcp.tls]`, `[cluster.tls]`) is read from:
/// `$CREDENTIALS_DIRECTORY/NAME` (or `${CREDENTIALS_DIRECTORY}/NAME`) under
/// `credentials`, systemd's credentials directory; any other path as given.
pub fn resolve_credential(
    path: &std::path::Path,
    credentials: Option<&std::path::Path>,
) -> Result<PathBuf, String> {
    let text = path.to_string_lossy();
    let rest = text
        .strip_prefix("$CREDENTIALS_DIRECTORY/")
        .or_else(|| text.strip_prefix("${CREDENTIALS_DIRECTORY}/"));
    let Some(name) = rest else {
        return Ok(path.to_path_buf());
    };
    match credentials {
        Some(directory) => Ok(directory.join(name)),
        None => Err(
            "CREDENTIALS_DIRECTORY is not set: the path names a systemd credential, so the unit \
             needs LoadCredential= for it"
                .to_string(),
        ),
    }
}

/// `storage.default_durability` as its word (`persisted`), the form the key
/// takes; `Durability`'s own serde form belongs to the metadata journal.
mod durability_word {
    use iggyd_metadata::Durability;

    pub fn serialize<S: serde::Serializer>(
        durability: &Durability,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(durability.as_str())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Durability, D::Error> {
        let word: String = serde::Deserialize::deserialize(deserializer)?;
        [Durability::Persisted, Durability::Replicated]
            .into_iter()
            .find(|durability| durability.as_str() == word)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown durability {word:?}")))
    }
}

/// Renders a value for an error message: strings quoted, numbers bare, a
/// secret (the password) by length only (an error line ends up in the
/// journal).
pub(crate) fn show(key: &str, value: &Value) -> String {
    let secret = keys::find(key).is_some_and(|key| key.kind.is_secret());
    match value {
        Value::String(_, s) if secret => {
            format!("a {}-character password (not shown)", s.chars().count())
        }
        Value::String(_, s) => format!("{s:?}"),
        Value::Char(_, c) => format!("{:?}", c.to_string()),
        Value::Bool(_, b) => b.to_string(),
        Value::Num(_, n) => match (n.to_u128(), n.to_i128(), n.to_f64()) {
            (Some(u), _, _) => u.to_string(),
            (_, Some(i), _) => i.to_string(),
            (_, _, Some(f)) => format!("{f:?}"),
            _ => "a number".to_string(),
        },
        Value::Array(_, items) => {
            let items: Vec<String> = items.iter().map(|item| show(key, item)).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Dict(..) => "a table".to_string(),
        Value::Empty(..) => "nothing".to_string(),
    }
}
