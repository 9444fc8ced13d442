//! The bridge between the daemon's decoded `Command` and the kit's
//! encoder: `request_of(command)` is the request a 0.11.0 client sends for
//! that command, built with `iggyd_testkit::wire::Request` (permissions are
//! encoded with the daemon's own `Permissions::encode`, the layout its
//! replies use). Round-trip tests (`codec`, `golden`) and the fuzz targets
//! in `daemon/fuzz/` (which include this file by path) decode, re-encode
//! through here and decode again.
//!
//! It only maps values; it holds no layout of its own and does no I/O.

use iggyd_testkit::wire::{
    Consumer, Identifier, OptionEntry, Partitioning, PollingStrategy, Request, Version,
};
use iggyd_wire::protocol::command::{Command, GroupRef, OffsetTarget, PasswordLogin, TokenLogin};
use iggyd_wire::protocol::options::OptionBlock;
use iggyd_wire::protocol::permissions::Permissions;
use iggyd_wire::protocol::primitives::{self, ConsumerKind};

fn identifier<'a>(identifier: &primitives::Identifier<'a>) -> Identifier<'a> {
    match *identifier {
        primitives::Identifier::Numeric(id) => Identifier::Numeric(id),
        primitives::Identifier::Name(name) => Identifier::Name(name),
    }
}

fn consumer<'a>(consumer: &primitives::Consumer<'a>) -> Consumer<'a> {
    match consumer.kind {
        ConsumerKind::Consumer => Consumer::Single(identifier(&consumer.id)),
        ConsumerKind::ConsumerGroup => Consumer::Group(identifier(&consumer.id)),
    }
}

fn options(block: &OptionBlock<'_>) -> Vec<OptionEntry> {
    block
        .entries
        .iter()
        .map(|entry| OptionEntry::raw(entry.key, entry.kind, entry.value))
        .collect()
}

fn permissions(permissions: Option<&Permissions>) -> Option<Vec<u8>> {
    permissions.map(|permissions| {
        let mut bytes = Vec::new();
        permissions.encode(&mut bytes);
        bytes
    })
}

fn strategy(strategy: primitives::PollingStrategy) -> PollingStrategy {
    match strategy {
        primitives::PollingStrategy::Offset(offset) => PollingStrategy::offset(offset),
        primitives::PollingStrategy::Timestamp(micros) => PollingStrategy::timestamp(micros),
        primitives::PollingStrategy::First => PollingStrategy::FIRST,
        primitives::PollingStrategy::Last => PollingStrategy::LAST,
        primitives::PollingStrategy::Next => PollingStrategy::NEXT,
    }
}

fn partitioning<'a>(partitioning: &primitives::Partitioning<'a>) -> Partitioning<'a> {
    match *partitioning {
        primitives::Partitioning::Balanced => Partitioning::Balanced,
        primitives::Partitioning::PartitionId(id) => Partitioning::PartitionId(id),
        primitives::Partitioning::MessagesKey(key) => Partitioning::MessagesKey(key),
    }
}

/// `(stream, topic)` of a command, for the many that address a topic.
fn pair<'a>(
    stream: &primitives::Identifier<'a>,
    topic: &primitives::Identifier<'a>,
) -> (Identifier<'a>, Identifier<'a>) {
    (identifier(stream), identifier(topic))
}

fn group<'a>(group: &GroupRef<'a>) -> (Identifier<'a>, Identifier<'a>, Identifier<'a>) {
    (
        identifier(&group.stream),
        identifier(&group.topic),
        identifier(&group.group),
    )
}

fn target<'a>(
    target: &OffsetTarget<'a>,
) -> (Consumer<'a>, Identifier<'a>, Identifier<'a>, Option<u32>) {
    (
        consumer(&target.consumer),
        identifier(&target.stream),
        identifier(&target.topic),
        target.partition_id,
    )
}

/// The request a 0.11.0 client sends for `command`. A Register that parsed
/// both ways is sent as the password login.
pub fn request_of(command: &Command<'_>) -> Request {
    match command {
        Command::Ping => Request::ping(),
        Command::GetStats => Request::get_stats(),
        Command::GetSnapshot { compression, types } => Request::get_snapshot(*compression, types),
        Command::GetClusterMetadata => Request::get_cluster_metadata(),
        Command::DescribeOptions { scope } => Request::describe_options(*scope as u8),
        Command::GetMe => Request::get_me(),
        Command::GetClient { client_id } => Request::get_client(*client_id),
        Command::GetClients => Request::get_clients(),
        Command::ClusterRouting { code } => Request::cluster_routing(*code as u32),
        Command::AttachConsumerSession {
            client,
            session,
            watermark,
        } => Request::attach_consumer_session(*client, *session, *watermark),
        Command::Register(register) => {
            let version = Version {
                protocol_version: register.version.protocol_version,
                sdk_name: register.version.sdk_name,
                sdk_version: register.version.sdk_version,
            };
            match (register.password, register.token) {
                (
                    Some(PasswordLogin {
                        username,
                        password,
                        context,
                    }),
                    _,
                ) => Request::login_password(version, username, password, context),
                (None, Some(TokenLogin { token, context })) => {
                    Request::login_token(version, token, context)
                }
                (None, None) => panic!("a decoded Register carries credentials"),
            }
        }
        Command::Logout => Request::logout(),
        Command::GetUser { user } => Request::get_user(identifier(user)),
        Command::GetUsers => Request::get_users(),
        Command::CreateUser {
            username,
            password,
            status,
            permissions: granted,
            options: block,
        } => Request::create_user(
            username,
            password,
            *status as u8,
            permissions(granted.as_ref()).as_deref(),
            &options(block),
        ),
        Command::DeleteUser { user } => Request::delete_user(identifier(user)),
        Command::UpdateUser {
            user,
            username,
            status,
            options: block,
        } => Request::update_user(
            identifier(user),
            *username,
            status.map(|status| status as u8),
            &options(block),
        ),
        Command::UpdatePermissions {
            user,
            permissions: granted,
        } => {
            Request::update_permissions(identifier(user), permissions(granted.as_ref()).as_deref())
        }
        Command::ChangePassword {
            user,
            current_password,
            new_password,
        } => Request::change_password(identifier(user), current_password, new_password),
        Command::GetPersonalAccessTokens => Request::get_personal_access_tokens(),
        Command::CreatePersonalAccessToken { name, expiry } => {
            Request::create_personal_access_token(name, *expiry)
        }
        Command::DeletePersonalAccessToken { name } => Request::delete_personal_access_token(name),
        Command::PollMessages(poll) => Request::poll_messages(
            consumer(&poll.consumer),
            identifier(&poll.stream),
            identifier(&poll.topic),
            poll.partition_id,
            strategy(poll.strategy),
            poll.count,
            poll.auto_commit,
        ),
        Command::SendMessages(send) => Request::send_messages(
            identifier(&send.stream),
            identifier(&send.topic),
            partitioning(&send.partitioning),
            send.messages_count,
            send.batch,
        ),
        Command::FlushUnsavedBuffer {
            stream,
            topic,
            partition_id,
            fsync,
        } => {
            let (stream, topic) = pair(stream, topic);
            Request::flush_unsaved_buffer(stream, topic, *partition_id, *fsync)
        }
        Command::GetConsumerOffset(offset_target) => {
            let (consumer, stream, topic, partition) = target(offset_target);
            Request::get_consumer_offset(consumer, stream, topic, partition)
        }
        Command::StoreConsumerOffset {
            target: offset_target,
            offset,
            ack,
        } => {
            let (consumer, stream, topic, partition) = target(offset_target);
            Request::store_consumer_offset(consumer, stream, topic, partition, *offset, *ack as u8)
        }
        Command::DeleteConsumerOffset {
            target: offset_target,
            ack,
        } => {
            let (consumer, stream, topic, partition) = target(offset_target);
            Request::delete_consumer_offset(consumer, stream, topic, partition, *ack as u8)
        }
        Command::GetStream { stream } => Request::get_stream(identifier(stream)),
        Command::GetStreams => Request::get_streams(),
        Command::CreateStream {
            name,
            options: block,
        } => Request::create_stream(name, &options(block)),
        Command::DeleteStream { stream } => Request::delete_stream(identifier(stream)),
        Command::UpdateStream {
            stream,
            name,
            options: block,
        } => Request::update_stream(identifier(stream), name, &options(block)),
        Command::PurgeStream { stream } => Request::purge_stream(identifier(stream)),
        Command::GetTopic { stream, topic } => {
            let (stream, topic) = pair(stream, topic);
            Request::get_topic(stream, topic)
        }
        Command::GetTopics { stream } => Request::get_topics(identifier(stream)),
        Command::CreateTopic {
            stream,
            partitions_count,
            name,
            options: block,
        } => Request::create_topic(identifier(stream), *partitions_count, name, &options(block)),
        Command::DeleteTopic { stream, topic } => {
            let (stream, topic) = pair(stream, topic);
            Request::delete_topic(stream, topic)
        }
        Command::UpdateTopic {
            stream,
            topic,
            name,
            options: block,
        } => {
            let (stream, topic) = pair(stream, topic);
            Request::update_topic(stream, topic, name, &options(block))
        }
        Command::PurgeTopic { stream, topic } => {
            let (stream, topic) = pair(stream, topic);
            Request::purge_topic(stream, topic)
        }
        Command::CreatePartitions {
            stream,
            topic,
            count,
        } => {
            let (stream, topic) = pair(stream, topic);
            Request::create_partitions(stream, topic, *count)
        }
        Command::DeletePartitions {
            stream,
            topic,
            count,
        } => {
            let (stream, topic) = pair(stream, topic);
            Request::delete_partitions(stream, topic, *count)
        }
        Command::DeleteSegments {
            stream,
            topic,
            partition_id,
            segments_count,
        } => {
            let (stream, topic) = pair(stream, topic);
            Request::delete_segments(stream, topic, *partition_id, *segments_count)
        }
        Command::GetConsumerGroup(reference) => {
            let (stream, topic, group) = group(reference);
            Request::get_consumer_group(stream, topic, group)
        }
        Command::GetConsumerGroups { stream, topic } => {
            let (stream, topic) = pair(stream, topic);
            Request::get_consumer_groups(stream, topic)
        }
        Command::CreateConsumerGroup {
            stream,
            topic,
            name,
        } => {
            let (stream, topic) = pair(stream, topic);
            Request::create_consumer_group(stream, topic, name)
        }
        Command::DeleteConsumerGroup(reference) => {
            let (stream, topic, group) = group(reference);
            Request::delete_consumer_group(stream, topic, group)
        }
        Command::JoinConsumerGroup(reference) => {
            let (stream, topic, group) = group(reference);
            Request::join_consumer_group(stream, topic, group)
        }
        Command::LeaveConsumerGroup(reference) => {
            let (stream, topic, group) = group(reference);
            Request::leave_consumer_group(stream, topic, group)
        }
        Command::SyncConsumerGroup(reference) => {
            let (stream, topic, group) = group(reference);
            Request::sync_consumer_group(stream, topic, group)
        }
    }
}
