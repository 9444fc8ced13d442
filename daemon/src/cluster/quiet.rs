//! Quiet partition groups: an idle group costs nothing.
//!
//! openraft keeps a group alive with timers of its own: a tick every
//! fifth of a heartbeat interval in every group, and a heartbeat round
//! trip to every follower every heartbeat interval. With a thousand
//! partitions that is tens of thousands of wake-ups a second for groups
//! where nothing happens (measured: 7–8 % of a core per node for 100 idle
//! groups). So a partition group runs with openraft's tick off, and the
//! shard does what the tick did, for all its groups at once:
//!
//! - **Liveness is per node, not per group.** Shard 0 sends every peer
//!   node a beat each heartbeat interval; the answer is when that node was
//!   last heard ([`Liveness`], shared by the node's shards; `liveness.rs`).
//! - **Elections** ([`Quiet::tick`], a follower's side): a member whose
//!   leader's node has been silent for its election timeout (random
//!   between the minimum and the maximum, per group), or that knows no
//!   leader for that long, starts a pre-vote.
//! - **Votes** ([`Quiet::refuse_vote`]): with no heartbeats, openraft's
//!   leader lease (renewed by heartbeats) lapses in an idle group, so a
//!   member refuses a (pre-)vote itself while it leads with a quorum of
//!   live voters, or while the leader it follows is alive; a leader that
//!   refuses one heartbeats the group at once, so the candidate learns
//!   whom to follow (a member restarted faster than an election timeout
//!   is not missed).
//! - **Heartbeats** (a leader's side): only when there is something to
//!   tell: the commit index moved since the last one, a follower lags,
//!   or a voter's node came back; the commit index, and a returning
//!   voter, until every live follower acknowledged a heartbeat (a
//!   returning node may open the group only once its metadata lists it).
//! - **Handing leadership over** (openraft's transfer, asked by an admin
//!   or by a leader's removal): openraft's leader sends no heartbeats and
//!   takes no writes until the target takes over, and never gives up on
//!   its own. So the leader asks again each minimum election timeout (a
//!   target that missed the ask, opened its group late or was behind
//!   takes over then), and refuses no vote meanwhile; a member asked
//!   treats its leader as silent since the ask, so that if the target
//!   does not take over within an election timeout, one of them
//!   campaigns (measured before: a transfer to a node restarted moments
//!   earlier left some groups leading nothing and writable nowhere).
//! - **The lease** of a leader ([`Liveness::quorum_live`]): a quorum of
//!   the group's voters alive (this node and the nodes heard within an
//!   election timeout), when openraft's own acknowledgements are older.
//!
//! The metadata group keeps openraft's timers: it is one group, and its
//! heartbeats are what clients are told about the leader by.
//!
//! Must not: wait for a group (every trigger is a task of its own), or
//! take a lock beyond the liveness map's, which is held for one lookup.

use super::liveness::Liveness;
use openraft::async_runtime::WatchReceiver;
use std::cell::Cell;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Elections a shard starts per tick at most: a node that starts (or a
/// topic of a thousand partitions created at once) would otherwise send
/// every group's votes in the same instant, and on a small host the
/// answers come late enough for the groups to campaign again (measured: a
/// storm with 1,000 partitions on three nodes of two cores). The rest wait
/// for the next ticks.
pub const CAMPAIGNS_PER_TICK: usize = 32;

/// openraft's configuration for a quiet group: the cluster's, with the
/// tick off, and openraft's own election timeouts (which then set nothing
/// but its leader lease, `election_timeout_max`: a member that heard its
/// leader within the lease refuses a vote) ending at the cluster's minimum
/// election timeout. A member's quiet tick campaigns once its leader's
/// node was silent for at least that minimum; with openraft's lease as
/// long as the cluster's maximum (its default), the other members refused
/// such a campaign until two timeouts had passed, and the candidate waited
/// out another draw (measured: failover p50 3.1 s with the default
/// timing). Whether a leader is alive is the vote guard's to say
/// ([`Quiet::refuse_vote`]). A lease shorter still (a heartbeat interval
/// short of the minimum) once failed the in-process membership test
/// `a_change_asked_as_the_leader_dies_waits_for_the_next_leader`; the
/// cause was not the lease's length but a membership change on an idle
/// leader, whose lease had lapsed, being refused on every retry (now
/// renewed first, `iggyd_raft::membership`).
pub fn openraft_config(cluster: &openraft::Config) -> openraft::Config {
    let heartbeat = cluster.heartbeat_interval;
    let lease = cluster
        .election_timeout_min
        .max(heartbeat.saturating_add(2));
    let quiet = openraft::Config {
        enable_tick: false,
        election_timeout_min: heartbeat + (lease - heartbeat) / 2,
        election_timeout_max: lease,
        ..cluster.clone()
    };
    quiet.validate().unwrap_or_else(|_| openraft::Config {
        enable_tick: false,
        ..cluster.clone()
    })
}

/// What a quiet group's member keeps for the shard's tick.
#[derive(Debug)]
pub struct Quiet {
    /// This member's election timeout, drawn again after each election.
    elect_after: Cell<Duration>,
    /// Since when this member has heard of no live leader (or since its
    /// last campaign).
    waiting_since: Cell<Instant>,
    /// Whether this member campaigned since it last heard a live leader.
    campaigned: Cell<bool>,
    /// The commit index every live follower acknowledged a heartbeat (or
    /// an append) for.
    told_commit: Cell<Option<u64>>,
    /// A commit index being told: sent at that instant, heartbeated again
    /// each tick until every live follower acknowledged a later one (a
    /// heartbeat lost under load would otherwise leave a follower with an
    /// old commit index for as long as the group stays idle, and it serves
    /// reads only up to it).
    telling: Cell<Option<(Option<u64>, Instant)>>,
    /// A leader's transfer under way: the node it hands leadership to and
    /// when it last asked.
    handing: Cell<Option<(u64, Instant)>>,
    /// A transfer a leader asked of this member: the leader, its term and
    /// when this member was asked first.
    asked: Cell<Option<(u64, u64, Instant)>>,
    /// What the last tick saw (state, leader, term, commit index), to log
    /// a change of it.
    seen: Cell<Option<Seen>>,
    /// The state of the draws.
    seed: Cell<u64>,
}

/// The timing a quiet group runs on (the cluster's).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub election_min: Duration,
    pub election_max: Duration,
    pub heartbeat: Duration,
}

impl Timing {
    pub fn of(config: &openraft::Config) -> Timing {
        Timing {
            election_min: Duration::from_millis(config.election_timeout_min),
            election_max: Duration::from_millis(config.election_timeout_max),
            heartbeat: Duration::from_millis(config.heartbeat_interval),
        }
    }

    /// How long a leader's lease lasts without openraft's acknowledgements,
    /// and how recently a leader's node must have answered to be followed.
    pub fn lease(&self) -> Duration {
        self.election_min
    }

    /// How recently the leader's node must have answered a follower's node
    /// for the follower to refuse another member's vote: a heartbeat
    /// interval short of the minimum election timeout (a candidate counts
    /// its leader's silence from its own node's last beat, which can be a
    /// beat earlier than the voter's), else a campaign begun the moment
    /// the leader's silence reached the timeout was refused and waited out
    /// another.
    pub fn vote_guard(&self) -> Duration {
        self.election_min
            .saturating_sub(self.heartbeat)
            .max(self.heartbeat)
    }
}

/// What the shard's tick asks a group to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    None,
    Heartbeat,
    Elect,
    /// Ask again that node be let lead.
    Transfer(u64),
}

impl Quiet {
    /// A member's state; `seed` makes its draws differ from its peers'.
    pub fn new(seed: u64, timing: Timing) -> Quiet {
        let quiet = Quiet {
            elect_after: Cell::new(timing.election_max),
            waiting_since: Cell::new(Instant::now()),
            campaigned: Cell::new(false),
            told_commit: Cell::new(None),
            telling: Cell::new(None),
            handing: Cell::new(None),
            asked: Cell::new(None),
            seen: Cell::new(None),
            seed: Cell::new(seed | 1),
        };
        quiet.draw(timing);
        quiet
    }

    /// The first campaign of a group this node just started: one member
    /// of each group (`preferred`, its storage id modulo the voters)
    /// campaigns at the first tick, so that a new group gets a leader at
    /// once and groups' leaders spread over the nodes; the others first
    /// wait two election timeouts more than usual, so that they do not
    /// compete with it.
    ///
    /// Only for a group that has never had a term: a member that restarts
    /// may hold the only complete log, and must not wait longer than its
    /// election timeout to campaign.
    pub fn first_campaign(&self, preferred: bool, timing: Timing) {
        if preferred {
            self.elect_after.set(Duration::ZERO);
        } else {
            self.elect_after
                .set(self.elect_after.get() + timing.election_max * 2);
        }
    }

    /// This member, leading, asked its voters to let `to` lead.
    pub fn handing(&self, to: u64, now: Instant) {
        if self.handing.get().is_none_or(|(before, _)| before != to) {
            self.handing.set(Some((to, now)));
        }
    }

    /// Whether this member, leading, is handing its leadership over (no
    /// heartbeat renews openraft's lease meanwhile).
    pub fn hands_over(&self) -> bool {
        self.handing.get().is_some()
    }

    /// The leader `leader`, in term `term`, asked this member to let
    /// another lead (the first ask of that leader and term counts).
    pub fn asked(&self, leader: u64, term: u64, now: Instant) {
        if self
            .asked
            .get()
            .is_none_or(|(before, in_term, _)| (before, in_term) != (leader, term))
        {
            self.asked.set(Some((leader, term, now)));
        }
    }

    /// A new election timeout in `[min, max)` (xorshift: the draws only
    /// need to differ between members).
    fn draw(&self, timing: Timing) {
        let mut x = self.seed.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.seed.set(x);
        let span = timing
            .election_max
            .saturating_sub(timing.election_min)
            .as_millis()
            .max(1);
        let extra = u64::try_from(u128::from(x) % span).unwrap_or(0);
        self.elect_after
            .set(timing.election_min + Duration::from_millis(extra));
    }

    /// What this member should do now, from its metrics: `revived` are the
    /// nodes heard again since the last tick.
    pub fn tick(
        &self,
        metrics: &openraft::RaftMetrics<iggyd_raft::PartitionRaft>,
        liveness: &Liveness,
        revived: &BTreeSet<u64>,
        timing: Timing,
        now: Instant,
        may_elect: bool,
    ) -> Action {
        let me = metrics.id;
        if metrics.state.is_leader() {
            self.waiting_since.set(now);
            // openraft sends no heartbeat while it hands leadership over:
            // ask again (the target may have missed it, or been behind).
            if let Some((to, asked)) = self.handing.get() {
                if now.saturating_duration_since(asked) >= timing.election_min {
                    self.handing.set(Some((to, now)));
                    return Action::Transfer(to);
                }
                return Action::None;
            }
            let committed = metrics
                .local_committed
                .as_ref()
                .map(|log_id| log_id.index());
            let last = metrics.last_log_index;
            // A follower alive but behind: openraft resends on a heartbeat
            // (a dead one is not worth one each tick; it is told when it
            // comes back).
            let lagging = metrics.replication.as_ref().is_some_and(|followers| {
                followers.iter().any(|(follower, matched)| {
                    *follower != me
                        && matched.as_ref().map(|log_id| log_id.index()) < last
                        && liveness.alive(*follower, timing.lease())
                })
            });
            let voters: BTreeSet<u64> = metrics.membership_config.voter_ids().collect();
            let came_back = revived.iter().any(|node| voters.contains(node));
            if came_back && committed.is_some() {
                // A returning voter may have lost what it knew committed
                // (saved lazily) and may open the group only later (once
                // its metadata lists it), so one heartbeat can find no
                // group: tell it again until every live follower
                // acknowledged one, as after a commit.
                self.told_commit.set(None);
                self.telling.set(Some((committed, now)));
            }
            if let Some((commit, sent)) = self.telling.get()
                && every_live_follower_acked_since(metrics, liveness, timing, sent)
            {
                self.told_commit.set(commit);
                self.telling.set(None);
            }
            let news = committed != self.told_commit.get();
            if news
                && self
                    .telling
                    .get()
                    .is_none_or(|(commit, _)| commit != committed)
            {
                self.telling.set(Some((committed, now)));
            }
            if news || lagging || came_back {
                return Action::Heartbeat;
            }
            return Action::None;
        }
        self.handing.set(None);
        if !metrics
            .membership_config
            .voter_ids()
            .any(|voter| voter == me)
        {
            return Action::None;
        }
        // How long the leader's node has been silent, or since the leader
        // asked to hand over (it leads no more in effect); `None` when
        // there is no leader to follow, or its node was never heard.
        let silence = match metrics.current_leader {
            Some(leader) if leader != me => self
                .handing_since(metrics, leader)
                .map(|asked| now.saturating_duration_since(asked))
                .or_else(|| liveness.silence(leader)),
            _ => None,
        };
        if silence.is_some_and(|silence| silence < self.elect_after.get()) {
            self.waiting_since.set(now);
            self.campaigned.set(false);
            // A new group's first wait (`first_campaign`, longer than any
            // draw) ends once the member follows a leader: it would
            // otherwise stay this member's timeout until its first
            // campaign (measured: the first failovers of a new topic took
            // 5.7–6.0 s instead of 1.5–2).
            if self.elect_after.get() >= timing.election_max {
                self.draw(timing);
            }
            return Action::None;
        }
        // A leader heard and then silent for the timeout is the wait
        // itself: campaign now, not a timeout later. Otherwise (and after
        // a campaign of this member's own) wait the timeout since this
        // member began to wait.
        let since_waiting = now.saturating_duration_since(self.waiting_since.get());
        let waited = (silence.is_some() && !self.campaigned.get())
            || since_waiting >= self.elect_after.get();
        if !may_elect || !waited {
            return Action::None;
        }
        self.waiting_since.set(now);
        self.campaigned.set(true);
        self.draw(timing);
        Action::Elect
    }

    /// Why this member refuses `candidate`'s (pre-)vote, if it does: it
    /// leads with a quorum of live voters, or the leader it follows is
    /// alive. `Some((reason, heartbeat))`: `heartbeat` when this member
    /// leads (its heartbeat tells the candidate whom to follow).
    pub fn refuse_vote(
        &self,
        metrics: &openraft::RaftMetrics<iggyd_raft::PartitionRaft>,
        liveness: &Liveness,
        timing: Timing,
        candidate: u64,
    ) -> Option<(String, bool)> {
        let me = metrics.id;
        if candidate == me {
            return None;
        }
        if metrics.state.is_leader() {
            if self.handing.get().is_some() {
                return None;
            }
            let voters: BTreeSet<u64> = metrics.membership_config.voter_ids().collect();
            return liveness
                .quorum_live(me, &voters, timing.lease())
                .then(|| ("this member leads and a quorum is alive".to_string(), true));
        }
        match metrics.current_leader {
            Some(leader)
                if leader != me
                    && leader != candidate
                    && self.handing_since(metrics, leader).is_none()
                    && liveness.alive(leader, timing.vote_guard()) =>
            {
                Some((format!("the leader, node {leader}, is alive"), false))
            }
            _ => None,
        }
    }
}

impl Quiet {
    /// When `leader`, whom this member follows in the current term, asked
    /// it to let another lead, if it did.
    fn handing_since(
        &self,
        metrics: &openraft::RaftMetrics<iggyd_raft::PartitionRaft>,
        leader: u64,
    ) -> Option<Instant> {
        self.asked
            .get()
            .filter(|(asking, term, _)| (*asking, *term) == (leader, metrics.current_term))
            .map(|(_, _, at)| at)
    }
}

/// Whether every voter of the group but this member that is alive (a beat
/// answered within the lease) acknowledged a heartbeat or an append sent
/// at or after `sent` (openraft's heartbeat metrics: when each follower
/// last acknowledged this leader). A dead follower is told when it comes
/// back.
fn every_live_follower_acked_since(
    metrics: &openraft::RaftMetrics<iggyd_raft::PartitionRaft>,
    liveness: &Liveness,
    timing: Timing,
    sent: Instant,
) -> bool {
    metrics
        .membership_config
        .voter_ids()
        .filter(|voter| *voter != metrics.id && liveness.alive(*voter, timing.lease()))
        .all(|voter| acked_since(metrics, voter, sent))
}

/// Whether `follower` acknowledged a heartbeat or an append this leader
/// sent at or after `sent`.
fn acked_since(
    metrics: &openraft::RaftMetrics<iggyd_raft::PartitionRaft>,
    follower: u64,
    sent: Instant,
) -> bool {
    use openraft::async_runtime::Instant as _;
    metrics
        .heartbeat
        .as_ref()
        .and_then(|acked| acked.get(&follower))
        .and_then(Option::as_ref)
        .and_then(|at| Instant::now().checked_sub(at.elapsed()))
        .is_some_and(|at| at >= sent)
}

/// What a quiet tick saw of a group, to log its changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub leader: Option<u64>,
    pub term: u64,
    pub committed: Option<u64>,
    pub last: Option<u64>,
}

impl Quiet {
    /// What changed in `metrics` since the last call, if anything.
    pub fn changed(
        &self,
        metrics: &openraft::RaftMetrics<iggyd_raft::PartitionRaft>,
    ) -> Option<Seen> {
        let seen = Seen {
            leader: metrics.current_leader,
            term: metrics.current_term,
            committed: metrics
                .local_committed
                .as_ref()
                .map(|log_id| log_id.index()),
            last: metrics.last_log_index,
        };
        (self.seen.replace(Some(seen)) != Some(seen)).then_some(seen)
    }
}

/// The nodes alive now (within `within`) that were not at the last look,
/// or that restarted since (a restart shorter than `within` leaves a node
/// alive throughout, and it too lost what it knew committed).
#[derive(Debug, Default)]
pub struct Revivals {
    alive: BTreeSet<u64>,
    restarts: std::collections::BTreeMap<u64, u64>,
}

impl Revivals {
    pub fn look(&mut self, liveness: &Liveness, peers: &[u64], within: Duration) -> BTreeSet<u64> {
        let alive: BTreeSet<u64> = peers
            .iter()
            .copied()
            .filter(|peer| liveness.alive(*peer, within))
            .collect();
        let mut revived: BTreeSet<u64> = alive.difference(&self.alive).copied().collect();
        for peer in peers {
            let restarts = liveness.restarts(*peer);
            if self.restarts.insert(*peer, restarts).unwrap_or(restarts) != restarts
                && alive.contains(peer)
            {
                revived.insert(*peer);
            }
        }
        self.alive = alive;
        revived
    }
}

/// A quiet group's leader's lease. It holds only while a quorum
/// acknowledged this member *as its leader* within an election timeout
/// (`crate::cluster::lease_holds`, openraft's own acknowledgements): a
/// quorum of live nodes is not enough, since a deposed leader (paused,
/// or cut off and healed) still hears its peers before it learns of the
/// newer term. An idle group's acknowledgements are old, so a leader
/// renews them with one heartbeat ([`Lease::renew`]) before it writes.
#[derive(Debug, Clone)]
pub struct Lease {
    pub liveness: std::sync::Arc<Liveness>,
    pub timing: Timing,
}

impl Lease {
    pub fn holds(&self, raft: &crate::cluster::group::GroupRaft) -> bool {
        crate::cluster::lease_holds(raft)
    }

    /// Whether a renewal could succeed: the lease holds, or a quorum of
    /// the group's voters is alive (an idle leader is not refused at
    /// once; it renews first).
    pub fn renewable(&self, raft: &crate::cluster::group::GroupRaft) -> bool {
        self.holds(raft)
            || with_metrics(raft, |metrics| {
                let voters: BTreeSet<u64> = metrics.membership_config.voter_ids().collect();
                self.liveness
                    .quorum_live(metrics.id, &voters, self.timing.lease())
            })
    }
}

impl Lease {
    /// Makes openraft's own lease fresh before a write: openraft refuses
    /// to append on a leader whose quorum last acknowledged it more than
    /// an election timeout ago (`ForwardReason::LeaseExpired`), which an
    /// idle quiet group always is. A heartbeat renews it (one round trip,
    /// the first write after a pause only); waits at most an election
    /// timeout, then the write is tried anyway (and refused, and retried,
    /// if no quorum answered).
    pub async fn renew(&self, raft: &crate::cluster::group::GroupRaft) {
        // Half of openraft's own lease (`openraft_config`).
        let half_lease = Duration::from_millis(raft.config().election_timeout_max / 2);
        let fresh = |metrics: &openraft::RaftMetrics<iggyd_raft::PartitionRaft>| {
            match crate::cluster::quorum_acked(metrics) {
                crate::cluster::QuorumAcked::Always => true,
                crate::cluster::QuorumAcked::Never => false,
                crate::cluster::QuorumAcked::Ago(ago) => ago < half_lease,
            }
        };
        if with_metrics(raft, |metrics| fresh(metrics) || !metrics.state.is_leader()) {
            return;
        }
        let _ = raft.trigger().heartbeat().await;
        let _ = raft
            .wait(Some(self.timing.election_min))
            .metrics(fresh, "a quorum's acknowledgement")
            .await;
    }
}

/// Reads a group's metrics without waiting.
pub fn with_metrics<R>(
    raft: &crate::cluster::group::GroupRaft,
    read: impl FnOnce(&openraft::RaftMetrics<iggyd_raft::PartitionRaft>) -> R,
) -> R {
    let metrics = raft.metrics();
    let metrics = metrics.borrow_watched();
    read(&metrics)
}

#[cfg(test)]
#[path = "quiet_tests.rs"]
mod tests;
