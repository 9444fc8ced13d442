//! The top-level error of a daemon run: where a module's typed error becomes
//! an exit code and the one paragraph an operator reads. Only `boot` and
//! `supervisor` produce it.

use std::process::ExitCode;

/// `EX_CONFIG` from sysexits.h: the configuration (or what it asks of this
/// machine) cannot work. systemd units treat it as a permanent failure.
pub const EXIT_CONFIG: u8 = 78;
/// Any other failure of a run.
pub const EXIT_FAILURE: u8 = 1;

#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("shard plan: {0}")]
    Plan(#[from] crate::topology::TopologyError),
    #[error("preflight: {0}")]
    Preflight(#[from] crate::preflight::PreflightError),
    #[error("listener on {address}: {source}")]
    Listen {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Control(#[from] crate::control::ControlError),
    #[error(transparent)]
    Metrics(#[from] crate::control::metrics_server::MetricsError),
    #[error("shard {shard} (PU {pu}) failed: {message}")]
    Shard {
        shard: usize,
        pu: u32,
        message: String,
    },
    #[error("logging: {0}")]
    Logging(#[from] crate::logging::LoggingError),
    /// The TLS certificate, key or client CAs did not load.
    #[error("TLS: {0}")]
    Tls(#[from] crate::net::tls::TlsLoadError),
    /// `[cluster]` could not be made ready (its certificates, its timing).
    #[error("cluster: {0}")]
    Cluster(String),
    #[error("{0}")]
    Runtime(String),
    /// The graceful stop ran out of `shutdown.drain_timeout`; the stuck
    /// shards are left to the process exit.
    #[error("drain timeout: {stuck} did not stop within {timeout:?}; exiting without them")]
    DrainTimeout {
        timeout: std::time::Duration,
        stuck: String,
    },
    /// A second stop signal arrived while draining: exit at once.
    #[error("second signal ({signal}) during shutdown: exiting without finishing the drain")]
    SecondSignal { signal: String },
}

impl BootError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            BootError::Config(_)
            | BootError::Plan(_)
            | BootError::Preflight(_)
            | BootError::Tls(_)
            | BootError::Cluster(_) => ExitCode::from(EXIT_CONFIG),
            BootError::Logging(error) if error.is_config() => ExitCode::from(EXIT_CONFIG),
            BootError::Control(error) if error.is_configuration() => ExitCode::from(EXIT_CONFIG),
            BootError::Metrics(error) if error.is_configuration() => ExitCode::from(EXIT_CONFIG),
            BootError::Listen { .. }
            | BootError::Shard { .. }
            | BootError::Logging(_)
            | BootError::Control(_)
            | BootError::Metrics(_)
            | BootError::Runtime(_)
            | BootError::DrainTimeout { .. }
            | BootError::SecondSignal { .. } => ExitCode::from(EXIT_FAILURE),
        }
    }
}
