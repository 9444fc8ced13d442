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
pub fn acked_since(
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
mod tests {
    use super::*;

    use openraft::{Membership, ServerState, StoredMembership};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    type Metrics = openraft::RaftMetrics<iggyd_raft::PartitionRaft>;

    fn timing() -> Timing {
        Timing {
            election_min: Duration::from_millis(1000),
            election_max: Duration::from_millis(2000),
            heartbeat: Duration::from_millis(1),
        }
    }

    fn metrics(id: u64, state: ServerState, leader: Option<u64>) -> Metrics {
        let mut metrics = Metrics::new_initial(id);
        metrics.state = state;
        metrics.current_leader = leader;
        let voters: BTreeSet<u64> = [1, 2, 3].into();
        let nodes: BTreeMap<u64, openraft::impls::BasicNode> = voters
            .iter()
            .map(|id| (*id, openraft::impls::BasicNode::new(format!("node-{id}"))))
            .collect();
        let membership = Membership::new(vec![voters], nodes).expect("a membership");
        metrics.membership_config = Arc::new(StoredMembership::new(None, membership));
        metrics
    }

    fn log_id(index: u64) -> Option<iggyd_raft::LogId> {
        Some(iggyd_raft::LogId::new_term_index(1, index))
    }

    #[test]
    fn a_follower_elects_only_after_its_leader_is_silent_for_its_timeout() {
        let liveness = Liveness::default();
        let quiet = Quiet::new(42, timing());
        let start = Instant::now();
        let follower = metrics(2, ServerState::Follower, Some(1));
        let none = BTreeSet::new();
        liveness.heard(1);
        // The leader answers: nothing to do, however long it has been.
        let later = start + Duration::from_secs(30);
        assert_eq!(
            quiet.tick(&follower, &liveness, &none, timing(), later, true),
            Action::None
        );
        // A leader never heard (or silent): elect once the draw passed
        // since this member began to wait, and then wait a whole draw
        // again.
        let short = Timing {
            election_min: Duration::from_millis(2),
            election_max: Duration::from_millis(3),
            heartbeat: Duration::from_millis(1),
        };
        let silent = Liveness::default();
        let quiet = Quiet::new(42, short);
        let at = Instant::now();
        assert_eq!(
            quiet.tick(&follower, &silent, &none, short, at, true),
            Action::None
        );
        let later = at + Duration::from_millis(5);
        assert_eq!(
            quiet.tick(&follower, &silent, &none, short, later, true),
            Action::Elect
        );
        assert_eq!(
            quiet.tick(&follower, &silent, &none, short, later, true),
            Action::None
        );
        let again = later + Duration::from_millis(5);
        assert_eq!(
            quiet.tick(&follower, &silent, &none, short, again, true),
            Action::Elect
        );
    }

    #[test]
    fn a_follower_elects_at_the_first_tick_after_its_leader_fell_silent_for_its_timeout() {
        let timing = Timing {
            election_min: Duration::from_millis(20),
            election_max: Duration::from_millis(30),
            heartbeat: Duration::from_millis(1),
        };
        let liveness = Liveness::default();
        let quiet = Quiet::new(11, timing);
        let follower = metrics(2, ServerState::Follower, Some(1));
        let none = BTreeSet::new();
        liveness.heard(1);
        let deadline = Instant::now() + Duration::from_secs(5);
        // Tick until the leader's silence reaches the draw: that very
        // tick campaigns (waiting a second timeout from the last tick
        // that saw the leader alive doubled the failover).
        loop {
            assert!(Instant::now() < deadline, "never campaigned");
            std::thread::sleep(Duration::from_millis(1));
            let draw = quiet.elect_after.get();
            let action = quiet.tick(&follower, &liveness, &none, timing, Instant::now(), true);
            let silence = liveness.silence(1).expect("heard");
            if silence >= draw + Duration::from_millis(1) {
                assert_eq!(action, Action::Elect, "silent {silence:?}, draw {draw:?}");
                break;
            }
            if action == Action::Elect {
                break;
            }
        }
        // Still silent: the next campaign waits a whole draw, not a tick.
        let campaigned = Instant::now();
        let again = quiet.tick(&follower, &liveness, &none, timing, campaigned, true);
        assert_eq!(again, Action::None);
        let later = campaigned + timing.election_max;
        let again = quiet.tick(&follower, &liveness, &none, timing, later, true);
        assert_eq!(again, Action::Elect);
    }

    #[test]
    fn a_new_groups_long_first_wait_ends_once_the_member_follows_a_leader() {
        let liveness = Liveness::default();
        let none = BTreeSet::new();
        let quiet = Quiet::new(9, timing());
        quiet.first_campaign(false, timing());
        assert!(quiet.elect_after.get() >= timing().election_max);
        liveness.heard(1);
        let follower = metrics(2, ServerState::Follower, Some(1));
        let now = Instant::now();
        assert_eq!(
            quiet.tick(&follower, &liveness, &none, timing(), now, true),
            Action::None
        );
        let draw = quiet.elect_after.get();
        assert!(
            draw >= timing().election_min && draw < timing().election_max,
            "{draw:?}"
        );
    }

    #[test]
    fn a_member_without_a_leader_elects_after_its_draw_and_not_before() {
        let liveness = Liveness::default();
        let quiet = Quiet::new(7, timing());
        let start = Instant::now();
        let leaderless = metrics(2, ServerState::Follower, None);
        let none = BTreeSet::new();
        assert_eq!(
            quiet.tick(&leaderless, &liveness, &none, timing(), start, true),
            Action::None
        );
        let draw = quiet.elect_after.get();
        assert!(draw >= timing().election_min && draw < timing().election_max);
        let before = start + timing().election_min - Duration::from_millis(1);
        assert_eq!(
            quiet.tick(&leaderless, &liveness, &none, timing(), before, true),
            Action::None
        );
        let after = Instant::now() + timing().election_max;
        assert_eq!(
            quiet.tick(&leaderless, &liveness, &none, timing(), after, true),
            Action::Elect
        );
        // A learner never campaigns.
        let learner = metrics(9, ServerState::Learner, None);
        let far = Instant::now() + Duration::from_secs(60);
        assert_eq!(
            quiet.tick(&learner, &liveness, &none, timing(), far, true),
            Action::None
        );
    }

    #[test]
    fn a_leader_heartbeats_only_with_news() {
        let liveness = Liveness::default();
        let quiet = Quiet::new(3, timing());
        let now = Instant::now();
        let none = BTreeSet::new();
        let mut leader = metrics(1, ServerState::Leader, Some(1));
        leader.last_log_index = Some(5);
        leader.local_committed = log_id(5);
        leader.replication = Some([(1, log_id(5)), (2, log_id(5)), (3, log_id(5))].into());
        // The commit index moved since the last heartbeat (none yet).
        assert_eq!(
            quiet.tick(&leader, &liveness, &none, timing(), now, true),
            Action::Heartbeat
        );
        // Nothing new: quiet.
        assert_eq!(
            quiet.tick(&leader, &liveness, &none, timing(), now, true),
            Action::None
        );
        // A voter's node came back: it is told who leads.
        assert_eq!(
            quiet.tick(&leader, &liveness, &[3].into(), timing(), now, true),
            Action::Heartbeat
        );
        assert_eq!(
            quiet.tick(&leader, &liveness, &[7].into(), timing(), now, true),
            Action::None
        );
        // A follower behind: a heartbeat each tick while it is alive.
        leader.replication = Some([(1, log_id(5)), (2, log_id(3)), (3, log_id(5))].into());
        assert_eq!(
            quiet.tick(&leader, &liveness, &none, timing(), now, true),
            Action::None
        );
        liveness.heard(2);
        assert_eq!(
            quiet.tick(&leader, &liveness, &none, timing(), now, true),
            Action::Heartbeat
        );
        assert_eq!(
            quiet.tick(&leader, &liveness, &none, timing(), now, true),
            Action::Heartbeat
        );
    }

    #[test]
    fn a_commit_index_and_a_returning_voter_are_told_until_every_live_follower_acknowledged() {
        use openraft::async_runtime::Instant as _;
        type At = openraft::type_config::alias::InstantOf<iggyd_raft::PartitionRaft>;
        let liveness = Liveness::default();
        liveness.heard(2);
        liveness.heard(3);
        let quiet = Quiet::new(3, timing());
        let none = BTreeSet::new();
        let mut leader = metrics(1, ServerState::Leader, Some(1));
        leader.last_log_index = Some(5);
        leader.local_committed = log_id(5);
        leader.replication = Some([(1, log_id(5)), (2, log_id(5)), (3, log_id(5))].into());
        let acked_before = At::now();
        leader.heartbeat = Some(
            [
                (2, Some(acked_before.into())),
                (3, Some(acked_before.into())),
            ]
            .into(),
        );
        // Sent after the last acknowledgements: told again each tick.
        std::thread::sleep(Duration::from_millis(2));
        let tick =
            |leader: &Metrics| quiet.tick(leader, &liveness, &none, timing(), Instant::now(), true);
        assert_eq!(tick(&leader), Action::Heartbeat);
        assert_eq!(tick(&leader), Action::Heartbeat);
        // One follower acknowledged since: still told.
        std::thread::sleep(Duration::from_millis(2));
        let acked = At::now();
        leader.heartbeat = Some([(2, Some(acked.into())), (3, Some(acked_before.into()))].into());
        assert_eq!(tick(&leader), Action::Heartbeat);
        // Both did: quiet.
        leader.heartbeat = Some([(2, Some(acked.into())), (3, Some(acked.into()))].into());
        assert_eq!(tick(&leader), Action::None);
        // A follower whose node is silent is not waited for.
        leader.local_committed = log_id(6);
        leader.last_log_index = Some(6);
        leader.replication = Some([(1, log_id(6)), (2, log_id(6)), (3, log_id(6))].into());
        let only_2 = Liveness::default();
        only_2.heard(2);
        let tick =
            |leader: &Metrics| quiet.tick(leader, &only_2, &none, timing(), Instant::now(), true);
        assert_eq!(tick(&leader), Action::Heartbeat);
        std::thread::sleep(Duration::from_millis(2));
        leader.heartbeat = Some([(2, Some(At::now().into())), (3, None)].into());
        assert_eq!(tick(&leader), Action::None);
        // Node 3 comes back with nothing new committed: told each tick
        // until it acknowledged a heartbeat sent since (its first may
        // have found no group), then quiet again.
        let back: BTreeSet<u64> = [3].into();
        assert_eq!(
            quiet.tick(&leader, &liveness, &back, timing(), Instant::now(), true),
            Action::Heartbeat
        );
        let tick =
            |leader: &Metrics| quiet.tick(leader, &liveness, &none, timing(), Instant::now(), true);
        assert_eq!(tick(&leader), Action::Heartbeat);
        assert_eq!(tick(&leader), Action::Heartbeat);
        std::thread::sleep(Duration::from_millis(2));
        let acked = At::now();
        leader.heartbeat = Some([(2, Some(acked.into())), (3, Some(acked.into()))].into());
        assert_eq!(tick(&leader), Action::None);
    }

    #[test]
    fn openrafts_lease_in_a_quiet_group_ends_at_the_first_campaign() {
        let cluster = |election: u64, heartbeat: u64| openraft::Config {
            heartbeat_interval: heartbeat,
            election_timeout_min: election,
            election_timeout_max: election * 2,
            ..Default::default()
        };
        for (election, heartbeat) in [
            (1000, 200),
            (500, 100),
            (150, 20),
            (150, 74),
            (60_000, 10_000),
        ] {
            let quiet = openraft_config(&cluster(election, heartbeat));
            assert!(!quiet.enable_tick);
            assert_eq!(quiet.heartbeat_interval, heartbeat);
            assert_eq!(quiet.election_timeout_max, election, "{quiet:?}");
            assert!(quiet.election_timeout_min > heartbeat);
            assert!(quiet.election_timeout_min < quiet.election_timeout_max);
            assert!(quiet.clone().validate().is_ok());
        }
        let default = openraft_config(&cluster(1000, 200));
        assert_eq!(
            (default.election_timeout_min, default.election_timeout_max),
            (600, 1000)
        );
    }

    #[test]
    fn votes_are_refused_while_the_leader_is_alive() {
        let liveness = Liveness::default();
        let quiet = Quiet::new(1, timing());
        // A leader with a live quorum refuses, and heartbeats.
        let leader = metrics(1, ServerState::Leader, Some(1));
        assert_eq!(quiet.refuse_vote(&leader, &liveness, timing(), 2), None);
        liveness.heard(3);
        let refused = quiet.refuse_vote(&leader, &liveness, timing(), 2);
        assert!(matches!(refused, Some((_, true))), "{refused:?}");
        // A follower refuses while its leader is alive, not for the
        // leader itself.
        let follower = metrics(2, ServerState::Follower, Some(3));
        let refused = quiet.refuse_vote(&follower, &liveness, timing(), 1);
        assert!(matches!(refused, Some((_, false))), "{refused:?}");
        assert_eq!(quiet.refuse_vote(&follower, &liveness, timing(), 3), None);
        // A leader silent, or none known: openraft decides.
        let silent = metrics(2, ServerState::Follower, Some(1));
        assert_eq!(quiet.refuse_vote(&silent, &liveness, timing(), 3), None);
        let leaderless = metrics(2, ServerState::Follower, None);
        assert_eq!(quiet.refuse_vote(&leaderless, &liveness, timing(), 3), None);
    }

    // Proves a leadership transfer that does not complete ends: the leader
    // asks again each minimum election timeout and refuses no vote
    // meanwhile; a member it asked treats it as silent since the ask (no
    // vote refused for it, a campaign once its election timeout passed),
    // for that leader and term only; and a leader that no longer leads
    // forgets its transfer.
    #[test]
    fn a_transfer_that_does_not_complete_is_asked_again_and_ends_in_an_election() {
        let liveness = Liveness::default();
        let none = BTreeSet::new();
        let start = Instant::now();
        liveness.heard(2);
        liveness.heard(3);

        let leading = Quiet::new(1, timing());
        let mut leader = metrics(1, ServerState::Leader, Some(1));
        leader.current_term = 4;
        assert!(
            leading
                .refuse_vote(&leader, &liveness, timing(), 2)
                .is_some()
        );
        leading.handing(3, start);
        assert_eq!(leading.refuse_vote(&leader, &liveness, timing(), 2), None);
        let tick =
            |at: Duration| leading.tick(&leader, &liveness, &none, timing(), start + at, true);
        assert_eq!(tick(Duration::from_millis(10)), Action::None);
        assert_eq!(tick(Duration::from_millis(1000)), Action::Transfer(3));
        assert_eq!(tick(Duration::from_millis(1500)), Action::None);
        assert_eq!(tick(Duration::from_millis(2000)), Action::Transfer(3));
        let deposed = metrics(1, ServerState::Follower, Some(2));
        leading.tick(&deposed, &liveness, &none, timing(), start, true);
        assert!(
            leading
                .refuse_vote(&leader, &liveness, timing(), 2)
                .is_some()
        );

        // Node 2 follows node 1 in term 4; node 1 is alive throughout.
        liveness.heard(1);
        let following = Quiet::new(2, timing());
        let mut follower = metrics(2, ServerState::Follower, Some(1));
        follower.current_term = 4;
        let follow = |at: Duration| {
            liveness.heard(1);
            following.tick(&follower, &liveness, &none, timing(), start + at, true)
        };
        assert!(
            following
                .refuse_vote(&follower, &liveness, timing(), 3)
                .is_some()
        );
        // An ask of an older term is not this leader's.
        following.asked(1, 3, start);
        assert!(
            following
                .refuse_vote(&follower, &liveness, timing(), 3)
                .is_some()
        );
        following.asked(1, 4, start);
        following.asked(1, 4, start + Duration::from_millis(900));
        assert_eq!(
            following.refuse_vote(&follower, &liveness, timing(), 3),
            None
        );
        assert_eq!(follow(Duration::from_millis(100)), Action::None);
        assert_eq!(follow(Duration::from_millis(2000)), Action::Elect);
    }

    #[test]
    fn election_timeouts_are_drawn_within_the_bounds_and_differ() {
        let timing = Timing {
            election_min: Duration::from_millis(1000),
            election_max: Duration::from_millis(2000),
            heartbeat: Duration::from_millis(1),
        };
        let draws: BTreeSet<Duration> = (1..=20)
            .map(|seed| {
                let quiet = Quiet::new(seed * 7919, timing);
                quiet.elect_after.get()
            })
            .collect();
        assert!(draws.len() > 10, "{draws:?}");
        assert!(
            draws
                .iter()
                .all(|draw| *draw >= timing.election_min && *draw < timing.election_max)
        );
    }

    #[test]
    fn revivals_are_the_nodes_heard_again() {
        let liveness = Liveness::default();
        let mut revivals = Revivals::default();
        let lease = Duration::from_secs(1);
        assert!(revivals.look(&liveness, &[2, 3], lease).is_empty());
        liveness.heard(3);
        assert_eq!(revivals.look(&liveness, &[2, 3], lease), [3].into());
        assert!(revivals.look(&liveness, &[2, 3], lease).is_empty());
        assert!(revivals.look(&liveness, &[2, 3], Duration::ZERO).is_empty());
        assert_eq!(revivals.look(&liveness, &[2, 3], lease), [3].into());

        // Restarted within the lease: alive throughout, and revived.
        liveness.heard_from(3, Some(1));
        assert!(revivals.look(&liveness, &[2, 3], lease).is_empty());
        liveness.heard_from(3, Some(2));
        assert_eq!(revivals.look(&liveness, &[2, 3], lease), [3].into());
        assert!(revivals.look(&liveness, &[2, 3], lease).is_empty());
    }

    #[test]
    fn a_new_group_campaigns_first_on_its_preferred_member_and_within_the_budget() {
        let liveness = Liveness::default();
        let none = BTreeSet::new();
        let leaderless = metrics(2, ServerState::Follower, None);
        let now = Instant::now();
        let preferred = Quiet::new(5, timing());
        preferred.first_campaign(true, timing());
        let other = Quiet::new(6, timing());
        other.first_campaign(false, timing());
        // Over the shard's budget this tick: nothing, and the next tick
        // still campaigns.
        assert_eq!(
            preferred.tick(&leaderless, &liveness, &none, timing(), now, false),
            Action::None
        );
        assert_eq!(
            preferred.tick(&leaderless, &liveness, &none, timing(), now, true),
            Action::Elect
        );
        // The others wait their draw plus two election timeouts.
        let late = now + timing().election_max * 2;
        assert_eq!(
            other.tick(&leaderless, &liveness, &none, timing(), late, true),
            Action::None
        );
        let later = now + timing().election_max * 3 + Duration::from_millis(1);
        assert_eq!(
            other.tick(&leaderless, &liveness, &none, timing(), later, true),
            Action::Elect
        );
    }
}
