//! The Iggy 0.11.0 TCP framing as a client sees it, stated here on its own
//! (from the wire reference, `shared/iggy-tcp-protocol.md`; § numbers below)
//! rather than borrowed from the daemon, so the daemon's decoder is checked
//! against an independent encoder.
//!
//! A request is a 256-byte VSR header followed by the body; a reply or an
//! eviction is a 256-byte header followed by the reply body. This module
//! owns the request header (`Header`), raw frame I/O (`connect`,
//! `exchange`, `read_frame`) and the reply (`Reply`, with its result
//! section); `request` owns the bodies of every command and `client` a
//! logged-in blocking connection. Nothing here decides what a reply means
//! beyond its framing.

pub mod client;
pub mod request;

pub use client::{Client, ClientError, SendFrame};
pub use request::{
    Body, Consumer, Identifier, OptionEntry, Partitioning, PollingStrategy, Request, Version,
};

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Every header is this long (§2.2).
pub const HEADER_SIZE: usize = 256;
/// Header byte 60: what the frame is.
pub const COMMAND_REQUEST: u8 = 5;
pub const COMMAND_REPLY: u8 = 8;
pub const COMMAND_EVICTION: u8 = 13;
/// Operation bytes with a meaning of their own (§2.4): login, and every
/// request that carries its command code in the header instead.
pub const OPERATION_REGISTER: u8 = 1;
pub const OPERATION_NON_REPLICATED: u8 = 2;
/// Operations whose requests the SDK does not stamp with a checksum:
/// non-replicated requests and the three partition operations (§2.3).
const OPERATIONS_UNSTAMPED: [u8; 4] = [OPERATION_NON_REPLICATED, 160, 161, 162];
/// A reply larger than this is refused (the 64 MiB frame cap, §2.9).
pub const FRAME_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Generous: a debug daemon on a loaded 2-core machine.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(20);

/// The fields of a request header a client sets (§2.3); every other byte
/// is zero.
///
/// | Offset | Size | Field |
/// |---|---|---|
/// | 48 | 4 | size = 256 + body length |
/// | 60 | 1 | command = 5 (Request) |
/// | 128 | 16 | client id |
/// | 144 | 16 | request checksum: XXH3-64 of the body zero-extended, or 0 |
/// | 168 | 8 | request number |
/// | 176 | 1 | operation |
/// | 184 | 8 | session |
/// | 196 | 4 | command code (NonReplicated only) |
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Header {
    pub size: u32,
    pub command: u8,
    pub client: u128,
    pub request_checksum: u128,
    pub request: u64,
    pub operation: u8,
    pub session: u64,
    pub code: u32,
}

impl Header {
    /// A request header for a body of `body_len` bytes, everything else 0.
    pub fn new(operation: u8, code: u32, body_len: usize) -> Header {
        Header {
            size: u32::try_from(HEADER_SIZE + body_len).unwrap_or(u32::MAX),
            command: COMMAND_REQUEST,
            operation,
            code,
            ..Header::default()
        }
    }

    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let fields: [(usize, &[u8]); 8] = [
            (48, &self.size.to_le_bytes()),
            (60, &[self.command]),
            (128, &self.client.to_le_bytes()),
            (144, &self.request_checksum.to_le_bytes()),
            (168, &self.request.to_le_bytes()),
            (176, &[self.operation]),
            (184, &self.session.to_le_bytes()),
            (196, &self.code.to_le_bytes()),
        ];
        let mut bytes = [0u8; HEADER_SIZE];
        for (at, value) in fields {
            bytes[at..at + value.len()].copy_from_slice(value);
        }
        bytes
    }

    /// `[header][body]`.
    pub fn frame(&self, body: &[u8]) -> Vec<u8> {
        let mut frame = Vec::with_capacity(HEADER_SIZE + body.len());
        frame.extend_from_slice(&self.encode());
        frame.extend_from_slice(body);
        frame
    }
}

/// The checksum a client stamps: XXH3-64 (seed 0) of the body, zero-extended.
pub fn request_checksum(body: &[u8]) -> u128 {
    u128::from(xxhash_rust::xxh3::xxh3_64(body))
}

/// Whether the SDK stamps a request of this operation with its checksum.
pub fn is_stamped(operation: u8) -> bool {
    !OPERATIONS_UNSTAMPED.contains(&operation)
}

/// Whether an operation moves the session's request counter: everything
/// but login and non-replicated requests (§2.3).
pub fn is_replicated(operation: u8) -> bool {
    !matches!(operation, OPERATION_REGISTER | OPERATION_NON_REPLICATED)
}

/// Whether a reply with this operation byte starts with a result section
/// (§2.7): login, logout, every metadata operation and the two offset ones.
pub fn is_result_framed(operation: u8) -> bool {
    matches!(operation, 1 | 64..=68 | 128..=137 | 139..=149 | 161 | 162)
}

/// One reply or eviction frame as read off the socket.
#[derive(Debug, Clone)]
pub struct Reply {
    pub header: [u8; HEADER_SIZE],
    pub body: Vec<u8>,
}

impl Reply {
    fn u32_at(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.header[at..at + 4].try_into().expect("4 bytes"))
    }
    /// Header byte 60: 8 = Reply, 13 = Eviction.
    pub fn command(&self) -> u8 {
        self.header[60]
    }
    /// Reply status (offset 216); meaningless for an eviction.
    pub fn status(&self) -> u32 {
        self.u32_at(216)
    }
    /// The operation the reply echoes (offset 208).
    pub fn operation(&self) -> u8 {
        self.header[208]
    }
    /// Eviction reason (offset 255).
    pub fn eviction_reason(&self) -> u8 {
        self.header[255]
    }
    /// A reply (not an eviction) with status 0.
    pub fn is_ok(&self) -> bool {
        self.command() == COMMAND_REPLY && self.status() == 0
    }
    /// The body after the result section of a result-framed operation
    /// (`[count u32]`, then `count` entries of `[index u32][code u32]`), or
    /// the first result code when the section reports a failure (§2.7).
    /// Other replies' bodies come back whole. `Err(1)` for a section too
    /// short to read.
    pub fn payload(&self) -> Result<&[u8], u32> {
        if !is_result_framed(self.operation()) || self.body.is_empty() {
            return Ok(&self.body);
        }
        let word = |at: usize| {
            self.body
                .get(at..at + 4)
                .map(|bytes| u32::from_le_bytes(bytes.try_into().expect("4 bytes")))
        };
        match word(0) {
            None => Err(1),
            Some(0) => Ok(&self.body[4..]),
            Some(_) => Err(word(8).unwrap_or(1)),
        }
    }
}

/// A connection with `REPLY_TIMEOUT` on reads and writes; panics if the
/// daemon does not accept.
pub fn connect(address: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(address).expect("connect to iggyd");
    stream
        .set_read_timeout(Some(REPLY_TIMEOUT))
        .expect("timeout");
    stream
        .set_write_timeout(Some(REPLY_TIMEOUT))
        .expect("timeout");
    stream
}

/// Writes `frame` and reads one frame back; `None` when the daemon closed
/// (or reset) the connection instead of answering.
pub fn exchange(stream: &mut TcpStream, frame: &[u8]) -> Option<Reply> {
    stream.write_all(frame).ok()?;
    read_frame(stream).ok().flatten()
}

/// Reads one `[256-byte header][body]` frame; `Ok(None)` on end of stream
/// or reset, `Err` for a size outside the header..=64 MiB range or another
/// I/O error.
pub fn read_frame(stream: &mut impl Read) -> std::io::Result<Option<Reply>> {
    let mut reply = Reply {
        header: [0; HEADER_SIZE],
        body: Vec::new(),
    };
    Ok(read_frame_into(stream, &mut reply)?.then_some(reply))
}

/// `read_frame` into an existing reply, reusing its body's allocation;
/// `Ok(false)` on end of stream or reset.
pub fn read_frame_into(stream: &mut impl Read, reply: &mut Reply) -> std::io::Result<bool> {
    let closed = |error: &std::io::Error| {
        matches!(
            error.kind(),
            std::io::ErrorKind::UnexpectedEof
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe
        )
    };
    match stream.read_exact(&mut reply.header) {
        Ok(()) => {}
        Err(error) if closed(&error) => return Ok(false),
        Err(error) => return Err(error),
    }
    let size = u32::from_le_bytes(reply.header[48..52].try_into().expect("4 bytes")) as usize;
    if !(HEADER_SIZE..=FRAME_BYTES_MAX).contains(&size) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("reply size {size} outside {HEADER_SIZE}..={FRAME_BYTES_MAX}"),
        ));
    }
    reply.body.resize(size - HEADER_SIZE, 0);
    match stream.read_exact(&mut reply.body) {
        Ok(()) => Ok(true),
        Err(error) if closed(&error) => Ok(false),
        Err(error) => Err(error),
    }
}
