//! The fixed 256-byte headers of protocol 0.11.0: request (client → server,
//! §2.2–§2.3), reply (§2.5) and eviction (§2.6).
//!
//! Decoding a header is infallible: it only lifts fields out of a fixed
//! array. Deciding whether the header is acceptable (size, command byte,
//! operation) is `frame.rs`'s job, and deciding what the body means is
//! `command.rs`'s. Reserved bytes are written as zero and ignored on read.
//!
//! Each header states its layout once, in a `walk` that names every field
//! with its offset (the table on the type, in code); decoding and encoding
//! both go through it, so the two directions cannot drift apart.

use super::codes::{
    EvictionReason, HEADER_COMMAND_EVICTION, HEADER_COMMAND_REPLY, HEADER_COMMAND_REQUEST, Status,
};
use super::limits::{HEADER_SIZE, PROTOCOL_VERSION, PROTOCOL_VERSION_MIN};

/// A little-endian integer at a constant offset of a header. Every offset
/// used in this file is below 256 - size, so the bounds checks never fail;
/// they exist so that a typo becomes a zero field in a test, not a panic in
/// production.
trait Field: Copy {
    fn read(header: &[u8; HEADER_SIZE], at: usize) -> Self;
    fn write(self, header: &mut [u8; HEADER_SIZE], at: usize);
}

macro_rules! little_endian_field {
    ($($int:ty),*) => {$(
        impl Field for $int {
            fn read(header: &[u8; HEADER_SIZE], at: usize) -> Self {
                let mut bytes = [0u8; size_of::<$int>()];
                if let Some(found) = at.checked_add(bytes.len()).and_then(|end| header.get(at..end)) {
                    bytes.copy_from_slice(found);
                }
                Self::from_le_bytes(bytes)
            }

            fn write(self, header: &mut [u8; HEADER_SIZE], at: usize) {
                let bytes = self.to_le_bytes();
                if let Some(slot) = at.checked_add(bytes.len()).and_then(|end| header.get_mut(at..end)) {
                    slot.copy_from_slice(&bytes);
                }
            }
        }
    )*};
}

little_endian_field!(u8, u32, u64, u128);

/// One direction of a pass over a header's fields.
enum Walk<'a> {
    /// Fields take their values from these bytes.
    Decode(&'a [u8; HEADER_SIZE]),
    /// Fields write their values into these bytes.
    Encode(&'a mut [u8; HEADER_SIZE]),
}

impl Walk<'_> {
    fn field<T: Field>(&mut self, at: usize, value: &mut T) {
        match self {
            Walk::Decode(header) => *value = T::read(header, at),
            Walk::Encode(header) => value.write(header, at),
        }
    }
}

/// A header decoded by its `walk`.
fn decode_fields<H: Default>(header: &[u8; HEADER_SIZE], walk: fn(&mut H, &mut Walk<'_>)) -> H {
    let mut decoded = H::default();
    walk(&mut decoded, &mut Walk::Decode(header));
    decoded
}

/// A header encoded by its `walk`; bytes it does not name stay zero.
fn encode_fields<H>(mut fields: H, walk: fn(&mut H, &mut Walk<'_>)) -> [u8; HEADER_SIZE] {
    let mut header = [0u8; HEADER_SIZE];
    walk(&mut fields, &mut Walk::Encode(&mut header));
    header
}

/// The command byte of the common prefix (§2.2).
pub const COMMAND_AT: usize = 60;
/// The `size` field (u32 LE, the whole frame with its header) of the common
/// prefix (§2.2), the only field read before a frame is complete.
pub const SIZE_AT: usize = 48;

/// The `size` field of a header's first bytes, or `None` while fewer than
/// its four bytes are there.
pub fn declared_size(header: &[u8]) -> Option<u32> {
    let bytes = header.get(SIZE_AT..SIZE_AT + 4)?;
    let mut size = [0u8; 4];
    size.copy_from_slice(bytes);
    Some(u32::from_le_bytes(size))
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
    /// The table above, in code.
    fn walk(&mut self, walk: &mut Walk<'_>) {
        walk.field(0, &mut self.checksum);
        walk.field(16, &mut self.checksum_body);
        walk.field(32, &mut self.cluster);
        walk.field(SIZE_AT, &mut self.size);
        walk.field(52, &mut self.view);
        walk.field(56, &mut self.release);
        walk.field(COMMAND_AT, &mut self.command);
        walk.field(61, &mut self.replica);
        walk.field(128, &mut self.client);
        walk.field(144, &mut self.request_checksum);
        walk.field(160, &mut self.timestamp);
        walk.field(168, &mut self.request);
        walk.field(176, &mut self.operation);
        walk.field(184, &mut self.session);
        walk.field(192, &mut self.user_id);
        walk.field(196, &mut self.command_code);
    }

    pub fn decode(header: &[u8; HEADER_SIZE]) -> Self {
        decode_fields(header, Self::walk)
    }

    /// Encodes the header. Used by tests and tools that play the client.
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        encode_fields(*self, Self::walk)
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
    /// The table above, in code, but for the command byte, which is the
    /// constant 8 and not a field.
    fn walk(&mut self, walk: &mut Walk<'_>) {
        walk.field(32, &mut self.cluster);
        walk.field(SIZE_AT, &mut self.size);
        walk.field(52, &mut self.view);
        walk.field(56, &mut self.release);
        walk.field(128, &mut self.request_checksum);
        walk.field(144, &mut self.context);
        walk.field(160, &mut self.client);
        walk.field(176, &mut self.op);
        walk.field(184, &mut self.commit);
        walk.field(192, &mut self.timestamp);
        walk.field(200, &mut self.request);
        walk.field(208, &mut self.operation);
        walk.field(216, &mut self.status);
    }

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
        let mut header = encode_fields(*self, Self::walk);
        HEADER_COMMAND_REPLY.write(&mut header, COMMAND_AT);
        header
    }

    /// Reads a reply header back (tests and tools playing the client).
    pub fn decode(header: &[u8; HEADER_SIZE]) -> Self {
        decode_fields(header, Self::walk)
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

    /// The table above, in code (the server never reads an eviction).
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut header = [0u8; HEADER_SIZE];
        self.cluster.write(&mut header, 32);
        (HEADER_SIZE as u32).write(&mut header, SIZE_AT);
        HEADER_COMMAND_EVICTION.write(&mut header, COMMAND_AT);
        self.client.write(&mut header, 128);
        self.server_protocol_version.write(&mut header, 144);
        self.server_protocol_version_min.write(&mut header, 148);
        (self.reason as u8).write(&mut header, 255);
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
