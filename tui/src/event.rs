//! Everything the console reacts to, as one enum: terminal input, socket
//! news from the client thread, and a timer tick. Producers (the input
//! thread, the client thread) only send these; `App::update` is the only
//! consumer.

use crate::api::cluster::ClusterStatus;
use crate::api::{Hello, HistoryWindow, Snapshot};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Key(crossterm::event::KeyEvent),
    Resize {
        width: u16,
        height: u16,
    },
    /// Nothing happened for a while; used to refresh relative times while
    /// disconnected.
    Tick,
    /// The client (re)connected and the daemon said hello.
    Connected(Hello),
    Snapshot(Box<Snapshot>),
    /// History points the console has not seen yet (the whole window after
    /// a (re)connect), sent just before the snapshot they came with.
    History(Box<HistoryWindow>),
    /// The daemon's answer to `cluster_status` (asked while the Cluster
    /// view is shown), or why there is none.
    Cluster(Result<Box<ClusterStatus>, String>),
    /// The daemon's answer to an action the operator confirmed.
    ActionDone(Result<String, String>),
    /// The connection failed or broke; the next attempt is in `retry_in`.
    Disconnected {
        reason: String,
        retry_in: Duration,
    },
}
