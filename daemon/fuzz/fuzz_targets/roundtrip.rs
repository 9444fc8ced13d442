//! Fuzz target `roundtrip`: structured inputs. The fuzzer's bytes drive an
//! `arbitrary::Unstructured` that builds a *valid* request of any kind (names
//! 1..=255 bytes, unique option keys and permission ids, partition counts in
//! range, a real message batch), the test kit's SDK-layout encoder
//! (`iggyd_testkit::wire`, through the e2e tests' `request_of`) turns it into
//! a frame, and the frame goes through the connection's decode path
//! (`decode_frame`, checksum check, `Command::decode`).
//!
//! Property: decode(encode(command)) == command, the whole frame is used,
//! and the operation byte matches. For Register, where a body may parse as
//! both credential shapes, the shape that was encoded must come back intact.

#![no_main]

use arbitrary::{Result, Unstructured};
use iggyd_wire::batch::{MessageSpec, encode_producer_batch};
use iggyd_wire::protocol::codes::CommandCode;
use iggyd_wire::protocol::command::{
    GroupRef, OffsetTarget, OptionScope, PasswordLogin, PollMessages, Register, SendMessages,
    TokenLogin,
};
use iggyd_wire::protocol::options::{OptionBlock, OptionEntry};
use iggyd_wire::protocol::permissions::{
    GlobalPermissions, Permissions, StreamPermissions, TopicPermissions,
};
use iggyd_wire::protocol::primitives::{
    AckLevel, ClientVersionInfo, Consumer, ConsumerKind, Identifier, Partitioning, PollingStrategy,
    UserStatus,
};
use iggyd_wire::protocol::{Command, decode_frame};
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/e2e/request_of.rs"]
mod request_of;

/// A UTF-8 string of at most `max` bytes, cut on a character boundary.
fn text<'a>(u: &mut Unstructured<'a>, max: usize) -> Result<&'a str> {
    let text: &str = u.arbitrary()?;
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Ok(&text[..end])
}

/// A wire name: 1..=255 bytes.
fn name<'a>(u: &mut Unstructured<'a>) -> Result<&'a str> {
    let name = text(u, 255)?;
    Ok(if name.is_empty() { "n" } else { name })
}

fn bytes<'a>(u: &mut Unstructured<'a>, min: usize, max: usize) -> Result<&'a [u8]> {
    let len = u.int_in_range(min..=max)?;
    u.bytes(len)
}

fn identifier<'a>(u: &mut Unstructured<'a>) -> Result<Identifier<'a>> {
    Ok(if u.arbitrary()? {
        Identifier::Numeric(u.arbitrary()?)
    } else {
        Identifier::Name(name(u)?)
    })
}

fn group<'a>(u: &mut Unstructured<'a>) -> Result<GroupRef<'a>> {
    Ok(GroupRef {
        stream: identifier(u)?,
        topic: identifier(u)?,
        group: identifier(u)?,
    })
}

fn consumer<'a>(u: &mut Unstructured<'a>) -> Result<Consumer<'a>> {
    Ok(Consumer {
        kind: if u.arbitrary()? {
            ConsumerKind::Consumer
        } else {
            ConsumerKind::ConsumerGroup
        },
        id: identifier(u)?,
    })
}

fn target<'a>(u: &mut Unstructured<'a>) -> Result<OffsetTarget<'a>> {
    Ok(OffsetTarget {
        consumer: consumer(u)?,
        stream: identifier(u)?,
        topic: identifier(u)?,
        partition_id: u.arbitrary()?,
    })
}

/// Up to 8 entries with distinct String keys; values 1..=255 bytes of a
/// non-zero kind.
fn options<'a>(u: &mut Unstructured<'a>) -> Result<OptionBlock<'a>> {
    let mut entries: Vec<OptionEntry<'a>> = Vec::new();
    for _ in 0..u.int_in_range(0..=8)? {
        let key = name(u)?;
        if entries.iter().any(|entry| entry.key == key) {
            continue;
        }
        entries.push(OptionEntry {
            key,
            kind: u.int_in_range(1..=15)?,
            value: bytes(u, 1, 255)?,
        });
    }
    Ok(OptionBlock { entries })
}

fn permissions(u: &mut Unstructured<'_>) -> Result<Option<Permissions>> {
    if !u.arbitrary()? {
        return Ok(None);
    }
    let global = GlobalPermissions {
        manage_servers: u.arbitrary()?,
        read_servers: u.arbitrary()?,
        manage_users: u.arbitrary()?,
        read_users: u.arbitrary()?,
        manage_streams: u.arbitrary()?,
        read_streams: u.arbitrary()?,
        manage_topics: u.arbitrary()?,
        read_topics: u.arbitrary()?,
        poll_messages: u.arbitrary()?,
        send_messages: u.arbitrary()?,
    };
    let mut streams: Vec<StreamPermissions> = Vec::new();
    for _ in 0..u.int_in_range(0..=4)? {
        let stream_id = u.arbitrary()?;
        if streams.iter().any(|stream| stream.stream_id == stream_id) {
            continue;
        }
        let mut topics: Vec<TopicPermissions> = Vec::new();
        for _ in 0..u.int_in_range(0..=4)? {
            let topic_id = u.arbitrary()?;
            if topics.iter().any(|topic| topic.topic_id == topic_id) {
                continue;
            }
            topics.push(TopicPermissions {
                topic_id,
                manage_topic: u.arbitrary()?,
                read_topic: u.arbitrary()?,
                poll_messages: u.arbitrary()?,
                send_messages: u.arbitrary()?,
            });
        }
        streams.push(StreamPermissions {
            stream_id,
            manage_stream: u.arbitrary()?,
            read_stream: u.arbitrary()?,
            manage_topics: u.arbitrary()?,
            read_topics: u.arbitrary()?,
            poll_messages: u.arbitrary()?,
            send_messages: u.arbitrary()?,
            topics,
        });
    }
    Ok(Some(Permissions { global, streams }))
}

fn status(u: &mut Unstructured<'_>) -> Result<UserStatus> {
    Ok(if u.arbitrary()? {
        UserStatus::Active
    } else {
        UserStatus::Inactive
    })
}

fn ack(u: &mut Unstructured<'_>) -> Result<AckLevel> {
    Ok(if u.arbitrary()? {
        AckLevel::Quorum
    } else {
        AckLevel::NoAck
    })
}

/// A producer batch of 1..=8 messages built with the real batch encoder.
fn batch(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let mut messages = Vec::new();
    for index in 0..u.int_in_range(1..=8u32)? {
        messages.push(MessageSpec {
            id: u.arbitrary()?,
            timestamp_delta: index,
            payload: bytes(u, 1, 64)?.to_vec(),
            user_headers: bytes(u, 0, 32)?.to_vec(),
        });
    }
    Ok(encode_producer_batch(u.arbitrary()?, &messages))
}

fn register<'a>(u: &mut Unstructured<'a>) -> Result<Register<'a>> {
    let version = ClientVersionInfo {
        protocol_version: 0x2C00 | u.int_in_range(0..=0x3FF)?,
        sdk_name: name(u)?,
        sdk_version: name(u)?,
    };
    let context = bytes(u, 0, 64)?;
    Ok(if u.arbitrary()? {
        Register {
            version,
            password: Some(PasswordLogin {
                username: name(u)?,
                password: text(u, 255)?,
                context,
            }),
            token: None,
        }
    } else {
        Register {
            version,
            password: None,
            token: Some(TokenLogin {
                token: name(u)?,
                context,
            }),
        }
    })
}

/// Snapshot type bytes (1..=6 or 100), owned because they are mapped from
/// input bytes rather than borrowed.
fn snapshot_types(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let mut types = Vec::new();
    for _ in 0..u.int_in_range(0..=16)? {
        types.push(*u.choose(&[1u8, 2, 3, 4, 5, 6, 100])?);
    }
    Ok(types)
}

fn command<'a>(u: &mut Unstructured<'a>, batch: &'a [u8], types: &'a [u8]) -> Result<Command<'a>> {
    let s = identifier;
    Ok(match u.int_in_range(0..=50u8)? {
        0 => Command::Ping,
        1 => Command::GetStats,
        2 => Command::GetSnapshot {
            compression: u.int_in_range(1..=6)?,
            types,
        },
        3 => Command::GetClusterMetadata,
        4 => Command::DescribeOptions {
            scope: *u.choose(&[OptionScope::Topic, OptionScope::Stream, OptionScope::User])?,
        },
        5 => Command::GetMe,
        6 => Command::GetClient {
            client_id: u.arbitrary()?,
        },
        7 => Command::GetClients,
        // 14 has a body of its own and 104 is a poll's: only 103 and 123
        // travel undecoded.
        8 if u.arbitrary()? => Command::AttachConsumerSession {
            client: u.arbitrary()?,
            session: u.arbitrary()?,
            watermark: u.arbitrary()?,
        },
        8 => Command::ClusterRouting {
            code: *u.choose(&[
                CommandCode::GetPollRouting,
                CommandCode::GetConsumerOffsetRouting,
            ])?,
        },
        9 => Command::Register(register(u)?),
        10 => Command::Logout,
        11 => Command::GetUser { user: s(u)? },
        12 => Command::GetUsers,
        13 => Command::CreateUser {
            username: name(u)?,
            password: text(u, 255)?,
            status: status(u)?,
            permissions: permissions(u)?,
            options: options(u)?,
        },
        14 => Command::DeleteUser { user: s(u)? },
        15 => Command::UpdateUser {
            user: s(u)?,
            username: if u.arbitrary()? { Some(name(u)?) } else { None },
            status: if u.arbitrary()? {
                Some(status(u)?)
            } else {
                None
            },
            options: options(u)?,
        },
        16 => Command::UpdatePermissions {
            user: s(u)?,
            permissions: permissions(u)?,
        },
        17 => Command::ChangePassword {
            user: s(u)?,
            current_password: text(u, 255)?,
            new_password: text(u, 255)?,
        },
        18 => Command::GetPersonalAccessTokens,
        19 => Command::CreatePersonalAccessToken {
            name: name(u)?,
            expiry: u.arbitrary()?,
        },
        20 => Command::DeletePersonalAccessToken { name: name(u)? },
        21 => Command::PollMessages(PollMessages {
            consumer: consumer(u)?,
            stream: s(u)?,
            topic: s(u)?,
            partition_id: u.arbitrary()?,
            strategy: match u.int_in_range(0..=4u8)? {
                0 => PollingStrategy::Offset(u.arbitrary()?),
                1 => PollingStrategy::Timestamp(u.arbitrary()?),
                2 => PollingStrategy::First,
                3 => PollingStrategy::Last,
                _ => PollingStrategy::Next,
            },
            count: u.arbitrary()?,
            auto_commit: u.arbitrary()?,
        }),
        22 => Command::SendMessages(SendMessages {
            stream: s(u)?,
            topic: s(u)?,
            partitioning: match u.int_in_range(0..=2u8)? {
                0 => Partitioning::Balanced,
                1 => Partitioning::PartitionId(u.arbitrary()?),
                _ => Partitioning::MessagesKey(bytes(u, 1, 255)?),
            },
            messages_count: u.int_in_range(1..=u32::MAX)?,
            batch,
        }),
        23 => Command::FlushUnsavedBuffer {
            stream: s(u)?,
            topic: s(u)?,
            partition_id: u.arbitrary()?,
            fsync: u.arbitrary()?,
        },
        24 => Command::GetConsumerOffset(target(u)?),
        25 => Command::StoreConsumerOffset {
            target: target(u)?,
            offset: u.arbitrary()?,
            ack: ack(u)?,
        },
        26 => Command::DeleteConsumerOffset {
            target: target(u)?,
            ack: ack(u)?,
        },
        27 => Command::GetStream { stream: s(u)? },
        28 => Command::GetStreams,
        29 => Command::CreateStream {
            name: name(u)?,
            options: options(u)?,
        },
        30 => Command::DeleteStream { stream: s(u)? },
        31 => Command::UpdateStream {
            stream: s(u)?,
            name: name(u)?,
            options: options(u)?,
        },
        32 => Command::PurgeStream { stream: s(u)? },
        33 => Command::GetTopic {
            stream: s(u)?,
            topic: s(u)?,
        },
        34 => Command::GetTopics { stream: s(u)? },
        35 => Command::CreateTopic {
            stream: s(u)?,
            partitions_count: u.int_in_range(0..=1000)?,
            name: name(u)?,
            options: options(u)?,
        },
        36 => Command::DeleteTopic {
            stream: s(u)?,
            topic: s(u)?,
        },
        37 => Command::UpdateTopic {
            stream: s(u)?,
            topic: s(u)?,
            name: name(u)?,
            options: options(u)?,
        },
        38 => Command::PurgeTopic {
            stream: s(u)?,
            topic: s(u)?,
        },
        39 => Command::CreatePartitions {
            stream: s(u)?,
            topic: s(u)?,
            count: u.int_in_range(1..=1000)?,
        },
        40 => Command::DeletePartitions {
            stream: s(u)?,
            topic: s(u)?,
            count: u.arbitrary()?,
        },
        41 => Command::DeleteSegments {
            stream: s(u)?,
            topic: s(u)?,
            partition_id: u.arbitrary()?,
            segments_count: u.arbitrary()?,
        },
        42 => Command::GetConsumerGroup(group(u)?),
        43 => Command::GetConsumerGroups {
            stream: s(u)?,
            topic: s(u)?,
        },
        44 => Command::CreateConsumerGroup {
            stream: s(u)?,
            topic: s(u)?,
            name: name(u)?,
        },
        45 => Command::DeleteConsumerGroup(group(u)?),
        46 => Command::JoinConsumerGroup(group(u)?),
        47 => Command::LeaveConsumerGroup(group(u)?),
        _ => Command::SyncConsumerGroup(group(u)?),
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(batch) = batch(&mut u) else { return };
    let Ok(types) = snapshot_types(&mut u) else {
        return;
    };
    let Ok(command) = command(&mut u, &batch, &types) else {
        return;
    };
    let request = request_of::request_of(&command);
    let header = request.header(0x5EED, 1, 1);
    let frame_bytes = header.frame(&request.body);
    let (frame, used) = decode_frame(&frame_bytes)
        .expect("an encoded request frames")
        .expect("an encoded request is complete");
    assert_eq!(used, frame_bytes.len());
    assert_eq!(frame.header.encode(), header.encode());
    let decoded = frame.command().unwrap_or_else(|error| {
        panic!("{command:?} does not decode: {error}");
    });
    assert_eq!(decoded.operation() as u8, header.operation);
    match (&command, &decoded) {
        (Command::Register(sent), Command::Register(received)) => {
            assert_eq!(sent.version, received.version);
            if sent.password.is_some() {
                assert_eq!(sent.password, received.password);
            } else {
                assert_eq!(sent.token, received.token);
            }
        }
        _ => assert_eq!(decoded, command),
    }
});
