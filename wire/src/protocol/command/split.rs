//! Splitting a decoded request into a send and every other request.
//!
//! A server takes sends down a path of their own (the frame's buffer moves
//! to the partition's owner, so the batch is never copied) and dispatches
//! the rest; [`NotSend`] is what it dispatches, a `Command` whose
//! `SendMessages` variant holds `Infallible`: it cannot be built, so a
//! `match` on it has no arm for sends and none can be forgotten. This file
//! only moves values from one type to the other; it decodes nothing.

use super::{Command, SendMessages};
use std::convert::Infallible;

/// Every request but a send.
pub type NotSend<'a> = Command<'a, Infallible>;

/// A decoded request as a server routes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Split<'a> {
    /// SendMessages (101), to be taken down the send path.
    Send(SendMessages<'a>),
    /// Any other request, to be dispatched.
    NotSend(NotSend<'a>),
}

impl<'a> Command<'a> {
    /// This request as a send or as one that cannot be a send; the same
    /// variant with the same fields either way.
    pub fn split(self) -> Split<'a> {
        use Command as C;
        let not_send = match self {
            C::SendMessages(send) => return Split::Send(send),
            C::Ping => C::Ping,
            C::GetStats => C::GetStats,
            C::GetSnapshot { compression, types } => C::GetSnapshot { compression, types },
            C::GetClusterMetadata => C::GetClusterMetadata,
            C::DescribeOptions { scope } => C::DescribeOptions { scope },
            C::GetMe => C::GetMe,
            C::GetClient { client_id } => C::GetClient { client_id },
            C::GetClients => C::GetClients,
            C::ClusterRouting { code } => C::ClusterRouting { code },
            C::AttachConsumerSession {
                client,
                session,
                watermark,
            } => C::AttachConsumerSession {
                client,
                session,
                watermark,
            },
            C::Register(value) => C::Register(value),
            C::Logout => C::Logout,
            C::GetUser { user } => C::GetUser { user },
            C::GetUsers => C::GetUsers,
            C::CreateUser {
                username,
                password,
                status,
                permissions,
                options,
            } => C::CreateUser {
                username,
                password,
                status,
                permissions,
                options,
            },
            C::DeleteUser { user } => C::DeleteUser { user },
            C::UpdateUser {
                user,
                username,
                status,
                options,
            } => C::UpdateUser {
                user,
                username,
                status,
                options,
            },
            C::UpdatePermissions { user, permissions } => {
                C::UpdatePermissions { user, permissions }
            }
            C::ChangePassword {
                user,
                current_password,
                new_password,
            } => C::ChangePassword {
                user,
                current_password,
                new_password,
            },
            C::GetPersonalAccessTokens => C::GetPersonalAccessTokens,
            C::CreatePersonalAccessToken { name, expiry } => {
                C::CreatePersonalAccessToken { name, expiry }
            }
            C::DeletePersonalAccessToken { name } => C::DeletePersonalAccessToken { name },
            C::PollMessages(value) => C::PollMessages(value),
            C::FlushUnsavedBuffer {
                stream,
                topic,
                partition_id,
                fsync,
            } => C::FlushUnsavedBuffer {
                stream,
                topic,
                partition_id,
                fsync,
            },
            C::GetConsumerOffset(value) => C::GetConsumerOffset(value),
            C::StoreConsumerOffset {
                target,
                offset,
                ack,
            } => C::StoreConsumerOffset {
                target,
                offset,
                ack,
            },
            C::DeleteConsumerOffset { target, ack } => C::DeleteConsumerOffset { target, ack },
            C::GetStream { stream } => C::GetStream { stream },
            C::GetStreams => C::GetStreams,
            C::CreateStream { name, options } => C::CreateStream { name, options },
            C::DeleteStream { stream } => C::DeleteStream { stream },
            C::UpdateStream {
                stream,
                name,
                options,
            } => C::UpdateStream {
                stream,
                name,
                options,
            },
            C::PurgeStream { stream } => C::PurgeStream { stream },
            C::GetTopic { stream, topic } => C::GetTopic { stream, topic },
            C::GetTopics { stream } => C::GetTopics { stream },
            C::CreateTopic {
                stream,
                partitions_count,
                name,
                options,
            } => C::CreateTopic {
                stream,
                partitions_count,
                name,
                options,
            },
            C::DeleteTopic { stream, topic } => C::DeleteTopic { stream, topic },
            C::UpdateTopic {
                stream,
                topic,
                name,
                options,
            } => C::UpdateTopic {
                stream,
                topic,
                name,
                options,
            },
            C::PurgeTopic { stream, topic } => C::PurgeTopic { stream, topic },
            C::CreatePartitions {
                stream,
                topic,
                count,
            } => C::CreatePartitions {
                stream,
                topic,
                count,
            },
            C::DeletePartitions {
                stream,
                topic,
                count,
            } => C::DeletePartitions {
                stream,
                topic,
                count,
            },
            C::DeleteSegments {
                stream,
                topic,
                partition_id,
                segments_count,
            } => C::DeleteSegments {
                stream,
                topic,
                partition_id,
                segments_count,
            },
            C::GetConsumerGroup(value) => C::GetConsumerGroup(value),
            C::GetConsumerGroups { stream, topic } => C::GetConsumerGroups { stream, topic },
            C::CreateConsumerGroup {
                stream,
                topic,
                name,
            } => C::CreateConsumerGroup {
                stream,
                topic,
                name,
            },
            C::DeleteConsumerGroup(value) => C::DeleteConsumerGroup(value),
            C::JoinConsumerGroup(value) => C::JoinConsumerGroup(value),
            C::LeaveConsumerGroup(value) => C::LeaveConsumerGroup(value),
            C::SyncConsumerGroup(value) => C::SyncConsumerGroup(value),
        };
        Split::NotSend(not_send)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codes::{CommandCode, Operation};
    use crate::protocol::header::RequestHeader;
    use crate::protocol::primitives::{Identifier, Partitioning};

    // Proves a split keeps the request: a send comes out as the send it
    // was, and every other request (a decoded ping, a built delete) as the
    // same variant with the same fields.
    #[test]
    fn split_keeps_the_request() {
        let batch = [0_u8; 4];
        let send = SendMessages {
            stream: Identifier::Numeric(1),
            topic: Identifier::Numeric(2),
            partitioning: Partitioning::Balanced,
            messages_count: 1,
            batch: &batch,
        };
        assert_eq!(Command::SendMessages(send).split(), Split::Send(send));

        let header = RequestHeader::client_request(Operation::NonReplicated as u8, 1, 0);
        let ping = Command::decode(&header, &[]).unwrap();
        assert_eq!(ping.code(), CommandCode::Ping);
        assert_eq!(ping.split(), Split::NotSend(Command::Ping));

        let delete = Command::DeleteStream {
            stream: Identifier::Numeric(7),
        };
        assert_eq!(
            delete.split(),
            Split::NotSend(Command::DeleteStream {
                stream: Identifier::Numeric(7),
            })
        );
    }
}
