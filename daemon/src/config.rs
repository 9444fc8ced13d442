//! Configuration: built-in defaults < TOML file < `IGGYD_` environment < flags,
//! merged with figment into a `RawConfig`, then validated once into a `Config`
//! that cannot be built unvalidated. Errors carry the key, the value given and
//! what is accepted; they are never printed here (the caller turns them into
//! exit code 78).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Total bytes the shards may use; `None` = derived at start from
    /// MemAvailable and the cgroup's `memory.max`.
    pub budget_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RootConfig {
    pub username: String,
    pub password: String,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LoggingConfig {
    pub level: String,
    pub dir: PathBuf,
    /// 0 = no per-file limit.
    pub max_file_size_bytes: u64,
    /// 0 = no total limit.
    pub max_total_size_bytes: u64,
    /// Zero = keep forever.
    pub retention: Duration,
    pub rotation_check_interval: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShutdownConfig {
    /// How long a graceful stop may take before the process exits non-zero.
    pub drain_timeout: Duration,
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

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config key `{key}`: {message}")]
    Invalid { key: String, message: String },
}

impl Config {
    pub fn load(sources: &Sources) -> Result<Config, ConfigError> {
        let _ = sources;
        Err(ConfigError::Invalid {
            key: "*".into(),
            message: "not built yet".into(),
        })
    }

    /// The effective configuration as TOML, in the shape a config file takes.
    pub fn to_toml(&self) -> String {
        String::new()
    }
}
