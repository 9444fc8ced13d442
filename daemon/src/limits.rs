//! Every bound of the daemon in one place, so a reader can see at a glance how
//! much of anything can exist at once. Values are checked at the edge where
//! they enter (config, socket, disk); nothing here allocates.

use std::time::Duration;

/// Messages a shard's inbox (the mesh queue into its pump) holds before
/// senders wait. Bounded so a hot shard pushes back instead of growing.
pub const SHARD_INBOX_DEPTH: usize = 4096;

/// Smallest memory share a shard may be given by `memory.budget`. Below this a
/// shard cannot hold its runtime, its io_uring rings and a few connections'
/// buffers, so start-up refuses instead of failing later inside a shard.
pub const SHARD_MEMORY_MIN_BYTES: u64 = 32 * 1024 * 1024;

/// Fraction of the memory the machine and the cgroup can give that a derived
/// (`memory.budget = "auto"`) budget takes: the page cache serves reads, so
/// the daemon leaves it at least half.
pub const DERIVED_BUDGET_PERCENT: u64 = 50;

/// How long the supervisor waits for every shard to report ready.
pub const SHARD_START_TIMEOUT: Duration = Duration::from_secs(30);

/// How often each shard's pump proves it is alive by bumping its heartbeat.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(250);

/// How often the supervisor wakes to check signals and shard events.
pub const SUPERVISOR_TICK: Duration = Duration::from_millis(100);

/// Listen backlog of each shard's listener socket.
pub const LISTEN_BACKLOG: i32 = 1024;

/// Submission-queue entries of each shard's io_uring.
pub const IO_URING_ENTRIES: u32 = 1024;

// Admin socket (`control/server.rs`). The protocol's own bounds (request line
// length, subscription interval) live in `control/api.rs`, next to the wire
// format they belong to.

/// Admin clients served at once; one more gets an error line and is closed.
pub const ADMIN_CLIENTS_MAX: usize = 16;

/// An admin client that sends no complete request for this long is closed.
pub const ADMIN_CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A response line that cannot be written within this time (a subscriber
/// that stopped reading) drops that client; no other client waits for it.
pub const ADMIN_CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long stopping the admin socket waits for client threads to finish
/// after their connections were shut down.
pub const ADMIN_STOP_TIMEOUT: Duration = Duration::from_millis(500);
