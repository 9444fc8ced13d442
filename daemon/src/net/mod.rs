//! Networking of a shard: the per-shard TCP listener, the connection loop
//! (frames in, replies out), per-connection session state, and the request
//! handler that executes the Iggy protocol's commands; and what every
//! shard's connections share, built once by the supervisor (`Net`):
//! admission (connection caps, login backoff, security counters), the login
//! pool, the TLS configuration, and each owner shard's budget of append
//! bytes in flight.

pub mod activity;
pub mod admission;
pub mod append_budget;
pub mod connection;
pub mod context;
pub mod handler;
pub mod handover;
pub mod listener;
pub mod reply_budget;
pub mod reply_frame;
pub mod login;
pub mod session;
pub mod snapshot_request;
pub mod tls;

use crate::config::LimitsConfig;
use crate::shard::front::{Front, FrontStart};
use context::{NetContext, NetSettings};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// The per-connection bounds of `[limits]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Largest frame read before login, header included.
    pub login_frame_bytes_max: usize,
    /// From accept to a successful login.
    pub login_timeout: Duration,
    /// A logged-in connection silent this long is closed (`None` = never).
    pub idle_timeout: Option<Duration>,
    /// Failed logins after which the connection is closed.
    pub login_failures_before_close: u32,
    /// Bytes of records one poll reply holds beyond its first batch.
    pub poll_reply_bytes_max: u64,
}

impl ConnectionLimits {
    pub fn of(limits: &LimitsConfig) -> ConnectionLimits {
        ConnectionLimits {
            login_frame_bytes_max: usize::try_from(limits.max_login_frame_size_bytes)
                .unwrap_or(usize::MAX),
            login_timeout: limits.login_timeout,
            idle_timeout: (!limits.idle_timeout.is_zero()).then_some(limits.idle_timeout),
            login_failures_before_close: u32::try_from(limits.login_failures_before_close)
                .unwrap_or(u32::MAX),
            poll_reply_bytes_max: limits.max_poll_reply_bytes,
        }
    }
}

/// What the connections of every shard share.
#[derive(Debug, Clone)]
pub struct Net {
    pub admission: Arc<admission::Admission>,
    pub logins: login::LoginPool,
    /// `Some` when `tcp.tls.enabled`.
    pub tls: Option<tls::TlsCell>,
    /// One per shard, by shard id: the bytes of appends in flight to it.
    pub append_budgets: Arc<[Arc<append_budget::AppendBudget>]>,
    /// One per shard, by shard id: the bytes of poll replies its
    /// connections hold.
    pub reply_budgets: Arc<[Arc<reply_budget::ReplyBudget>]>,
    pub limits: ConnectionLimits,
    /// A cluster node: the nodes clients are shown and who leads (clients
    /// are sent to the leader).
    pub cluster: Option<Arc<crate::cluster::node::ClusterRoster>>,
    /// A cluster node: the logged-in sessions of every shard (session
    /// number → user id), which routed data connections attach to.
    pub live_sessions: Arc<std::sync::Mutex<std::collections::HashMap<u64, u32>>>,
    /// The service manager keeps the listening sockets across a restart
    /// (`fdstore`): stopping leaves them listening for the next process,
    /// and every connection is told to reconnect as soon as it is between
    /// requests (`net::handover`).
    pub hand_over: bool,
    /// Shards whose listener still accepts (`net::handover`).
    pub accepting: Arc<handover::Accepting>,
}

impl Net {
    /// Remembers a logged-in session (cluster nodes only).
    pub fn session_started(&self, session: u64, user_id: u32) {
        if self.cluster.is_some()
            && let Ok(mut live) = self.live_sessions.lock()
        {
            live.insert(session, user_id);
        }
    }

    /// Forgets a session that logged out or closed.
    pub fn session_gone(&self, session: u64) {
        if self.cluster.is_some()
            && session != 0
            && let Ok(mut live) = self.live_sessions.lock()
        {
            live.remove(&session);
        }
    }

    /// The user of live session `session`.
    pub fn session_user(&self, session: u64) -> Option<u32> {
        self.live_sessions
            .lock()
            .ok()
            .and_then(|live| live.get(&session).copied())
    }
}

impl Net {
    /// The budget of appends to `owner`.
    pub fn append_budget(&self, owner: usize) -> Option<&Arc<append_budget::AppendBudget>> {
        self.append_budgets.get(owner)
    }

    /// Reserves up to `limits.max_poll_reply_bytes` of the poll-reply
    /// budget of `shard` (a shard past the plan gets nothing: one batch).
    pub fn reserve_reply(&self, shard: usize) -> Option<reply_budget::ReplyHold> {
        self.reply_budgets
            .get(shard)
            .map(|budget| budget.reserve(self.limits.poll_reply_bytes_max))
    }
}

/// The front a shard starts once its partitions are recovered: its client
/// connections, accepted from `listener` (bound by the supervisor).
pub fn front(settings: NetSettings, listener: std::net::TcpListener) -> FrontStart {
    FrontStart(Box::new(move |shard_context| {
        let (stop_accepting, accepting_stopped) = flume::bounded(1);
        let context = Rc::new(NetContext::new(shard_context, settings, stop_accepting));
        let accept = listener::serve(context.clone(), listener, accepting_stopped)
            .map_err(|error| format!("listener: {error}"))?;
        let front: Rc<dyn Front> = context;
        Ok((front, monoio::spawn(accept)))
    }))
}

#[cfg(test)]
impl Net {
    /// Defaults of `[limits]`, no TLS, one cheap login thread: for unit
    /// tests that run shards.
    pub fn for_tests(shards: usize) -> Net {
        let admission = admission::Admission::new(admission::AdmissionLimits {
            max_connections: None,
            max_connections_per_address: None,
            descriptors: None,
            shards: shards as u64,
            login_backoff: crate::limits::LOGIN_BACKOFF,
            max_login_backoff: crate::limits::LOGIN_BACKOFF_CAP,
        });
        let logins = login::LoginPool::start(1, 4, iggyd_metadata::auth::HashCost::cheap())
            .expect("login thread starts");
        Net {
            admission,
            logins,
            tls: None,
            append_budgets: (0..shards)
                .map(|_| append_budget::AppendBudget::new(crate::limits::APPEND_BYTES_IN_FLIGHT))
                .collect(),
            reply_budgets: (0..shards)
                .map(|_| reply_budget::ReplyBudget::new(crate::limits::POLL_REPLY_BYTES_IN_FLIGHT))
                .collect(),
            cluster: None,
            live_sessions: Default::default(),
            limits: ConnectionLimits {
                login_frame_bytes_max: crate::limits::LOGIN_FRAME_BYTES_MAX as usize,
                login_timeout: crate::limits::LOGIN_TIMEOUT,
                idle_timeout: Some(crate::limits::IDLE_TIMEOUT),
                login_failures_before_close: 3,
                poll_reply_bytes_max: crate::limits::POLL_REPLY_BYTES,
            },
            hand_over: false,
            accepting: handover::Accepting::new(shards),
        }
    }
}
