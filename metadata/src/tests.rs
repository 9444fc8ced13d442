//! Cross-file tests of the metadata layer: id and name rules, placement,
//! consumer-group rebalancing through commands, every apply error code,
//! tokens and logins, seeded replay equals live state, and the wire codes
//! of errors (the store's own persistence tests are `store_tests.rs`). Password hashes here use `HashCost::cheap()` so the suite
//! stays fast on two cores.

use super::auth::{self, HashCost};
use super::command::{Applied, Ident, MetadataCommand as C};
use super::io::SimDirIo;
use super::model::{MemberKey, Metadata, UserStatus};
use super::options::{Durability, TopicOptions, TopicOptionsUpdate};
use super::sim_test::random_command;
use super::store::{ExecuteError, MetadataStore};
use iggyd_storage::sim::SimRng;

pub(crate) fn id(value: u32) -> Ident {
    Ident::Id(value)
}

pub(crate) fn name(value: &str) -> Ident {
    Ident::from(value)
}

pub(crate) fn create_stream(metadata: &mut Metadata, stream: &str) -> u32 {
    match metadata
        .apply(C::CreateStream {
            name: stream.into(),
            created_at_us: 1,
        })
        .unwrap()
    {
        Applied::StreamCreated { stream_id } => stream_id,
        other => panic!("{other:?}"),
    }
}

pub(crate) fn topic_command(stream: Ident, topic: &str, partitions: u32, shards: u32) -> C {
    C::CreateTopic {
        stream,
        name: topic.into(),
        partitions_count: partitions,
        options: TopicOptions::defaults(Durability::Persisted),
        created_at_us: 2,
        shard_count: shards,
    }
}

pub(crate) fn create_topic(
    metadata: &mut Metadata,
    stream: u32,
    topic: &str,
    partitions: u32,
) -> u32 {
    match metadata
        .apply(topic_command(id(stream), topic, partitions, 3))
        .unwrap()
    {
        Applied::TopicCreated { topic_id, .. } => topic_id,
        other => panic!("{other:?}"),
    }
}

pub(crate) fn user_command(username: &str) -> C {
    C::CreateUser {
        username: username.into(),
        password_hash: auth::hash_password("password", HashCost::cheap()).unwrap(),
        status: UserStatus::Active,
        permissions: None,
        created_at_us: 3,
    }
}

pub(crate) fn code(result: Result<Applied, super::MetadataError>) -> u32 {
    result.unwrap_err().status().code()
}

// Proves streams, topics and users reuse the lowest free id, and names are
// unique in their scope (streams and users globally, topics per stream).
#[test]
fn id_reuse_and_name_uniqueness() {
    let mut metadata = Metadata::new();
    for stream in ["a", "b", "c"] {
        create_stream(&mut metadata, stream);
    }
    metadata.apply(C::DeleteStream { stream: id(1) }).unwrap();
    assert_eq!(create_stream(&mut metadata, "d"), 1);
    assert_eq!(create_stream(&mut metadata, "e"), 3);
    assert_eq!(
        code(metadata.apply(C::CreateStream {
            name: "a".into(),
            created_at_us: 0
        })),
        1012
    );
    assert_eq!(
        code(metadata.apply(C::UpdateStream {
            stream: name("d"),
            name: "a".into()
        })),
        1012
    );
    metadata
        .apply(C::UpdateStream {
            stream: name("d"),
            name: "d2".into(),
        })
        .unwrap();
    assert_eq!(metadata.stream(&name("d2")).unwrap().id, 1);
    assert_eq!(
        code(metadata.apply(C::DeleteStream { stream: name("d") })),
        1009
    );

    assert_eq!(create_topic(&mut metadata, 0, "t0", 1), 0);
    assert_eq!(create_topic(&mut metadata, 0, "t1", 1), 1);
    assert_eq!(create_topic(&mut metadata, 0, "t2", 1), 2);
    // Same topic name in another stream is fine.
    assert_eq!(create_topic(&mut metadata, 2, "t0", 1), 0);
    assert_eq!(code(metadata.apply(topic_command(id(0), "t1", 1, 3))), 2013);
    metadata
        .apply(C::DeleteTopic {
            stream: id(0),
            topic: name("t1"),
        })
        .unwrap();
    assert_eq!(create_topic(&mut metadata, 0, "t3", 1), 1);

    for username in ["root", "alice", "bob"] {
        metadata.apply(user_command(username)).unwrap();
    }
    metadata
        .apply(C::DeleteUser {
            user: name("alice"),
        })
        .unwrap();
    assert_eq!(
        metadata.apply(user_command("carol")).unwrap(),
        Applied::UserCreated { user_id: 1 }
    );
    assert_eq!(code(metadata.apply(user_command("bob"))), 46);
    assert_eq!(
        code(metadata.apply(C::UpdateUser {
            user: name("carol"),
            username: Some("bob".into()),
            status: None
        })),
        46
    );
    metadata.check_invariants().unwrap();
}

// Proves partitions spread evenly over shards across topics (3 shards;
// topics with 1, 2 and 5 partitions → per-shard counts differ by ≤ 1),
// owners never move on later creates, ids append and delete from the top.
#[test]
fn partition_owners_spread_and_stay() {
    let mut metadata = Metadata::new();
    let stream = create_stream(&mut metadata, "s");
    let one = create_topic(&mut metadata, stream, "one", 1);
    create_topic(&mut metadata, stream, "two", 2);
    create_topic(&mut metadata, stream, "five", 5);
    let counts = metadata.partitions_per_shard(3);
    assert_eq!(counts.iter().sum::<u64>(), 8);
    assert!(
        counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1,
        "{counts:?}"
    );
    let before: Vec<_> = (0..1)
        .map(|p| metadata.partition_owner(stream, one, p))
        .collect();

    let created = metadata
        .apply(C::CreatePartitions {
            stream: id(stream),
            topic: name("one"),
            count: 4,
            created_at_us: 9,
            shard_count: 3,
        })
        .unwrap();
    let Applied::PartitionsCreated { created, .. } = created else {
        panic!()
    };
    assert_eq!(
        created.iter().map(|p| p.partition_id).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(metadata.partition_owner(stream, one, 0), before[0]);
    let counts = metadata.partitions_per_shard(3);
    assert!(
        counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1,
        "{counts:?}"
    );

    let removed = metadata
        .apply(C::DeletePartitions {
            stream: id(stream),
            topic: id(one),
            count: 2,
        })
        .unwrap();
    let Applied::PartitionsDeleted { removed, .. } = removed else {
        panic!()
    };
    assert_eq!(
        removed.iter().map(|p| p.partition_id).collect::<Vec<_>>(),
        vec![3, 4]
    );
    assert_eq!(
        metadata
            .stream_by_id(stream)
            .unwrap()
            .topic_by_id(one)
            .unwrap()
            .partitions_count(),
        3
    );
    assert_eq!(metadata.partition_owner(stream, one, 3), None);

    // Deleting a stream reports every partition with its owner.
    let Applied::StreamDeleted { removed, .. } = metadata
        .apply(C::DeleteStream { stream: id(stream) })
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(removed.len(), 3 + 2 + 5);
}

// Proves group ids are per topic and never reused, names are unique per
// topic, joins are idempotent, leaves of non-members are 5006, and every
// membership or partition change rebalances fairly and bumps the
// generation; "member gone" removes a session from every group.
#[test]
fn consumer_groups_through_commands() {
    let mut metadata = Metadata::new();
    let stream = create_stream(&mut metadata, "s");
    let topic = create_topic(&mut metadata, stream, "t", 4);
    let group =
        |metadata: &mut Metadata, group: &str| match metadata.apply(C::CreateConsumerGroup {
            stream: id(stream),
            topic: id(topic),
            name: group.into(),
        }) {
            Ok(Applied::GroupCreated { group_id, .. }) => Ok(group_id),
            Ok(other) => panic!("{other:?}"),
            Err(error) => Err(error.status().code()),
        };
    assert_eq!(group(&mut metadata, "g0"), Ok(0));
    assert_eq!(group(&mut metadata, "g1"), Ok(1));
    assert_eq!(group(&mut metadata, "g0"), Err(5004));
    assert_eq!(group(&mut metadata, ""), Err(5005));
    metadata
        .apply(C::DeleteConsumerGroup {
            stream: id(stream),
            topic: id(topic),
            group: id(1),
        })
        .unwrap();
    assert_eq!(group(&mut metadata, "g2"), Ok(2), "ids are never reused");
    assert_eq!(
        code(metadata.apply(C::DeleteConsumerGroup {
            stream: id(stream),
            topic: id(topic),
            group: id(1),
        })),
        5000
    );

    let join = |metadata: &mut Metadata, group: u32, member: u128| {
        metadata.apply(C::JoinConsumerGroup {
            stream: id(stream),
            topic: id(topic),
            group: id(group),
            member: MemberKey(member),
        })
    };
    let view = |metadata: &Metadata, group: u32| {
        metadata
            .group(&id(stream), &id(topic), &id(group))
            .unwrap()
            .2
            .clone()
    };
    join(&mut metadata, 0, 10).unwrap();
    assert_eq!(
        view(&metadata, 0).assignment(MemberKey(10)),
        Some(&[0, 1, 2, 3][..])
    );
    join(&mut metadata, 0, 20).unwrap();
    join(&mut metadata, 2, 20).unwrap();
    // A join is cooperative: member 10 keeps serving what moves to 20.
    let g0 = view(&metadata, 0);
    assert_eq!(g0.generation, 2);
    assert_eq!(g0.assignment(MemberKey(10)), Some(&[0, 1, 2, 3][..]));
    assert_eq!(g0.assignment(MemberKey(20)), Some(&[][..]));
    assert_eq!(g0.pending_move(3), Some(MemberKey(20)));
    assert_eq!(g0.pending_move(2), Some(MemberKey(20)));
    metadata
        .apply(C::CompleteMoves {
            stream: id(stream),
            topic: id(topic),
            group: id(0),
            partitions: vec![3, 2, 0],
        })
        .unwrap();
    let g0 = view(&metadata, 0);
    assert_eq!(g0.generation, 3);
    assert_eq!(g0.assignment(MemberKey(10)), Some(&[0, 1][..]));
    assert_eq!(g0.assignment(MemberKey(20)), Some(&[2, 3][..]));
    assert!(g0.pending.is_empty());
    let again = join(&mut metadata, 0, 20).unwrap();
    assert!(matches!(again, Applied::GroupJoined { changed: false, .. }));
    assert_eq!(view(&metadata, 0).generation, 3);

    // Partition changes rebalance every group of the topic.
    metadata
        .apply(C::CreatePartitions {
            stream: id(stream),
            topic: id(topic),
            count: 1,
            created_at_us: 5,
            shard_count: 2,
        })
        .unwrap();
    let g0 = view(&metadata, 0);
    assert_eq!(g0.generation, 4);
    assert_eq!(g0.assignment(MemberKey(10)), Some(&[0, 2, 4][..]));
    metadata
        .apply(C::DeletePartitions {
            stream: id(stream),
            topic: id(topic),
            count: 3,
        })
        .unwrap();
    let g0 = view(&metadata, 0);
    assert_eq!(g0.generation, 5);
    assert_eq!(g0.assignment(MemberKey(10)), Some(&[0][..]));
    assert_eq!(g0.assignment(MemberKey(20)), Some(&[1][..]));

    // Member 20 disconnects: removed from both groups.
    let Applied::MembersRemoved { groups } = metadata
        .apply(C::MemberGone {
            member: MemberKey(20),
        })
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(groups.len(), 2);
    assert_eq!(
        view(&metadata, 0).assignment(MemberKey(10)),
        Some(&[0, 1][..])
    );
    assert!(view(&metadata, 2).members.is_empty());
    assert_eq!(
        code(metadata.apply(C::LeaveConsumerGroup {
            stream: id(stream),
            topic: id(topic),
            group: id(2),
            member: MemberKey(20),
        })),
        5006
    );
    metadata
        .apply(C::LeaveConsumerGroup {
            stream: id(stream),
            topic: id(topic),
            group: name("g0"),
            member: MemberKey(10),
        })
        .unwrap();
    assert!(view(&metadata, 0).members.is_empty());
    metadata.check_invariants().unwrap();
}

// Proves the remaining apply error codes: 1009, 1013, 2010, 2014, 2015,
// 2019, 3013-free paths, 1019, 20, 43, 48, 49, 50, 51, 52, 56, 5000, and
// that a rejected command leaves the state untouched.
#[test]
fn apply_error_codes() {
    let mut metadata = Metadata::new();
    let stream = create_stream(&mut metadata, "s");
    create_topic(&mut metadata, stream, "t", 2);
    metadata.apply(user_command("root")).unwrap();
    metadata.apply(user_command("user")).unwrap();
    let before = metadata.clone();

    assert_eq!(
        code(metadata.apply(C::CreateStream {
            name: String::new(),
            created_at_us: 0
        })),
        1013
    );
    assert_eq!(
        code(metadata.apply(C::CreateStream {
            name: "x".repeat(256),
            created_at_us: 0
        })),
        1013
    );
    assert_eq!(code(metadata.apply(topic_command(id(9), "t", 1, 1))), 1009);
    assert_eq!(
        code(metadata.apply(topic_command(name("nope"), "t", 1, 1))),
        1009
    );
    assert_eq!(
        code(metadata.apply(topic_command(id(stream), "", 1, 1))),
        2014
    );
    assert_eq!(
        code(metadata.apply(topic_command(id(stream), "u", 1001, 1))),
        2015
    );
    let mut small = TopicOptions::defaults(Durability::Persisted);
    small.max_topic_size_bytes = Some(1);
    assert_eq!(
        code(metadata.apply(C::CreateTopic {
            stream: id(stream),
            name: "u".into(),
            partitions_count: 1,
            options: small,
            created_at_us: 0,
            shard_count: 1,
        })),
        1019
    );
    assert_eq!(
        code(metadata.apply(C::UpdateTopic {
            stream: id(stream),
            topic: id(0),
            name: "t".into(),
            update: TopicOptionsUpdate {
                max_topic_size_bytes: Some(Some(1)),
                ..Default::default()
            },
        })),
        1019
    );
    assert_eq!(
        code(metadata.apply(C::DeleteTopic {
            stream: id(stream),
            topic: id(7)
        })),
        2010
    );
    for count in [0, 1001] {
        assert_eq!(
            code(metadata.apply(C::CreatePartitions {
                stream: id(stream),
                topic: id(0),
                count,
                created_at_us: 0,
                shard_count: 1,
            })),
            2015
        );
    }
    assert_eq!(
        code(metadata.apply(C::DeletePartitions {
            stream: id(stream),
            topic: id(0),
            count: 3
        })),
        2019
    );
    assert_eq!(
        code(metadata.apply(C::DeletePartitions {
            stream: id(stream),
            topic: id(0),
            count: 0
        })),
        2015
    );
    assert_eq!(
        code(metadata.apply(C::JoinConsumerGroup {
            stream: id(stream),
            topic: id(0),
            group: id(0),
            member: MemberKey(1),
        })),
        5000
    );

    assert_eq!(code(metadata.apply(user_command("ab"))), 43);
    assert_eq!(code(metadata.apply(user_command(&"x".repeat(51)))), 43);
    assert_eq!(code(metadata.apply(C::DeleteUser { user: id(9) })), 20);
    assert_eq!(code(metadata.apply(C::DeleteUser { user: id(0) })), 48);
    assert_eq!(
        code(metadata.apply(C::UpdatePermissions {
            user: id(0),
            permissions: None
        })),
        49
    );
    assert_eq!(
        code(metadata.apply(C::ChangePassword {
            user: name("ghost"),
            password_hash: String::new()
        })),
        20
    );

    let pat = |name: &str, hash: u8, expiry: Option<u64>| C::CreatePat {
        user_id: 1,
        name: name.into(),
        token_hash: [hash; 32],
        expiry_at_us: expiry,
        created_at_us: 100,
    };
    assert_eq!(code(metadata.apply(pat("ab", 1, None))), 50);
    assert_eq!(code(metadata.apply(pat(&"x".repeat(31), 1, None))), 50);
    assert_eq!(code(metadata.apply(pat("token", 1, Some(100)))), 56);
    assert_eq!(
        code(metadata.apply(C::DeletePat {
            user_id: 1,
            name: "none".into()
        })),
        20
    );
    assert_eq!(metadata, before, "rejected commands change nothing");

    metadata.apply(pat("token", 1, None)).unwrap();
    assert_eq!(code(metadata.apply(pat("token", 2, None))), 51);
    for index in 1..crate::limits::PATS_PER_USER_MAX {
        metadata
            .apply(pat(&format!("token-{index}"), index as u8 + 1, None))
            .unwrap();
    }
    assert_eq!(code(metadata.apply(pat("one-more", 250, None))), 52);
    metadata
        .apply(C::DeletePat {
            user_id: 1,
            name: "token".into(),
        })
        .unwrap();
    metadata.check_invariants().unwrap();
}

// Proves the login helpers: password login (inactive = 42), token login
// (unknown 53, expired 54, inactive owner 47), deleting a user drops its
// tokens.
#[test]
fn login_helpers() {
    let mut metadata = Metadata::new();
    metadata.apply(user_command("root")).unwrap();
    metadata.apply(user_command("alice")).unwrap();
    assert_eq!(metadata.verify_password("alice", "password"), Ok(1));
    assert_eq!(
        metadata
            .verify_password("alice", "wrong")
            .unwrap_err()
            .status()
            .code(),
        42
    );
    assert_eq!(
        metadata
            .verify_password("nobody", "password")
            .unwrap_err()
            .status()
            .code(),
        42
    );
    assert_eq!(
        metadata
            .verify_password("al", "password")
            .unwrap_err()
            .status()
            .code(),
        42
    );
    assert!(metadata.check_current_password(1, "password").is_ok());

    let raw = auth::generate_token().unwrap();
    metadata
        .apply(C::CreatePat {
            user_id: 1,
            name: "ci-token".into(),
            token_hash: auth::hash_token(&raw),
            expiry_at_us: Some(1_000),
            created_at_us: 10,
        })
        .unwrap();
    assert_eq!(metadata.verify_token(&raw, 999), Ok(1));
    assert_eq!(
        metadata
            .verify_token(&raw, 1_000)
            .unwrap_err()
            .status()
            .code(),
        54
    );
    assert_eq!(
        metadata
            .verify_token("nope", 0)
            .unwrap_err()
            .status()
            .code(),
        53
    );

    metadata
        .apply(C::UpdateUser {
            user: id(1),
            username: None,
            status: Some(UserStatus::Inactive),
        })
        .unwrap();
    assert_eq!(
        metadata
            .verify_password("alice", "password")
            .unwrap_err()
            .status()
            .code(),
        42
    );
    assert_eq!(
        metadata.verify_token(&raw, 0).unwrap_err().status().code(),
        47
    );

    metadata.apply(C::DeleteUser { user: id(1) }).unwrap();
    assert_eq!(
        metadata.verify_token(&raw, 0).unwrap_err().status().code(),
        53
    );
    metadata.check_invariants().unwrap();
}

// Proves replay equals live state: for several seeds, a random command
// sequence executed through the store (with snapshots every 7 commands)
// and recovered from the same files gives exactly the live state. Group
// memberships are reset at recovery, so the comparison applies the same
// reset to the live copy.
#[test]
fn replay_equals_live_state() {
    for seed in 1..=8u64 {
        let mut rng = SimRng::new(seed);
        let (mut store, _) = MetadataStore::open_with_interval(SimDirIo::new(seed), 7).unwrap();
        let mut accepted = 0;
        for step in 0..300 {
            match store.execute(random_command(&mut rng, step)) {
                Ok(_) => accepted += 1,
                Err(ExecuteError::Rejected(_)) => {}
                Err(ExecuteError::Fatal(error)) => panic!("seed {seed}: {error}"),
            }
        }
        assert!(
            accepted > 50,
            "seed {seed}: only {accepted} commands applied"
        );
        store.metadata().check_invariants().unwrap();
        let mut live = store.metadata().clone();
        live.apply(C::ResetMembers).unwrap();
        let io = store.into_io();
        let (recovered, report) = MetadataStore::open_with_interval(io, 7).unwrap();
        assert_eq!(report.torn_tail, None);
        let mut recovered_state = recovered.metadata().clone();
        if !report.members_reset {
            recovered_state.apply(C::ResetMembers).unwrap();
        }
        assert_eq!(
            recovered_state.streams().collect::<Vec<_>>(),
            live.streams().collect::<Vec<_>>(),
            "seed {seed}"
        );
        assert_eq!(
            recovered_state.users().collect::<Vec<_>>(),
            live.users().collect::<Vec<_>>()
        );
    }
}

// Proves the per-stream topic cap (2021) and that a full stream still
// reuses freed ids.
#[test]
fn too_many_topics() {
    let mut metadata = Metadata::new();
    let stream = create_stream(&mut metadata, "s");
    for index in 0..crate::limits::TOPICS_PER_STREAM_MAX {
        metadata
            .apply(topic_command(id(stream), &format!("t{index}"), 0, 1))
            .unwrap();
    }
    assert_eq!(
        code(metadata.apply(topic_command(id(stream), "extra", 0, 1))),
        2021
    );
    metadata
        .apply(C::DeleteTopic {
            stream: id(stream),
            topic: id(17),
        })
        .unwrap();
    assert!(matches!(
        metadata
            .apply(topic_command(id(stream), "extra", 0, 1))
            .unwrap(),
        Applied::TopicCreated { topic_id: 17, .. }
    ));
}

// Proves every error variant maps to the wire code of §2.8.
#[test]
fn error_wire_codes() {
    use super::MetadataError as E;
    let cases: Vec<(E, u32)> = vec![
        (E::StreamNotFound { stream: "1".into() }, 1009),
        (E::StreamNameAlreadyExists { name: "s".into() }, 1012),
        (E::InvalidStreamName { len: 0 }, 1013),
        (E::TooManyStreams { max: 1 }, 1020),
        (
            E::TopicNotFound {
                stream_id: 0,
                topic: "t".into(),
            },
            2010,
        ),
        (
            E::TopicNameAlreadyExists {
                stream_id: 0,
                name: "t".into(),
            },
            2013,
        ),
        (E::InvalidTopicName { len: 0 }, 2014),
        (
            E::TooManyPartitions {
                count: 0,
                min: 1,
                max: 1000,
            },
            2015,
        ),
        (
            E::InvalidPartitionsCount {
                requested: 2,
                existing: 1,
            },
            2019,
        ),
        (
            E::TooManyTopics {
                stream_id: 0,
                max: 1,
            },
            2021,
        ),
        (
            E::PartitionIdSpaceExhausted {
                existing: 1,
                requested: 1,
                max: 1,
            },
            3013,
        ),
        (
            E::InvalidTopicSize {
                max_topic_size: 1,
                segment_size: 2,
            },
            1019,
        ),
        (E::UnsupportedOptionKey { key: "k".into() }, 4041),
        (E::invalid_option("k", "v"), 4042),
        (E::UserNotFound, 20),
        (E::InvalidUsername { len: 1 }, 43),
        (E::InvalidPassword { len: 1 }, 44),
        (
            E::UserAlreadyExists {
                username: "u".into(),
            },
            46,
        ),
        (E::CannotDeleteUser, 48),
        (E::CannotChangePermissions, 49),
        (E::InvalidCredentials, 42),
        (E::InvalidPersonalAccessTokenName { len: 1 }, 50),
        (E::PersonalAccessTokenAlreadyExists { name: "p".into() }, 51),
        (
            E::PersonalAccessTokensLimitReached {
                user_id: 1,
                max: 100,
            },
            52,
        ),
        (E::PersonalAccessTokenNotFound { name: "p".into() }, 20),
        (E::InvalidPersonalAccessToken, 53),
        (
            E::PersonalAccessTokenExpired {
                user_id: 1,
                expiry_at_us: 1,
            },
            54,
        ),
        (
            E::InvalidPersonalAccessTokenExpiry {
                expiry_at_us: 1,
                now_us: 2,
            },
            56,
        ),
        (E::UserInactive { user_id: 1 }, 47),
        (E::ConsumerGroupNotFound { group: "g".into() }, 5000),
        (E::ConsumerGroupNameAlreadyExists { name: "g".into() }, 5004),
        (E::InvalidConsumerGroupName { len: 0 }, 5005),
        (E::ConsumerGroupMemberNotFound { group_id: 0 }, 5006),
        (E::ConsumerGroupIdsExhausted, 1),
        (
            E::ConsumerGroupFull {
                group_id: 0,
                max: 1,
            },
            1,
        ),
        (E::Unauthorized, 41),
    ];
    for (error, expected) in cases {
        assert_eq!(error.status().code(), expected, "{error:?}");
    }
}

// Proves a topic from the model encodes as a TopicHeader through the
// codec's reply types: compression code 1 (never 0), never/unlimited as
// u64::MAX, and the explicit/derived blocks split by what the client sent.
#[test]
fn topic_header_from_model() {
    use iggyd_wire::protocol::options::{OptionBlock, OptionEntry, ValueKind};
    use iggyd_wire::protocol::reply::{TopicInfo, encode_topic};
    let block = OptionBlock {
        entries: vec![OptionEntry {
            key: "durability",
            kind: ValueKind::String as u8,
            value: b"replicated",
        }],
    };
    let options = super::options::parse_create_options(&block, Durability::Persisted).unwrap();
    let (explicit, derived) = options.option_blocks();
    assert_eq!(explicit.len(), 1);
    assert_eq!(derived.len(), 8);
    let explicit = super::options::as_entries(&explicit);
    let derived = super::options::as_entries(&derived);
    let info = TopicInfo {
        id: 3,
        created_at_us: 9,
        partitions_count: 2,
        message_expiry: options.message_expiry_wire(),
        compression: options.compression.to_wire(),
        max_topic_size: options.max_topic_size_wire(),
        size_bytes: 0,
        messages_count: 0,
        name: "t",
        explicit_options: &explicit,
        derived_options: &derived,
    };
    let mut out = Vec::new();
    encode_topic(&mut out, &info);
    assert_eq!(out[24], 1);
    assert_eq!(&out[16..24], &u64::MAX.to_le_bytes());
    assert_eq!(&out[25..33], &u64::MAX.to_le_bytes());
    // Name at 49 ([len 1]["t"]), then the explicit block's [len u32] at 51.
    let explicit_len = u32::from_le_bytes(out[51..55].try_into().unwrap()) as usize;
    let reparsed = OptionBlock::decode(&out[55..55 + explicit_len], 0).unwrap();
    assert_eq!(reparsed.get("durability").unwrap().value, b"replicated");
}
