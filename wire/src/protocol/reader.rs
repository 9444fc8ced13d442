//! Bounds-checked little-endian reader over a borrowed body, and the
//! matching writer helpers over `Vec<u8>`.
//!
//! Every read goes through `Reader::bytes`, the only place that slices the
//! input; it uses `get` with a checked end, so no input can make the codec
//! index out of bounds or overflow. The writer side is for replies and test
//! encoders: it never fails, because what it writes comes from the server's
//! own model, which was validated when it entered through the reader.

use super::error::WireError;
use super::limits::{NAME_LEN_MAX, NAME_LEN_MIN};

/// Cursor over a request body. Borrowed results live as long as the body.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    position: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, position: 0 }
    }

    /// Offset of the next unread byte from the start of the buffer.
    pub fn position(&self) -> usize {
        self.position
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.position)
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Reads exactly `count` bytes.
    pub fn bytes(&mut self, count: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        let truncated = || WireError::Truncated {
            what,
            offset: self.position,
            needed: count,
            available: self.remaining(),
        };
        let end = self.position.checked_add(count).ok_or_else(truncated)?;
        let slice = self.buf.get(self.position..end).ok_or_else(truncated)?;
        self.position = end;
        Ok(slice)
    }

    /// Reads a fixed-size array.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.bytes(N, what)?);
        Ok(array)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    pub fn u128(&mut self, what: &'static str) -> Result<u128, WireError> {
        Ok(u128::from_le_bytes(self.array(what)?))
    }

    /// A strict boolean byte: 0 or 1, anything else is malformed. The SDKs
    /// only write 0/1, so strictness catches desynchronised decoding early.
    pub fn bool(&mut self, what: &'static str) -> Result<bool, WireError> {
        let offset = self.position;
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::Malformed {
                what,
                offset,
                reason: "boolean byte must be 0 or 1",
            }),
        }
    }

    /// A wire name `[len u8][UTF-8]` with 1..=255 bytes (§4.1).
    pub fn name(&mut self, what: &'static str) -> Result<&'a str, WireError> {
        let offset = self.position;
        let text = self.short_str(what)?;
        if text.len() < NAME_LEN_MIN {
            return Err(WireError::Malformed {
                what,
                offset,
                reason: "name length must be 1..=255",
            });
        }
        Ok(text)
    }

    /// `[len u8][UTF-8]` where a zero length is allowed (passwords): the
    /// login rules reject short values as credentials, not as framing.
    pub fn short_str(&mut self, what: &'static str) -> Result<&'a str, WireError> {
        let length = usize::from(self.u8(what)?);
        self.utf8(length, what)
    }

    /// `count` bytes that must be UTF-8.
    pub fn utf8(&mut self, count: usize, what: &'static str) -> Result<&'a str, WireError> {
        let offset = self.position;
        let bytes = self.bytes(count, what)?;
        std::str::from_utf8(bytes).map_err(|_| WireError::Malformed {
            what,
            offset,
            reason: "not valid UTF-8",
        })
    }

    /// Everything not read yet (option blocks run to the end of the body).
    pub fn rest(&mut self) -> &'a [u8] {
        let rest = self.buf.get(self.position..).unwrap_or(&[]);
        self.position = self.buf.len();
        rest
    }

    /// Succeeds only if the whole buffer was consumed.
    pub fn finish(&self, what: &'static str) -> Result<(), WireError> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(WireError::TrailingBytes {
                what,
                offset: self.position,
                remaining: self.remaining(),
            })
        }
    }
}

/// Little-endian writer helpers for reply and test encoders.
pub trait WireWrite {
    fn put_u8(&mut self, value: u8);
    fn put_u16(&mut self, value: u16);
    fn put_u32(&mut self, value: u32);
    fn put_u64(&mut self, value: u64);
    fn put_u128(&mut self, value: u128);
    fn put_f32(&mut self, value: f32);
    fn put_bool(&mut self, value: bool);
    fn put_bytes(&mut self, bytes: &[u8]);
    /// `[len u8][bytes]`. Names come validated from the decoder (1..=255
    /// bytes); a longer value is clamped at a character boundary rather than
    /// writing a length byte that disagrees with the bytes, which would
    /// desynchronise the client.
    fn put_name(&mut self, name: &str);
    /// `[len u32][bytes]`; lengths above `u32::MAX` cannot occur below the
    /// 64 MiB frame cap and are clamped for the same reason as names.
    fn put_u32_prefixed(&mut self, bytes: &[u8]);
}

/// Longest prefix of `text` that fits `max` bytes and ends on a char boundary.
pub(crate) fn clamp_str(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or("")
}

impl WireWrite for Vec<u8> {
    fn put_u8(&mut self, value: u8) {
        self.push(value);
    }
    fn put_u16(&mut self, value: u16) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_u32(&mut self, value: u32) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_u64(&mut self, value: u64) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_u128(&mut self, value: u128) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_f32(&mut self, value: f32) {
        self.extend_from_slice(&value.to_le_bytes());
    }
    fn put_bool(&mut self, value: bool) {
        self.push(u8::from(value));
    }
    fn put_bytes(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
    fn put_name(&mut self, name: &str) {
        debug_assert!(
            !name.is_empty() && name.len() <= NAME_LEN_MAX,
            "invalid wire name {name:?}"
        );
        let name = clamp_str(name, NAME_LEN_MAX);
        // clamp_str guarantees the length fits a u8.
        self.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
        self.extend_from_slice(name.as_bytes());
    }
    fn put_u32_prefixed(&mut self, bytes: &[u8]) {
        let length = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        self.put_u32(length);
        self.extend_from_slice(bytes.get(..length as usize).unwrap_or(bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves every reader primitive is bounds-checked: each read on a buffer
    // one byte too short fails with Truncated and leaves no panic behind.
    #[test]
    fn reads_fail_cleanly_when_short() {
        let data = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
        assert!(matches!(
            Reader::new(&data[..0]).u8("x"),
            Err(WireError::Truncated { .. })
        ));
        assert!(matches!(
            Reader::new(&data[..1]).u16("x"),
            Err(WireError::Truncated { .. })
        ));
        assert!(matches!(
            Reader::new(&data[..3]).u32("x"),
            Err(WireError::Truncated { .. })
        ));
        assert!(matches!(
            Reader::new(&data[..7]).u64("x"),
            Err(WireError::Truncated { .. })
        ));
        assert!(matches!(
            Reader::new(&data[..15]).u128("x"),
            Err(WireError::Truncated { .. })
        ));
        let mut reader = Reader::new(&data);
        assert!(reader.bytes(usize::MAX, "huge").is_err());
        assert_eq!(reader.position(), 0);
        assert_eq!(reader.u32("x").unwrap(), 0x0403_0201);
        assert_eq!(reader.remaining(), 11);
        assert!(matches!(
            reader.finish("x"),
            Err(WireError::TrailingBytes { remaining: 11, .. })
        ));
    }

    // Proves names round-trip and that zero length, bad UTF-8 and short
    // buffers are rejected.
    #[test]
    fn names_are_validated() {
        let mut out = Vec::new();
        out.put_name("stream-1");
        assert_eq!(Reader::new(&out).name("n").unwrap(), "stream-1");
        assert!(matches!(
            Reader::new(&[0]).name("n"),
            Err(WireError::Malformed { .. })
        ));
        assert_eq!(Reader::new(&[0]).short_str("n").unwrap(), "");
        assert!(matches!(
            Reader::new(&[2, 0xff, 0xfe]).name("n"),
            Err(WireError::Malformed { .. })
        ));
        assert!(matches!(
            Reader::new(&[5, b'a']).name("n"),
            Err(WireError::Truncated { .. })
        ));
        assert!(matches!(
            Reader::new(&[2]).bool("b"),
            Err(WireError::Malformed { .. })
        ));
    }

    // Proves the clamp never splits a UTF-8 character.
    #[test]
    fn clamp_respects_char_boundaries() {
        let text = "é".repeat(200);
        let clamped = clamp_str(&text, 255);
        assert_eq!(clamped.len(), 254);
        assert_eq!(clamp_str("abc", 255), "abc");
    }
}
