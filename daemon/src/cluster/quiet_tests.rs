//! The quiet groups' rules, one member at a time from its metrics:
//! elections and their timeouts, heartbeats only with news, the votes
//! refused while a leader is alive, returning voters told the commit, and
//! a transfer that does not complete ending in an election.

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
    let tick = |at: Duration| leading.tick(&leader, &liveness, &none, timing(), start + at, true);
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
