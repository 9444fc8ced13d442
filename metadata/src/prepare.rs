//! `prepare`: turns a decoded protocol request into a [`MetadataCommand`]
//! on shard 0, resolving everything non-deterministic first — the clock,
//! password hashes, token generation — and parsing option blocks with the
//! server's defaults, so that the command can be journaled and replayed.
//!
//! Must not: check permissions (the handler does, with
//! `permissions::Principal` and ids resolved from its view, before
//! forwarding to shard 0), apply anything, or touch sessions. Requests
//! that are not metadata changes come back as `Prepared::NotMetadata`.
//! Disconnects and logouts are not requests here: the session layer
//! sends `MetadataCommand::MemberGone` itself.

use super::auth::{self, CredentialError, HashCost};
use super::command::{Ident, MetadataCommand};
use super::error::MetadataError;
use super::model::{MemberKey, Metadata, UserStatus};
use super::options::{self, Durability};
use iggyd_wire::protocol::command::{Command, NotSend};

/// What the caller knows about the request and the server.
#[derive(Debug, Clone, Copy)]
pub struct PrepareContext {
    /// Wall clock, µs since the epoch.
    pub now_us: u64,
    /// The logged-in user sending the request.
    pub user_id: u32,
    /// The session, as a consumer-group member.
    pub member: MemberKey,
    /// Shards to place new partitions on.
    pub shard_count: u32,
    /// Durability of topics that do not say (`persisted` in iggyd's config).
    pub default_durability: Durability,
    pub hash_cost: HashCost,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    Command(MetadataCommand),
    /// CreatePersonalAccessToken: the command stores only the hash; the raw
    /// token goes into the reply once and is never kept.
    CommandWithToken {
        command: MetadataCommand,
        raw_token: String,
    },
    NotMetadata,
}

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// Answer the client with `status()`.
    #[error(transparent)]
    Rejected(#[from] MetadataError),
    /// The random source or the hasher failed: a server fault (status 1).
    #[error(transparent)]
    Credential(#[from] CredentialError),
}

/// See the module doc. `metadata` is shard 0's current state (used only to
/// verify the current password of ChangePassword).
pub fn prepare(
    command: &NotSend<'_>,
    metadata: &Metadata,
    context: &PrepareContext,
) -> Result<Prepared, PrepareError> {
    use Command as R;
    use MetadataCommand as M;
    let now_us = context.now_us;
    let command = match command {
        R::CreateStream { name, options } => {
            options::check_no_options(options)?;
            M::CreateStream {
                name: (*name).to_owned(),
                created_at_us: now_us,
            }
        }
        R::UpdateStream {
            stream,
            name,
            options,
        } => {
            options::check_no_options(options)?;
            M::UpdateStream {
                stream: stream.into(),
                name: (*name).to_owned(),
            }
        }
        R::DeleteStream { stream } => M::DeleteStream {
            stream: stream.into(),
        },
        R::CreateTopic {
            stream,
            partitions_count,
            name,
            options,
        } => M::CreateTopic {
            stream: stream.into(),
            name: (*name).to_owned(),
            partitions_count: *partitions_count,
            options: options::parse_create_options(options, context.default_durability)?,
            created_at_us: now_us,
            shard_count: context.shard_count,
        },
        R::UpdateTopic {
            stream,
            topic,
            name,
            options,
        } => M::UpdateTopic {
            stream: stream.into(),
            topic: topic.into(),
            name: (*name).to_owned(),
            update: options::parse_update_options(options)?,
        },
        R::DeleteTopic { stream, topic } => M::DeleteTopic {
            stream: stream.into(),
            topic: topic.into(),
        },
        R::CreatePartitions {
            stream,
            topic,
            count,
        } => M::CreatePartitions {
            stream: stream.into(),
            topic: topic.into(),
            count: *count,
            created_at_us: now_us,
            shard_count: context.shard_count,
        },
        R::DeletePartitions {
            stream,
            topic,
            count,
        } => M::DeletePartitions {
            stream: stream.into(),
            topic: topic.into(),
            count: *count,
        },
        R::CreateUser {
            username,
            password,
            status,
            permissions,
            options,
        } => {
            options::check_no_options(options)?;
            super::apply::validate_username(username)?;
            auth::validate_password(password)?;
            M::CreateUser {
                username: (*username).to_owned(),
                password_hash: auth::hash_password(password, context.hash_cost)?,
                status: UserStatus::from(*status),
                permissions: permissions.clone(),
                created_at_us: now_us,
            }
        }
        R::UpdateUser {
            user,
            username,
            status,
            options,
        } => {
            options::check_no_options(options)?;
            M::UpdateUser {
                user: user.into(),
                username: username.map(str::to_owned),
                status: status.map(UserStatus::from),
            }
        }
        R::DeleteUser { user } => M::DeleteUser { user: user.into() },
        R::UpdatePermissions { user, permissions } => M::UpdatePermissions {
            user: user.into(),
            permissions: permissions.clone(),
        },
        R::ChangePassword {
            user,
            current_password,
            new_password,
        } => {
            let target = metadata.user(&Ident::from(user))?.id;
            auth::validate_password(new_password)?;
            metadata.check_current_password(target, current_password)?;
            M::ChangePassword {
                user: Ident::Id(target),
                password_hash: auth::hash_password(new_password, context.hash_cost)?,
            }
        }
        R::CreatePersonalAccessToken { name, expiry } => {
            // IggyExpiry: 0 = server default (never), u64::MAX = never,
            // else µs from now.
            let expiry_at_us = match *expiry {
                0 | u64::MAX => None,
                micros => Some(now_us.saturating_add(micros)),
            };
            let raw_token = auth::generate_token()?;
            return Ok(Prepared::CommandWithToken {
                command: M::CreatePat {
                    user_id: context.user_id,
                    name: (*name).to_owned(),
                    token_hash: auth::hash_token(&raw_token),
                    expiry_at_us,
                    created_at_us: now_us,
                },
                raw_token,
            });
        }
        R::DeletePersonalAccessToken { name } => M::DeletePat {
            user_id: context.user_id,
            name: (*name).to_owned(),
        },
        R::CreateConsumerGroup {
            stream,
            topic,
            name,
        } => M::CreateConsumerGroup {
            stream: stream.into(),
            topic: topic.into(),
            name: (*name).to_owned(),
        },
        R::DeleteConsumerGroup(group) => M::DeleteConsumerGroup {
            stream: group.stream.into(),
            topic: group.topic.into(),
            group: group.group.into(),
        },
        R::JoinConsumerGroup(group) => M::JoinConsumerGroup {
            stream: group.stream.into(),
            topic: group.topic.into(),
            group: group.group.into(),
            member: context.member,
        },
        R::LeaveConsumerGroup(group) => M::LeaveConsumerGroup {
            stream: group.stream.into(),
            topic: group.topic.into(),
            group: group.group.into(),
            member: context.member,
        },
        _ => return Ok(Prepared::NotMetadata),
    };
    Ok(Prepared::Command(command))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Applied;
    use iggyd_wire::protocol::options::{OptionBlock, OptionEntry, ValueKind};
    use iggyd_wire::protocol::primitives::{Identifier, UserStatus as WireStatus};

    fn context() -> PrepareContext {
        PrepareContext {
            now_us: 1_000,
            user_id: 1,
            member: MemberKey(42),
            shard_count: 2,
            default_durability: Durability::Persisted,
            hash_cost: HashCost::cheap(),
        }
    }

    fn run(metadata: &mut Metadata, request: &NotSend<'_>) -> Result<Prepared, PrepareError> {
        let prepared = prepare(request, metadata, &context())?;
        if let Prepared::Command(command) | Prepared::CommandWithToken { command, .. } = &prepared {
            metadata.apply(command.clone())?;
        }
        Ok(prepared)
    }

    fn code(result: Result<Prepared, PrepareError>) -> u32 {
        match result {
            Err(PrepareError::Rejected(error)) => error.status().code(),
            other => panic!("{other:?}"),
        }
    }

    // Proves requests become deterministic commands end to end: users with
    // hashed passwords, topics with parsed options (legacy enforce_fsync),
    // tokens returned raw once and stored hashed, password changes checked
    // against the current password, and non-metadata requests passed by.
    #[test]
    fn requests_to_commands() {
        let mut metadata = Metadata::new();
        for username in ["iggy", "alice"] {
            run(
                &mut metadata,
                &Command::CreateUser {
                    username,
                    password: "secret",
                    status: WireStatus::Active,
                    permissions: None,
                    options: OptionBlock::default(),
                },
            )
            .unwrap();
        }
        assert_eq!(metadata.verify_password("alice", "secret"), Ok(1));
        assert_eq!(
            code(run(
                &mut metadata,
                &Command::CreateUser {
                    username: "bob",
                    password: "no",
                    status: WireStatus::Active,
                    permissions: None,
                    options: OptionBlock::default(),
                }
            )),
            44
        );

        run(
            &mut metadata,
            &Command::CreateStream {
                name: "s",
                options: OptionBlock::default(),
            },
        )
        .unwrap();
        let stream_options = OptionBlock {
            entries: vec![OptionEntry {
                key: "x",
                kind: ValueKind::String as u8,
                value: b"y",
            }],
        };
        assert_eq!(
            code(run(
                &mut metadata,
                &Command::CreateStream {
                    name: "s2",
                    options: stream_options,
                }
            )),
            4041
        );
        run(
            &mut metadata,
            &Command::CreateTopic {
                stream: Identifier::Name("s"),
                partitions_count: 3,
                name: "t",
                options: OptionBlock {
                    entries: vec![OptionEntry {
                        key: "enforce_fsync",
                        kind: ValueKind::Bool as u8,
                        value: &[1],
                    }],
                },
            },
        )
        .unwrap();
        let (_, topic) = metadata.topic(&Ident::Id(0), &Ident::from("t")).unwrap();
        assert_eq!(topic.options.durability, Durability::Persisted);
        assert_eq!(topic.created_at_us, 1_000);

        let Prepared::CommandWithToken { raw_token, command } = run(
            &mut metadata,
            &Command::CreatePersonalAccessToken {
                name: "deploy",
                expiry: 500,
            },
        )
        .unwrap() else {
            panic!()
        };
        assert!(!format!("{command:?}").contains(&raw_token));
        assert_eq!(metadata.verify_token(&raw_token, 1_499), Ok(1));
        assert_eq!(
            metadata
                .verify_token(&raw_token, 1_500)
                .unwrap_err()
                .status()
                .code(),
            54
        );

        let change = |current| Command::ChangePassword {
            user: Identifier::Numeric(1),
            current_password: current,
            new_password: "better",
        };
        assert_eq!(code(run(&mut metadata, &change("wrong"))), 42);
        run(&mut metadata, &change("secret")).unwrap();
        assert_eq!(metadata.verify_password("alice", "better"), Ok(1));

        run(
            &mut metadata,
            &Command::CreateConsumerGroup {
                stream: Identifier::Numeric(0),
                topic: Identifier::Numeric(0),
                name: "g",
            },
        )
        .unwrap();
        let join = Command::JoinConsumerGroup(iggyd_wire::protocol::command::GroupRef {
            stream: Identifier::Numeric(0),
            topic: Identifier::Numeric(0),
            group: Identifier::Name("g"),
        });
        let Prepared::Command(command) = prepare(&join, &metadata, &context()).unwrap() else {
            panic!()
        };
        assert!(matches!(
            metadata.apply(command).unwrap(),
            Applied::GroupJoined { changed: true, .. }
        ));
        assert_eq!(
            prepare(&Command::Ping, &metadata, &context()).unwrap(),
            Prepared::NotMetadata
        );
    }
}
