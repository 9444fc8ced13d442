//! `MetadataError`: every way a metadata command, option block or login
//! check can be refused, each mapped to its wire status (§2.8).
//!
//! Must not: carry I/O errors (persistence failures are
//! [`super::store::StoreError`], which is fatal for shard 0, not a reply to
//! a client). The status numbers come from `protocol::codes::Status`, the
//! one compat table.

use crate::limits::{
    PASSWORD_LEN_MAX, PASSWORD_LEN_MIN, PAT_NAME_LEN_MAX, PAT_NAME_LEN_MIN, USERNAME_LEN_MAX,
    USERNAME_LEN_MIN,
};
use iggyd_wire::protocol::codes::Status;
use iggyd_wire::protocol::limits::{NAME_LEN_MAX, NAME_LEN_MIN};

/// A refused metadata operation. Each variant carries what a log line needs
/// (ids, names, the offending value); the client only ever sees the code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// Unknown stream, by id or by name: Apache answers 1009 for both
    /// (its error carries the identifier), so iggyd does too.
    #[error("stream {stream} not found")]
    StreamNotFound { stream: String },
    #[error("stream name {name:?} already exists")]
    StreamNameAlreadyExists { name: String },
    #[error("invalid stream name ({len} bytes; {NAME_LEN_MIN}..={NAME_LEN_MAX})")]
    InvalidStreamName { len: usize },
    #[error("too many streams (at most {max})")]
    TooManyStreams { max: usize },
    /// Unknown topic, by id or by name → 2010 (see `StreamNotFound`).
    #[error("topic {topic} not found in stream {stream_id}")]
    TopicNotFound { stream_id: u32, topic: String },
    #[error("topic name {name:?} already exists in stream {stream_id}")]
    TopicNameAlreadyExists { stream_id: u32, name: String },
    #[error("invalid topic name ({len} bytes; {NAME_LEN_MIN}..={NAME_LEN_MAX})")]
    InvalidTopicName { len: usize },
    #[error("too many topics in stream {stream_id} (at most {max})")]
    TooManyTopics { stream_id: u32, max: usize },
    #[error("partitions count {count} outside {min}..={max}")]
    TooManyPartitions { count: u32, min: u32, max: u32 },
    #[error("cannot delete {requested} partitions, topic has {existing}")]
    InvalidPartitionsCount { requested: u32, existing: u32 },
    #[error("partition id space exhausted ({existing} + {requested} > {max})")]
    PartitionIdSpaceExhausted {
        existing: u32,
        requested: u32,
        max: u32,
    },
    #[error("max topic size {max_topic_size} is below the segment size {segment_size}")]
    InvalidTopicSize {
        max_topic_size: u64,
        segment_size: u64,
    },
    #[error("unsupported option key {key:?}")]
    UnsupportedOptionKey { key: String },
    #[error("invalid value for option {key:?}: {reason}")]
    InvalidOptionValue { key: String, reason: String },
    #[error("user not found")]
    UserNotFound,
    #[error("invalid username ({len} characters; {USERNAME_LEN_MIN}..={USERNAME_LEN_MAX})")]
    InvalidUsername { len: usize },
    #[error("invalid password ({len} characters; {PASSWORD_LEN_MIN}..={PASSWORD_LEN_MAX})")]
    InvalidPassword { len: usize },
    #[error("user {username:?} already exists")]
    UserAlreadyExists { username: String },
    #[error("the root user cannot be deleted")]
    CannotDeleteUser,
    #[error("the root user's permissions cannot be changed")]
    CannotChangePermissions,
    #[error("invalid credentials")]
    InvalidCredentials,
    #[error(
        "invalid personal access token name ({len} characters; {PAT_NAME_LEN_MIN}..={PAT_NAME_LEN_MAX})"
    )]
    InvalidPersonalAccessTokenName { len: usize },
    #[error("personal access token {name:?} already exists")]
    PersonalAccessTokenAlreadyExists { name: String },
    #[error("user {user_id} already has {max} personal access tokens")]
    PersonalAccessTokensLimitReached { user_id: u32, max: usize },
    #[error("personal access token not found")]
    PersonalAccessTokenNotFound { name: String },
    #[error("invalid personal access token")]
    InvalidPersonalAccessToken,
    #[error("personal access token expired at {expiry_at_us} µs")]
    PersonalAccessTokenExpired { user_id: u32, expiry_at_us: u64 },
    #[error("personal access token expiry {expiry_at_us} µs is not after {now_us} µs")]
    InvalidPersonalAccessTokenExpiry { expiry_at_us: u64, now_us: u64 },
    #[error("user {user_id} is inactive")]
    UserInactive { user_id: u32 },
    /// Unknown consumer group, by id or by name → 5000 (§6.10).
    #[error("consumer group {group} not found")]
    ConsumerGroupNotFound { group: String },
    #[error("consumer group {name:?} already exists")]
    ConsumerGroupNameAlreadyExists { name: String },
    #[error("invalid consumer group name ({len} bytes; {NAME_LEN_MIN}..={NAME_LEN_MAX})")]
    InvalidConsumerGroupName { len: usize },
    #[error("member is not in consumer group {group_id}")]
    ConsumerGroupMemberNotFound { group_id: u32 },
    #[error("consumer group ids of this topic are exhausted")]
    ConsumerGroupIdsExhausted,
    #[error("consumer group {group_id} is full ({max} members)")]
    ConsumerGroupFull { group_id: u32, max: usize },
    #[error("topic {topic_id} already has {max} consumer groups")]
    TooManyConsumerGroups { topic_id: u32, max: usize },
    #[error("the metadata record is {bytes} bytes, more than the {max} allowed")]
    RecordTooLarge { bytes: usize, max: usize },
    #[error("the metadata would grow past {max} bytes (now {bytes}), the snapshot limit")]
    MetadataFull { bytes: usize, max: usize },
    #[error("partition storage ids are exhausted")]
    StorageIdsExhausted,
    #[error("unauthorized")]
    Unauthorized,
}

impl MetadataError {
    /// The status this error travels as (reply header offset 216).
    pub fn status(&self) -> Status {
        use MetadataError as E;
        match self {
            E::StreamNotFound { .. } => Status::StreamIdNotFound,
            E::StreamNameAlreadyExists { .. } => Status::StreamNameAlreadyExists,
            E::InvalidStreamName { .. } => Status::InvalidStreamName,
            E::TooManyStreams { .. } => Status::TooManyStreams,
            E::TopicNotFound { .. } => Status::TopicIdNotFound,
            E::TopicNameAlreadyExists { .. } => Status::TopicNameAlreadyExists,
            E::InvalidTopicName { .. } => Status::InvalidTopicName,
            E::TooManyTopics { .. } => Status::TooManyTopics,
            E::TooManyPartitions { .. } => Status::TooManyPartitions,
            E::InvalidPartitionsCount { .. } => Status::InvalidPartitionsCount,
            E::PartitionIdSpaceExhausted { .. } => Status::PartitionIdSpaceExhausted,
            E::InvalidTopicSize { .. } => Status::InvalidTopicSize,
            E::UnsupportedOptionKey { .. } => Status::UnsupportedOptionKey,
            E::InvalidOptionValue { .. } => Status::InvalidOptionValue,
            // Apache has no "user not found" code on this path; it answers
            // ResourceNotFound (§6.2).
            E::UserNotFound => Status::ResourceNotFound,
            E::InvalidUsername { .. } => Status::InvalidUsername,
            E::InvalidPassword { .. } => Status::InvalidPassword,
            E::UserAlreadyExists { .. } => Status::UserAlreadyExists,
            E::CannotDeleteUser => Status::CannotDeleteUser,
            E::CannotChangePermissions => Status::CannotChangePermissions,
            E::InvalidCredentials => Status::InvalidCredentials,
            E::InvalidPersonalAccessTokenName { .. } => Status::InvalidPersonalAccessTokenName,
            E::PersonalAccessTokenAlreadyExists { .. } => Status::PersonalAccessTokenAlreadyExists,
            E::PersonalAccessTokensLimitReached { .. } => Status::PersonalAccessTokensLimitReached,
            // DeletePersonalAccessToken of an unknown name → 20 (§6.3).
            E::PersonalAccessTokenNotFound { .. } => Status::ResourceNotFound,
            E::InvalidPersonalAccessToken => Status::InvalidPersonalAccessToken,
            E::PersonalAccessTokenExpired { .. } => Status::PersonalAccessTokenExpired,
            E::InvalidPersonalAccessTokenExpiry { .. } => Status::InvalidPersonalAccessTokenExpiry,
            E::UserInactive { .. } => Status::UserInactive,
            E::ConsumerGroupNotFound { .. } => Status::ConsumerGroupIdNotFound,
            E::ConsumerGroupNameAlreadyExists { .. } => Status::ConsumerGroupNameAlreadyExists,
            E::InvalidConsumerGroupName { .. } => Status::InvalidConsumerGroupName,
            E::ConsumerGroupMemberNotFound { .. } => Status::ConsumerGroupMemberNotFound,
            // Four billion groups created on one topic: nothing better than
            // the generic error exists on the wire.
            E::ConsumerGroupIdsExhausted
            | E::ConsumerGroupFull { .. }
            | E::TooManyConsumerGroups { .. }
            | E::MetadataFull { .. }
            | E::StorageIdsExhausted => Status::Error,
            // A request whose record (a permissions block, an option set)
            // is larger than a metadata record may be.
            E::RecordTooLarge { .. } => Status::InvalidFormat,
            E::Unauthorized => Status::Unauthorized,
        }
    }

    pub(crate) fn invalid_option(key: &str, reason: impl Into<String>) -> Self {
        Self::InvalidOptionValue {
            key: key.to_owned(),
            reason: reason.into(),
        }
    }
}
