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

/// Idle I/O buffers a shard's pool keeps for reuse: a sixteenth of the
/// shard's memory share, at most 32 MiB (enough for a few partitions' write
/// buffers to be reused without allocation or page faults; the rest is
/// freed at once and the pool is trimmed when the shard goes idle).
pub fn pool_idle_bytes_max(per_shard_memory_bytes: u64) -> u64 {
    (per_shard_memory_bytes / 16).min(32 * 1024 * 1024)
}

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

/// Ops the pump applies before a commit phase (one group commit). Bounds the
/// latency an fsync adds to the first op of a round.
pub const PUMP_OPS_PER_COMMIT: usize = 1024;

/// Default interval of the `replicated` flush policy (`storage.flush_interval`).
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// How often each shard publishes its report (partitions, latencies) for
/// the console.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// How often each pump checks its partitions for expired segments and
/// `max_topic_size` by default (`retention.check_interval` overrides it; the
/// config default must match).
pub const RETENTION_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// A consumer-group member that sends no request for this long is stale:
/// evicted and removed from its groups (1.2 x Apache's 30 s heartbeat).
pub const STALE_CLIENT_AFTER: Duration = Duration::from_secs(36);

/// While the daemon stops, how long an idle connection may take to send its
/// next request before it is closed.
pub const STOP_GRACE: Duration = Duration::from_millis(200);

/// Longest wait for connections to finish before the pumps drain anyway.
pub const QUIESCE_MAX: Duration = Duration::from_secs(5);

/// How often the `STATUS=` summary is refreshed.
pub const STATUS_EVERY: Duration = Duration::from_secs(5);

/// While a start (recovery) or a stop (drain) takes long, ask systemd for
/// `EXTEND_TIMEOUT_BY` more every `EXTEND_TIMEOUT_EVERY`.
pub const EXTEND_TIMEOUT_EVERY: Duration = Duration::from_secs(5);
pub const EXTEND_TIMEOUT_BY: Duration = Duration::from_secs(15);
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

/// While a listener stops: how long handshakes already under way get to
/// complete after new SYNs are filtered out (loopback and LAN round trips are
/// far shorter).
pub const HANDSHAKE_SETTLE: Duration = Duration::from_millis(20);
