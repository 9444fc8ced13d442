//! Splitting a byte stream into request frames (§2.2, §2.9) and checking the
//! optional request checksum (§2.3).
//!
//! A frame is `[256-byte header][body]`, where header `size` (u32 at 48) is
//! the whole frame length. Sizes below 256 or above 64 MiB, and a command
//! byte (offset 60) other than 5, mean the stream cannot be trusted: the
//! errors produced here all say "close the connection". No I/O happens here;
//! the connection code feeds whatever bytes it has and is told how many more
//! it needs.

use xxhash_rust::xxh3::xxh3_64;

use super::codes::HEADER_COMMAND_REQUEST;
use super::command::Command;
use super::error::WireError;
use super::header::{COMMAND_AT, RequestHeader, declared_size};
use super::limits::{FRAME_SIZE_MAX, HEADER_SIZE};

/// Checks the header `size` field against §2.9.
pub fn check_frame_size(size: u32) -> Result<usize, WireError> {
    let length = usize::try_from(size).map_err(|_| WireError::FrameSize { size })?;
    if !(HEADER_SIZE..=FRAME_SIZE_MAX).contains(&length) {
        return Err(WireError::FrameSize { size });
    }
    Ok(length)
}

/// How long the frame that starts at `buf[0]` is, header included.
///
/// `Ok(None)` while fewer than 52 bytes are buffered (the size field is not
/// complete); an error as soon as the size or, once buffered, the command
/// byte is unacceptable. The result never exceeds 64 MiB, so it is safe to
/// allocate a buffer of that length.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, WireError> {
    let Some(size) = declared_size(buf) else {
        return Ok(None);
    };
    let length = check_frame_size(size)?;
    if let Some(command) = buf.get(COMMAND_AT).copied()
        && command != HEADER_COMMAND_REQUEST
    {
        return Err(WireError::NotARequest { found: command });
    }
    Ok(Some(length))
}

/// A complete request frame borrowed from the connection buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub header: RequestHeader,
    pub body: &'a [u8],
}

impl<'a> Frame<'a> {
    /// Verifies the request checksum, then decodes the command. Errors come
    /// after the header is known, so the caller can always build the reply
    /// or eviction that [`WireError::action`] asks for.
    pub fn command(&self) -> Result<Command<'a>, WireError> {
        verify_request_checksum(&self.header, self.body)?;
        Command::decode(&self.header, self.body)
    }
}

/// Takes one frame off the front of `buf`. Returns the frame and how many
/// bytes it used, or `Ok(None)` if the frame is not complete yet.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, WireError> {
    let Some(length) = frame_len(buf)? else {
        return Ok(None);
    };
    let (Some(header_bytes), Some(body)) = (buf.get(..HEADER_SIZE), buf.get(HEADER_SIZE..length))
    else {
        return Ok(None);
    };
    let mut header = [0u8; HEADER_SIZE];
    header.copy_from_slice(header_bytes);
    let header = RequestHeader::decode(&header);
    if header.command != HEADER_COMMAND_REQUEST {
        return Err(WireError::NotARequest {
            found: header.command,
        });
    }
    Ok(Some((Frame { header, body }, length)))
}

/// The `request_checksum` a client stamps: XXH3-64 (seed 0) of the body,
/// zero-extended to 128 bits.
pub fn request_checksum(body: &[u8]) -> u128 {
    u128::from(xxh3_64(body))
}

/// A zero stamp means "not stamped" (partition and non-replicated
/// operations); a non-zero stamp must match, else status 4 (InvalidFormat),
/// as on the Apache server.
pub fn verify_request_checksum(header: &RequestHeader, body: &[u8]) -> Result<(), WireError> {
    if header.request_checksum == 0 {
        return Ok(());
    }
    let computed = request_checksum(body);
    if computed != header.request_checksum {
        return Err(WireError::ChecksumMismatch {
            stamped: header.request_checksum,
            computed,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codes::Status;
    use crate::protocol::error::WireAction;

    fn frame_bytes(header: &RequestHeader, body: &[u8]) -> Vec<u8> {
        let mut bytes = header.encode().to_vec();
        bytes.extend_from_slice(body);
        bytes
    }

    // Proves frame_len needs 52 bytes to answer, enforces 256..=64 MiB and the
    // command byte, and that every error here closes the connection.
    #[test]
    fn frame_len_limits() {
        let header = RequestHeader::client_request(2, 1, 0);
        let bytes = frame_bytes(&header, &[]);
        assert_eq!(frame_len(&bytes[..51]), Ok(None));
        assert_eq!(frame_len(&bytes[..52]), Ok(Some(256)));
        assert_eq!(frame_len(&bytes), Ok(Some(256)));
        for size in [0u32, 255, (FRAME_SIZE_MAX + 1) as u32, u32::MAX] {
            let bad = RequestHeader { size, ..header };
            let error = frame_len(&bad.encode()).unwrap_err();
            assert_eq!(error.action(), WireAction::Close, "size {size}");
        }
        let max = RequestHeader {
            size: FRAME_SIZE_MAX as u32,
            ..header
        };
        assert_eq!(frame_len(&max.encode()), Ok(Some(FRAME_SIZE_MAX)));
        let reply = RequestHeader {
            command: 8,
            ..header
        };
        assert_eq!(
            frame_len(&reply.encode()),
            Err(WireError::NotARequest { found: 8 })
        );
        assert_eq!(frame_len(&reply.encode()[..60]), Ok(Some(256)));
    }

    // Proves decode_frame waits for the whole body, returns the consumed
    // length, and leaves the next frame's bytes alone.
    #[test]
    fn decode_frame_splits_stream() {
        let body = [1u8, 2, 3];
        let header = RequestHeader::client_request(2, 21, body.len());
        let mut bytes = frame_bytes(&header, &body);
        assert_eq!(decode_frame(&bytes[..258]), Ok(None));
        bytes.extend_from_slice(&[9; 10]);
        let (frame, used) = decode_frame(&bytes).unwrap().unwrap();
        assert_eq!(used, 259);
        assert_eq!(frame.body, &body);
        assert_eq!(frame.header, header);
    }

    // Proves the §12 ping request decodes and that a wrong non-zero checksum
    // stamp is status 4 while a zero stamp is accepted.
    #[test]
    fn ping_and_checksum() {
        let mut header = [0u8; 256];
        header[48..52].copy_from_slice(&256u32.to_le_bytes());
        header[60] = 5;
        header[176] = 2;
        header[196..200].copy_from_slice(&[1, 0, 0, 0]);
        let (frame, used) = decode_frame(&header).unwrap().unwrap();
        assert_eq!(used, 256);
        assert_eq!(frame.command(), Ok(Command::Ping));

        let body = b"abc";
        let stamped = RequestHeader {
            request_checksum: request_checksum(body),
            ..RequestHeader::default()
        };
        assert_eq!(verify_request_checksum(&stamped, body), Ok(()));
        assert_eq!(request_checksum(body) >> 64, 0, "high 8 bytes are zero");
        let wrong = RequestHeader {
            request_checksum: 1,
            ..stamped
        };
        assert_eq!(
            verify_request_checksum(&wrong, body)
                .unwrap_err()
                .status()
                .map(Status::code),
            Some(4)
        );
    }
}
