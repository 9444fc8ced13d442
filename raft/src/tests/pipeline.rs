//! Pipelined replication (`crate::pipeline`) between three in-process
//! members: a leader keeps several appends out to a follower, the
//! follower hands them to openraft in their stream's order although they
//! arrive out of it, and every replica ends with the same messages; and
//! an append call is decoded without copying its batches.

use super::replay::{all_applied, three_members};
use super::*;
use openraft::raft::AppendEntriesRequest;
use openraft::rt::WatchReceiver;

// Proves the pipeline is used and keeps order: with each append held
// on its way (the odd calls of a stream less than the even ones, so each
// overtakes the one before it) and sixteen proposals written at once,
// the leader has more than one append out to a follower at a time, calls
// are served out of their order, and still every proposal is answered
// with dense offsets and every replica stores the same bytes.
#[test]
fn a_leader_keeps_appends_out_at_once_and_the_follower_keeps_their_order() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let members = three_members(&transport).await;
        let rafts: Vec<Rc<BackendRaft>> = members.iter().map(|(raft, _, _)| raft.clone()).collect();
        // One write first: a leader, its followers matched.
        let first = write_to_leader(&rafts, 1).await;
        assert_eq!(first.base_offset, 0);
        transport
            .stream_delay
            .set(std::time::Duration::from_millis(40));
        let leader = leader_of(&rafts).await;
        let writes = (0..16u32).map(|index| {
            let leader = leader.clone();
            async move {
                // Spaced so that each is proposed while the ones before it
                // are still out.
                monoio::time::sleep(std::time::Duration::from_millis(u64::from(index) * 5)).await;
                leader
                    .client_write(proposal(0, 3))
                    .await
                    .map(|written| *written.response())
            }
        });
        let mut written: Vec<Appended> = futures_util::future::join_all(writes)
            .await
            .into_iter()
            .map(|result| result.expect("write"))
            .collect();
        written.sort_by_key(|appended| appended.base_offset);
        for (index, appended) in written.iter().enumerate() {
            let base = 1 + 3 * index as u64;
            assert_eq!(
                *appended,
                Appended {
                    base_offset: base,
                    last_offset: base + 2
                }
            );
        }
        let next = 1 + 3 * 16;
        let applied: Vec<&Rc<Applied>> = members.iter().map(|(_, _, applied)| applied).collect();
        all_applied(&applied, next).await;
        let streams = transport.streams.borrow().clone();
        let leader_id = *leader.node_id();
        let to_followers: Vec<StreamCalls> = streams
            .iter()
            .filter(|((from, _), _)| *from == leader_id)
            .map(|(_, calls)| *calls)
            .collect();
        assert!(
            to_followers.iter().any(|calls| calls.most_out > 1),
            "more than one append out to a follower at once: {streams:?}"
        );
        assert!(
            to_followers.iter().any(|calls| calls.overtaken > 0),
            "calls arrived out of their order: {streams:?}"
        );
        assert_replicas_alike(&members, next).await;
        for raft in &rafts {
            raft.shutdown().await.expect("shutdown");
        }
    });
}

// Proves a follower's refusals: a call whose predecessors never come is
// refused after the turn's wait, a duplicate of a call already handed
// over is refused at once, and neither reaches openraft (the log is
// unchanged).
#[test]
fn a_follower_refuses_a_call_out_of_turn_and_a_duplicate() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let members = three_members(&transport).await;
        let rafts: Vec<Rc<BackendRaft>> = members.iter().map(|(raft, _, _)| raft.clone()).collect();
        write_to_leader(&rafts, 2).await;
        let leader = leader_of(&rafts).await;
        let follower = rafts
            .iter()
            .find(|raft| raft.node_id() != leader.node_id())
            .expect("a follower")
            .clone();
        let metrics = follower.metrics().borrow_watched().clone();
        let last = metrics.last_log_index;
        let request = AppendEntriesRequest::<PartitionRaft> {
            vote: metrics.vote,
            prev_log_id: None,
            leader_commit: None,
            entries: Vec::new(),
        };
        let call = |seq: u64| {
            crate::network::encode_with(
                crate::network::APPEND_STREAM,
                &crate::pipeline::header(77, seq),
                &request,
            )
            .expect("encode")
        };
        // Call 1 of a stream whose call 0 never comes.
        let started = std::time::Instant::now();
        let answer = crate::network::serve(&follower, None, call(1).into()).await;
        assert_eq!(answer.first(), Some(&1), "refused");
        assert!(started.elapsed() >= crate::pipeline::TURN_WAIT);
        assert!(
            String::from_utf8_lossy(&answer[1..]).contains("did not come"),
            "{}",
            String::from_utf8_lossy(&answer[1..])
        );
        // Call 0 is handed over; a second copy of it is a duplicate.
        let answer = crate::network::serve(&follower, None, call(0).into()).await;
        assert_eq!(answer.first(), Some(&0), "served");
        let answer = crate::network::serve(&follower, None, call(0).into()).await;
        assert_eq!(answer.first(), Some(&1), "refused");
        assert!(String::from_utf8_lossy(&answer[1..]).contains("duplicate"));
        // A call without its place in a stream is malformed.
        let answer = crate::network::serve(
            &follower,
            None,
            vec![crate::network::APPEND_STREAM, 1, 2].into(),
        )
        .await;
        assert_eq!(answer.first(), Some(&1), "refused");
        assert_eq!(follower.metrics().borrow_watched().last_log_index, last);
        for raft in &rafts {
            raft.shutdown().await.expect("shutdown");
        }
    });
}

// Proves an AppendEntries call is decoded without copying its batches: a
// batch decoded by `decode_shared` lies inside the call's buffer and
// equals the one encoded, a plain decode copies, and every truncation of
// the call is refused, never a panic.
#[test]
fn a_decoded_call_shares_its_batches_with_the_call() {
    let entry = crate::Entry {
        log_id: openraft::LogId::new_term_index(1, 5),
        payload: openraft::EntryPayload::Normal(proposal(0, 3)),
    };
    let request = AppendEntriesRequest::<PartitionRaft> {
        vote: crate::Vote::new(1, 1),
        prev_log_id: None,
        leader_commit: None,
        entries: vec![entry.clone(), entry],
    };
    let call = bytes::Bytes::from(postcard::to_allocvec(&request).expect("encode"));
    let inside = |bytes: &bytes::Bytes| {
        let start = call.as_ptr() as usize;
        let at = bytes.as_ptr() as usize;
        at >= start && at + bytes.len() <= start + call.len()
    };
    let batch = |request: &AppendEntriesRequest<PartitionRaft>, index: usize| match &request.entries
        [index]
        .payload
    {
        openraft::EntryPayload::Normal(Proposal::Batch(bytes)) => bytes.clone(),
        other => panic!("a batch: {other:?}"),
    };
    let decoded: AppendEntriesRequest<PartitionRaft> =
        crate::network::decode_shared(&call).expect("decode");
    assert_eq!(decoded.entries, request.entries);
    assert!(inside(&batch(&decoded, 0)) && inside(&batch(&decoded, 1)));
    let copied: AppendEntriesRequest<PartitionRaft> = postcard::from_bytes(&call).expect("decode");
    assert_eq!(copied.entries, request.entries);
    assert!(!inside(&batch(&copied, 0)));
    for cut in 0..call.len() {
        assert!(
            crate::network::decode_shared::<AppendEntriesRequest<PartitionRaft>>(
                &call.slice(..cut)
            )
            .is_err(),
            "a call cut at {cut} of {}",
            call.len()
        );
    }
}
