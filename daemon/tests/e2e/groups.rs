//! Consumer groups as the official clients use them (issue 13 §4), at the
//! wire level: a group's offsets are readable by any caller allowed to
//! poll, members or not, and a poll in the name of a group the session is
//! not a member of (deleted, never joined, membership lost) answers
//! ConsumerGroupMemberNotFound, which the 0.11.0 SDK's consumer turns into
//! a rejoin, instead of a hard error.

use iggyd_testkit::TestDaemon;
use iggyd_testkit::wire::{Client, ClientError, Consumer, Identifier, PollingStrategy, Request};

use crate::messages::{logged_in, send, stream_with_topic};

fn group_poll(
    client: &mut Client,
    group: &str,
    partition: Option<u32>,
) -> Result<Vec<u8>, ClientError> {
    client
        .call(&Request::poll_messages(
            Consumer::Group(Identifier::Name(group)),
            Identifier::Name("s"),
            Identifier::Name("t"),
            partition,
            PollingStrategy::offset(0),
            10,
            false,
        ))
        .map(<[u8]>::to_vec)
}

fn join(client: &mut Client, group: &str) {
    client
        .call(&Request::join_consumer_group(
            Identifier::Name("s"),
            Identifier::Name("t"),
            Identifier::Name(group),
        ))
        .unwrap();
}

// Proves a group's stored offset is served to a caller that is not a
// member (a lag monitor, `iggy consumer-offset get --kind consumer-group`),
// while storing one still needs the partition's assignment.
#[test]
fn group_offsets_are_readable_by_non_members() {
    let daemon = TestDaemon::start();
    let mut member = logged_in(daemon.address, "iggy", "iggy");
    stream_with_topic(&mut member, "s", "t", 1);
    send(&mut member, "s", "t", 0, &[b"a", b"b", b"c"]);
    member
        .call(&Request::create_consumer_group(
            Identifier::Name("s"),
            Identifier::Name("t"),
            "g",
        ))
        .unwrap();
    join(&mut member, "g");
    let group = || Consumer::Group(Identifier::Name("g"));
    member
        .call(&Request::store_consumer_offset(
            group(),
            Identifier::Name("s"),
            Identifier::Name("t"),
            Some(0),
            1,
            1,
        ))
        .unwrap();

    let mut monitor = logged_in(daemon.address, "iggy", "iggy");
    let body = monitor
        .call(&Request::get_consumer_offset(
            group(),
            Identifier::Name("s"),
            Identifier::Name("t"),
            Some(0),
        ))
        .unwrap()
        .to_vec();
    // [partition_id u32][current_offset u64][stored_offset u64]
    assert_eq!(body.len(), 20, "a non-member read nothing: {body:?}");
    assert_eq!(u64::from_le_bytes(body[4..12].try_into().unwrap()), 2);
    assert_eq!(u64::from_le_bytes(body[12..20].try_into().unwrap()), 1);
    match monitor.call(&Request::store_consumer_offset(
        group(),
        Identifier::Name("s"),
        Identifier::Name("t"),
        Some(0),
        2,
        1,
    )) {
        Err(ClientError::Status { status, .. }) => assert_eq!(status, 5009),
        other => panic!("a non-member stored a group offset: {other:?}"),
    }
    daemon.assert_clean_log();
}

// Proves polls in the name of a group the session is not in answer 5006
// (the SDK's cue to join again): a group that was deleted under its
// member, a group never joined, and a group that does not exist; a member
// polling a partition it does not own still gets the empty "not yours"
// reply (partition u32::MAX).
#[test]
fn polls_outside_a_group_answer_member_not_found() {
    let daemon = TestDaemon::start();
    let mut client = logged_in(daemon.address, "iggy", "iggy");
    stream_with_topic(&mut client, "s", "t", 2);
    send(&mut client, "s", "t", 0, &[b"a"]);
    for name in ["g", "h"] {
        client
            .call(&Request::create_consumer_group(
                Identifier::Name("s"),
                Identifier::Name("t"),
                name,
            ))
            .unwrap();
    }
    join(&mut client, "g");
    let mut other = logged_in(daemon.address, "iggy", "iggy");
    join(&mut other, "g");
    // Two members, two partitions: each owns one; the other is "not yours".
    let partitions: Vec<u32> = [0, 1]
        .into_iter()
        .map(|partition| {
            let body = group_poll(&mut client, "g", Some(partition)).unwrap();
            u32::from_le_bytes(body[..4].try_into().unwrap())
        })
        .collect();
    assert!(partitions.contains(&u32::MAX), "{partitions:?}");

    let not_member = |result: Result<Vec<u8>, ClientError>, what: &str| match result {
        Err(ClientError::Status { status, .. }) => assert_eq!(status, 5006, "{what}"),
        other => panic!("{what}: {other:?}"),
    };
    not_member(
        group_poll(&mut client, "h", Some(0)),
        "a group never joined",
    );
    not_member(group_poll(&mut client, "nope", Some(0)), "an unknown group");
    other
        .call(&Request::delete_consumer_group(
            Identifier::Name("s"),
            Identifier::Name("t"),
            Identifier::Name("g"),
        ))
        .unwrap();
    not_member(group_poll(&mut client, "g", Some(0)), "a deleted group");
    client.ping().unwrap();
    daemon.assert_clean_log();
}

fn sync(client: &mut Client) -> Vec<u32> {
    let body = client
        .call(&Request::sync_consumer_group(
            Identifier::Name("s"),
            Identifier::Name("t"),
            Identifier::Name("g"),
        ))
        .unwrap()
        .to_vec();
    // [generation u64][count u32][partition u32]...
    body.get(12..)
        .unwrap_or_default()
        .chunks_exact(4)
        .map(|chunk| u32::from_le_bytes(chunk.try_into().unwrap()))
        .collect()
}

// Proves the cooperative hand-off waits for the owner's commit and no
// longer than `consumer_groups.rebalance_timeout`: A holds polled but
// uncommitted messages of both partitions when B joins; B gets nothing
// while A neither commits nor the timeout passes, and its share once the
// (here 300 ms) timeout has passed.
#[test]
fn a_hand_off_completes_after_the_rebalance_timeout() {
    let daemon = TestDaemon::builder()
        .env("IGGYD_CONSUMER_GROUPS__REBALANCE_TIMEOUT", "300 ms")
        .spawn();
    let mut a = logged_in(daemon.address, "iggy", "iggy");
    stream_with_topic(&mut a, "s", "t", 2);
    for partition in 0..2 {
        send(&mut a, "s", "t", partition, &[b"x", b"y"]);
    }
    a.call(&Request::create_consumer_group(
        Identifier::Name("s"),
        Identifier::Name("t"),
        "g",
    ))
    .unwrap();
    join(&mut a, "g");
    assert_eq!(sync(&mut a), vec![0, 1]);
    for partition in 0..2 {
        let body = group_poll(&mut a, "g", Some(partition)).unwrap();
        assert_eq!(u32::from_le_bytes(body[..4].try_into().unwrap()), partition);
    }
    let mut b = logged_in(daemon.address, "iggy", "iggy");
    join(&mut b, "g");
    let started = std::time::Instant::now();
    assert_eq!(sync(&mut b), Vec::<u32>::new(), "B waits for A");
    a.ping().unwrap();
    assert_eq!(
        sync(&mut a),
        vec![0, 1],
        "A keeps what it has not committed"
    );
    let mut waited = 0;
    let handed = loop {
        let partitions = sync(&mut b);
        if !partitions.is_empty() {
            break partitions;
        }
        waited += 1;
        assert!(waited < 500, "the hand-off never timed out");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    assert_eq!(handed, vec![1]);
    assert_eq!(sync(&mut a), vec![0]);
    daemon.assert_clean_log();
}
