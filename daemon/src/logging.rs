//! Process-wide `tracing` subscriber: human-readable lines on stderr, colour
//! only when stderr is a terminal, the level from `logging.level`. This module
//! owns the subscriber and nothing else; callers only use `tracing` macros.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Install the global subscriber. Safe to call once; a second call is ignored
/// (tests may build several daemons' worth of state in one process).
pub fn init(level: &str) {
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_thread_names(true)
        .with_target(false)
        .try_init();
}
