//! Authentication state of one connection: who is logged in, with which
//! session number and client id, and which consumer groups the session
//! joined. Owned by the connection task; nothing else mutates it.

use iggyd_metadata::grant::{Grant, Revoked};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

/// A logged-in session (§3: Register -> session number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Login {
    /// Who logged in; checked against every view (`Metadata::standing`).
    pub grant: Grant,
    /// Non-zero, unique in this process; echoed in every reply's `op`.
    pub session: u64,
    /// The client's random id from the request header (bytes 128..144).
    pub client: u128,
}

/// A consumer group membership, by numeric ids (plain data the shard's
/// front reports).
pub use crate::shard::front::Membership;

/// What this session did with one partition of a group it is in: the last
/// offset it was served and the last it committed. A partition its owner
/// must hand off (a cooperative rebalance) moves once `committed` reaches
/// `polled`: the new owner then starts after everything the old one read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub polled: Option<u64>,
    pub committed: Option<u64>,
}

impl Progress {
    /// Everything this session was served is committed.
    pub fn caught_up(&self) -> bool {
        match self.polled {
            None => true,
            Some(polled) => self.committed.is_some_and(|committed| committed >= polled),
        }
    }
}

#[derive(Debug)]
pub struct Session {
    /// The wire client id (GetClients/GetMe): unique across shards.
    pub client_id: u32,
    /// The console's counters of this connection (`net::activity`).
    pub activity: Option<std::rc::Rc<crate::net::activity::Activity>>,
    pub peer: SocketAddr,
    pub login: Option<Login>,
    /// Groups this session joined; left on logout and disconnect.
    pub memberships: BTreeSet<Membership>,
    /// Per group partition this session polled or committed.
    pub progress: BTreeMap<(Membership, u32), Progress>,
    /// Monotone `commit` value echoed in replies.
    pub commit: u64,
    /// While logged in: says why, when a metadata view revokes the login
    /// (`NetContext`'s `Front::view_installed`).
    pub ended: Option<flume::Receiver<Revoked>>,
    /// Failed logins on this connection.
    pub failed_logins: u32,
    /// When this session's last request that could change a partition's
    /// numbers was answered: partition reports gathered before it are
    /// stale for this session (`handler::streams::partition_reports`).
    pub settled_at: Option<std::time::Instant>,
    /// Set by a handler whose reply is the last (too many failed logins):
    /// the connection writes it, then closes.
    pub close_after_reply: bool,
    /// A routed data connection of a cluster node (code 14): the session
    /// number it acts for in consumer groups.
    pub acting_for: Option<u64>,
}

impl Session {
    pub fn new(client_id: u32, peer: SocketAddr) -> Session {
        Session {
            client_id,
            activity: None,
            peer,
            login: None,
            memberships: BTreeSet::new(),
            progress: BTreeMap::new(),
            commit: 0,
            ended: None,
            failed_logins: 0,
            settled_at: None,
            close_after_reply: false,
            acting_for: None,
        }
    }

    /// The session number for reply headers (0 when not logged in).
    pub fn number(&self) -> u64 {
        self.login.map_or(0, |login| login.session)
    }

    pub fn user_id(&self) -> Option<u32> {
        self.login.map(|login| login.grant.user_id)
    }

    /// The next `commit` value: non-decreasing and ≥ the session number.
    pub fn next_commit(&mut self) -> u64 {
        self.commit = self.commit.max(self.number()).saturating_add(1);
        self.commit
    }
}
