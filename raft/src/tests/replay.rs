//! Tests of resends left in doubt (`replay.rs`) on three members through
//! the RPC codec: a resend is answered from its first attempt, not stored
//! twice, also after the leader that committed it is cut off.

use super::*;

/// Starts three members through the codec and has them elect a leader.
async fn three_members(
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
async fn all_applied(members: &[&Rc<Applied>], next: u64) {
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
        let batch = proposal(1_000, 3).0;
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
        let never = proposal(2_000, 2).0;
        let after = follower_applied.replays.last_index();
        let proposed = network
            .forward(leader_id, never, Some(after), timeout)
            .await
            .expect("proposed");
        assert_eq!(proposed.base_offset, 5);
        all_applied(&applied, 7).await;

        // Committed by a leader that is then cut off: the new leader
        // resolves the resend.
        let batch = proposal(3_000, 4).0;
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
        let mut contents = Vec::new();
        for (_, backend, _) in &members {
            let mut log = backend.log.lock().await;
            log.write_pending().await.expect("write");
            let read = log
                .partition()
                .read_by_offset(0, 1000, u64::MAX)
                .await
                .expect("read");
            assert_eq!(read.message_count, 11, "every message once");
            contents.push(read.records_bytes().into_owned());
        }
        assert!(contents.windows(2).all(|pair| pair[0] == pair[1]));
        for raft in &rafts {
            raft.shutdown().await.expect("shutdown");
        }
    });
}
