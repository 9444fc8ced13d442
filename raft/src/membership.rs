//! Membership changes of a group (`iggyd cluster add-node|remove-node`):
//! what a node's entry in a membership carries ([`NodeCard`], openraft's
//! `BasicNode::addr`), the change asked ([`MemberChange`]) and how its
//! group's leader carries it out ([`change_members`]: a new node is added
//! as a learner, waited for until it holds the log, then made a voter
//! through openraft's joint consensus; a removal is checked to leave a
//! quorum that is alive first).
//!
//! Every wait is bounded; the answer says what happened.
//!
//! Must not: change a group this node does not lead (the caller forwards
//! to the leader, `network.rs`), or remove the leader itself (it hands its
//! leadership to the most caught-up other voter first, and the change is
//! then the new leader's to make).

use crate::PartitionTypes;
use openraft::ChangeMembers;
use openraft::async_runtime::{Instant as _, WatchReceiver};
use openraft::impls::BasicNode;
use openraft::type_config::TypeConfigExt;
use std::collections::BTreeSet;
use std::time::Duration;

/// What a node's entry in a membership says of it, as openraft's
/// `BasicNode::addr`: `<replication address>[ <client address>[ <name>]]`
/// (space-separated; the name is the rest of the string). A membership
/// written before cards carried more than the replication address reads
/// as one with only that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCard {
    /// The node-to-node address (`host:port`).
    pub replication: String,
    /// The Iggy address clients dial, when the membership says.
    pub address: Option<String>,
    /// The node's name, when the membership says.
    pub name: Option<String>,
}

impl NodeCard {
    pub fn parse(addr: &str) -> NodeCard {
        let mut parts = addr.trim().splitn(3, ' ');
        let replication = parts.next().unwrap_or_default().to_string();
        let address = parts
            .next()
            .filter(|part| !part.is_empty())
            .map(str::to_string);
        let name = parts
            .next()
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(str::to_string);
        NodeCard {
            replication,
            address,
            name,
        }
    }

    /// The card as a membership's node.
    pub fn node(&self) -> BasicNode {
        let mut addr = self.replication.clone();
        if let Some(address) = &self.address {
            addr.push(' ');
            addr.push_str(address);
            if let Some(name) = &self.name {
                addr.push(' ');
                addr.push_str(name);
            }
        }
        BasicNode { addr }
    }
}

/// A membership change asked of a group.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MemberChange {
    /// Make node `id` a voter (added as a learner first, with `node`).
    Add { id: u64, node: BasicNode },
    /// Take node `id` out of the group (voter or learner).
    Remove { id: u64 },
}

impl MemberChange {
    pub fn node_id(&self) -> u64 {
        match self {
            MemberChange::Add { id, .. } | MemberChange::Remove { id } => *id,
        }
    }
}

/// What a change came to at the leader.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MemberOutcome {
    /// The change is committed; the group's voters now.
    Changed { voters: Vec<u64> },
    /// Nothing to do (already a voter, or not a member); the voters.
    Unchanged { voters: Vec<u64> },
}

/// Why a change was not made (or not known to be).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MemberError {
    /// This node does not lead the group; the leader it knows of.
    NotLeader(Option<u64>),
    /// The change was forwarded to `node`, the group's leader as last
    /// known, and never reached it (refused, not connected): nothing was
    /// asked there, and a leader just gone is replaced by an election.
    Unreachable { node: u64, why: String },
    /// The change would leave a group that cannot commit.
    Refused(String),
    /// The new node did not catch up in time: it stays a learner.
    NotCaughtUp {
        id: u64,
        matched: Option<u64>,
        needed: u64,
        waited_ms: u64,
    },
    /// The change was proposed but not seen committed in time.
    TimedOut(u64),
    /// openraft refused or failed.
    Failed(String),
}

impl std::fmt::Display for MemberError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemberError::NotLeader(leader) => match leader {
                Some(leader) => write!(f, "this node does not lead the group: node {leader} does"),
                None => write!(f, "the group has no leader now (an election is under way)"),
            },
            MemberError::Unreachable { node, why } => write!(
                f,
                "node {node}, the group's leader as last known, cannot be reached ({why}) and \
                 no other leader was elected in time"
            ),
            MemberError::Refused(why) => write!(f, "{why}"),
            MemberError::NotCaughtUp {
                id,
                matched,
                needed,
                waited_ms,
            } => write!(
                f,
                "node {id} did not catch up within {waited_ms} ms (it holds up to {}, the \
                 change needs {needed}); it stays a learner",
                matched.map_or_else(|| "nothing".to_string(), |m| m.to_string())
            ),
            MemberError::TimedOut(ms) => {
                write!(f, "not seen committed within {ms} ms (it may still be)")
            }
            MemberError::Failed(why) => write!(f, "{why}"),
        }
    }
}

/// How long `change_members` polls the group's metrics between looks.
const POLL: Duration = Duration::from_millis(20);

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Whether removing `id` from `voters` leaves a group that can commit:
/// some voter left, and a majority of those left `alive` (acknowledged
/// the leader within a lease; the leader counts). An even count left is
/// refused unless `allow_even`: only the first step of a replacement
/// (add, then remove) may pass through one, never a removal.
pub fn check_removal(
    voters: &BTreeSet<u64>,
    id: u64,
    alive: &BTreeSet<u64>,
    allow_even: bool,
) -> Result<(), String> {
    if !voters.contains(&id) {
        return Ok(());
    }
    let left: BTreeSet<u64> = voters.iter().copied().filter(|v| *v != id).collect();
    if left.is_empty() {
        return Err(format!(
            "node {id} is the group's only voter: it cannot be removed"
        ));
    }
    let up = left.iter().filter(|v| alive.contains(v)).count();
    if up * 2 <= left.len() {
        let down: Vec<String> = left
            .iter()
            .filter(|v| !alive.contains(v))
            .map(u64::to_string)
            .collect();
        return Err(format!(
            "removing node {id} would leave {} voter(s) of which only {up} answer \
             (not answering: {}): no quorum; bring them back or add a node first",
            left.len(),
            down.join(", ")
        ));
    }
    if left.len().is_multiple_of(2) && !allow_even {
        return Err(format!(
            "removing node {id} would leave {} voters, an even count that tolerates no more \
             failures than {}: add a node first (a replacement adds, then removes)",
            left.len(),
            left.len() - 1
        ));
    }
    Ok(())
}

/// The voters of a group's metrics, and those alive from its leader's
/// view (acknowledged within `lease`; the leader itself always).
fn voters_and_alive<C: PartitionTypes>(
    metrics: &openraft::RaftMetrics<C>,
    lease: Duration,
) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let voters: BTreeSet<u64> = metrics.membership_config.membership().voter_ids().collect();
    let mut alive = BTreeSet::from([metrics.id]);
    if let Some(heartbeat) = &metrics.heartbeat {
        for (node, acked) in heartbeat {
            if acked.as_ref().is_some_and(|at| at.elapsed() <= lease) {
                alive.insert(*node);
            }
        }
    }
    (voters, alive)
}

/// Asks every member of a leading `raft` for an acknowledgement now and
/// waits (at most `lease`) until each voter `of` names has answered: the
/// view of who is alive is then today's, also in a group that heartbeats
/// only with news (whose last acknowledgements may be minutes old). A
/// voter that does not answer within the lease counts as not alive.
pub async fn fresh_acknowledgements<C, SM>(
    raft: &openraft::Raft<C, SM>,
    lease: Duration,
    of: impl Fn(u64) -> bool,
) where
    C: PartitionTypes,
    SM: openraft::storage::RaftStateMachine<C>,
{
    if !raft.metrics().borrow_watched().state.is_leader() {
        return;
    }
    let asked = C::now();
    let _ = raft.trigger().heartbeat().await;
    let _ = raft
        .wait(Some(lease))
        .metrics(
            |metrics| {
                let since = asked.elapsed();
                metrics
                    .membership_config
                    .membership()
                    .voter_ids()
                    .filter(|voter| *voter != metrics.id && of(*voter))
                    .all(|voter| {
                        metrics.heartbeat.as_ref().is_some_and(|heartbeat| {
                            heartbeat
                                .get(&voter)
                                .and_then(Option::as_ref)
                                .is_some_and(|at| at.elapsed() <= since)
                        })
                    })
            },
            "every voter's acknowledgement",
        )
        .await;
}

/// Carries out `change` on `raft`, which must lead its group. `wait`
/// bounds each step (a learner's catch-up, each commit); `allow_even`
/// lets a removal leave an even voter count.
pub async fn change_members<C, SM>(
    raft: &openraft::Raft<C, SM>,
    change: MemberChange,
    wait: Duration,
    allow_even: bool,
) -> Result<MemberOutcome, MemberError>
where
    C: PartitionTypes,
    SM: openraft::storage::RaftStateMachine<C>,
{
    let lease = Duration::from_millis(raft.config().election_timeout_max);
    fresh_acknowledgements(raft, lease, |_| true).await;
    let (leader, voters, learners, alive) = {
        let metrics = raft.metrics();
        let metrics = metrics.borrow_watched();
        let leader = metrics.state.is_leader().then_some(metrics.id);
        if leader.is_none() {
            return Err(MemberError::NotLeader(metrics.current_leader));
        }
        let (voters, alive) = voters_and_alive(&metrics, lease);
        let learners: BTreeSet<u64> = metrics
            .membership_config
            .membership()
            .learner_ids()
            .collect();
        (metrics.id, voters, learners, alive)
    };
    match change {
        MemberChange::Add { id, node } => {
            if voters.contains(&id) {
                return Ok(MemberOutcome::Unchanged {
                    voters: voters.into_iter().collect(),
                });
            }
            let added = within(raft, wait, || raft.add_learner(id, node.clone(), false)).await?;
            let needed = added.log_id.index();
            let started = C::now();
            loop {
                let matched = {
                    let metrics = raft.metrics();
                    let metrics = metrics.borrow_watched();
                    if !metrics.state.is_leader() {
                        return Err(MemberError::NotLeader(metrics.current_leader));
                    }
                    metrics
                        .replication
                        .as_ref()
                        .and_then(|replication| replication.get(&id).cloned().flatten())
                        .map(|log_id| log_id.index())
                };
                if matched.is_some_and(|matched| matched >= needed) {
                    break;
                }
                if started.elapsed() >= wait {
                    return Err(MemberError::NotCaughtUp {
                        id,
                        matched,
                        needed,
                        waited_ms: millis(started.elapsed()),
                    });
                }
                C::sleep(POLL).await;
            }
            let changed = within(raft, wait, || {
                raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            })
            .await?;
            Ok(changed_to(&changed))
        }
        MemberChange::Remove { id } => {
            if !voters.contains(&id) {
                if !learners.contains(&id) {
                    return Ok(MemberOutcome::Unchanged {
                        voters: voters.into_iter().collect(),
                    });
                }
                within(raft, wait, || {
                    raft.change_membership(ChangeMembers::RemoveNodes(BTreeSet::from([id])), false)
                })
                .await?;
                return Ok(MemberOutcome::Changed {
                    voters: voters.into_iter().collect(),
                });
            }
            check_removal(&voters, id, &alive, allow_even).map_err(MemberError::Refused)?;
            if id == leader {
                return hand_off(raft, id, wait).await;
            }
            let changed = within(raft, wait, || {
                raft.change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([id])), false)
            })
            .await?;
            Ok(changed_to(&changed))
        }
    }
}

/// A change written: the voters of the membership it wrote.
fn changed_to<C: PartitionTypes>(
    written: &openraft::raft::ClientWriteResponse<C>,
) -> MemberOutcome {
    MemberOutcome::Changed {
        voters: written
            .membership
            .as_ref()
            .map_or_else(Vec::new, |membership| membership.voter_ids().collect()),
    }
}

/// This leader is to be removed: its leadership goes to the voter that
/// holds the most of the log first, and the change is for the new leader
/// to make (answered as [`MemberError::NotLeader`] naming it, once this
/// node sees it lead, within `wait`).
async fn hand_off<C, SM>(
    raft: &openraft::Raft<C, SM>,
    me: u64,
    wait: Duration,
) -> Result<MemberOutcome, MemberError>
where
    C: PartitionTypes,
    SM: openraft::storage::RaftStateMachine<C>,
{
    let Some(to) = successor(raft, me) else {
        return Err(MemberError::Refused(format!(
            "node {me} leads the group and no other voter can take over"
        )));
    };
    raft.trigger().transfer_leader(to).await.map_err(|error| {
        MemberError::Failed(format!("handing leadership to node {to}: {error}"))
    })?;
    let started = C::now();
    loop {
        let leader = {
            let metrics = raft.metrics();
            let metrics = metrics.borrow_watched();
            (!metrics.state.is_leader())
                .then_some(metrics.current_leader)
                .flatten()
                .filter(|leader| *leader != me)
        };
        if let Some(leader) = leader {
            return Err(MemberError::NotLeader(Some(leader)));
        }
        if started.elapsed() >= wait {
            return Err(MemberError::Failed(format!(
                "node {me} leads the group and did not see node {to} take over within {} ms",
                millis(wait)
            )));
        }
        C::sleep(POLL).await;
    }
}

/// A voter of `raft`'s group, other than the leader and `not`, that
/// holds the most of the log (where a leader that is removed hands its
/// leadership).
pub fn successor<C, SM>(raft: &openraft::Raft<C, SM>, not: u64) -> Option<u64>
where
    C: PartitionTypes,
    SM: openraft::storage::RaftStateMachine<C>,
{
    let metrics = raft.metrics();
    let metrics = metrics.borrow_watched();
    let voters: Vec<u64> = metrics.membership_config.membership().voter_ids().collect();
    let replication = metrics.replication.as_ref()?;
    voters
        .into_iter()
        .filter(|voter| *voter != not && *voter != metrics.id)
        .max_by_key(|voter| {
            replication
                .get(voter)
                .cloned()
                .flatten()
                .map(|log_id| log_id.index())
        })
}

/// `write()` within `wait`, its errors as [`MemberError`]s; tried again
/// while a membership change is still in progress (the previous one not
/// committed yet, as right after a new leader's election).
async fn within<C, SM, F, Fut>(
    raft: &openraft::Raft<C, SM>,
    wait: Duration,
    mut write: F,
) -> Result<openraft::raft::ClientWriteResponse<C>, MemberError>
where
    C: PartitionTypes,
    SM: openraft::storage::RaftStateMachine<C>,
    F: FnMut() -> Fut,
    Fut: std::future::Future<
            Output = Result<
                openraft::raft::ClientWriteResponse<C>,
                openraft::errors::RaftError<C, openraft::errors::ClientWriteError<C>>,
            >,
        >,
{
    use openraft::errors::{ChangeMembershipError, ClientWriteError, ForwardReason, RaftError};
    let started = C::now();
    // A leader whose quorum last acknowledged it more than a lease ago
    // refuses to write (an idle group that heartbeats only with news
    // always is such a leader): it heartbeats and tries again, for at
    // most a lease; a leader that hears no quorum in that time is no
    // leader to ask.
    let lease = Duration::from_millis(raft.config().election_timeout_max);
    let mut lapsed_since = None;
    loop {
        let left = wait.saturating_sub(started.elapsed());
        match C::timeout(left, write()).await {
            Err(_) => return Err(MemberError::TimedOut(millis(wait))),
            Ok(Ok(response)) => return Ok(response),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))))
                if forward.reason == ForwardReason::LeaseExpired =>
            {
                let since = *lapsed_since.get_or_insert_with(C::now);
                if since.elapsed() >= lease || started.elapsed() + POLL >= wait {
                    return Err(MemberError::NotLeader(None));
                }
                let _ = raft.trigger().heartbeat().await;
                C::sleep(POLL).await;
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
                return Err(MemberError::NotLeader(forward.leader_id));
            }
            Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(
                ChangeMembershipError::InProgress(_),
            )))) if started.elapsed() < wait => C::sleep(POLL).await,
            Ok(Err(error)) => return Err(MemberError::Failed(error.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_round_trips_and_a_bare_address_reads_as_one() {
        let card = NodeCard {
            replication: "10.0.0.4:8091".into(),
            address: Some("10.0.0.4:8090".into()),
            name: Some("node four".into()),
        };
        assert_eq!(NodeCard::parse(&card.node().addr), card);
        let bare = NodeCard::parse("10.0.0.1:8091");
        assert_eq!(bare.replication, "10.0.0.1:8091");
        assert_eq!(bare.address, None);
        assert_eq!(bare.name, None);
        assert_eq!(bare.node().addr, "10.0.0.1:8091");
    }

    #[test]
    fn a_removal_must_leave_a_live_quorum_and_no_even_count() {
        let three = BTreeSet::from([1, 2, 3]);
        let four = BTreeSet::from([1, 2, 3, 4]);
        // 4 voters, 3 dead: {1,2,4} left, all alive.
        assert_eq!(
            check_removal(&four, 3, &BTreeSet::from([1, 2, 4]), false),
            Ok(())
        );
        // 3 voters, removing one leaves 2: even, refused unless allowed.
        let error = check_removal(&three, 3, &three, false).unwrap_err();
        assert!(error.contains("even count"), "{error}");
        assert_eq!(check_removal(&three, 3, &three, true), Ok(()));
        // 3 voters, 3 dead, removing a live one: {1,2}... with 2 dead too.
        let error = check_removal(&three, 2, &BTreeSet::from([1]), true).unwrap_err();
        assert!(error.contains("no quorum"), "{error}");
        // the only voter.
        let error = check_removal(&BTreeSet::from([1]), 1, &BTreeSet::from([1]), true).unwrap_err();
        assert!(error.contains("only voter"), "{error}");
        // not a voter: nothing to check.
        assert_eq!(check_removal(&three, 9, &BTreeSet::new(), false), Ok(()));
    }
}
