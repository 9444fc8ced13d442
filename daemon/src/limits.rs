//! Every bound of the daemon in one place, so a reader can see at a glance how
//! much of anything can exist at once. Values are checked at the edge where
//! they enter (config, socket, disk); nothing here allocates.
//!
//! Where a bound is written, once (the lower crates keep theirs, and this
//! module re-exports them so every bound is reachable from here:
//! `limits::wire`, `limits::storage`, `limits::metadata`):
//!
//! - `iggyd_wire::protocol::limits` (`limits::wire`) holds the facts of the Iggy 0.11.0 wire that the
//!   codec enforces (frame and header sizes, name and option caps, partitions
//!   per request, the protocol version): every client and the Apache server
//!   agree on them, they are not tunables, and the codec stays a leaf that
//!   must not import this module. The admin socket's protocol keeps its own
//!   wire caps next to its types (`control/api.rs`) for the same reason.
//! - `iggyd_storage::limits` (`limits::storage`): batch size, index
//!   sampling, read windows and write chunks, consumer-offsets files.
//! - `iggyd_metadata::limits` (`limits::metadata`): stream, topic, token and
//!   group counts, name and credential lengths, journal record and snapshot
//!   sizes, topic option ranges.
//! - This module holds every other bound: what iggyd lets clients,
//!   configuration and disk content create or claim (counts, lengths, sizes,
//!   the ranges configuration keys accept), its queue depths, and the
//!   intervals and timeouts of its own machinery. It may use
//!   `protocol::limits` (a bound derived from the wire says so by naming it).
//!
//! Not bounds, and so not here: byte layouts (record, header and field
//! sizes live with the type that encodes them: `batch.rs`,
//! `protocol/header.rs`, `storage/`, `metadata/journal.rs`), and constants
//! that only size a buffer or a read chunk for speed; changing those changes
//! how fast iggyd is, never what it accepts.

use iggyd_wire::protocol::limits::{FRAME_SIZE_MAX, HEADER_SIZE};
use std::time::Duration;

pub use iggyd_metadata::limits as metadata;
pub use iggyd_storage::limits as storage;
pub use iggyd_wire::protocol::limits as wire;

/// Messages a shard's inbox (the mesh queue into its pump) holds before
/// senders wait. Bounded so a hot shard pushes back instead of growing.
pub const SHARD_INBOX_DEPTH: usize = 4096;

/// Most shards one daemon runs. Shard ids travel in one byte (the top byte
/// of wire client ids, the mesh's envelopes), so a plan with more is
/// refused at start (exit 78) rather than tripping an assertion in every
/// shard thread.
pub const SHARDS_MAX: usize = 255;

/// Smallest memory share a shard may be given by `memory.budget`. Below this a
/// shard cannot hold its runtime, its io_uring rings and a few connections'
/// buffers, so start-up refuses instead of failing later inside a shard.
pub const SHARD_MEMORY_MIN_BYTES: u64 = 32 * 1024 * 1024;

/// Smallest `memory.budget` the configuration accepts at all (the per-shard
/// minimum above is checked at start, once the shard count is known).
pub const MEMORY_BUDGET_MIN_BYTES: u64 = 1024 * 1024;

/// Idle I/O buffers a shard's pool keeps for reuse: a sixteenth of the
/// shard's memory share, at most 32 MiB (enough for a few partitions' write
/// buffers to be reused without allocation or page faults; the rest is
/// freed at once and the pool is trimmed when the shard goes idle).
pub fn pool_idle_bytes_max(per_shard_memory_bytes: u64) -> u64 {
    (per_shard_memory_bytes / 16).min(32 * 1024 * 1024)
}

/// I/O buffers (write tails, read windows) a shard hands out before it takes
/// only what each operation needs: half the shard's memory share (the rest
/// is frames in flight, metadata, connections, the allocator's slack).
pub fn io_buffer_budget_bytes(per_shard_memory_bytes: u64) -> u64 {
    per_shard_memory_bytes / 2
}

/// Allocations from this size up (read windows, large poll replies, large
/// send frames) are mapped on their own and unmapped when freed. glibc's
/// default starts at 128 KiB but raises its threshold to the size of each
/// large block freed, after which freed windows and replies stay in the
/// heap and the RSS ratchets up: twelve clients that polled 300 MB and
/// stopped reading left the daemon +185 MB of RSS for 17 MB of replies
/// held; fixed at this size, +9 MB. 2 MiB keeps the common 1 MB send
/// frames in the heap.
pub const MMAP_THRESHOLD_BYTES: usize = 2 * 1024 * 1024;

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

/// Default interval of the `replicated` flush policy (`storage.flush_interval`,
/// whose built-in default this is).
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// `storage.flush_interval` accepts 0 (off) or this range: below 10 ms the
/// fsyncs would be the workload, above 1 h "replicated" means "at shutdown".
pub const FLUSH_INTERVAL_MIN: Duration = Duration::from_millis(10);
/// See [`FLUSH_INTERVAL_MIN`].
pub const FLUSH_INTERVAL_MAX: Duration = Duration::from_secs(3600);

/// How often each shard publishes its report (partitions, latencies) for
/// the console.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// How often each pump checks its partitions for expired segments and
/// `max_topic_size` by default (the built-in default of
/// `retention.check_interval`).
pub const RETENTION_CHECK_INTERVAL: Duration = Duration::from_secs(10);
/// `retention.check_interval` accepts this range.
pub const RETENTION_CHECK_INTERVAL_MIN: Duration = Duration::from_millis(100);
/// See [`RETENTION_CHECK_INTERVAL_MIN`].
pub const RETENTION_CHECK_INTERVAL_MAX: Duration = Duration::from_secs(3600);

/// How often a shard's janitor removes deleted data from its trash. Each
/// tick removes files and directories in rounds of
/// [`TRASH_REMOVALS_PER_ROUND`] until [`TRASH_TICK_TIME`] has passed (an
/// unlink is a short blocking call on the shard thread, milliseconds for a
/// large segment on a busy disk) or [`TRASH_ROUNDS_PER_TICK`] rounds ran:
/// at most 5 % of a shard's time, thousands of small files a second.
pub const TRASH_CHECK_INTERVAL: Duration = Duration::from_millis(100);
pub const TRASH_REMOVALS_PER_ROUND: u64 = 16;
pub const TRASH_TICK_TIME: Duration = Duration::from_millis(5);
pub const TRASH_ROUNDS_PER_TICK: u32 = 64;
/// Storage ids of removed partitions a pump remembers, so that an open
/// racing the delete (a create or settings refresh still in flight) does
/// not bring the directory back; the oldest are forgotten first.
pub const REMOVED_PARTITIONS_REMEMBERED: usize = 65_536;

/// A consumer-group member that sends no request for this long is stale:
/// evicted and removed from its groups (1.2 x Apache's 30 s heartbeat).
pub const STALE_CLIENT_AFTER: Duration = Duration::from_secs(36);

/// Default of `consumer_groups.rebalance_timeout`: a partition promised to
/// a joining member moves after this long even if its owner never committed
/// what it polled (Apache: 30 s).
pub const REBALANCE_TIMEOUT: Duration = Duration::from_secs(30);
/// See [`REBALANCE_TIMEOUT`]: the accepted range.
pub const REBALANCE_TIMEOUT_MIN: Duration = Duration::from_millis(100);
/// See [`REBALANCE_TIMEOUT`].
pub const REBALANCE_TIMEOUT_MAX: Duration = Duration::from_secs(3600);

/// While the daemon stops, how long an idle connection may take to send its
/// next request before it is closed.
pub const STOP_GRACE: Duration = Duration::from_millis(200);

/// A connection told to reconnect while the daemon stops (`net::handover`):
/// how long the eviction's write and the shutdown may take, and how long
/// what the client still sends is read and discarded before the close (so
/// a request already on its way does not meet a reset before the client
/// read the eviction).
pub const HANDOVER_WRITE_TIMEOUT: Duration = Duration::from_secs(1);
pub const HANDOVER_LINGER: Duration = Duration::from_millis(100);

/// While the daemon stops and hands its listeners over: how long a
/// connection waits for its next request (answered with the eviction)
/// before the eviction is sent unasked; its client read its last reply
/// long before (`net::handover`).
pub const HANDOVER_GRACE: Duration = Duration::from_millis(100);

/// While handing over: how long a connection waits for every shard to stop
/// accepting before it tells its client to reconnect (they stop within a
/// millisecond of each other; this bounds a shard that does not).
pub const HANDOVER_ACCEPT_WAIT: Duration = Duration::from_millis(50);

/// Descriptors taken from `LISTEN_FDS` at most (`fdstore`): one listener
/// per shard, the metrics and the admin listeners, with room to spare. A
/// larger count is treated as malformed.
pub const INHERITED_FDS_MAX: usize = 65_536;

/// Longest wait for connections to finish before the pumps drain anyway.
pub const QUIESCE_MAX: Duration = Duration::from_secs(5);

/// `shutdown.drain_timeout` accepts this range: a stop needs at least a
/// second to drain, and systemd's stop timeout must stay above the maximum.
pub const DRAIN_TIMEOUT_MIN: Duration = Duration::from_secs(1);
/// See [`DRAIN_TIMEOUT_MIN`].
pub const DRAIN_TIMEOUT_MAX: Duration = Duration::from_secs(300);

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

/// How long a client thread drains a refused admin client's input before
/// closing.
pub const ADMIN_CLOSE_LINGER: Duration = Duration::from_millis(200);

/// How long an admin action (flush, fault) waits for a shard.
pub const ADMIN_ACTION_TIMEOUT: Duration = Duration::from_secs(10);

/// `iggyd cluster status`: how long every shard has to report its groups
/// (a shard that does not is listed as silent, its groups missing).
pub const ADMIN_CLUSTER_STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// `iggyd cluster status`: how long a TCP connect to another node's
/// replication address may take before it counts as unreachable.
pub const ADMIN_CLUSTER_REACH_TIMEOUT: Duration = Duration::from_millis(500);

/// `iggyd cluster transfer-leader`: how long the admin socket waits to see
/// the new leader of every group it asked to move (an election takes one
/// to two election timeouts; the admin client waits a little longer).
pub const ADMIN_CLUSTER_TRANSFER_WAIT: Duration = Duration::from_secs(10);

/// How often a transfer's wait looks at the groups again.
pub const ADMIN_CLUSTER_TRANSFER_POLL: Duration = Duration::from_millis(20);

/// `iggyd cluster add-node|remove-node`: how long each step of one group's
/// change may wait at its leader (a new node's catch-up, each commit, a
/// removed leader's hand-off), and how long the node asked looks for that
/// leader (an election after the one it knew of died).
pub const ADMIN_CLUSTER_MEMBERSHIP_STEP_WAIT: Duration = Duration::from_secs(8);

/// `iggyd cluster add-node|remove-node`: how long the admin socket waits
/// for every group's outcome (the metadata group's, then every partition
/// group's at once); a group not answered by then is reported not done.
/// Below the CLI's wait for the answer.
pub const ADMIN_CLUSTER_MEMBERSHIP_WAIT: Duration = Duration::from_secs(40);

// `iggy snapshot` (`control/snapshot_file.rs`): each bounded so a snapshot
// stays far below the 64 MiB reply limit and builds in about a second.

/// Snapshot requests queued for the `snapshot` thread; more wait (their
/// connection's task, not its shard).
pub const SNAPSHOT_QUEUE_DEPTH: usize = 4;

/// Log lines a snapshot carries, over the newest log files.
pub const SNAPSHOT_LOG_LINES_MAX: usize = 10_000;

/// Log bytes a snapshot carries.
pub const SNAPSHOT_LOG_BYTES_MAX: u64 = 8 * 1024 * 1024;

/// Data-directory entries the filesystem overview lists.
pub const SNAPSHOT_FILESYSTEM_ENTRIES_MAX: usize = 20_000;

/// Processes the process list shows.
pub const SNAPSHOT_PROCESSES_MAX: usize = 4_096;

/// Characters of one process's command line in the process list.
pub const SNAPSHOT_COMMAND_LINE_MAX: usize = 512;

/// Longest Unix socket path (`admin.socket`): `sockaddr_un` holds 108 bytes
/// including the terminating NUL.
pub const UNIX_SOCKET_PATH_BYTES_MAX: usize = 107;

/// While a listener stops: how long handshakes already under way get to
/// complete after new SYNs are filtered out (loopback and LAN round trips are
/// far shorter).
pub const HANDSHAKE_SETTLE: Duration = Duration::from_millis(20);

// Hostile clients (`net/`): every bound a client can press on. The
// configuration keys of the `[limits]` section default to these.

/// `limits.max_login_frame_size`: before login a connection may announce
/// frames of at most this many bytes (header included); a larger one is
/// answered with an eviction and closed without reading its body. A login
/// from the official SDKs is a few hundred bytes; the names in it are at most
/// 255 bytes each.
pub const LOGIN_FRAME_BYTES_MAX: u64 = 4 * 1024;
/// `limits.max_login_frame_size` accepts this range: room for the largest
/// login the wire allows at the low end, the wire's own frame cap at the top.
pub const LOGIN_FRAME_BYTES_MIN: u64 = 1024;
/// See [`LOGIN_FRAME_BYTES_MIN`].
pub const LOGIN_FRAME_BYTES_LIMIT: u64 = FRAME_SIZE_MAX as u64;

/// `limits.login_timeout`: a connection that has not logged in this long
/// after it was accepted (TLS handshake included) is closed.
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(10);
/// `limits.login_timeout` accepts this range.
pub const LOGIN_TIMEOUT_MIN: Duration = Duration::from_secs(1);
/// See [`LOGIN_TIMEOUT_MIN`].
pub const LOGIN_TIMEOUT_MAX: Duration = Duration::from_secs(3600);

/// `limits.idle_timeout`: a logged-in connection that sends nothing for this
/// long is closed (the official SDKs ping every 5 s). 0 = never.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// `limits.idle_timeout` is 0 or at least this.
pub const IDLE_TIMEOUT_MIN: Duration = Duration::from_secs(1);

/// `limits.login_threads`: threads that verify passwords (Argon2id), off
/// the shards. One keeps a login flood to one core's worth of hashing.
pub const LOGIN_THREADS: u64 = 1;
/// `limits.login_threads` accepts 1 to this.
pub const LOGIN_THREADS_MAX: u64 = 64;
/// Niceness of the login threads: on a machine whose cores all run shards,
/// the scheduler prefers the shards when both are runnable.
pub const LOGIN_THREAD_NICE: i32 = 10;

/// `limits.max_queued_logins`: password logins waiting for a login thread;
/// one more is answered with status 58 (TransientNotAccepted), which the
/// SDK retries on the same connection.
pub const LOGINS_QUEUED_MAX: u64 = 64;
/// `limits.max_queued_logins` accepts 1 to this.
pub const LOGINS_QUEUED_LIMIT: u64 = 65_536;

/// `limits.login_backoff`: after a failed login from an address, its next
/// login waits this long, doubling with every further failure up to
/// `limits.max_login_backoff`; a successful login resets it. 0 = no delay.
pub const LOGIN_BACKOFF: Duration = Duration::from_millis(100);
/// `limits.login_backoff` is 0 or in this range.
pub const LOGIN_BACKOFF_MIN: Duration = Duration::from_millis(1);
/// See [`LOGIN_BACKOFF_MIN`].
pub const LOGIN_BACKOFF_MAX: Duration = Duration::from_secs(60);
/// `limits.max_login_backoff`: the cap of that delay. Well under the SDK's
/// 30 s reply timeout, so a delayed honest login still gets its answer.
pub const LOGIN_BACKOFF_CAP: Duration = Duration::from_secs(5);
/// `limits.max_login_backoff` accepts this range.
pub const LOGIN_BACKOFF_CAP_MIN: Duration = Duration::from_millis(1);
/// See [`LOGIN_BACKOFF_CAP_MIN`].
pub const LOGIN_BACKOFF_CAP_MAX: Duration = Duration::from_secs(600);
/// Source addresses whose failed logins are remembered at once; when full,
/// the address whose last failure is oldest is forgotten first.
pub const LOGIN_BACKOFF_ADDRESSES_MAX: usize = 65_536;
/// An address without a failed login for this long starts afresh.
pub const LOGIN_BACKOFF_FORGET_AFTER: Duration = Duration::from_secs(600);

/// `limits.login_failures_before_close`: a connection is closed after this
/// many failed logins (the SDK reconnects when asked again).
pub const LOGIN_FAILURES_BEFORE_CLOSE: u64 = 3;
/// `limits.login_failures_before_close` accepts 1 to this.
pub const LOGIN_FAILURES_BEFORE_CLOSE_MAX: u64 = 1_000;

/// `limits.max_connections` and `limits.max_connections_per_address`
/// accept 1 to this ("auto" derives them from RLIMIT_NOFILE).
pub const CONNECTIONS_LIMIT: u64 = 1 << 24;
/// Descriptors kept for everything but client connections whatever the
/// partitions: stdio, logs, the metadata journal and snapshots, the
/// data-directory lock, the admin socket and its clients, each shard's
/// listener, io_uring and event descriptors, and the short-lived ones
/// (directory fsyncs, sealed segment reads, compactions, rotations).
pub const DESCRIPTORS_RESERVED_BASE: u64 = 128;
/// Descriptors kept per shard on top of the base (listener, ring, events).
pub const DESCRIPTORS_RESERVED_PER_SHARD: u64 = 8;
/// Descriptors a partition holds open while it exists: the active segment's
/// log (a direct-I/O and a buffered handle) and index, and its consumer
/// offsets, plus one for a read of a sealed segment.
pub const DESCRIPTORS_PER_PARTITION: u64 = 5;
/// Without a configured `limits.max_connections_per_address`, one address
/// may hold this fraction (1/n) of the connection cap.
pub const CONNECTIONS_PER_ADDRESS_SHARE: u64 = 4;
/// Fewer possible connections than this at start is worth a warning (the
/// open-files limit is too low for a server).
pub const CONNECTIONS_FEW: u64 = 64;
/// Refused connections are logged at most once per this interval per shard
/// (with the count refused meanwhile), so a flood cannot flood the log.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(5);
/// The consensus library's lines pass once per call site per this interval
/// on each thread (`logging::throttle`), with the count held back.
pub const LIBRARY_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// How long GetStream(s)/GetTopic(s) reuse the partition reports gathered
/// from every shard (unless a partition change went out from the asking
/// shard since): a client looping them costs each pump at most 20 report
/// ops a second per shard.
pub const PARTITION_REPORTS_REUSE: Duration = Duration::from_millis(50);

/// glibc's allocator keeps this much freed memory at the top of each arena
/// instead of returning it to the kernel (`M_TRIM_THRESHOLD`). Its default
/// (dynamic, about twice the largest freed block) gave back the pages of
/// every 1 MiB send frame as soon as it was written, so the next frame's
/// receive faulted fresh zeroed pages in again: 10 % of a producer run's
/// CPU. 64 MiB holds a few dozen frames per shard.
pub const ALLOCATOR_TRIM_THRESHOLD: usize = 64 * 1024 * 1024;
/// Blocks up to this size come from the arenas, not a fresh `mmap` each
/// (`M_MMAP_THRESHOLD`; glibc's ceiling on 64-bit), so frames and poll
/// replies reuse memory.
pub const ALLOCATOR_MMAP_THRESHOLD: usize = 32 * 1024 * 1024;

/// Partitions whose files a shard opens at once when many open together (a
/// cluster node taking in a new topic): their creates and fsyncs overlap
/// in the kernel instead of waiting one after another.
pub const PARTITION_OPENS_IN_FLIGHT: usize = 32;

/// A shard reports its recovery's progress (`STATUS=`, the console) every
/// this many partitions opened.
pub const RECOVERY_PROGRESS_EVERY: usize = 64;

/// `limits.max_append_bytes_in_flight`: bytes of appends queued for or held
/// by one owner shard's pump at once; senders on every shard wait (in
/// arrival order) beyond it. An inbox bounded by count alone could hold
/// 4,096 frames of 64 MiB.
pub const APPEND_BYTES_IN_FLIGHT: u64 = 256 * 1024 * 1024;
/// `limits.max_append_bytes_in_flight` is at least one whole frame.
pub const APPEND_BYTES_IN_FLIGHT_MIN: u64 = FRAME_SIZE_MAX as u64;

/// Bytes of the Raft entries a cluster node's shard keeps in memory after
/// appending them, for the replication and apply reads that follow
/// (`shard/pump/entry_cache.rs`); older entries are read from the files.
/// 32 MiB holds a few 1 MB batches of every partition that two producers
/// and followers a moment behind keep busy.
pub const ENTRY_CACHE_BYTES: usize = 32 * 1024 * 1024;
/// Entries that cache holds at most, whatever their size.
pub const ENTRY_CACHE_ENTRIES: usize = 16 * 1024;

/// `limits.max_poll_reply_bytes`: bytes of stored records one poll reply
/// holds at most beyond its first batch, which always comes whole; a poll
/// asking for more gets fewer messages, as the protocol allows. 32 MiB
/// keeps Apache Iggy's behaviour for polls of tens of MB (its server
/// answers a 20,000-message poll of 1 KB messages whole).
pub const POLL_REPLY_BYTES: u64 = 32 * 1024 * 1024;
/// `limits.max_poll_reply_bytes` is at least this.
pub const POLL_REPLY_BYTES_MIN: u64 = 64 * 1024;
/// `limits.max_poll_reply_bytes` is at most what fits one reply frame with
/// its header and the poll prefix.
pub const POLL_REPLY_BYTES_MAX: u64 = (FRAME_SIZE_MAX - HEADER_SIZE - 16) as u64;
/// `limits.max_poll_reply_bytes_in_flight`: bytes of poll replies one
/// shard's connections hold at once, from the pump's read until the kernel
/// took the last byte (`net/reply_budget.rs`); past it a poll gets its
/// first batch alone. Clients that ask for a lot and stop reading hold at
/// most this much of a shard's memory (plus one batch each).
pub const POLL_REPLY_BYTES_IN_FLIGHT: u64 = 256 * 1024 * 1024;
/// `limits.max_poll_reply_bytes_in_flight` is at least this.
pub const POLL_REPLY_BYTES_IN_FLIGHT_MIN: u64 = 1024 * 1024;
/// `limits.max_consumer_offsets_per_partition`: stored consumer offsets one
/// partition holds at most (each costs about 80 bytes of memory, 76 B
/// measured with 20,000 by `iggyd-bench --consumer-offsets`, and one
/// 32-byte record in `consumer_offsets.log`); storing one for a new consumer past
/// it is refused with TooManyConsumerOffsets (3024). Consumer groups'
/// offsets count too. A client allowed to poll can otherwise make a
/// partition hold one per consumer name it invents.
pub const CONSUMER_OFFSETS_PER_PARTITION: u64 = 10_000;
/// `limits.max_consumer_offsets_per_partition` accepts 1 to this.
pub const CONSUMER_OFFSETS_PER_PARTITION_MAX: u64 = 10_000_000;

// TLS (`net/tls.rs`).

/// Largest certificate, key or CA file read (PEM): far above any real chain.
pub const TLS_PEM_FILE_BYTES_MAX: u64 = 1024 * 1024;

// Cluster (`[cluster]`, replication between nodes).

/// `cluster.name` is a DNS label of 1 to this many characters: it names the
/// node certificates (SAN `node-<id>.<name>`).
pub const CLUSTER_NAME_LEN_MAX: usize = 63;
/// `cluster.node_id` and each `cluster.nodes[i].id` are 1 to this: Raft node
/// ids are `u64`, but a TOML integer is signed, so a larger id could be
/// given only through the environment and `iggyd config` could not print it.
pub const CLUSTER_NODE_ID_MAX: u64 = i64::MAX as u64;
/// `cluster.nodes[i].name` is 1 to this many characters (an Iggy name).
pub const CLUSTER_NODE_NAME_LEN_MAX: usize = 255;
/// `cluster.election_timeout`: a follower that hears no leader for a random
/// time between this and twice this starts an election.
pub const CLUSTER_ELECTION_TIMEOUT: Duration = Duration::from_secs(1);
/// See [`CLUSTER_ELECTION_TIMEOUT`]: the accepted range.
pub const CLUSTER_ELECTION_TIMEOUT_MIN: Duration = Duration::from_millis(150);
/// See [`CLUSTER_ELECTION_TIMEOUT`].
pub const CLUSTER_ELECTION_TIMEOUT_MAX: Duration = Duration::from_secs(60);
/// `cluster.metadata_snapshot_entries`: the metadata group snapshots its
/// store every this many entries (then its log is purged through it).
pub const CLUSTER_METADATA_SNAPSHOT_ENTRIES: u64 = 1_024;
/// See [`CLUSTER_METADATA_SNAPSHOT_ENTRIES`]: the accepted range.
pub const CLUSTER_METADATA_SNAPSHOT_ENTRIES_MIN: u64 = 16;
/// See [`CLUSTER_METADATA_SNAPSHOT_ENTRIES`].
pub const CLUSTER_METADATA_SNAPSHOT_ENTRIES_MAX: u64 = 1_000_000;
/// `cluster.heartbeat_interval`: how often the leader tells followers it is
/// alive; below half the election timeout (checked when the cluster is on),
/// so one lost heartbeat does not start an election.
pub const CLUSTER_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(200);
/// See [`CLUSTER_HEARTBEAT_INTERVAL`]: the accepted range.
pub const CLUSTER_HEARTBEAT_INTERVAL_MIN: Duration = Duration::from_millis(20);
/// See [`CLUSTER_HEARTBEAT_INTERVAL`].
pub const CLUSTER_HEARTBEAT_INTERVAL_MAX: Duration = Duration::from_secs(10);

// Configuration forms (`config/`).

/// Highest PU OS index `sharding.cpu_allocation` accepts, exclusive. Linux's
/// largest `CONFIG_NR_CPUS` is 8192; the cap only stops `"0..4000000000"`
/// from allocating gigabytes.
pub const PU_ID_LIMIT: u32 = 1 << 16;

// Logging (`logging/`).

/// Lines queued for `log-writer` before new ones are dropped (and counted).
/// At ~150 bytes a line that is ~2.5 MiB: seconds of trace-level logging
/// from every shard while the disk stalls.
pub const LOG_QUEUE_DEPTH: usize = 16_384;
/// How long `flush` (and the shutdown flush) waits for the writer. A disk
/// that takes longer is hung; the caller logs that and carries on.
pub const LOG_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);
/// `logging.max_file_size` is 0 (no limit) or at least this.
pub const LOG_FILE_SIZE_MIN_BYTES: u64 = 4096;
/// `logging.rotation_check_interval` is at least this, so the checker
/// cannot spin.
pub const LOG_ROTATION_CHECK_INTERVAL_MIN: Duration = Duration::from_secs(1);
/// File logging pauses while free space on the log filesystem is under
/// `min(LOG_LOW_DISK_FLOOR_BYTES, LOG_LOW_DISK_PERCENT % of the filesystem)`:
/// 1 GiB on any disk of 20 GiB or more, 5 % on smaller ones, so a small test
/// or container filesystem is not declared full while it has room.
pub const LOG_LOW_DISK_FLOOR_BYTES: u64 = 1 << 30;
/// See [`LOG_LOW_DISK_FLOOR_BYTES`].
pub const LOG_LOW_DISK_PERCENT: u64 = 5;
/// The free space under which file logging pauses on a file system of
/// `filesystem_bytes` (see [`LOG_LOW_DISK_FLOOR_BYTES`]); `iggyd doctor`
/// fails a data directory with less.
pub fn low_disk_threshold(filesystem_bytes: u64) -> u64 {
    LOG_LOW_DISK_FLOOR_BYTES.min(filesystem_bytes / 100 * LOG_LOW_DISK_PERCENT)
}
/// Free space is checked when this many bytes were written since the last
/// check, or `LOG_DISK_CHECK_INTERVAL` passed, whichever comes first: one
/// statvfs per MiB or per second, never one per line.
pub const LOG_DISK_CHECK_BYTES: u64 = 1 << 20;
/// See [`LOG_DISK_CHECK_BYTES`].
pub const LOG_DISK_CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// Warnings and errors kept for the admin socket, newest last.
pub const RECENT_EVENTS_MAX: usize = 200;
/// Longest event text kept (a bounded buffer in bytes, too).
pub const RECENT_EVENT_TEXT_MAX: usize = 512;

// The control plane's history (`control/history.rs`) and console support.
// These bound what the admin side keeps in memory; no shard touches them.

/// Series the history rings keep at most (process, then shards, then
/// consumer groups, then partitions, in that order; the rest are not
/// recorded, and the console says so). 1,024 covers 2 shards with about
/// 500 partitions, or 64 shards with 150.
pub const HISTORY_SERIES_MAX: usize = 1024;
/// What the history rings may hold in memory: 1,024 series of `f32` at
/// 900 one-second plus 2,160 ten-second points, with their names and
/// headers (`history::memory_bound_bytes`, checked at compile time, is
/// about 12.8 MB). A daemon with 2 shards and 8 partitions uses about
/// 0.5 MB.
pub const HISTORY_BYTES_MAX: usize = 13 * 1024 * 1024;
