//! The frames two nodes exchange after their hellos (`hello.rs`): their
//! byte layout, encoding, and a sans-I/O decoder that is fed bytes as they
//! arrive and hands back whole frames. Every bound is checked on the
//! header, before a byte of the body is awaited or allocated.
//!
//! Layout (little-endian), a 24-byte header then the body:
//!
//! ```text
//! offset  size  field
//!      0     4  length     u32: bytes after this field (20 + body length)
//!      4     1  kind       1 request, 2 response, 3 failure, 4 ping, 5 pong
//!      5     1  flags      0 (no flag is defined; any set bit is refused)
//!      6     2  reserved   0
//!      8     8  call id    u64, chosen by the caller, echoed by the answer
//!     16     8  channel    u64, opaque here (callers put a Raft group id)
//!     24     …  body       request / response: the caller's bytes;
//!                          failure: code u16 then a UTF-8 message of at
//!                          most 1,024 bytes; ping / pong: empty
//! ```
//!
//! Must not: do I/O, panic on any input, or allocate more than the header
//! declares once the header passed its checks (and nothing for a header
//! that did not).

/// The header's size in bytes.
pub const HEADER_BYTES: usize = 24;

/// The bytes the length field counts besides the body.
const HEADER_AFTER_LENGTH: usize = HEADER_BYTES - 4;

/// The longest failure message on the wire; longer ones are cut at a
/// character boundary when encoded, and refused when decoded.
pub const FAILURE_MESSAGE_BYTES_MAX: usize = 1024;

/// A body is received into memory that grows by at most this much per
/// step, so a peer that declares a large body and sends little of it holds
/// little more than what it sent.
const BODY_GROWTH_STEP: usize = 1 << 20;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// A call: the body is the caller's request.
    Request = 1,
    /// A call's answer: the body is the handler's reply.
    Response = 2,
    /// A call's failure: the body is a code and a message.
    Failure = 3,
    /// Liveness: the client asks, the server answers with a pong of the
    /// same call id. No body.
    Ping = 4,
    Pong = 5,
}

impl FrameKind {
    fn from_byte(byte: u8) -> Option<FrameKind> {
        match byte {
            1 => Some(FrameKind::Request),
            2 => Some(FrameKind::Response),
            3 => Some(FrameKind::Failure),
            4 => Some(FrameKind::Ping),
            5 => Some(FrameKind::Pong),
            _ => None,
        }
    }
}

/// One frame, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: FrameKind,
    pub call_id: u64,
    pub channel: u64,
    pub body: Vec<u8>,
}

/// Why bytes are not a frame. Every variant ends the connection that sent
/// them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("a frame declares {declared} bytes after its length field, fewer than its header's 20")]
    TooShort { declared: u32 },
    #[error("a frame declares {declared} bytes in all, more than the {max} allowed")]
    TooLarge { declared: u64, max: u64 },
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("frame flags {0:#04x} set (no flag is defined)")]
    Flags(u8),
    #[error("reserved header bytes {0:#06x} are not zero")]
    Reserved(u16),
    #[error("a {kind:?} frame carries {bytes} body bytes (it has none)")]
    UnexpectedBody { kind: FrameKind, bytes: usize },
    #[error("a failure frame's body: {0}")]
    Failure(&'static str),
}

impl Frame {
    /// The header this frame is sent with.
    pub fn header(&self) -> [u8; HEADER_BYTES] {
        let after_length = HEADER_AFTER_LENGTH + self.body.len();
        // The sender checks bodies against the frame limit, which is far
        // below 4 GiB (`limits.rs`); a longer body is a programmer error.
        assert!(
            u32::try_from(after_length).is_ok(),
            "a frame body past 4 GiB"
        );
        let mut header = [0u8; HEADER_BYTES];
        let fields: [&[u8]; 6] = [
            &(after_length as u32).to_le_bytes(),
            &[self.kind as u8],
            &[0],
            &0u16.to_le_bytes(),
            &self.call_id.to_le_bytes(),
            &self.channel.to_le_bytes(),
        ];
        let mut at = 0;
        for field in fields {
            if let Some(slot) = header.get_mut(at..at + field.len()) {
                slot.copy_from_slice(field);
            }
            at += field.len();
        }
        debug_assert_eq!(at, HEADER_BYTES);
        header
    }

    /// The frame's bytes in one buffer (tests and tools; connections send
    /// the header and the body without joining them).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(HEADER_BYTES + self.body.len());
        bytes.extend_from_slice(&self.header());
        bytes.extend_from_slice(&self.body);
        bytes
    }

    /// A failure frame answering `call_id`.
    pub fn failure(call_id: u64, channel: u64, code: u16, message: &str) -> Frame {
        Frame {
            kind: FrameKind::Failure,
            call_id,
            channel,
            body: encode_failure(code, message),
        }
    }
}

/// A failure body: `code` then `message`, cut to at most
/// `FAILURE_MESSAGE_BYTES_MAX` bytes at a character boundary.
pub fn encode_failure(code: u16, message: &str) -> Vec<u8> {
    let mut end = message.len().min(FAILURE_MESSAGE_BYTES_MAX);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let mut body = Vec::with_capacity(2 + end);
    body.extend_from_slice(&code.to_le_bytes());
    body.extend_from_slice(message.get(..end).unwrap_or_default().as_bytes());
    body
}

/// A failure body's code and message.
pub fn decode_failure(body: &[u8]) -> Result<(u16, String), FrameError> {
    let (Some(code), Some(message)) = (body.get(..2), body.get(2..)) else {
        return Err(FrameError::Failure("shorter than its 2-byte code"));
    };
    if message.len() > FAILURE_MESSAGE_BYTES_MAX {
        return Err(FrameError::Failure("a message longer than 1,024 bytes"));
    }
    let message =
        std::str::from_utf8(message).map_err(|_| FrameError::Failure("a message not UTF-8"))?;
    let code = u16::from_le_bytes([
        code.first().copied().unwrap_or_default(),
        code.get(1).copied().unwrap_or_default(),
    ]);
    Ok((code, message.to_string()))
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    let mut field = [0u8; 2];
    if let Some(source) = bytes.get(at..at + 2) {
        field.copy_from_slice(source);
    }
    u16::from_le_bytes(field)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut field = [0u8; 4];
    if let Some(source) = bytes.get(at..at + 4) {
        field.copy_from_slice(source);
    }
    u32::from_le_bytes(field)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut field = [0u8; 8];
    if let Some(source) = bytes.get(at..at + 8) {
        field.copy_from_slice(source);
    }
    u64::from_le_bytes(field)
}

/// A header that passed its checks, waiting for its body.
#[derive(Debug)]
struct Partial {
    kind: FrameKind,
    call_id: u64,
    channel: u64,
    body_len: usize,
    /// The body received so far is `body[..filled]`; `body.len()` grows
    /// towards `body_len` a step at a time.
    body: Vec<u8>,
    filled: usize,
}

/// Turns a byte stream into frames. Feed it through `unfilled` +
/// `filled` (to receive straight into its memory) or `push` (from a
/// slice).
#[derive(Debug)]
pub struct FrameDecoder {
    frame_bytes_max: usize,
    header: [u8; HEADER_BYTES],
    header_filled: usize,
    partial: Option<Partial>,
}

impl FrameDecoder {
    /// A decoder that refuses frames (header included) longer than
    /// `frame_bytes_max`.
    pub fn new(frame_bytes_max: usize) -> FrameDecoder {
        assert!(frame_bytes_max >= HEADER_BYTES);
        FrameDecoder {
            frame_bytes_max,
            header: [0; HEADER_BYTES],
            header_filled: 0,
            partial: None,
        }
    }

    /// No byte of a next frame has arrived yet.
    pub fn is_between_frames(&self) -> bool {
        self.header_filled == 0 && self.partial.is_none()
    }

    /// Bytes held for the frame being received (the memory reserved for
    /// it, not what it declared).
    pub fn buffered_bytes(&self) -> usize {
        HEADER_BYTES
            + self
                .partial
                .as_ref()
                .map_or(0, |partial| partial.body.capacity())
    }

    /// Where the next bytes go: never empty.
    pub fn unfilled(&mut self) -> &mut [u8] {
        match &mut self.partial {
            None => self
                .header
                .get_mut(self.header_filled..)
                .unwrap_or_default(),
            Some(partial) => {
                if partial.filled == partial.body.len() {
                    let grown = partial
                        .body_len
                        .min(partial.filled.saturating_add(BODY_GROWTH_STEP));
                    // Doubling keeps the copies linear in the body's size;
                    // the declared length caps it.
                    let capacity = partial
                        .body_len
                        .min(partial.body.capacity().saturating_mul(2))
                        .max(grown);
                    partial
                        .body
                        .reserve_exact(capacity.saturating_sub(partial.body.len()));
                    partial.body.resize(grown, 0);
                }
                partial.body.get_mut(partial.filled..).unwrap_or_default()
            }
        }
    }

    /// Records that `count` bytes were written at the start of
    /// `unfilled()`; a frame when they completed one.
    pub fn filled(&mut self, count: usize) -> Result<Option<Frame>, FrameError> {
        match &mut self.partial {
            None => {
                assert!(count <= HEADER_BYTES - self.header_filled);
                self.header_filled += count;
                if self.header_filled < HEADER_BYTES {
                    return Ok(None);
                }
                self.header_filled = 0;
                self.start_body()
            }
            Some(partial) => {
                assert!(count <= partial.body.len() - partial.filled);
                partial.filled += count;
                if partial.filled < partial.body_len {
                    return Ok(None);
                }
                match self.partial.take() {
                    Some(partial) => finish(partial).map(Some),
                    None => Ok(None),
                }
            }
        }
    }

    /// Decodes from `bytes`, advancing it past what was used; stops after
    /// one frame.
    pub fn push(&mut self, bytes: &mut &[u8]) -> Result<Option<Frame>, FrameError> {
        while !bytes.is_empty() {
            let target = self.unfilled();
            let count = target.len().min(bytes.len());
            let (now, rest) = bytes.split_at(count);
            if let Some(target) = target.get_mut(..count) {
                target.copy_from_slice(now);
            }
            *bytes = rest;
            if let Some(frame) = self.filled(count)? {
                return Ok(Some(frame));
            }
        }
        Ok(None)
    }

    /// Checks a complete header; the frame itself when it has no body.
    fn start_body(&mut self) -> Result<Option<Frame>, FrameError> {
        let header = &self.header;
        let after_length = u32_at(header, 0);
        if (after_length as usize) < HEADER_AFTER_LENGTH {
            return Err(FrameError::TooShort {
                declared: after_length,
            });
        }
        let total = 4 + u64::from(after_length);
        if total > self.frame_bytes_max as u64 {
            return Err(FrameError::TooLarge {
                declared: total,
                max: self.frame_bytes_max as u64,
            });
        }
        let kind_byte = header.get(4).copied().unwrap_or_default();
        let kind = FrameKind::from_byte(kind_byte).ok_or(FrameError::UnknownKind(kind_byte))?;
        let flags = header.get(5).copied().unwrap_or_default();
        if flags != 0 {
            return Err(FrameError::Flags(flags));
        }
        let reserved = u16_at(header, 6);
        if reserved != 0 {
            return Err(FrameError::Reserved(reserved));
        }
        let body_len = after_length as usize - HEADER_AFTER_LENGTH;
        if matches!(kind, FrameKind::Ping | FrameKind::Pong) && body_len != 0 {
            return Err(FrameError::UnexpectedBody {
                kind,
                bytes: body_len,
            });
        }
        if kind == FrameKind::Failure && body_len > 2 + FAILURE_MESSAGE_BYTES_MAX {
            return Err(FrameError::Failure("a message longer than 1,024 bytes"));
        }
        let partial = Partial {
            kind,
            call_id: u64_at(header, 8),
            channel: u64_at(header, 16),
            body_len,
            // Nothing is reserved before a body byte arrives: a peer that
            // declares a large body and sends none of it holds no memory.
            body: Vec::new(),
            filled: 0,
        };
        if body_len == 0 {
            return finish(partial).map(Some);
        }
        self.partial = Some(partial);
        Ok(None)
    }
}

fn finish(partial: Partial) -> Result<Frame, FrameError> {
    debug_assert_eq!(partial.filled, partial.body_len);
    if partial.kind == FrameKind::Failure {
        decode_failure(&partial.body)?;
    }
    Ok(Frame {
        kind: partial.kind,
        call_id: partial.call_id,
        channel: partial.channel,
        body: partial.body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iggyd_testkit::rng::Rng;

    const MAX: usize = 1 << 20;

    fn frame(kind: FrameKind, body: Vec<u8>) -> Frame {
        Frame {
            kind,
            call_id: 0x0102_0304_0506_0708,
            channel: 0x1112_1314_1516_1718,
            body,
        }
    }

    fn decode_all(bytes: &[u8], max: usize) -> Result<Vec<Frame>, FrameError> {
        let mut decoder = FrameDecoder::new(max);
        let mut rest = bytes;
        let mut frames = Vec::new();
        while let Some(frame) = decoder.push(&mut rest)? {
            frames.push(frame);
        }
        Ok(frames)
    }

    // Proves the header layout byte for byte, as the module doc states it.
    #[test]
    fn the_header_layout_is_as_documented() {
        let bytes = frame(FrameKind::Request, b"abc".to_vec()).to_bytes();
        assert_eq!(
            bytes,
            [
                23, 0, 0, 0, // length: 20 + 3
                1, 0, 0, 0, // kind, flags, reserved
                8, 7, 6, 5, 4, 3, 2, 1, // call id
                0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, // channel
                b'a', b'b', b'c',
            ]
        );
    }

    // Proves every kind round-trips, several frames in one buffer, fed in
    // every split of the buffer into two pieces.
    #[test]
    fn frames_round_trip_in_any_split() {
        let frames = vec![
            frame(FrameKind::Request, b"request".to_vec()),
            frame(FrameKind::Response, Vec::new()),
            frame(FrameKind::Response, vec![7; 3000]),
            Frame::failure(9, 1, 503, "not the leader"),
            frame(FrameKind::Ping, Vec::new()),
            frame(FrameKind::Pong, Vec::new()),
        ];
        let bytes: Vec<u8> = frames.iter().flat_map(Frame::to_bytes).collect();
        for split in 0..=bytes.len() {
            let (first, second) = bytes.split_at(split);
            let mut decoder = FrameDecoder::new(MAX);
            let mut decoded = Vec::new();
            for mut piece in [first, second] {
                while let Some(frame) = decoder.push(&mut piece).unwrap() {
                    decoded.push(frame);
                }
            }
            assert_eq!(decoded, frames, "split at {split}");
            assert!(decoder.is_between_frames());
        }
        let (code, message) = decode_failure(&frames[3].body).unwrap();
        assert_eq!((code, message.as_str()), (503, "not the leader"));
    }

    // Proves each malformed header is refused with its reason, from the
    // header alone (no body byte needed).
    #[test]
    fn bad_headers_are_refused_from_the_header_alone() {
        let good = frame(FrameKind::Request, b"x".to_vec()).header();
        let with = |at: usize, value: &[u8]| {
            let mut header = good;
            header[at..at + value.len()].copy_from_slice(value);
            decode_all(&header, MAX).unwrap_err()
        };
        assert_eq!(
            with(0, &19u32.to_le_bytes()),
            FrameError::TooShort { declared: 19 }
        );
        assert_eq!(with(4, &[0]), FrameError::UnknownKind(0));
        assert_eq!(with(4, &[6]), FrameError::UnknownKind(6));
        assert_eq!(with(5, &[0x80]), FrameError::Flags(0x80));
        assert_eq!(with(6, &[0, 1]), FrameError::Reserved(0x0100));
        let mut ping = frame(FrameKind::Ping, b"x".to_vec()).header();
        assert_eq!(
            decode_all(&ping, MAX).unwrap_err(),
            FrameError::UnexpectedBody {
                kind: FrameKind::Ping,
                bytes: 1
            }
        );
        ping[0..4].copy_from_slice(&(20u32 + 2000).to_le_bytes());
        ping[4] = FrameKind::Failure as u8;
        assert_eq!(
            decode_all(&ping, MAX).unwrap_err(),
            FrameError::Failure("a message longer than 1,024 bytes")
        );
    }

    // Proves a length prefix past the limit is refused as soon as the
    // header is complete, and that the decoder allocated nothing for it:
    // `u32::MAX` declared, 24 bytes held.
    #[test]
    fn an_oversized_length_is_refused_without_allocating_it() {
        let mut header = frame(FrameKind::Request, Vec::new()).header();
        header[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut decoder = FrameDecoder::new(MAX);
        let mut rest = &header[..];
        assert_eq!(
            decoder.push(&mut rest).unwrap_err(),
            FrameError::TooLarge {
                declared: 4 + u64::from(u32::MAX),
                max: MAX as u64
            }
        );
        assert_eq!(decoder.buffered_bytes(), HEADER_BYTES);
        // The exact limit passes; one byte more does not.
        let limit = frame(FrameKind::Request, vec![0; MAX - HEADER_BYTES]).to_bytes();
        assert_eq!(decode_all(&limit, MAX).unwrap().len(), 1);
        assert!(matches!(
            decode_all(&limit, MAX - 1),
            Err(FrameError::TooLarge { .. })
        ));
    }

    // Proves a body's memory follows what arrives, not what it declares:
    // nothing after the header alone, one growth step after the first body
    // byte, doubling after that, and never more than the declared length
    // (3.5 growth steps here), byte for byte intact at the end.
    #[test]
    fn body_memory_follows_the_bytes_received() {
        let body_len = 3 * BODY_GROWTH_STEP + BODY_GROWTH_STEP / 2;
        let sent = frame(
            FrameKind::Request,
            (0..body_len).map(|at| at as u8).collect(),
        );
        let bytes = sent.to_bytes();
        let mut decoder = FrameDecoder::new(4 * BODY_GROWTH_STEP);
        let mut header = &bytes[..HEADER_BYTES];
        assert_eq!(decoder.push(&mut header).unwrap(), None);
        assert_eq!(decoder.buffered_bytes(), HEADER_BYTES);
        assert!(!decoder.is_between_frames());
        let mut one = &bytes[HEADER_BYTES..HEADER_BYTES + 1];
        assert_eq!(decoder.push(&mut one).unwrap(), None);
        assert_eq!(decoder.buffered_bytes(), HEADER_BYTES + BODY_GROWTH_STEP);
        let mut step = &bytes[HEADER_BYTES + 1..HEADER_BYTES + BODY_GROWTH_STEP + 1];
        assert_eq!(decoder.push(&mut step).unwrap(), None);
        assert_eq!(
            decoder.buffered_bytes(),
            HEADER_BYTES + 2 * BODY_GROWTH_STEP
        );
        let mut rest = &bytes[HEADER_BYTES + BODY_GROWTH_STEP + 1..];
        let mut received = None;
        while !rest.is_empty() {
            received = decoder.push(&mut rest).unwrap();
            if received.is_none() {
                assert!(decoder.buffered_bytes() <= HEADER_BYTES + body_len);
            }
        }
        assert_eq!(received, Some(sent));
        assert!(decoder.is_between_frames());
    }

    // Proves failure bodies: messages cut at a character boundary when
    // encoded; short, over-long and non-UTF-8 bodies refused when decoded.
    #[test]
    fn failure_bodies() {
        let long = "é".repeat(FAILURE_MESSAGE_BYTES_MAX);
        let body = encode_failure(7, &long);
        let (code, message) = decode_failure(&body).unwrap();
        assert_eq!(code, 7);
        assert_eq!(message.len(), FAILURE_MESSAGE_BYTES_MAX);
        assert!(decode_failure(&[1]).is_err());
        assert!(decode_failure(&[1, 0, 0xFF]).is_err());
        assert!(decode_failure(&[0; 3 + FAILURE_MESSAGE_BYTES_MAX]).is_err());
        let bad = Frame {
            kind: FrameKind::Failure,
            call_id: 1,
            channel: 0,
            body: vec![1, 0, 0xC3],
        };
        assert_eq!(
            decode_all(&bad.to_bytes(), MAX).unwrap_err(),
            FrameError::Failure("a message not UTF-8")
        );
    }

    // Proves decoding never panics and never holds more than the limit:
    // every input of up to two bytes after a valid header prefix, then
    // 20,000 seeded random inputs (half of them starting with a plausible
    // header) fed in random pieces through both entry points.
    #[test]
    fn decoding_arbitrary_bytes_never_panics() {
        for first in 0..=255u8 {
            for second in 0..=255u8 {
                let mut bytes = frame(FrameKind::Request, Vec::new()).header()[..4].to_vec();
                bytes.extend_from_slice(&[first, second]);
                let _ = decode_all(&bytes, 64);
                let _ = decode_all(&[first, second], 64);
            }
        }
        let seed = 0x5EED_F4A3;
        let mut rng = Rng(seed);
        for case in 0..20_000 {
            let len = rng.index(200);
            let mut bytes = rng.bytes(len);
            if case % 2 == 0 && bytes.len() >= HEADER_BYTES {
                let declared = 20 + rng.below(150) as u32;
                bytes[0..4].copy_from_slice(&declared.to_le_bytes());
                bytes[4] = 1 + rng.below(5) as u8;
                bytes[5..8].fill(0);
            }
            let max = HEADER_BYTES + rng.index(200);
            let mut decoder = FrameDecoder::new(max);
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                let piece = 1 + rng.index(rest.len());
                let (now, later) = rest.split_at(piece);
                rest = later;
                let result = if case % 3 == 0 {
                    let mut now = now;
                    let mut result = Ok(None);
                    while !now.is_empty() && result.is_ok() {
                        result = decoder.push(&mut now);
                    }
                    result
                } else {
                    let mut result = Ok(None);
                    let mut now = now;
                    while !now.is_empty() {
                        let target = decoder.unfilled();
                        assert!(!target.is_empty(), "seed {seed:#x} case {case}");
                        let count = target.len().min(now.len());
                        target[..count].copy_from_slice(&now[..count]);
                        now = &now[count..];
                        result = decoder.filled(count);
                        if result.is_err() {
                            break;
                        }
                    }
                    result
                };
                assert!(
                    decoder.buffered_bytes() <= max.max(HEADER_BYTES),
                    "seed {seed:#x} case {case}"
                );
                if result.is_err() {
                    break;
                }
            }
        }
    }
}
