//! The fixed 256-byte headers of protocol 0.11.0: request (client → server,
//! §2.2–§2.3), reply (§2.5) and eviction (§2.6).
//!
//! Decoding a header is infallible: it only lifts fields out of a fixed
//! array. Deciding whether the header is acceptable (size, command byte,
//! operation) is `frame.rs`'s job, and deciding what the body means is
//! `command.rs`'s. Reserved bytes are written as zero and ignored on read.

use super::codes::{
    EvictionReason, HEADER_COMMAND_EVICTION, HEADER_COMMAND_REPLY, HEADER_COMMAND_REQUEST, Status,
};
use super::limits::{HEADER_SIZE, PROTOCOL_VERSION, PROTOCOL_VERSION_MIN};

/// Reads `N` bytes at a constant offset of a header. The offsets used in
/// this file are all below 256 - N, so the fallback never happens; it exists
/// so that a typo becomes a zero field in a test, not a panic in production.
fn field<const N: usize>(header: &[u8; HEADER_SIZE], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(bytes) = at.checked_add(N).and_then(|end| header.get(at..end)) {
        out.copy_from_slice(bytes);
    }
    out
}

fn put<const N: usize>(header: &mut [u8; HEADER_SIZE], at: usize, bytes: [u8; N]) {
    if let Some(slot) = at.checked_add(N).and_then(|end| header.get_mut(at..end)) {
        slot.copy_from_slice(&bytes);
    }
}

/// Offsets shared by all header shapes (§2.2).
mod common {
    pub const CHECKSUM: usize = 0;
    pub const CHECKSUM_BODY: usize = 16;
    pub const CLUSTER: usize = 32;
    pub const SIZE: usize = 48;
    pub const VIEW: usize = 52;
    pub const RELEASE: usize = 56;
    pub const COMMAND: usize = 60;
    pub const REPLICA: usize = 61;
}

/// Request header (client → server).
///
/// | Offset | Size | Field |
/// |---|---|---|
/// | 0 | 16 | checksum (u128, 0) |
/// | 16 | 16 | checksum_body (u128, 0) |
/// | 32 | 16 | cluster (u128) |
/// | 48 | 4 | size = 256 + body length |
/// | 52 | 4 | view |
/// | 56 | 4 | release |
/// | 60 | 1 | command = 5 (Request) |
/// | 61 | 1 | replica |
/// | 62 | 66 | reserved |
/// | 128 | 16 | client id (u128) |
/// | 144 | 16 | request_checksum: XXH3-64 of the body zero-extended, or 0 |
/// | 160 | 8 | timestamp |
/// | 168 | 8 | request number |
/// | 176 | 1 | operation (§2.4) |
/// | 177 | 7 | padding |
/// | 184 | 8 | session |
/// | 192 | 4 | user_id (untrusted) |
/// | 196 | 4 | command code, only for operation 2 (NonReplicated) |
/// | 200 | 56 | reserved |
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RequestHeader {
    pub checksum: u128,
    pub checksum_body: u128,
    pub cluster: u128,
    pub size: u32,
    pub view: u32,
    pub release: u32,
    pub command: u8,
    pub replica: u8,
    pub client: u128,
    pub request_checksum: u128,
    pub timestamp: u64,
    pub request: u64,
    pub operation: u8,
    pub session: u64,
    pub user_id: u32,
    pub command_code: u32,
}

impl RequestHeader {
    const CLIENT: usize = 128;
    const REQUEST_CHECKSUM: usize = 144;
    const TIMESTAMP: usize = 160;
    const REQUEST: usize = 168;
    const OPERATION: usize = 176;
    const SESSION: usize = 184;
    const USER_ID: usize = 192;
    const COMMAND_CODE: usize = 196;

    pub fn decode(header: &[u8; HEADER_SIZE]) -> Self {
        Self {
            checksum: u128::from_le_bytes(field(header, common::CHECKSUM)),
            checksum_body: u128::from_le_bytes(field(header, common::CHECKSUM_BODY)),
            cluster: u128::from_le_bytes(field(header, common::CLUSTER)),
            size: u32::from_le_bytes(field(header, common::SIZE)),
            view: u32::from_le_bytes(field(header, common::VIEW)),
            release: u32::from_le_bytes(field(header, common::RELEASE)),
            command: u8::from_le_bytes(field(header, common::COMMAND)),
            replica: u8::from_le_bytes(field(header, common::REPLICA)),
            client: u128::from_le_bytes(field(header, Self::CLIENT)),
            request_checksum: u128::from_le_bytes(field(header, Self::REQUEST_CHECKSUM)),
            timestamp: u64::from_le_bytes(field(header, Self::TIMESTAMP)),
            request: u64::from_le_bytes(field(header, Self::REQUEST)),
            operation: u8::from_le_bytes(field(header, Self::OPERATION)),
            session: u64::from_le_bytes(field(header, Self::SESSION)),
            user_id: u32::from_le_bytes(field(header, Self::USER_ID)),
            command_code: u32::from_le_bytes(field(header, Self::COMMAND_CODE)),
        }
    }

    /// Encodes the header. Used by tests and tools that play the client.
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut header = [0u8; HEADER_SIZE];
        put(&mut header, common::CHECKSUM, self.checksum.to_le_bytes());
        put(
            &mut header,
            common::CHECKSUM_BODY,
            self.checksum_body.to_le_bytes(),
        );
        put(&mut header, common::CLUSTER, self.cluster.to_le_bytes());
        put(&mut header, common::SIZE, self.size.to_le_bytes());
        put(&mut header, common::VIEW, self.view.to_le_bytes());
        put(&mut header, common::RELEASE, self.release.to_le_bytes());
        put(&mut header, common::COMMAND, [self.command]);
        put(&mut header, common::REPLICA, [self.replica]);
        put(&mut header, Self::CLIENT, self.client.to_le_bytes());
        put(
            &mut header,
            Self::REQUEST_CHECKSUM,
            self.request_checksum.to_le_bytes(),
        );
        put(&mut header, Self::TIMESTAMP, self.timestamp.to_le_bytes());
        put(&mut header, Self::REQUEST, self.request.to_le_bytes());
        put(&mut header, Self::OPERATION, [self.operation]);
        put(&mut header, Self::SESSION, self.session.to_le_bytes());
        put(&mut header, Self::USER_ID, self.user_id.to_le_bytes());
        put(
            &mut header,
            Self::COMMAND_CODE,
            self.command_code.to_le_bytes(),
        );
        header
    }

    /// A request header as a 0.11.0 client builds it, for tests and tools:
    /// command 5, `size` = 256 + body length (saturating).
    pub fn client_request(operation: u8, command_code: u32, body_len: usize) -> Self {
        let body_len = u32::try_from(body_len).unwrap_or(u32::MAX);
        Self {
            size: body_len.saturating_add(HEADER_SIZE as u32),
            command: HEADER_COMMAND_REQUEST,
            operation,
            command_code,
            ..Self::default()
        }
    }
}

/// Reply header (server → client).
///
/// | Offset | Size | Field |
/// |---|---|---|
/// | 0..48 | | checksum, checksum_body (0), cluster (echo) |
/// | 48 | 4 | size = 256 + body length |
/// | 52 | 4 | view (echo) |
/// | 56 | 4 | release (echo) |
/// | 60 | 1 | command = 8 (Reply) |
/// | 61 | 67 | replica (0) and reserved |
/// | 128 | 16 | request_checksum (echo) |
/// | 144 | 16 | context (0) |
/// | 160 | 16 | client (echo of request bytes 128..144) |
/// | 176 | 8 | op = session number (0 when none) |
/// | 184 | 8 | commit, non-decreasing, ≥ op |
/// | 192 | 8 | timestamp (echo) |
/// | 200 | 8 | request (echo) |
/// | 208 | 1 | operation (echo; the SDK keys result-section stripping on it) |
/// | 209 | 7 | padding |
/// | 216 | 4 | status: 0 ok, else error code with an empty body |
/// | 220 | 36 | reserved |
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ReplyHeader {
    pub cluster: u128,
    pub size: u32,
    pub view: u32,
    pub release: u32,
    pub request_checksum: u128,
    pub context: u128,
    pub client: u128,
    pub op: u64,
    pub commit: u64,
    pub timestamp: u64,
    pub request: u64,
    pub operation: u8,
    pub status: u32,
}

impl ReplyHeader {
    const REQUEST_CHECKSUM: usize = 128;
    const CONTEXT: usize = 144;
    const CLIENT: usize = 160;
    const OP: usize = 176;
    const COMMIT: usize = 184;
    const TIMESTAMP: usize = 192;
    const REQUEST: usize = 200;
    const OPERATION: usize = 208;
    const STATUS: usize = 216;

    /// The reply to `request` following the echo rules of §2.5. `size` is
    /// `256 + body_len`; callers keep replies under the frame cap (see
    /// `reply::encode_reply`), and the saturation only guards arithmetic.
    pub fn for_request(
        request: &RequestHeader,
        status: Status,
        session: u64,
        commit: u64,
        body_len: usize,
    ) -> Self {
        let body_len = u32::try_from(body_len).unwrap_or(u32::MAX);
        Self {
            cluster: request.cluster,
            size: body_len.saturating_add(HEADER_SIZE as u32),
            view: request.view,
            release: request.release,
            request_checksum: request.request_checksum,
            context: 0,
            client: request.client,
            op: session,
            commit: commit.max(session),
            timestamp: request.timestamp,
            request: request.request,
            operation: request.operation,
            status: status.code(),
        }
    }

    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut header = [0u8; HEADER_SIZE];
        put(&mut header, common::CLUSTER, self.cluster.to_le_bytes());
        put(&mut header, common::SIZE, self.size.to_le_bytes());
        put(&mut header, common::VIEW, self.view.to_le_bytes());
        put(&mut header, common::RELEASE, self.release.to_le_bytes());
        put(&mut header, common::COMMAND, [HEADER_COMMAND_REPLY]);
        put(
            &mut header,
            Self::REQUEST_CHECKSUM,
            self.request_checksum.to_le_bytes(),
        );
        put(&mut header, Self::CONTEXT, self.context.to_le_bytes());
        put(&mut header, Self::CLIENT, self.client.to_le_bytes());
        put(&mut header, Self::OP, self.op.to_le_bytes());
        put(&mut header, Self::COMMIT, self.commit.to_le_bytes());
        put(&mut header, Self::TIMESTAMP, self.timestamp.to_le_bytes());
        put(&mut header, Self::REQUEST, self.request.to_le_bytes());
        put(&mut header, Self::OPERATION, [self.operation]);
        put(&mut header, Self::STATUS, self.status.to_le_bytes());
        header
    }

    /// Reads a reply header back (tests and tools playing the client).
    pub fn decode(header: &[u8; HEADER_SIZE]) -> Self {
        Self {
            cluster: u128::from_le_bytes(field(header, common::CLUSTER)),
            size: u32::from_le_bytes(field(header, common::SIZE)),
            view: u32::from_le_bytes(field(header, common::VIEW)),
            release: u32::from_le_bytes(field(header, common::RELEASE)),
            request_checksum: u128::from_le_bytes(field(header, Self::REQUEST_CHECKSUM)),
            context: u128::from_le_bytes(field(header, Self::CONTEXT)),
            client: u128::from_le_bytes(field(header, Self::CLIENT)),
            op: u64::from_le_bytes(field(header, Self::OP)),
            commit: u64::from_le_bytes(field(header, Self::COMMIT)),
            timestamp: u64::from_le_bytes(field(header, Self::TIMESTAMP)),
            request: u64::from_le_bytes(field(header, Self::REQUEST)),
            operation: u8::from_le_bytes(field(header, Self::OPERATION)),
            status: u32::from_le_bytes(field(header, Self::STATUS)),
        }
    }
}

/// Eviction header (server → client, header only, `size` = 256).
///
/// | Offset | Size | Field |
/// |---|---|---|
/// | 32 | 16 | cluster |
/// | 48 | 4 | size = 256 |
/// | 60 | 1 | command = 13 (Eviction) |
/// | 128 | 16 | client (must be non-zero; echo the request's) |
/// | 144 | 4 | server_protocol_version (max accepted; reason 14 only, else 0) |
/// | 148 | 4 | server_protocol_version_min (reason 14 only, else 0) |
/// | 152 | 103 | reserved |
/// | 255 | 1 | reason (§2.6) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EvictionHeader {
    pub cluster: u128,
    pub client: u128,
    pub server_protocol_version: u32,
    pub server_protocol_version_min: u32,
    pub reason: EvictionReason,
}

impl EvictionHeader {
    const CLIENT: usize = 128;
    const VERSION_MAX: usize = 144;
    const VERSION_MIN: usize = 148;
    const REASON: usize = 255;

    /// An eviction for the client of `request`. The protocol versions are
    /// filled in only for `IncompatibleProtocol`, as the SDK expects. A
    /// request with client id 0 (which no 0.11.0 SDK sends) gets client 1,
    /// because the SDK refuses an eviction with a zero client.
    pub fn for_request(request: &RequestHeader, reason: EvictionReason) -> Self {
        let incompatible = reason == EvictionReason::IncompatibleProtocol;
        Self {
            cluster: request.cluster,
            client: request.client.max(1),
            server_protocol_version: if incompatible { PROTOCOL_VERSION } else { 0 },
            server_protocol_version_min: if incompatible {
                PROTOCOL_VERSION_MIN
            } else {
                0
            },
            reason,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut header = [0u8; HEADER_SIZE];
        put(&mut header, common::CLUSTER, self.cluster.to_le_bytes());
        put(
            &mut header,
            common::SIZE,
            (HEADER_SIZE as u32).to_le_bytes(),
        );
        put(&mut header, common::COMMAND, [HEADER_COMMAND_EVICTION]);
        put(&mut header, Self::CLIENT, self.client.to_le_bytes());
        put(
            &mut header,
            Self::VERSION_MAX,
            self.server_protocol_version.to_le_bytes(),
        );
        put(
            &mut header,
            Self::VERSION_MIN,
            self.server_protocol_version_min.to_le_bytes(),
        );
        put(&mut header, Self::REASON, [self.reason as u8]);
        header
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves every request header field sits at its §2.3 offset and that
    // decode(encode(h)) == h.
    #[test]
    fn request_header_offsets_and_round_trip() {
        let request = RequestHeader {
            checksum: 1,
            checksum_body: 2,
            cluster: 3,
            size: 300,
            view: 4,
            release: 5,
            command: 5,
            replica: 6,
            client: 0x1122_3344_5566_7788_99AA_BBCC_DDEE_FF00,
            request_checksum: 7,
            timestamp: 8,
            request: 9,
            operation: 2,
            session: 10,
            user_id: 11,
            command_code: 12,
        };
        let bytes = request.encode();
        assert_eq!(&bytes[48..52], &300u32.to_le_bytes());
        assert_eq!(bytes[60], 5);
        assert_eq!(&bytes[128..144], &request.client.to_le_bytes());
        assert_eq!(&bytes[144..160], &7u128.to_le_bytes());
        assert_eq!(&bytes[168..176], &9u64.to_le_bytes());
        assert_eq!(bytes[176], 2);
        assert_eq!(&bytes[184..192], &10u64.to_le_bytes());
        assert_eq!(&bytes[196..200], &12u32.to_le_bytes());
        assert!(bytes[200..].iter().all(|byte| *byte == 0));
        assert_eq!(RequestHeader::decode(&bytes), request);
    }

    // Proves the reply echo rules of §2.5 at exact offsets.
    #[test]
    fn reply_header_echoes_request() {
        let request = RequestHeader {
            client: 0xABCD,
            request_checksum: 0x1234,
            timestamp: 77,
            request: 5,
            operation: 132,
            ..RequestHeader::client_request(132, 0, 10)
        };
        let reply = ReplyHeader::for_request(&request, Status::StreamNameAlreadyExists, 42, 50, 0);
        let bytes = reply.encode();
        assert_eq!(&bytes[48..52], &256u32.to_le_bytes());
        assert_eq!(bytes[60], 8);
        assert_eq!(&bytes[128..144], &0x1234u128.to_le_bytes());
        assert_eq!(&bytes[144..160], &[0u8; 16]);
        assert_eq!(&bytes[160..176], &0xABCDu128.to_le_bytes());
        assert_eq!(&bytes[176..184], &42u64.to_le_bytes());
        assert_eq!(&bytes[184..192], &50u64.to_le_bytes());
        assert_eq!(&bytes[192..200], &77u64.to_le_bytes());
        assert_eq!(&bytes[200..208], &5u64.to_le_bytes());
        assert_eq!(bytes[208], 132);
        assert_eq!(&bytes[216..220], &1012u32.to_le_bytes());
        assert!(bytes[220..].iter().all(|byte| *byte == 0));
        assert_eq!(ReplyHeader::decode(&bytes), reply);
        // commit never goes below op.
        assert_eq!(
            ReplyHeader::for_request(&request, Status::Ok, 42, 3, 0).commit,
            42
        );
    }

    // Proves the eviction layout of §2.6, versions only for reason 14.
    #[test]
    fn eviction_header_layout() {
        let request = RequestHeader {
            client: 99,
            ..RequestHeader::default()
        };
        let bytes =
            EvictionHeader::for_request(&request, EvictionReason::IncompatibleProtocol).encode();
        assert_eq!(&bytes[48..52], &256u32.to_le_bytes());
        assert_eq!(bytes[60], 13);
        assert_eq!(&bytes[128..144], &99u128.to_le_bytes());
        assert_eq!(&bytes[144..148], &[0x00, 0x2C, 0x00, 0x00]);
        assert_eq!(&bytes[148..152], &[0x00, 0x2C, 0x00, 0x00]);
        assert_eq!(bytes[255], 14);
        let bytes = EvictionHeader::for_request(
            &RequestHeader::default(),
            EvictionReason::InvalidCredentials,
        )
        .encode();
        assert_eq!(&bytes[128..144], &1u128.to_le_bytes());
        assert_eq!(&bytes[144..152], &[0u8; 8]);
        assert_eq!(bytes[255], 9);
    }
}
