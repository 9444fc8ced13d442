//! The compatibility table: command codes, operation bytes and the mapping
//! between them (§2.4), wire status codes (§2.8), eviction reasons (§2.6)
//! and which reply operations carry a result section (§2.7).
//!
//! This is the single place where a number of the Iggy 0.11.0 wire gets a
//! name. It holds no behaviour beyond lookups, so that every other module
//! (and every reviewer) can check a code against one table.

/// Legacy command codes. Replicated commands never carry them on the wire
/// (the operation byte identifies them); non-replicated requests carry theirs
/// at header bytes 196..200 (§2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum CommandCode {
    Ping = 1,
    GetStats = 10,
    GetSnapshot = 11,
    GetClusterMetadata = 12,
    DescribeOptions = 13,
    AttachConsumerSession = 14,
    GetMe = 20,
    GetClient = 21,
    GetClients = 22,
    GetUser = 31,
    GetUsers = 32,
    CreateUser = 33,
    DeleteUser = 34,
    UpdateUser = 35,
    UpdatePermissions = 36,
    ChangePassword = 37,
    LoginUserLegacy = 38,
    LogoutUser = 39,
    LoginRegister = 40,
    GetPersonalAccessTokens = 41,
    CreatePersonalAccessToken = 42,
    DeletePersonalAccessToken = 43,
    LoginWithPersonalAccessTokenLegacy = 44,
    LoginRegisterWithPersonalAccessToken = 45,
    PollMessages = 100,
    SendMessages = 101,
    FlushUnsavedBuffer = 102,
    GetPollRouting = 103,
    PollMessagesOnPrimary = 104,
    GetConsumerOffset = 120,
    StoreConsumerOffset = 121,
    DeleteConsumerOffset = 122,
    GetConsumerOffsetRouting = 123,
    GetStream = 200,
    GetStreams = 201,
    CreateStream = 202,
    DeleteStream = 203,
    UpdateStream = 204,
    PurgeStream = 205,
    GetTopic = 300,
    GetTopics = 301,
    CreateTopic = 302,
    DeleteTopic = 303,
    UpdateTopic = 304,
    PurgeTopic = 305,
    CreatePartitions = 402,
    DeletePartitions = 403,
    DeleteSegments = 503,
    GetConsumerGroup = 600,
    GetConsumerGroups = 601,
    CreateConsumerGroup = 602,
    DeleteConsumerGroup = 603,
    JoinConsumerGroup = 604,
    LeaveConsumerGroup = 605,
    SyncConsumerGroup = 606,
}

impl CommandCode {
    /// Every known code, in numeric order (used by tests and fuzzing).
    pub const ALL: [CommandCode; 55] = [
        Self::Ping,
        Self::GetStats,
        Self::GetSnapshot,
        Self::GetClusterMetadata,
        Self::DescribeOptions,
        Self::AttachConsumerSession,
        Self::GetMe,
        Self::GetClient,
        Self::GetClients,
        Self::GetUser,
        Self::GetUsers,
        Self::CreateUser,
        Self::DeleteUser,
        Self::UpdateUser,
        Self::UpdatePermissions,
        Self::ChangePassword,
        Self::LoginUserLegacy,
        Self::LogoutUser,
        Self::LoginRegister,
        Self::GetPersonalAccessTokens,
        Self::CreatePersonalAccessToken,
        Self::DeletePersonalAccessToken,
        Self::LoginWithPersonalAccessTokenLegacy,
        Self::LoginRegisterWithPersonalAccessToken,
        Self::PollMessages,
        Self::SendMessages,
        Self::FlushUnsavedBuffer,
        Self::GetPollRouting,
        Self::PollMessagesOnPrimary,
        Self::GetConsumerOffset,
        Self::StoreConsumerOffset,
        Self::DeleteConsumerOffset,
        Self::GetConsumerOffsetRouting,
        Self::GetStream,
        Self::GetStreams,
        Self::CreateStream,
        Self::DeleteStream,
        Self::UpdateStream,
        Self::PurgeStream,
        Self::GetTopic,
        Self::GetTopics,
        Self::CreateTopic,
        Self::DeleteTopic,
        Self::UpdateTopic,
        Self::PurgeTopic,
        Self::CreatePartitions,
        Self::DeletePartitions,
        Self::DeleteSegments,
        Self::GetConsumerGroup,
        Self::GetConsumerGroups,
        Self::CreateConsumerGroup,
        Self::DeleteConsumerGroup,
        Self::JoinConsumerGroup,
        Self::LeaveConsumerGroup,
        Self::SyncConsumerGroup,
    ];

    /// Looks a code up; `None` for codes this protocol version does not know.
    pub fn from_u32(code: u32) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|known| *known as u32 == code)
    }

    /// The operation byte a 0.11.0 client uses for this command (§2.4).
    /// Codes without a replicated operation travel as `NonReplicated`.
    pub fn operation(self) -> Operation {
        use CommandCode as C;
        match self {
            C::LoginRegister | C::LoginRegisterWithPersonalAccessToken => Operation::Register,
            C::LogoutUser => Operation::Logout,
            C::CreateStream => Operation::CreateStream,
            C::UpdateStream => Operation::UpdateStream,
            C::DeleteStream => Operation::DeleteStream,
            C::PurgeStream => Operation::PurgeStream,
            C::CreateTopic => Operation::CreateTopic,
            C::UpdateTopic => Operation::UpdateTopic,
            C::DeleteTopic => Operation::DeleteTopic,
            C::PurgeTopic => Operation::PurgeTopic,
            C::CreatePartitions => Operation::CreatePartitions,
            C::DeletePartitions => Operation::DeletePartitions,
            C::DeleteSegments => Operation::DeleteSegments,
            C::CreateConsumerGroup => Operation::CreateConsumerGroup,
            C::DeleteConsumerGroup => Operation::DeleteConsumerGroup,
            C::CreateUser => Operation::CreateUser,
            C::UpdateUser => Operation::UpdateUser,
            C::DeleteUser => Operation::DeleteUser,
            C::ChangePassword => Operation::ChangePassword,
            C::UpdatePermissions => Operation::UpdatePermissions,
            C::CreatePersonalAccessToken => Operation::CreatePersonalAccessToken,
            C::DeletePersonalAccessToken => Operation::DeletePersonalAccessToken,
            C::JoinConsumerGroup => Operation::JoinConsumerGroup,
            C::LeaveConsumerGroup => Operation::LeaveConsumerGroup,
            C::SendMessages => Operation::SendMessages,
            C::StoreConsumerOffset => Operation::StoreConsumerOffset,
            C::DeleteConsumerOffset => Operation::DeleteConsumerOffset,
            C::Ping
            | C::GetStats
            | C::GetSnapshot
            | C::GetClusterMetadata
            | C::DescribeOptions
            | C::AttachConsumerSession
            | C::GetMe
            | C::GetClient
            | C::GetClients
            | C::GetUser
            | C::GetUsers
            | C::LoginUserLegacy
            | C::GetPersonalAccessTokens
            | C::LoginWithPersonalAccessTokenLegacy
            | C::PollMessages
            | C::FlushUnsavedBuffer
            | C::GetPollRouting
            | C::PollMessagesOnPrimary
            | C::GetConsumerOffset
            | C::GetConsumerOffsetRouting
            | C::GetStream
            | C::GetStreams
            | C::GetTopic
            | C::GetTopics
            | C::GetConsumerGroup
            | C::GetConsumerGroups
            | C::SyncConsumerGroup => Operation::NonReplicated,
        }
    }

    /// True for the cluster-routing codes of §6.11, which a single node
    /// answers with status 3 (the SDK only sends them to multi-node rosters).
    pub fn is_cluster_routing(self) -> bool {
        matches!(
            self,
            Self::AttachConsumerSession
                | Self::GetPollRouting
                | Self::PollMessagesOnPrimary
                | Self::GetConsumerOffsetRouting
        )
    }
}

/// The operation byte at request header offset 176 / reply offset 208 (§2.4).
///
/// Only the values a client may send are listed; replica-internal values
/// (0, 64..=68) are deliberately absent so that decoding them fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Operation {
    Register = 1,
    NonReplicated = 2,
    Logout = 3,
    CreateStream = 128,
    UpdateStream = 129,
    DeleteStream = 130,
    PurgeStream = 131,
    CreateTopic = 132,
    UpdateTopic = 133,
    DeleteTopic = 134,
    PurgeTopic = 135,
    CreatePartitions = 136,
    DeletePartitions = 137,
    DeleteSegments = 138,
    CreateConsumerGroup = 139,
    DeleteConsumerGroup = 140,
    CreateUser = 141,
    UpdateUser = 142,
    DeleteUser = 143,
    ChangePassword = 144,
    UpdatePermissions = 145,
    CreatePersonalAccessToken = 146,
    DeletePersonalAccessToken = 147,
    JoinConsumerGroup = 148,
    LeaveConsumerGroup = 149,
    SendMessages = 160,
    StoreConsumerOffset = 161,
    DeleteConsumerOffset = 162,
}

impl Operation {
    /// Every operation a client may send.
    pub const ALL: [Operation; 28] = [
        Self::Register,
        Self::NonReplicated,
        Self::Logout,
        Self::CreateStream,
        Self::UpdateStream,
        Self::DeleteStream,
        Self::PurgeStream,
        Self::CreateTopic,
        Self::UpdateTopic,
        Self::DeleteTopic,
        Self::PurgeTopic,
        Self::CreatePartitions,
        Self::DeletePartitions,
        Self::DeleteSegments,
        Self::CreateConsumerGroup,
        Self::DeleteConsumerGroup,
        Self::CreateUser,
        Self::UpdateUser,
        Self::DeleteUser,
        Self::ChangePassword,
        Self::UpdatePermissions,
        Self::CreatePersonalAccessToken,
        Self::DeletePersonalAccessToken,
        Self::JoinConsumerGroup,
        Self::LeaveConsumerGroup,
        Self::SendMessages,
        Self::StoreConsumerOffset,
        Self::DeleteConsumerOffset,
    ];

    /// Looks an operation byte up; `None` for bytes no client sends.
    pub fn from_u8(byte: u8) -> Option<Self> {
        Self::ALL.iter().copied().find(|known| *known as u8 == byte)
    }

    /// The command code a replicated operation stands for. `Register`
    /// answers 40 although 45 shares the byte (§6.2); `NonReplicated` has no
    /// fixed code (it is in the header), so it answers `None`.
    pub fn command_code(self) -> Option<CommandCode> {
        use Operation as O;
        let code = match self {
            O::NonReplicated => return None,
            O::Register => CommandCode::LoginRegister,
            O::Logout => CommandCode::LogoutUser,
            O::CreateStream => CommandCode::CreateStream,
            O::UpdateStream => CommandCode::UpdateStream,
            O::DeleteStream => CommandCode::DeleteStream,
            O::PurgeStream => CommandCode::PurgeStream,
            O::CreateTopic => CommandCode::CreateTopic,
            O::UpdateTopic => CommandCode::UpdateTopic,
            O::DeleteTopic => CommandCode::DeleteTopic,
            O::PurgeTopic => CommandCode::PurgeTopic,
            O::CreatePartitions => CommandCode::CreatePartitions,
            O::DeletePartitions => CommandCode::DeletePartitions,
            O::DeleteSegments => CommandCode::DeleteSegments,
            O::CreateConsumerGroup => CommandCode::CreateConsumerGroup,
            O::DeleteConsumerGroup => CommandCode::DeleteConsumerGroup,
            O::CreateUser => CommandCode::CreateUser,
            O::UpdateUser => CommandCode::UpdateUser,
            O::DeleteUser => CommandCode::DeleteUser,
            O::ChangePassword => CommandCode::ChangePassword,
            O::UpdatePermissions => CommandCode::UpdatePermissions,
            O::CreatePersonalAccessToken => CommandCode::CreatePersonalAccessToken,
            O::DeletePersonalAccessToken => CommandCode::DeletePersonalAccessToken,
            O::JoinConsumerGroup => CommandCode::JoinConsumerGroup,
            O::LeaveConsumerGroup => CommandCode::LeaveConsumerGroup,
            O::SendMessages => CommandCode::SendMessages,
            O::StoreConsumerOffset => CommandCode::StoreConsumerOffset,
            O::DeleteConsumerOffset => CommandCode::DeleteConsumerOffset,
        };
        Some(code)
    }

    /// True for operations that change replicated state and therefore need a
    /// session (everything except `Register` and `NonReplicated`).
    pub fn is_replicated(self) -> bool {
        !matches!(self, Self::Register | Self::NonReplicated)
    }
}

/// Whether a reply with this operation byte starts with a result section
/// (§2.7). Takes the raw byte because replies echo whatever the request
/// carried. `Register` is result-framed only when the body is non-empty,
/// which is always the case for a successful login; errors travel as status
/// with an empty body, which the SDK never strips.
pub fn is_result_framed(operation: u8) -> bool {
    matches!(operation, 1 | 64..=68 | 128..=137 | 139..=149 | 161 | 162)
}

/// Wire status codes (reply header offset 216) and result-section error
/// codes, from `iggy_common` 0.11.0 `IggyError` (§2.8). `Ok` is 0; every
/// other value makes the SDK raise the error of that number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Status {
    Ok = 0,
    Error = 1,
    InvalidConfiguration = 2,
    InvalidCommand = 3,
    InvalidFormat = 4,
    FeatureUnavailable = 5,
    InvalidIdentifier = 6,
    ResourceNotFound = 20,
    StaleClient = 30,
    Unauthenticated = 40,
    Unauthorized = 41,
    InvalidCredentials = 42,
    InvalidUsername = 43,
    InvalidPassword = 44,
    InvalidUserStatus = 45,
    UserAlreadyExists = 46,
    UserInactive = 47,
    CannotDeleteUser = 48,
    CannotChangePermissions = 49,
    InvalidPersonalAccessTokenName = 50,
    PersonalAccessTokenAlreadyExists = 51,
    PersonalAccessTokensLimitReached = 52,
    InvalidPersonalAccessToken = 53,
    PersonalAccessTokenExpired = 54,
    InvalidPersonalAccessTokenExpiry = 56,
    TransientNotCommitted = 57,
    TransientNotAccepted = 58,
    RequestAlreadyApplied = 59,
    ClientNotFound = 100,
    InvalidClientId = 101,
    StreamIdNotFound = 1009,
    StreamNameNotFound = 1010,
    StreamNameAlreadyExists = 1012,
    InvalidStreamName = 1013,
    InvalidTopicSize = 1019,
    TooManyStreams = 1020,
    TopicIdNotFound = 2010,
    TopicNameNotFound = 2011,
    TopicNameAlreadyExists = 2013,
    InvalidTopicName = 2014,
    TooManyPartitions = 2015,
    InvalidPartitionsCount = 2019,
    TooManyTopics = 2021,
    PartitionNotFound = 3007,
    NoPartitions = 3008,
    PartitionIdSpaceExhausted = 3013,
    ConsumerOffsetNotFound = 3021,
    TooManyConsumerOffsets = 3024,
    InvalidMessagesCount = 4009,
    TooBigUserHeaders = 4017,
    TooBigMessagePayload = 4022,
    InvalidMessagePayloadLength = 4025,
    InvalidMessageChecksum = 4027,
    InvalidMessageTimestampDelta = 4038,
    InvalidBatchChecksum = 4039,
    UnsupportedOptionKey = 4041,
    InvalidOptionValue = 4042,
    OptionsBlockTooLarge = 4043,
    InvalidOffset = 4100,
    ConsumerGroupIdNotFound = 5000,
    ConsumerGroupNameNotFound = 5003,
    ConsumerGroupNameAlreadyExists = 5004,
    InvalidConsumerGroupName = 5005,
    ConsumerGroupMemberNotFound = 5006,
    ConsumerGroupPartitionNotOwned = 5009,
}

impl Status {
    /// The number that goes on the wire.
    pub fn code(self) -> u32 {
        self as u32
    }
}

/// Reason byte of an eviction header (offset 255, §2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EvictionReason {
    NoSession = 1,
    ClientReleaseTooLow = 2,
    ClientReleaseTooHigh = 3,
    InvalidRequestOperation = 4,
    InvalidRequestBody = 5,
    InvalidRequestBodySize = 6,
    SessionTooLow = 7,
    SessionReleaseMismatch = 8,
    InvalidCredentials = 9,
    InvalidToken = 10,
    UserInactive = 11,
    SessionError = 12,
    StaleClient = 13,
    IncompatibleProtocol = 14,
    MalformedLogin = 15,
}

/// Header command byte (offset 60) of a client request (§2.2).
pub const HEADER_COMMAND_REQUEST: u8 = 5;
/// Header command byte of a reply.
pub const HEADER_COMMAND_REPLY: u8 = 8;
/// Header command byte of an eviction.
pub const HEADER_COMMAND_EVICTION: u8 = 13;

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the code <-> operation mapping is a bijection on the
    // replicated operations and that every known code round-trips by number.
    #[test]
    fn code_operation_mapping_is_consistent() {
        for code in CommandCode::ALL {
            assert_eq!(CommandCode::from_u32(code as u32), Some(code));
            let operation = code.operation();
            if operation != Operation::NonReplicated && operation != Operation::Register {
                assert_eq!(operation.command_code(), Some(code));
            }
        }
        for operation in Operation::ALL {
            assert_eq!(Operation::from_u8(operation as u8), Some(operation));
            if let Some(code) = operation.command_code() {
                assert_eq!(code.operation(), operation);
            }
        }
        assert_eq!(Operation::from_u8(0), None);
        assert_eq!(Operation::from_u8(64), None);
        assert_eq!(CommandCode::from_u32(0), None);
        assert_eq!(CommandCode::from_u32(16), None);
    }

    // Proves the result-framed set matches the "yes" column of §2.4.
    #[test]
    fn result_framed_matches_reference_table() {
        let framed: Vec<u8> = Operation::ALL
            .iter()
            .map(|operation| *operation as u8)
            .filter(|byte| is_result_framed(*byte))
            .collect();
        let expected: Vec<u8> = vec![
            1, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 139, 140, 141, 142, 143, 144, 145,
            146, 147, 148, 149, 161, 162,
        ];
        assert_eq!(framed, expected);
        assert!(!is_result_framed(2));
        assert!(!is_result_framed(3));
        assert!(!is_result_framed(138));
        assert!(!is_result_framed(160));
    }
}
