//! Tests on three members through the RPC codec: offsets entries
//! replicate like batches but take no message offsets, and a resend left
//! in doubt (`replay.rs`) is answered from its first attempt, not stored
//! twice, also after the leader that committed it is cut off.

use super::*;

/// Starts three members through the codec and has them elect a leader.
pub(super) async fn three_members(
    transport: &InProcess,
) -> Vec<(Rc<BackendRaft>, SharedBackend, Rc<Applied>)> {
    let mut members = Vec::new();
    for id in 1..=3 {
        members.push(start_member(id, transport).await);
    }
    let voters: std::collections::BTreeMap<u64, openraft::impls::BasicNode> = (1..=3)
        .map(|id| {
            (
                id,
                openraft::impls::BasicNode {
                    addr: format!("node-{id}"),
                },
            )
        })
        .collect();
    for (raft, _, _) in &members {
        match raft.initialize(voters.clone()).await {
            Ok(()) => {}
            Err(openraft::errors::RaftError::APIError(
                openraft::errors::InitializeError::NotAllowed(_),
            )) => {}
            Err(error) => panic!("initialize: {error}"),
        }
    }
    members
}

/// Waits until every member in `members` has applied messages up to
/// `next`.
pub(super) async fn all_applied(members: &[&Rc<Applied>], next: u64) {
    for applied in members {
        for _ in 0..250 {
            if applied.committed_next_offset.get() == next {
                break;
            }
            monoio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(applied.committed_next_offset.get(), next);
    }
}

/// A batch proposal's bytes.
fn batch_of(proposal: Proposal) -> Vec<u8> {
    match proposal {
        Proposal::Batch(bytes) => bytes.to_vec(),
        Proposal::Offsets(_) | Proposal::Purge(_) => panic!("a batch proposal"),
    }
}

/// Waits until `applied` has applied offsets entries, and takes them.
async fn offsets_applied(applied: &Applied) -> Vec<(u64, Vec<crate::offsets::OffsetWrite>)> {
    for _ in 0..250 {
        if applied.has_offsets() {
            return applied.take_offsets();
        }
        monoio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("no offsets entry applied within 5 s");
}

// Proves an offsets entry replicates like a batch but takes no message
// offset: written at the leader and forwarded by a follower, it is
// applied on every member (its writes queued in log order, with its
// index), the batch after it continues the offsets densely, and every
// member's log holds it at the same index.
#[test]
fn offsets_entries_apply_on_every_member_and_take_no_message_offsets() {
    use crate::offsets::{OffsetWrite, encode};
    use iggyd_storage::consumer_offsets::{ConsumerKey, ConsumerKind};
    runtime().block_on(async {
        let transport = InProcess::default();
        let members = three_members(&transport).await;
        let rafts: Vec<Rc<BackendRaft>> = members.iter().map(|(raft, _, _)| raft.clone()).collect();
        assert_eq!(write_to_leader(&rafts, 2).await.base_offset, 0);
        let leader = leader_of(&rafts).await;
        let leader_id = *leader.node_id();
        let consumer = ConsumerKey {
            kind: ConsumerKind::Group,
            id: 4,
        };
        let first = vec![OffsetWrite::Store {
            consumer,
            offset: 1,
        }];
        let first_index = crate::replay::propose_control(
            &*leader,
            crate::replay::ControlEntry::Offsets(encode(&first)),
        )
        .await
        .expect("committed");
        for (_, _, applied) in &members {
            let taken = offsets_applied(applied).await;
            assert_eq!(taken, vec![(first_index, first.clone())]);
        }
        // A follower forwards an offsets entry to the leader.
        let follower_id = (1..=3).find(|id| *id != leader_id).expect("a follower");
        let network = crate::network::Network::<InProcess>::new(
            InProcess {
                from: follower_id,
                ..transport.clone()
            },
            7,
        );
        let second = vec![OffsetWrite::Delete { consumer }];
        let second_index = network
            .forward_offsets(
                leader_id,
                &encode(&second),
                std::time::Duration::from_secs(5),
            )
            .await
            .expect("forwarded and committed");
        assert!(second_index > first_index);
        for (_, _, applied) in &members {
            let taken = offsets_applied(applied).await;
            assert_eq!(taken, vec![(second_index, second.clone())]);
        }
        // The next batch continues the offsets where the first ended.
        assert_eq!(
            write_to_leader(&rafts, 3).await,
            Appended {
                base_offset: 2,
                last_offset: 4
            }
        );
        let applied: Vec<&Rc<Applied>> = members.iter().map(|(_, _, applied)| applied).collect();
        all_applied(&applied, 5).await;
        for (_, backend, _) in &members {
            let log = backend.log.lock().await;
            assert_eq!(log.partition().next_offset(), 5);
            match log
                .get(second_index)
                .await
                .expect("read")
                .expect("held")
                .body
            {
                iggyd_storage::raft::StoredBody::Offsets(bytes) => {
                    assert_eq!(crate::offsets::decode(&bytes).unwrap(), second);
                }
                other => panic!("{other:?}"),
            }
        }
        for raft in &rafts {
            let _ = raft.shutdown().await;
        }
    });
}

// Proves a resend of a batch left in doubt is resolved, not stored twice:
// a follower forwards a batch whose answer is lost (outcome unknown); the
// resend, resolved at the leader from where the first attempt began, is
// answered with the first attempt's offsets, and the log holds the
// messages once. A resend of a batch that never committed is proposed.
// After the leader that committed a batch is cut off, its resend is
// resolved by the new leader the same way.
#[test]
fn a_resend_in_doubt_is_answered_from_its_first_attempt_not_stored_twice() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let members = three_members(&transport).await;
        let rafts: Vec<Rc<BackendRaft>> = members.iter().map(|(raft, _, _)| raft.clone()).collect();
        let written = write_to_leader(&rafts, 2).await;
        assert_eq!(written.base_offset, 0);
        let leader = leader_of(&rafts).await;
        let leader_id = *leader.node_id();
        let (follower, _, follower_applied) = members
            .iter()
            .find(|(raft, _, _)| *raft.node_id() != leader_id)
            .expect("a follower");
        let follower_id = *follower.node_id();
        all_applied(&[follower_applied], 2).await;
        let network = crate::network::Network::<InProcess>::new(
            InProcess {
                from: follower_id,
                ..transport.clone()
            },
            7,
        );
        let timeout = std::time::Duration::from_secs(5);

        // The first attempt commits, but its answer is lost.
        let batch = batch_of(proposal(1_000, 3));
        let after = follower_applied.replays.last_index();
        transport.lose_answers_of.set(Some(follower_id));
        let first = network
            .forward(leader_id, batch.clone(), None, timeout)
            .await;
        transport.lose_answers_of.set(None);
        assert!(
            matches!(first, Err(crate::replay::ProposeError::Unknown(_))),
            "{first:?}"
        );
        let resent = network
            .forward(leader_id, batch.clone(), Some(after), timeout)
            .await
            .expect("resolved");
        assert_eq!(
            resent,
            Appended {
                base_offset: 2,
                last_offset: 4
            }
        );
        let applied: Vec<&Rc<Applied>> = members.iter().map(|(_, _, applied)| applied).collect();
        all_applied(&applied, 5).await;

        // A resend whose first attempt never reached the group is proposed.
        let never = batch_of(proposal(2_000, 2));
        let after = follower_applied.replays.last_index();
        let proposed = network
            .forward(leader_id, never, Some(after), timeout)
            .await
            .expect("proposed");
        assert_eq!(proposed.base_offset, 5);
        all_applied(&applied, 7).await;

        // Committed by a leader that is then cut off: the new leader
        // resolves the resend.
        let batch = batch_of(proposal(3_000, 4));
        let after = follower_applied.replays.last_index();
        let first = network
            .forward(leader_id, batch.clone(), None, timeout)
            .await
            .expect("committed");
        assert_eq!(first.base_offset, 7);
        all_applied(&applied, 11).await;
        transport.down.borrow_mut().insert(leader_id);
        let survivors: Vec<Rc<BackendRaft>> = rafts
            .iter()
            .filter(|raft| *raft.node_id() != leader_id)
            .cloned()
            .collect();
        let new_leader = leader_of(&survivors).await;
        let mut resent = None;
        for _ in 0..250 {
            let new_leader_id = *leader_of(&survivors).await.node_id();
            match network
                .forward(new_leader_id, batch.clone(), Some(after), timeout)
                .await
            {
                Ok(appended) => {
                    resent = Some(appended);
                    break;
                }
                // While the new leader settles (or is the follower itself
                // for a moment), nothing is proposed; try again.
                Err(
                    crate::replay::ProposeError::NotLeader(_)
                    | crate::replay::ProposeError::NotDelivered(_)
                    | crate::replay::ProposeError::Unresolved(_),
                ) => monoio::time::sleep(std::time::Duration::from_millis(20)).await,
                Err(error) => panic!("resend: {error}"),
            }
        }
        assert_eq!(resent, Some(first), "new leader {}", new_leader.node_id());
        transport.down.borrow_mut().remove(&leader_id);
        all_applied(&applied, 11).await;
        // Every message once, the same bytes on every replica.
        assert_replicas_alike(&members, 11).await;
        for raft in &rafts {
            raft.shutdown().await.expect("shutdown");
        }
    });
}

// Proves a resend is resolved against everything its leader holds, not
// only what was committed when it arrived: a first attempt whose proposer
// gave up (its future dropped, as when a leader's lease lapses mid-write)
// stays in the leader's log and commits later; the resend is answered
// with that entry's offsets instead of being stored a second time, both
// when it comes as a resend of a batch in doubt and when it comes fresh
// (the SDK re-issues it through the leader under a new session), and the
// same messages sent again once committed get the same offsets.
#[test]
fn a_resend_after_its_first_attempt_was_given_up_is_not_stored_twice() {
    for in_doubt in [true, false] {
        resend_after_giving_up(in_doubt);
    }
}

fn resend_after_giving_up(in_doubt: bool) {
    runtime().block_on(async {
        let transport = InProcess::default();
        let members = three_members(&transport).await;
        let rafts: Vec<Rc<BackendRaft>> = members.iter().map(|(raft, _, _)| raft.clone()).collect();
        write_to_leader(&rafts, 2).await;
        let leader = leader_of(&rafts).await;
        let leader_id = *leader.node_id();
        let (_, _, applied) = members
            .iter()
            .find(|(raft, _, _)| *raft.node_id() == leader_id)
            .expect("the leader is a member");
        let batch = batch_of(proposal(0, 3));
        let after = applied.replays.last_index();
        // The followers cut off: the first attempt is appended at the
        // leader and cannot commit; its proposer gives up.
        for (raft, _, _) in &members {
            if *raft.node_id() != leader_id {
                transport.down.borrow_mut().insert(*raft.node_id());
            }
        }
        let first = crate::replay::propose(&leader, &applied.replays, batch.clone(), None);
        let gave_up = monoio::time::timeout(std::time::Duration::from_millis(60), first).await;
        assert!(gave_up.is_err(), "nothing commits without a quorum");
        // Back before an election timeout: the same leader, the entry
        // still in its log, uncommitted.
        transport.down.borrow_mut().clear();
        let resolve_after = in_doubt.then_some(after);
        let resend =
            crate::replay::propose(&leader, &applied.replays, batch.clone(), resolve_after)
                .await
                .expect("the resend is resolved");
        assert_eq!(resend.base_offset, 2, "the first attempt's offsets");
        for _ in 0..200 {
            if applied.committed_next_offset.get() >= 5 {
                break;
            }
            monoio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        monoio::time::sleep(std::time::Duration::from_millis(100)).await;
        let again = crate::replay::propose(&leader, &applied.replays, batch, None)
            .await
            .expect("the same messages again");
        assert_eq!(again.base_offset, 2, "the committed entry's offsets");
        assert_eq!(
            applied.committed_next_offset.get(),
            5,
            "2 messages, then the 3 of the batch once"
        );
        for raft in &rafts {
            raft.shutdown().await.expect("shutdown");
        }
    });
}
