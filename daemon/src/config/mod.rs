//! Configuration: built-in defaults < TOML file < `IGGY_ROOT_*` < `IGGYD_*`
//! environment < flags, merged with figment, then validated once into a
//! `Config` that cannot be built unvalidated. This module owns the key schema,
//! the defaults and every accepted value form; it reads no process state except
//! the config file (the environment is injected through `Sources`). Errors
//! carry the dotted key, the value given, what is accepted and where the value
//! came from, in one line; they are never printed here (the caller prints them
//! and exits 78, EX_CONFIG).
//!
//! Layout: `layers` builds the figment and rejects unknown keys, `units` parses
//! and prints sizes, durations and PU ranges exactly, and this file reads each
//! key into the typed `Config`.

mod layers;
mod units;

use crate::limits::PU_ID_LIMIT;
use figment::Figment;
use figment::value::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use units::{CPU_ALLOCATION_FORMS, DURATION_FORMS, SIZE_FORMS};

/// How shards are placed on CPUs (`sharding.cpu_allocation`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
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

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TcpConfig {
    pub address: SocketAddr,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AdminConfig {
    /// `admin.socket`; `<data_dir>/iggyd.sock` when not set. At most 107
    /// bytes, the room `sockaddr_un` has.
    pub socket: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShardingConfig {
    pub cpu_allocation: CpuAllocation,
    /// Refuse to start when io_uring is unavailable instead of falling back to epoll.
    pub require_io_uring: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MemoryConfig {
    /// Total bytes the shards may use (`memory.budget`, at least 1 MiB);
    /// `None` (`"auto"`) = derived at start from MemAvailable and the cgroup's
    /// `memory.max`.
    pub budget_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RootConfig {
    /// 3 to 50 characters.
    pub username: String,
    /// 3 to 100 characters, or empty: generate a random password on first
    /// start and write it once to `<data_dir>/root-credentials` (mode 0600;
    /// `metadata::bootstrap`), the packaged default.
    pub password: String,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
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
    pub max_file_size_bytes: u64,
    /// `logging.max_total_size`: oldest files are deleted to stay under it.
    /// 0 = no total limit.
    pub max_total_size_bytes: u64,
    /// `logging.retention`: files older than this are deleted.
    /// Zero (`0`) = keep forever.
    pub retention: Duration,
    /// `logging.rotation_check_interval`: how often retention and the total
    /// size are enforced. At least 1 s, so the checker cannot spin.
    pub rotation_check_interval: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShutdownConfig {
    /// How long a graceful stop may take before the process exits non-zero
    /// (`shutdown.drain_timeout`, 1 s to 300 s).
    pub drain_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RetentionConfig {
    /// How often each shard deletes expired segments and enforces
    /// `max_topic_size` (`retention.check_interval`, 100 ms to 1 h).
    pub check_interval: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StorageConfig {
    /// Durability of topics whose creator does not say
    /// (`storage.default_durability`: `persisted` acknowledges after fsync,
    /// `replicated` after the write).
    pub default_durability: crate::metadata::Durability,
    /// `replicated` topics: unsynced data is fsynced at least this often
    /// (`storage.flush_interval`; `0` leaves it to the topic's size and
    /// count thresholds and to shutdown; otherwise 10 ms to 1 h).
    pub flush_interval: Duration,
}

/// The validated, immutable configuration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
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
        Reader {
            figment: &figment,
            root: &root,
        }
        .config()
    }

    /// The effective configuration as TOML, in the shape a config file takes.
    /// Sizes and durations are printed as exact human strings, derived paths
    /// explicitly, and the budget as `"auto"` when derived at start. `load`
    /// of the output gives back an equal `Config`. The root password is
    /// included: the output is a config file, handle it like one.
    pub fn to_toml(&self) -> String {
        use toml::{Table, Value as Toml};
        // Built as ordered (key, value) lists and emitted one table at a
        // time, because `toml::Table` sorts keys and the file should read in
        // the order the schema lists them.
        let path = |p: &Path| Toml::from(p.to_string_lossy().into_owned());
        let size = |bytes: u64| Toml::from(units::format_size(bytes));
        let duration = |d: Duration| Toml::from(units::format_duration(d));
        let cpu_allocation = match &self.sharding.cpu_allocation {
            CpuAllocation::Physical => Toml::from("physical"),
            CpuAllocation::All => Toml::from("all"),
            CpuAllocation::Count(n) => Toml::Integer(i64::try_from(*n).unwrap_or(i64::MAX)),
            CpuAllocation::List(ids) => {
                Toml::Array(ids.iter().map(|&id| Toml::Integer(i64::from(id))).collect())
            }
        };
        let budget = match self.memory.budget_bytes {
            None => Toml::from("auto"),
            Some(bytes) => size(bytes),
        };
        let logging = &self.logging;
        let sections: Vec<(&str, Vec<(&str, Toml)>)> = vec![
            ("", vec![("data_dir", path(&self.data_dir))]),
            (
                "tcp",
                vec![("address", Toml::from(self.tcp.address.to_string()))],
            ),
            ("admin", vec![("socket", path(&self.admin.socket))]),
            (
                "sharding",
                vec![
                    ("cpu_allocation", cpu_allocation),
                    (
                        "require_io_uring",
                        Toml::Boolean(self.sharding.require_io_uring),
                    ),
                ],
            ),
            ("memory", vec![("budget", budget)]),
            (
                "root",
                vec![
                    ("username", Toml::from(self.root.username.clone())),
                    ("password", Toml::from(self.root.password.clone())),
                ],
            ),
            (
                "logging",
                vec![
                    ("level", Toml::from(logging.level.clone())),
                    ("dir", path(&logging.dir)),
                    ("max_file_size", size(logging.max_file_size_bytes)),
                    ("max_total_size", size(logging.max_total_size_bytes)),
                    ("retention", duration(logging.retention)),
                    (
                        "rotation_check_interval",
                        duration(logging.rotation_check_interval),
                    ),
                ],
            ),
            (
                "shutdown",
                vec![("drain_timeout", duration(self.shutdown.drain_timeout))],
            ),
            (
                "retention",
                vec![("check_interval", duration(self.retention.check_interval))],
            ),
            (
                "storage",
                vec![
                    (
                        "default_durability",
                        toml::Value::String(self.storage.default_durability.as_str().to_string()),
                    ),
                    ("flush_interval", duration(self.storage.flush_interval)),
                ],
            ),
        ];
        let mut document = String::new();
        for (name, entries) in sections {
            if !name.is_empty() {
                document.push_str(&format!("\n[{name}]\n"));
            }
            for (key, value) in entries {
                // A one-entry table prints as `key = value` with TOML quoting;
                // that cannot fail for strings, integers, booleans and arrays.
                let line = toml::to_string(&Table::from_iter([(key.to_string(), value)]))
                    .unwrap_or_default();
                document.push_str(&line);
            }
        }
        document
    }
}

/// Renders a value for an error message: strings quoted, numbers bare, the
/// password by length only (an error line ends up in the journal).
pub(crate) fn show(key: &str, value: &Value) -> String {
    match value {
        Value::String(_, s) if key == "root.password" => {
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

/// An integer value of any width and sign, or `None` (floats, strings…).
fn integer(value: &Value) -> Option<i128> {
    match value {
        Value::Num(_, n) => n
            .to_i128()
            .or_else(|| n.to_u128().and_then(|u| i128::try_from(u).ok())),
        _ => None,
    }
}

const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];

/// Reads and checks each key of the merged figment.
struct Reader<'a> {
    figment: &'a Figment,
    root: &'a Value,
}

impl Reader<'_> {
    fn config(&self) -> Result<Config, ConfigError> {
        let data_dir = PathBuf::from(self.path("data_dir")?);
        let admin_socket = match self.root.find_ref("admin.socket") {
            Some(_) => PathBuf::from(self.path("admin.socket")?),
            None => data_dir.join("iggyd.sock"),
        };
        // sockaddr_un holds 108 bytes including the terminating NUL.
        if admin_socket.as_os_str().len() > 107 {
            let origin = match self.root.find_ref("admin.socket") {
                Some(value) => layers::origin(self.figment, value),
                None => Some("the default `<data_dir>/iggyd.sock`".to_string()),
            };
            return Err(ConfigError::Invalid {
                key: "admin.socket".into(),
                value: format!("{:?}", admin_socket.display().to_string()),
                expected: "a Unix socket path of at most 107 bytes (set `admin.socket` or use a \
                           shorter `data_dir`)"
                    .into(),
                origin,
            });
        }
        let logging_dir = match self.root.find_ref("logging.dir") {
            Some(_) => PathBuf::from(self.path("logging.dir")?),
            None => data_dir.join("logs"),
        };
        let logging = self.logging(logging_dir)?;
        let (drain_value, drain_timeout) = self.duration("shutdown.drain_timeout")?;
        if !(Duration::from_secs(1)..=Duration::from_secs(300)).contains(&drain_timeout) {
            return Err(self.fail(
                "shutdown.drain_timeout",
                drain_value,
                "a duration from 1 s to 300 s, like \"30 s\"",
            ));
        }
        let (interval_value, check_interval) = self.duration("retention.check_interval")?;
        if !(Duration::from_millis(100)..=Duration::from_secs(3600)).contains(&check_interval) {
            return Err(self.fail(
                "retention.check_interval",
                interval_value,
                "a duration from 100 ms to 1 h, like \"10 s\"",
            ));
        }
        let durability_expected = "\"persisted\" or \"replicated\"";
        let (durability_value, durability_text) =
            self.string("storage.default_durability", durability_expected)?;
        let default_durability = match durability_text.trim() {
            "persisted" => crate::metadata::Durability::Persisted,
            "replicated" => crate::metadata::Durability::Replicated,
            _ => {
                return Err(self.fail(
                    "storage.default_durability",
                    durability_value,
                    durability_expected,
                ));
            }
        };
        let (flush_value, flush_interval) = self.duration("storage.flush_interval")?;
        if !flush_interval.is_zero()
            && !(Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&flush_interval)
        {
            return Err(self.fail(
                "storage.flush_interval",
                flush_value,
                "0 (off) or a duration from 10 ms to 1 h, like \"1 s\"",
            ));
        }
        Ok(Config {
            tcp: TcpConfig {
                address: self.address("tcp.address")?,
            },
            admin: AdminConfig {
                socket: admin_socket,
            },
            sharding: ShardingConfig {
                cpu_allocation: self.cpu_allocation("sharding.cpu_allocation")?,
                require_io_uring: self.boolean("sharding.require_io_uring")?,
            },
            memory: MemoryConfig {
                budget_bytes: self.budget("memory.budget")?,
            },
            root: RootConfig {
                username: self.text_of_length("root.username", 3, 50)?,
                password: self.root_password()?,
            },
            logging,
            shutdown: ShutdownConfig { drain_timeout },
            retention: RetentionConfig { check_interval },
            storage: StorageConfig {
                default_durability,
                flush_interval,
            },
            data_dir,
        })
    }

    fn logging(&self, dir: PathBuf) -> Result<LoggingConfig, ConfigError> {
        let (file_value, max_file_size_bytes) = self.size("logging.max_file_size")?;
        if max_file_size_bytes != 0 && max_file_size_bytes < 4096 {
            return Err(self.fail(
                "logging.max_file_size",
                file_value,
                "0 (no per-file limit) or a size of at least 4 KiB, like \"500 MB\"",
            ));
        }
        let (total_value, max_total_size_bytes) = self.size("logging.max_total_size")?;
        if max_file_size_bytes != 0
            && max_total_size_bytes != 0
            && max_file_size_bytes > max_total_size_bytes
        {
            let total_origin = from(&layers::origin(self.figment, total_value));
            return Err(self.fail(
                "logging.max_file_size",
                file_value,
                format!(
                    "at most `logging.max_total_size` ({}{total_origin}), or 0 for no per-file \
                     limit",
                    show("logging.max_total_size", total_value)
                ),
            ));
        }
        let (_, retention) = self.duration("logging.retention")?;
        let (interval_value, rotation_check_interval) =
            self.duration("logging.rotation_check_interval")?;
        if rotation_check_interval < Duration::from_secs(1) {
            return Err(self.fail(
                "logging.rotation_check_interval",
                interval_value,
                "a duration of at least 1 s, like \"1 m\"",
            ));
        }
        Ok(LoggingConfig {
            level: self.level("logging.level")?,
            dir,
            max_file_size_bytes,
            max_total_size_bytes,
            retention,
            rotation_check_interval,
        })
    }

    fn fail(&self, key: &str, value: &Value, expected: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            key: key.to_string(),
            value: show(key, value),
            expected: expected.into(),
            origin: layers::origin(self.figment, value),
        }
    }

    /// Every key read here has a built-in default or is read only when
    /// present, so a miss means the schema and the defaults disagree.
    fn value(&self, key: &str) -> Result<&Value, ConfigError> {
        self.root.find_ref(key).ok_or_else(|| ConfigError::Invalid {
            key: key.to_string(),
            value: "nothing".to_string(),
            expected: "a value (the built-in default is missing)".to_string(),
            origin: None,
        })
    }

    fn string(&self, key: &str, expected: &str) -> Result<(&Value, String), ConfigError> {
        let value = self.value(key)?;
        match value {
            Value::String(_, s) => Ok((value, s.clone())),
            Value::Char(_, c) => Ok((value, c.to_string())),
            _ => Err(self.fail(key, value, expected)),
        }
    }

    fn path(&self, key: &str) -> Result<String, ConfigError> {
        let expected = "a non-empty path, like \"/var/lib/iggyd\"";
        let (value, path) = self.string(key, expected)?;
        if path.trim().is_empty() || path.contains('\0') {
            return Err(self.fail(key, value, expected));
        }
        Ok(path)
    }

    fn address(&self, key: &str) -> Result<SocketAddr, ConfigError> {
        let expected = "an IP address and port, like \"127.0.0.1:8090\" or \"[::]:8090\"";
        let (value, text) = self.string(key, expected)?;
        text.trim()
            .parse()
            .map_err(|_| self.fail(key, value, expected))
    }

    fn boolean(&self, key: &str) -> Result<bool, ConfigError> {
        match self.value(key)? {
            Value::Bool(_, b) => Ok(*b),
            value => Err(self.fail(key, value, "true or false")),
        }
    }

    /// `root.password`: 3 to 100 characters, or `""` = generate one.
    fn root_password(&self) -> Result<String, ConfigError> {
        let key = "root.password";
        match self.value(key)? {
            Value::String(_, text) if text.is_empty() => Ok(String::new()),
            _ => self.text_of_length(key, 3, 100),
        }
    }

    fn text_of_length(&self, key: &str, min: usize, max: usize) -> Result<String, ConfigError> {
        let expected = format!("a string of {min} to {max} characters");
        let (value, text) = self.string(key, &expected)?;
        if !(min..=max).contains(&text.chars().count()) {
            return Err(self.fail(key, value, expected));
        }
        Ok(text)
    }

    /// Integers are bytes; strings go through the exact unit parser.
    fn size(&self, key: &str) -> Result<(&Value, u64), ConfigError> {
        let value = self.value(key)?;
        let bytes = match value {
            Value::String(_, text) => units::parse_size(text),
            _ => integer(value)
                .and_then(|i| u64::try_from(i).ok())
                .ok_or_else(|| SIZE_FORMS.to_string()),
        };
        bytes
            .map(|bytes| (value, bytes))
            .map_err(|expected| self.fail(key, value, expected))
    }

    /// Humantime strings; a bare number only when it is 0, because `30`
    /// could mean seconds or milliseconds.
    fn duration(&self, key: &str) -> Result<(&Value, Duration), ConfigError> {
        let value = self.value(key)?;
        let duration = match value {
            Value::String(_, text) => units::parse_duration(text),
            _ if integer(value) == Some(0) => Ok(Duration::ZERO),
            _ => Err(DURATION_FORMS.to_string()),
        };
        duration
            .map(|duration| (value, duration))
            .map_err(|expected| self.fail(key, value, expected))
    }

    fn budget(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        let expected = "\"auto\" or a size of at least 1 MiB, like \"8 GiB\"";
        let value = self.value(key)?;
        if let Value::String(_, text) = value
            && text.trim().eq_ignore_ascii_case("auto")
        {
            return Ok(None);
        }
        match self.size(key) {
            Ok((_, bytes)) if bytes >= 1 << 20 => Ok(Some(bytes)),
            Ok(_) => Err(self.fail(key, value, expected)),
            Err(_) => Err(self.fail(key, value, format!("{expected}; {SIZE_FORMS}"))),
        }
    }

    fn level(&self, key: &str) -> Result<String, ConfigError> {
        let expected = "one of trace, debug, info, warn, error, off, or a tracing EnvFilter \
                        directive list like \"info,iggyd::shard=debug\"";
        let (value, text) = self.string(key, expected)?;
        let text = text.trim();
        // `EnvFilter` reads a bare word as a target name, so a typo like
        // `infoo` would parse and silently disable logging: a bare word must
        // be a level (a bare target is written `target=trace`).
        let bare_word = text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        let ok = if bare_word {
            LEVELS.iter().any(|level| level.eq_ignore_ascii_case(text))
        } else {
            tracing_subscriber::EnvFilter::try_new(text).is_ok()
        };
        if !ok {
            let closest = LEVELS
                .iter()
                .map(|level| {
                    (
                        strsim::jaro_winkler(&text.to_ascii_lowercase(), level),
                        level,
                    )
                })
                .filter(|(score, _)| bare_word && *score >= 0.8)
                .max_by(|a, b| a.0.total_cmp(&b.0));
            let expected = match closest {
                Some((_, level)) => format!("{expected} (did you mean \"{level}\"?)"),
                None => expected.to_string(),
            };
            return Err(self.fail(key, value, expected));
        }
        Ok(text.to_string())
    }

    fn cpu_allocation(&self, key: &str) -> Result<CpuAllocation, ConfigError> {
        let value = self.value(key)?;
        let fail = |expected: &str| self.fail(key, value, expected);
        let count = |n: i128| match usize::try_from(n) {
            Ok(n) if (1..=PU_ID_LIMIT as usize).contains(&n) => Ok(CpuAllocation::Count(n)),
            _ => Err(fail(&format!(
                "a shard count from 1 to {PU_ID_LIMIT}, or {CPU_ALLOCATION_FORMS}"
            ))),
        };
        match value {
            Value::String(_, text) => {
                let text = text.trim();
                if text.eq_ignore_ascii_case("physical") {
                    Ok(CpuAllocation::Physical)
                } else if text.eq_ignore_ascii_case("all") {
                    Ok(CpuAllocation::All)
                } else if let Some(range) = units::parse_pu_range(text) {
                    range
                        .map(CpuAllocation::List)
                        .map_err(|expected| fail(&expected))
                } else if let Ok(n) = text.parse::<i128>() {
                    count(n)
                } else {
                    Err(fail(CPU_ALLOCATION_FORMS))
                }
            }
            Value::Array(_, items) => {
                let list_forms = format!(
                    "a non-empty list of distinct PU ids below {PU_ID_LIMIT}, like [0, 2, 4]"
                );
                let mut ids = Vec::with_capacity(items.len());
                for item in items {
                    let id = integer(item)
                        .and_then(|i| u32::try_from(i).ok())
                        .filter(|&id| id < PU_ID_LIMIT)
                        .ok_or_else(|| fail(&list_forms))?;
                    if ids.contains(&id) {
                        return Err(fail(&list_forms));
                    }
                    ids.push(id);
                }
                if ids.is_empty() {
                    return Err(fail(&list_forms));
                }
                Ok(CpuAllocation::List(ids))
            }
            _ => match integer(value) {
                Some(n) => count(n),
                None => Err(fail(CPU_ALLOCATION_FORMS)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
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
    fn load(toml: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
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

    fn load_err(toml: &str, env: &[(&str, &str)]) -> String {
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
        assert!(
            message.contains("\"10 m\" is not accepted; expected a duration from 1 s to 300 s")
        );
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
             admin, sharding, memory, root, logging, shutdown, retention, storage"
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
            [shutdown]\ndrain_timeout = \"2 m\"\n";
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

    /// Proves the storage keys: `persisted` by default with a 1 s interval
    /// flush, `replicated` and `0` (interval flush off) accepted from a file.
    #[test]
    fn storage_defaults_and_overrides() {
        let config = load("", &[]).unwrap();
        assert_eq!(
            config.storage.default_durability,
            crate::metadata::Durability::Persisted
        );
        assert_eq!(config.storage.flush_interval, Duration::from_secs(1));
        let config = load(
            "[storage]\ndefault_durability = \"replicated\"\nflush_interval = 0\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            config.storage.default_durability,
            crate::metadata::Durability::Replicated
        );
        assert_eq!(config.storage.flush_interval, Duration::ZERO);
        let printed = config.to_toml();
        assert!(
            printed.contains("default_durability = \"replicated\""),
            "{printed}"
        );
    }
}
