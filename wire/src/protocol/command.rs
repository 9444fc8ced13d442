//! `Command`: one variant per request of protocol 0.11.0 (§6), decoded from
//! a request header and its body.
//!
//! The command is derived from the operation byte for replicated operations
//! and from header bytes 196..200 for `NonReplicated` (op 2). Bodies are
//! consumed exactly; option blocks run to the end of the body. Names and
//! payloads borrow from the body. Message batches are NOT parsed here (the
//! batch validator owns that): SendMessages only checks its own framing.
//! Nothing in this file needs server state: "does this stream exist" or
//! "is this session logged in" are the caller's questions.

use super::codes::{CommandCode, Operation};
use super::error::WireError;
use super::header::RequestHeader;
use super::limits::PARTITIONS_PER_REQUEST_MAX;
use super::options::OptionBlock;
use super::permissions::Permissions;
use super::primitives::{
    AckLevel, ClientVersionInfo, Consumer, Identifier, OptionalPartition, Partitioning,
    PollingStrategy, UserStatus,
};
use super::reader::Reader;
use crate::batch::{BATCH_HEADER_SIZE, BATCH_LENGTH_AT};

mod split;

pub use split::{NotSend, Split};

/// Username/password shape of a Register body, after the version prefix:
/// `[username Name][pw_len u8][password][context_len u32][context]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PasswordLogin<'a> {
    pub username: &'a str,
    pub password: &'a str,
    pub context: &'a [u8],
}

/// Personal-access-token shape of a Register body, after the version
/// prefix: `[token_len u8][token][context_len u32][context]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenLogin<'a> {
    pub token: &'a str,
    pub context: &'a [u8],
}

/// A login (op 1, codes 40 and 45 share it, §6.2).
///
/// The body has no code saying which shape it is, so both parses are
/// attempted and kept; at least one is `Some`. The server follows Apache:
/// try `password` first, and if it is absent or the credentials are wrong,
/// try `token`. In practice only one parses (a token body read as a
/// password login runs out of bytes for the context length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Register<'a> {
    pub version: ClientVersionInfo<'a>,
    pub password: Option<PasswordLogin<'a>>,
    pub token: Option<TokenLogin<'a>>,
}

/// Scope byte of DescribeOptions (code 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum OptionScope {
    Topic = 1,
    Stream = 2,
    User = 3,
}

/// `(stream, topic, group)` triple used by most consumer-group commands:
/// `[stream Ident][topic Ident][group Ident]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupRef<'a> {
    pub stream: Identifier<'a>,
    pub topic: Identifier<'a>,
    pub group: Identifier<'a>,
}

/// Who and where for the offset commands:
/// `[Consumer][stream Ident][topic Ident][OptPart]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetTarget<'a> {
    pub consumer: Consumer<'a>,
    pub stream: Identifier<'a>,
    pub topic: Identifier<'a>,
    pub partition_id: Option<u32>,
}

/// PollMessages (code 100):
/// `[Consumer][stream Ident][topic Ident][OptPart][strategy 9B][count u32][auto_commit u8]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollMessages<'a> {
    pub consumer: Consumer<'a>,
    pub stream: Identifier<'a>,
    pub topic: Identifier<'a>,
    pub partition_id: Option<u32>,
    pub strategy: PollingStrategy,
    pub count: u32,
    pub auto_commit: bool,
}

/// SendMessages (code 101, op 160), §5.2:
/// `[metadata_length u32][stream Ident][topic Ident][Partitioning][messages_count u32][batch]`.
///
/// Checked here: `metadata_length` equals the decoded metadata size,
/// `messages_count ≥ 1`, the batch is at least a 256-byte header and its
/// `batch_length` (u64 at batch offset 32) equals the remaining body. The
/// batch's frames, checksums and `message_count` are the batch validator's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendMessages<'a> {
    pub stream: Identifier<'a>,
    pub topic: Identifier<'a>,
    pub partitioning: Partitioning<'a>,
    pub messages_count: u32,
    pub batch: &'a [u8],
}

/// Every request a 0.11.0 client may send. Field layouts are documented on
/// the decode arms and in §6; struct payloads document their own.
///
/// `S` is what the `SendMessages` variant holds: the decoded send by
/// default; `Infallible` in [`NotSend`], every request but a send, which
/// [`Command::split`] leaves once a send has been taken down its own path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a, S = SendMessages<'a>> {
    /// 1, empty body.
    Ping,
    /// 10, empty body.
    GetStats,
    /// 11: `[compression u8 1..=6][types_count u8][type u8 × n]`, types in 1..=6 or 100.
    GetSnapshot { compression: u8, types: &'a [u8] },
    /// 12, empty body.
    GetClusterMetadata,
    /// 13: `[scope u8]`.
    DescribeOptions { scope: OptionScope },
    /// 20, empty body.
    GetMe,
    /// 21: `[client_id u32]`.
    GetClient { client_id: u32 },
    /// 22, empty body.
    GetClients,
    /// 103, 123 (§6.11): which node serves a partition's auto-commit polls
    /// and offset writes; bodies are not decoded (a single node is never
    /// asked, and answers status 3).
    ClusterRouting { code: CommandCode },
    /// 14: a routed data connection acts for the session that asked 103 or
    /// 123 (its client id and session number, as that answer gave them).
    AttachConsumerSession {
        client: u128,
        session: u64,
        watermark: u64,
    },
    /// Op 1 (codes 40 / 45).
    Register(Register<'a>),
    /// Op 3 (code 39), empty body.
    Logout,
    /// 31: `[user Ident]`.
    GetUser { user: Identifier<'a> },
    /// 32, empty body.
    GetUsers,
    /// 33: `[username Name][pw_len u8][password][status u8][has_perms u8]([len u32][Permissions])` ‖ options.
    CreateUser {
        username: &'a str,
        password: &'a str,
        status: UserStatus,
        permissions: Option<Permissions>,
        options: OptionBlock<'a>,
    },
    /// 34: `[user Ident]`.
    DeleteUser { user: Identifier<'a> },
    /// 35: `[user Ident][has_name u8](Name)[has_status u8]([status u8])` ‖ options.
    UpdateUser {
        user: Identifier<'a>,
        username: Option<&'a str>,
        status: Option<UserStatus>,
        options: OptionBlock<'a>,
    },
    /// 36: `[user Ident][has_perms u8]([len u32][Permissions])`.
    UpdatePermissions {
        user: Identifier<'a>,
        permissions: Option<Permissions>,
    },
    /// 37: `[user Ident][cur_len u8][current][new_len u8][new]`.
    ChangePassword {
        user: Identifier<'a>,
        current_password: &'a str,
        new_password: &'a str,
    },
    /// 41, empty body.
    GetPersonalAccessTokens,
    /// 42: `[name Name][expiry u64]` (0 default, u64::MAX never, else µs from now).
    CreatePersonalAccessToken { name: &'a str, expiry: u64 },
    /// 43: `[name Name]`.
    DeletePersonalAccessToken { name: &'a str },
    /// 100.
    PollMessages(PollMessages<'a>),
    /// 101 (op 160).
    SendMessages(S),
    /// 102: `[stream Ident][topic Ident][partition_id u32][fsync u8]`.
    FlushUnsavedBuffer {
        stream: Identifier<'a>,
        topic: Identifier<'a>,
        partition_id: u32,
        fsync: bool,
    },
    /// 120: `OffsetTarget`.
    GetConsumerOffset(OffsetTarget<'a>),
    /// 121 (op 161): `OffsetTarget` `[offset u64][ack u8]`.
    StoreConsumerOffset {
        target: OffsetTarget<'a>,
        offset: u64,
        ack: AckLevel,
    },
    /// 122 (op 162): `OffsetTarget` `[ack u8]`.
    DeleteConsumerOffset {
        target: OffsetTarget<'a>,
        ack: AckLevel,
    },
    /// 200: `[stream Ident]`.
    GetStream { stream: Identifier<'a> },
    /// 201, empty body.
    GetStreams,
    /// 202 (op 128): `[name Name]` ‖ options.
    CreateStream {
        name: &'a str,
        options: OptionBlock<'a>,
    },
    /// 203 (op 130): `[stream Ident]`.
    DeleteStream { stream: Identifier<'a> },
    /// 204 (op 129): `[stream Ident][name Name]` ‖ options.
    UpdateStream {
        stream: Identifier<'a>,
        name: &'a str,
        options: OptionBlock<'a>,
    },
    /// 205 (op 131): `[stream Ident]`.
    PurgeStream { stream: Identifier<'a> },
    /// 300: `[stream Ident][topic Ident]`.
    GetTopic {
        stream: Identifier<'a>,
        topic: Identifier<'a>,
    },
    /// 301: `[stream Ident]`.
    GetTopics { stream: Identifier<'a> },
    /// 302 (op 132): `[stream Ident][partitions_count u32 0..=1000][name Name]` ‖ options.
    CreateTopic {
        stream: Identifier<'a>,
        partitions_count: u32,
        name: &'a str,
        options: OptionBlock<'a>,
    },
    /// 303 (op 134): `[stream Ident][topic Ident]`.
    DeleteTopic {
        stream: Identifier<'a>,
        topic: Identifier<'a>,
    },
    /// 304 (op 133): `[stream Ident][topic Ident][name Name]` ‖ options.
    UpdateTopic {
        stream: Identifier<'a>,
        topic: Identifier<'a>,
        name: &'a str,
        options: OptionBlock<'a>,
    },
    /// 305 (op 135): `[stream Ident][topic Ident]`.
    PurgeTopic {
        stream: Identifier<'a>,
        topic: Identifier<'a>,
    },
    /// 402 (op 136): `[stream Ident][topic Ident][count u32 1..=1000]`.
    CreatePartitions {
        stream: Identifier<'a>,
        topic: Identifier<'a>,
        count: u32,
    },
    /// 403 (op 137): `[stream Ident][topic Ident][count u32]`; the count is
    /// checked against the topic by the server (more than exist → 2019).
    DeletePartitions {
        stream: Identifier<'a>,
        topic: Identifier<'a>,
        count: u32,
    },
    /// 503 (op 138): `[stream Ident][topic Ident][partition_id u32][segments_count u32]`.
    DeleteSegments {
        stream: Identifier<'a>,
        topic: Identifier<'a>,
        partition_id: u32,
        segments_count: u32,
    },
    /// 600.
    GetConsumerGroup(GroupRef<'a>),
    /// 601: `[stream Ident][topic Ident]`.
    GetConsumerGroups {
        stream: Identifier<'a>,
        topic: Identifier<'a>,
    },
    /// 602 (op 139): `[stream Ident][topic Ident][name Name]`.
    CreateConsumerGroup {
        stream: Identifier<'a>,
        topic: Identifier<'a>,
        name: &'a str,
    },
    /// 603 (op 140).
    DeleteConsumerGroup(GroupRef<'a>),
    /// 604 (op 148).
    JoinConsumerGroup(GroupRef<'a>),
    /// 605 (op 149).
    LeaveConsumerGroup(GroupRef<'a>),
    /// 606.
    SyncConsumerGroup(GroupRef<'a>),
}

impl<'a> Command<'a> {
    /// Decodes the request described by `header` from `body`.
    ///
    /// Errors and what the server does about them (see `WireError::action`):
    /// unknown operation byte → close; unknown NonReplicated code → status
    /// 3; replicated code sent as NonReplicated → status 5; legacy login
    /// codes or a broken login → eviction 15; incompatible protocol →
    /// eviction 14; malformed body → status 3 (or the option/status codes).
    pub fn decode(header: &RequestHeader, body: &'a [u8]) -> Result<Self, WireError> {
        let operation =
            Operation::from_u8(header.operation).ok_or(WireError::UnknownOperation {
                operation: header.operation,
            })?;
        let code = match operation {
            Operation::Register => return decode_register(header, body).map(Command::Register),
            Operation::NonReplicated => {
                let code = header.command_code;
                let known =
                    CommandCode::from_u32(code).ok_or(WireError::UnknownCommand { code })?;
                if matches!(
                    known,
                    CommandCode::LoginUserLegacy | CommandCode::LoginWithPersonalAccessTokenLegacy
                ) {
                    return Err(WireError::LegacyLogin { code });
                }
                if known.operation() != Operation::NonReplicated {
                    return Err(WireError::ReplicatedCodeAsNonReplicated { code });
                }
                known
            }
            replicated => replicated
                .command_code()
                .ok_or(WireError::UnknownOperation {
                    operation: header.operation,
                })?,
        };
        decode_body(code, body)
    }

    /// The command code this request stands for (Register answers 40 for a
    /// password body and 45 for a token-only body).
    pub fn code(&self) -> CommandCode {
        use CommandCode as C;
        match self {
            Self::Ping => C::Ping,
            Self::GetStats => C::GetStats,
            Self::GetSnapshot { .. } => C::GetSnapshot,
            Self::GetClusterMetadata => C::GetClusterMetadata,
            Self::DescribeOptions { .. } => C::DescribeOptions,
            Self::GetMe => C::GetMe,
            Self::GetClient { .. } => C::GetClient,
            Self::GetClients => C::GetClients,
            Self::ClusterRouting { code } => *code,
            Self::AttachConsumerSession { .. } => C::AttachConsumerSession,
            Self::Register(register) if register.password.is_some() => C::LoginRegister,
            Self::Register(_) => C::LoginRegisterWithPersonalAccessToken,
            Self::Logout => C::LogoutUser,
            Self::GetUser { .. } => C::GetUser,
            Self::GetUsers => C::GetUsers,
            Self::CreateUser { .. } => C::CreateUser,
            Self::DeleteUser { .. } => C::DeleteUser,
            Self::UpdateUser { .. } => C::UpdateUser,
            Self::UpdatePermissions { .. } => C::UpdatePermissions,
            Self::ChangePassword { .. } => C::ChangePassword,
            Self::GetPersonalAccessTokens => C::GetPersonalAccessTokens,
            Self::CreatePersonalAccessToken { .. } => C::CreatePersonalAccessToken,
            Self::DeletePersonalAccessToken { .. } => C::DeletePersonalAccessToken,
            Self::PollMessages(_) => C::PollMessages,
            Self::SendMessages(_) => C::SendMessages,
            Self::FlushUnsavedBuffer { .. } => C::FlushUnsavedBuffer,
            Self::GetConsumerOffset(_) => C::GetConsumerOffset,
            Self::StoreConsumerOffset { .. } => C::StoreConsumerOffset,
            Self::DeleteConsumerOffset { .. } => C::DeleteConsumerOffset,
            Self::GetStream { .. } => C::GetStream,
            Self::GetStreams => C::GetStreams,
            Self::CreateStream { .. } => C::CreateStream,
            Self::DeleteStream { .. } => C::DeleteStream,
            Self::UpdateStream { .. } => C::UpdateStream,
            Self::PurgeStream { .. } => C::PurgeStream,
            Self::GetTopic { .. } => C::GetTopic,
            Self::GetTopics { .. } => C::GetTopics,
            Self::CreateTopic { .. } => C::CreateTopic,
            Self::DeleteTopic { .. } => C::DeleteTopic,
            Self::UpdateTopic { .. } => C::UpdateTopic,
            Self::PurgeTopic { .. } => C::PurgeTopic,
            Self::CreatePartitions { .. } => C::CreatePartitions,
            Self::DeletePartitions { .. } => C::DeletePartitions,
            Self::DeleteSegments { .. } => C::DeleteSegments,
            Self::GetConsumerGroup(_) => C::GetConsumerGroup,
            Self::GetConsumerGroups { .. } => C::GetConsumerGroups,
            Self::CreateConsumerGroup { .. } => C::CreateConsumerGroup,
            Self::DeleteConsumerGroup(_) => C::DeleteConsumerGroup,
            Self::JoinConsumerGroup(_) => C::JoinConsumerGroup,
            Self::LeaveConsumerGroup(_) => C::LeaveConsumerGroup,
            Self::SyncConsumerGroup(_) => C::SyncConsumerGroup,
        }
    }

    /// The operation byte this request travels with.
    pub fn operation(&self) -> Operation {
        self.code().operation()
    }
}

/// Register: `ClientVersionInfo` then one of the two credential shapes.
/// Apache drops a Register with a non-zero request or session number; an
/// eviction 15 tells the client the same thing without a 30 s timeout.
fn decode_register<'a>(header: &RequestHeader, body: &'a [u8]) -> Result<Register<'a>, WireError> {
    if header.request != 0 || header.session != 0 {
        return Err(WireError::MalformedLogin {
            reason: "register must carry request 0 and session 0",
        });
    }
    let mut reader = Reader::new(body);
    let version =
        ClientVersionInfo::decode(&mut reader).map_err(|_| WireError::MalformedLogin {
            reason: "version prefix does not decode",
        })?;
    if !version.is_compatible() {
        return Err(WireError::IncompatibleProtocol {
            version: version.protocol_version,
        });
    }
    let after_prefix = reader.clone();
    let password = parse_password_login(&mut reader).ok();
    let mut reader = after_prefix;
    let token = parse_token_login(&mut reader).ok();
    if password.is_none() && token.is_none() {
        return Err(WireError::MalformedLogin {
            reason: "body is neither a password nor a token login",
        });
    }
    Ok(Register {
        version,
        password,
        token,
    })
}

fn parse_context<'a>(reader: &mut Reader<'a>) -> Result<&'a [u8], WireError> {
    let length = reader.u32("login context length")?;
    let context = reader.bytes(
        usize::try_from(length).unwrap_or(usize::MAX),
        "login context",
    )?;
    reader.finish("login")?;
    Ok(context)
}

fn parse_password_login<'a>(reader: &mut Reader<'a>) -> Result<PasswordLogin<'a>, WireError> {
    let username = reader.name("username")?;
    let password = reader.short_str("password")?;
    let context = parse_context(reader)?;
    Ok(PasswordLogin {
        username,
        password,
        context,
    })
}

fn parse_token_login<'a>(reader: &mut Reader<'a>) -> Result<TokenLogin<'a>, WireError> {
    let token = reader.name("personal access token")?;
    let context = parse_context(reader)?;
    Ok(TokenLogin { token, context })
}

fn partitions_count(count: u32, min: u32) -> Result<u32, WireError> {
    if (min..=PARTITIONS_PER_REQUEST_MAX).contains(&count) {
        Ok(count)
    } else {
        Err(WireError::PartitionsCount {
            count,
            min,
            max: PARTITIONS_PER_REQUEST_MAX,
        })
    }
}

fn stream_topic<'a>(
    reader: &mut Reader<'a>,
) -> Result<(Identifier<'a>, Identifier<'a>), WireError> {
    let stream = Identifier::decode(reader, "stream id")?;
    let topic = Identifier::decode(reader, "topic id")?;
    Ok((stream, topic))
}

fn group_ref<'a>(reader: &mut Reader<'a>) -> Result<GroupRef<'a>, WireError> {
    let (stream, topic) = stream_topic(reader)?;
    let group = Identifier::decode(reader, "consumer group id")?;
    Ok(GroupRef {
        stream,
        topic,
        group,
    })
}

fn offset_target<'a>(reader: &mut Reader<'a>) -> Result<OffsetTarget<'a>, WireError> {
    let consumer = Consumer::decode(reader)?;
    let (stream, topic) = stream_topic(reader)?;
    let partition_id = OptionalPartition::decode(reader)?;
    Ok(OffsetTarget {
        consumer,
        stream,
        topic,
        partition_id,
    })
}

fn options<'a>(reader: &mut Reader<'a>) -> Result<OptionBlock<'a>, WireError> {
    let offset = reader.position();
    OptionBlock::decode(reader.rest(), offset)
}

fn decode_snapshot<'a>(reader: &mut Reader<'a>) -> Result<Command<'a>, WireError> {
    let offset = reader.position();
    let compression = reader.u8("snapshot compression")?;
    if !(1..=6).contains(&compression) {
        return Err(WireError::Malformed {
            what: "snapshot compression",
            offset,
            reason: "must be 1..=6",
        });
    }
    let count = reader.u8("snapshot types count")?;
    let types_offset = reader.position();
    let types = reader.bytes(usize::from(count), "snapshot types")?;
    if types.iter().any(|kind| !matches!(kind, 1..=6 | 100)) {
        return Err(WireError::Malformed {
            what: "snapshot types",
            offset: types_offset,
            reason: "types must be 1..=6 or 100",
        });
    }
    Ok(Command::GetSnapshot { compression, types })
}

fn decode_send<'a>(reader: &mut Reader<'a>) -> Result<Command<'a>, WireError> {
    let metadata_length = reader.u32("metadata length")?;
    let metadata_start = reader.position();
    let (stream, topic) = stream_topic(reader)?;
    let partitioning = Partitioning::decode(reader)?;
    let messages_count = reader.u32("messages count")?;
    let decoded = reader.position().saturating_sub(metadata_start);
    if u32::try_from(decoded).ok() != Some(metadata_length) {
        return Err(WireError::Malformed {
            what: "metadata length",
            offset: 0,
            reason: "does not match the decoded stream, topic, partitioning and count",
        });
    }
    if messages_count == 0 {
        return Err(WireError::Malformed {
            what: "messages count",
            offset: metadata_start.saturating_add(decoded).saturating_sub(4),
            reason: "a batch must carry at least one message",
        });
    }
    let batch_offset = reader.position();
    let batch = reader.rest();
    if batch.len() < BATCH_HEADER_SIZE {
        return Err(WireError::Truncated {
            what: "batch header",
            offset: batch_offset,
            needed: BATCH_HEADER_SIZE,
            available: batch.len(),
        });
    }
    let mut header_reader = Reader::new(batch);
    header_reader.bytes(BATCH_LENGTH_AT, "batch header")?;
    let batch_length = header_reader.u64("batch length")?;
    if u64::try_from(batch.len()).ok() != Some(batch_length) {
        return Err(WireError::Malformed {
            what: "batch length",
            offset: batch_offset.saturating_add(BATCH_LENGTH_AT),
            reason: "does not equal the bytes remaining in the body",
        });
    }
    Ok(Command::SendMessages(SendMessages {
        stream,
        topic,
        partitioning,
        messages_count,
        batch,
    }))
}

/// Decodes the body of a known command. Every arm either consumes the body
/// exactly (`finish`) or ends with an option block / batch that takes the rest.
fn decode_body(code: CommandCode, body: &[u8]) -> Result<Command<'_>, WireError> {
    use CommandCode as C;
    let mut reader = Reader::new(body);
    let reader = &mut reader;
    let command = match code {
        C::Ping => Command::Ping,
        C::GetStats => Command::GetStats,
        C::GetSnapshot => decode_snapshot(reader)?,
        C::GetClusterMetadata => Command::GetClusterMetadata,
        C::DescribeOptions => {
            let offset = reader.position();
            let scope = match reader.u8("option scope")? {
                1 => OptionScope::Topic,
                2 => OptionScope::Stream,
                3 => OptionScope::User,
                _ => {
                    return Err(WireError::Malformed {
                        what: "option scope",
                        offset,
                        reason: "must be 1 (topic), 2 (stream) or 3 (user)",
                    });
                }
            };
            Command::DescribeOptions { scope }
        }
        C::GetMe => Command::GetMe,
        C::GetClient => Command::GetClient {
            client_id: reader.u32("client id")?,
        },
        C::GetClients => Command::GetClients,
        C::AttachConsumerSession => Command::AttachConsumerSession {
            client: reader.u128("parent client id")?,
            session: reader.u64("parent session")?,
            watermark: reader.u64("metadata watermark")?,
        },
        C::GetPollRouting | C::GetConsumerOffsetRouting => {
            // The answer names the node that serves the partition, which
            // is the one asked (the leader): the body is not needed.
            reader.rest();
            Command::ClusterRouting { code }
        }
        // Register and the legacy logins never get here (see `decode`);
        // answering them as malformed keeps this match total without panicking.
        C::LoginRegister
        | C::LoginRegisterWithPersonalAccessToken
        | C::LoginUserLegacy
        | C::LoginWithPersonalAccessTokenLegacy => {
            return Err(WireError::MalformedLogin {
                reason: "login codes travel as the Register operation",
            });
        }
        C::LogoutUser => Command::Logout,
        C::GetUser => Command::GetUser {
            user: Identifier::decode(reader, "user id")?,
        },
        C::GetUsers => Command::GetUsers,
        C::CreateUser => {
            let username = reader.name("username")?;
            let password = reader.short_str("password")?;
            let status = UserStatus::decode(reader)?;
            let permissions = Permissions::decode_optional(reader)?;
            let options = options(reader)?;
            Command::CreateUser {
                username,
                password,
                status,
                permissions,
                options,
            }
        }
        C::DeleteUser => Command::DeleteUser {
            user: Identifier::decode(reader, "user id")?,
        },
        C::UpdateUser => {
            let user = Identifier::decode(reader, "user id")?;
            let username = if reader.bool("has username")? {
                Some(reader.name("username")?)
            } else {
                None
            };
            let status = if reader.bool("has status")? {
                Some(UserStatus::decode(reader)?)
            } else {
                None
            };
            let options = options(reader)?;
            Command::UpdateUser {
                user,
                username,
                status,
                options,
            }
        }
        C::UpdatePermissions => {
            let user = Identifier::decode(reader, "user id")?;
            let permissions = Permissions::decode_optional(reader)?;
            Command::UpdatePermissions { user, permissions }
        }
        C::ChangePassword => {
            let user = Identifier::decode(reader, "user id")?;
            let current_password = reader.short_str("current password")?;
            let new_password = reader.short_str("new password")?;
            Command::ChangePassword {
                user,
                current_password,
                new_password,
            }
        }
        C::GetPersonalAccessTokens => Command::GetPersonalAccessTokens,
        C::CreatePersonalAccessToken => {
            let name = reader.name("token name")?;
            let expiry = reader.u64("token expiry")?;
            Command::CreatePersonalAccessToken { name, expiry }
        }
        C::DeletePersonalAccessToken => Command::DeletePersonalAccessToken {
            name: reader.name("token name")?,
        },
        // 104 is a poll sent on a routed data connection (§6.11): the
        // same body, answered the same way.
        C::PollMessages | C::PollMessagesOnPrimary => {
            let consumer = Consumer::decode(reader)?;
            let (stream, topic) = stream_topic(reader)?;
            let partition_id = OptionalPartition::decode(reader)?;
            let strategy = PollingStrategy::decode(reader)?;
            let count = reader.u32("poll count")?;
            let auto_commit = reader.bool("auto commit")?;
            Command::PollMessages(PollMessages {
                consumer,
                stream,
                topic,
                partition_id,
                strategy,
                count,
                auto_commit,
            })
        }
        C::SendMessages => decode_send(reader)?,
        C::FlushUnsavedBuffer => {
            let (stream, topic) = stream_topic(reader)?;
            let partition_id = reader.u32("partition id")?;
            let fsync = reader.bool("fsync")?;
            Command::FlushUnsavedBuffer {
                stream,
                topic,
                partition_id,
                fsync,
            }
        }
        C::GetConsumerOffset => Command::GetConsumerOffset(offset_target(reader)?),
        C::StoreConsumerOffset => {
            let target = offset_target(reader)?;
            let offset = reader.u64("offset")?;
            let ack = AckLevel::decode(reader)?;
            Command::StoreConsumerOffset {
                target,
                offset,
                ack,
            }
        }
        C::DeleteConsumerOffset => {
            let target = offset_target(reader)?;
            let ack = AckLevel::decode(reader)?;
            Command::DeleteConsumerOffset { target, ack }
        }
        C::GetStream => Command::GetStream {
            stream: Identifier::decode(reader, "stream id")?,
        },
        C::GetStreams => Command::GetStreams,
        C::CreateStream => {
            let name = reader.name("stream name")?;
            let options = options(reader)?;
            Command::CreateStream { name, options }
        }
        C::DeleteStream => Command::DeleteStream {
            stream: Identifier::decode(reader, "stream id")?,
        },
        C::UpdateStream => {
            let stream = Identifier::decode(reader, "stream id")?;
            let name = reader.name("stream name")?;
            let options = options(reader)?;
            Command::UpdateStream {
                stream,
                name,
                options,
            }
        }
        C::PurgeStream => Command::PurgeStream {
            stream: Identifier::decode(reader, "stream id")?,
        },
        C::GetTopic => {
            let (stream, topic) = stream_topic(reader)?;
            Command::GetTopic { stream, topic }
        }
        C::GetTopics => Command::GetTopics {
            stream: Identifier::decode(reader, "stream id")?,
        },
        C::CreateTopic => {
            let stream = Identifier::decode(reader, "stream id")?;
            let partitions_count = partitions_count(reader.u32("partitions count")?, 0)?;
            let name = reader.name("topic name")?;
            let options = options(reader)?;
            Command::CreateTopic {
                stream,
                partitions_count,
                name,
                options,
            }
        }
        C::DeleteTopic => {
            let (stream, topic) = stream_topic(reader)?;
            Command::DeleteTopic { stream, topic }
        }
        C::UpdateTopic => {
            let (stream, topic) = stream_topic(reader)?;
            let name = reader.name("topic name")?;
            let options = options(reader)?;
            Command::UpdateTopic {
                stream,
                topic,
                name,
                options,
            }
        }
        C::PurgeTopic => {
            let (stream, topic) = stream_topic(reader)?;
            Command::PurgeTopic { stream, topic }
        }
        C::CreatePartitions => {
            let (stream, topic) = stream_topic(reader)?;
            let count = partitions_count(reader.u32("partitions count")?, 1)?;
            Command::CreatePartitions {
                stream,
                topic,
                count,
            }
        }
        C::DeletePartitions => {
            let (stream, topic) = stream_topic(reader)?;
            let count = reader.u32("partitions count")?;
            Command::DeletePartitions {
                stream,
                topic,
                count,
            }
        }
        C::DeleteSegments => {
            let (stream, topic) = stream_topic(reader)?;
            let partition_id = reader.u32("partition id")?;
            let segments_count = reader.u32("segments count")?;
            Command::DeleteSegments {
                stream,
                topic,
                partition_id,
                segments_count,
            }
        }
        C::GetConsumerGroup => Command::GetConsumerGroup(group_ref(reader)?),
        C::GetConsumerGroups => {
            let (stream, topic) = stream_topic(reader)?;
            Command::GetConsumerGroups { stream, topic }
        }
        C::CreateConsumerGroup => {
            let (stream, topic) = stream_topic(reader)?;
            let name = reader.name("consumer group name")?;
            Command::CreateConsumerGroup {
                stream,
                topic,
                name,
            }
        }
        C::DeleteConsumerGroup => Command::DeleteConsumerGroup(group_ref(reader)?),
        C::JoinConsumerGroup => Command::JoinConsumerGroup(group_ref(reader)?),
        C::LeaveConsumerGroup => Command::LeaveConsumerGroup(group_ref(reader)?),
        C::SyncConsumerGroup => Command::SyncConsumerGroup(group_ref(reader)?),
    };
    reader.finish("request body")?;
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codes::Status;
    use crate::protocol::reader::WireWrite;

    fn version_prefix() -> Vec<u8> {
        let mut body = Vec::new();
        ClientVersionInfo {
            protocol_version: 0x2C00,
            sdk_name: "rust-sdk",
            sdk_version: "0.11.0",
        }
        .encode(&mut body);
        body
    }

    // Proves the §6.2 shape rule: a token body does not parse as a password
    // login (it runs out of bytes for the context length), so only `token`
    // is set and the code reads as 45.
    #[test]
    fn token_login_is_unambiguous() {
        let mut body = version_prefix();
        body.put_name("0123456789abcdef");
        body.put_u32(0);
        let header = RequestHeader::client_request(1, 0, body.len());
        let Command::Register(register) = Command::decode(&header, &body).unwrap() else {
            panic!("not a Register");
        };
        assert_eq!(register.password, None);
        assert_eq!(
            register.token.map(|token| token.token),
            Some("0123456789abcdef")
        );
        assert_eq!(
            Command::Register(register).code(),
            CommandCode::LoginRegisterWithPersonalAccessToken
        );
    }

    // Proves option blocks take the rest of the body (so garbage after a
    // name is an option-block error, not trailing bytes) and that strict
    // flag bytes are enforced inside bodies.
    #[test]
    fn option_blocks_run_to_the_end() {
        let header = RequestHeader::client_request(Operation::CreateStream as u8, 0, 0);
        let mut body = Vec::new();
        body.put_name("s1");
        assert!(matches!(
            Command::decode(&header, &body),
            Ok(Command::CreateStream { name: "s1", .. })
        ));
        body.push(7);
        assert_eq!(
            Command::decode(&header, &body)
                .unwrap_err()
                .status()
                .map(Status::code),
            Some(3)
        );

        let header = RequestHeader::client_request(Operation::UpdateUser as u8, 0, 0);
        let mut body = Vec::new();
        Identifier::Numeric(1).encode(&mut body);
        body.push(2);
        assert!(matches!(
            Command::decode(&header, &body),
            Err(WireError::Malformed { .. })
        ));
        let mut body = Vec::new();
        Identifier::Numeric(1).encode(&mut body);
        body.extend_from_slice(&[0, 1, 3]);
        assert_eq!(
            Command::decode(&header, &body)
                .unwrap_err()
                .status()
                .map(Status::code),
            Some(45)
        );
    }
}
