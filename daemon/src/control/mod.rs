//! The admin Unix socket that `iggy-top` and operators attach to: versioned
//! newline-delimited JSON (`api`), served by a dedicated `admin` thread
//! (`server`), fed by whatever implements `ControlSource` (today
//! `daemon_source`). It is read-mostly: a few admin actions go through the
//! source, never straight into a shard.
//!
//! Must not: run on a shard thread, block a shard, or hold a lock a shard
//! takes. A snapshot is built from counters the shards already publish
//! (atomics such as the heartbeats, queue lengths, `/proc`), never by asking
//! a shard's pump and waiting for it.
//!
//! Try it by hand (`socat` speaks the protocol directly):
//!
//! ```text
//! $ echo '{"v":1,"op":"hello"}' | socat - UNIX-CONNECT:local_data/iggyd.sock
//! {"v":1,"ok":true,"type":"hello","version":"0.1.0","pid":123,"uptime_ms":4567}
//! $ echo '{"v":1,"op":"snapshot"}' | socat - UNIX-CONNECT:local_data/iggyd.sock | jq .snapshot.shards
//! $ echo '{"v":1,"op":"subscribe","interval_ms":500}' | socat -t 3600 - UNIX-CONNECT:local_data/iggyd.sock
//! $ echo '{"v":1,"op":"reboot"}' | socat - UNIX-CONNECT:local_data/iggyd.sock
//! {"v":1,"ok":false,"error":"unknown op \"reboot\": expected one of hello, snapshot, ..."}
//! ```

pub mod api;
pub mod cluster_cli;
pub mod daemon_source;
pub mod history;
pub mod metrics;
pub mod metrics_server;
pub mod server;
pub mod snapshot_file;
pub mod sysinfo;
#[cfg(test)]
pub(crate) mod test_fixture;

pub use api::{Action, Hello, Snapshot};
pub use server::{ControlError, ControlServer};

/// What the admin socket reads from and acts on. Implemented by the daemon
/// (`daemon_source::DaemonSource`) and by test doubles.
///
/// Contract for implementors: every method is called on an admin thread,
/// possibly several at once (one per client), and must return promptly. A
/// snapshot is assembled from counters that shards publish on their own
/// (relaxed atomics, queue lengths, `/proc`): never send a message to a
/// shard and wait for its answer here, so a wedged or busy shard cannot
/// stall the console, and the console cannot stall a shard.
pub trait ControlSource: Send + Sync {
    fn hello(&self) -> Hello;
    fn snapshot(&self) -> Snapshot;
    /// Sample the published state into the history rings (called once a
    /// second by the admin server's `history` thread). Sources without
    /// history do nothing.
    fn record_history(&self) {}
    /// The history points newer than `cursor` and the cursor after them;
    /// `None` when this source keeps no history.
    fn history(&self, _cursor: history::Cursor) -> Option<(api::HistoryWindow, history::Cursor)> {
        None
    }
    /// Perform an admin action; `Ok` carries the message for the `done`
    /// line, `Err` the message for the error line.
    fn action(&self, action: Action) -> Result<String, String>;
    /// `iggyd cluster …`: the payload of the answer, or the message of the
    /// error line. Like an action it may message shards, with a deadline.
    fn cluster(&self, _op: api::ClusterOp) -> Result<api::Payload, String> {
        Err("this daemon runs no cluster ([cluster] enabled = false)".into())
    }
}
