//! Key/value TLV blocks (§4.8): message user headers and the option blocks
//! of create/update stream, topic and user.
//!
//! Only structure is checked here (kinds, lengths, exact consumption, the
//! option-block rules: String keys, no duplicates, at most 1024 entries and
//! 100,000 bytes). Which keys exist and what values mean (§4.9) is decided
//! by the metadata code, which gets the entries as borrowed slices.

use super::error::WireError;
use super::limits::{
    OPTIONS_BYTES_MAX, OPTIONS_ENTRIES_MAX, TLV_VALUE_LEN_MAX, USER_HEADERS_BYTES_MAX,
};
use super::reader::{Reader, WireWrite, clamp_str};

/// TLV value kinds (§4.8). Unknown non-zero kinds are tolerated by the
/// structural parser and simply carried as their raw byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ValueKind {
    Raw = 1,
    String = 2,
    Bool = 3,
    Int8 = 4,
    Int16 = 5,
    Int32 = 6,
    Int64 = 7,
    Int128 = 8,
    Uint8 = 9,
    Uint16 = 10,
    Uint32 = 11,
    Uint64 = 12,
    Uint128 = 13,
    Float32 = 14,
    Float64 = 15,
}

impl ValueKind {
    pub fn from_u8(byte: u8) -> Option<Self> {
        use ValueKind as K;
        Some(match byte {
            1 => K::Raw,
            2 => K::String,
            3 => K::Bool,
            4 => K::Int8,
            5 => K::Int16,
            6 => K::Int32,
            7 => K::Int64,
            8 => K::Int128,
            9 => K::Uint8,
            10 => K::Uint16,
            11 => K::Uint32,
            12 => K::Uint64,
            13 => K::Uint128,
            14 => K::Float32,
            15 => K::Float64,
            _ => return None,
        })
    }
}

/// One TLV: `[kind u8][len u32][bytes]`, kind non-zero, len 1..=255.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlv<'a> {
    pub kind: u8,
    pub bytes: &'a [u8],
}

impl<'a> Tlv<'a> {
    pub fn decode(reader: &mut Reader<'a>, what: &'static str) -> Result<Self, WireError> {
        let offset = reader.position();
        let kind = reader.u8(what)?;
        if kind == 0 {
            return Err(WireError::Malformed {
                what,
                offset,
                reason: "TLV kind 0 is invalid",
            });
        }
        let length = reader.u32(what)?;
        let length = usize::try_from(length).unwrap_or(usize::MAX);
        if length == 0 || length > TLV_VALUE_LEN_MAX {
            return Err(WireError::Malformed {
                what,
                offset,
                reason: "TLV length must be 1..=255",
            });
        }
        let bytes = reader.bytes(length, what)?;
        Ok(Self { kind, bytes })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let bytes = self.bytes.get(..TLV_VALUE_LEN_MAX).unwrap_or(self.bytes);
        out.put_u8(self.kind);
        out.put_u32_prefixed(bytes);
    }
}

/// Structurally validates a message's user-header block: an even sequence
/// of TLVs consuming the buffer exactly, at most 100,000 bytes. Returns the
/// number of key/value entries.
pub fn validate_user_headers(bytes: &[u8]) -> Result<usize, WireError> {
    if bytes.len() > USER_HEADERS_BYTES_MAX {
        return Err(WireError::UserHeadersTooLarge { bytes: bytes.len() });
    }
    let mut reader = Reader::new(bytes);
    let mut entries = 0usize;
    while !reader.is_empty() {
        Tlv::decode(&mut reader, "user header key")?;
        Tlv::decode(&mut reader, "user header value")?;
        entries = entries.saturating_add(1);
    }
    Ok(entries)
}

/// One option: a String key and a value of any kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionEntry<'a> {
    pub key: &'a str,
    /// Raw value kind byte (see [`ValueKind::from_u8`]).
    pub kind: u8,
    pub value: &'a [u8],
}

#[cfg(any(test, feature = "test-support"))]
impl<'a> OptionEntry<'a> {
    /// A String-valued entry, the kind most tests write.
    pub fn string(key: &'a str, value: &'a str) -> Self {
        OptionEntry {
            key,
            kind: ValueKind::String as u8,
            value: value.as_bytes(),
        }
    }
}

impl OptionEntry<'_> {
    /// Layout: key TLV `[2][len u32][key]` then value TLV `[kind][len u32][value]`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let key = clamp_str(self.key, TLV_VALUE_LEN_MAX);
        Tlv {
            kind: ValueKind::String as u8,
            bytes: key.as_bytes(),
        }
        .encode(out);
        Tlv {
            kind: self.kind,
            bytes: self.value,
        }
        .encode(out);
    }
}

/// A validated option block.
///
/// In requests the block has no length prefix and runs to the end of the
/// body; in replies it is `[len u32][entries]` (see [`encode_option_block_prefixed`]).
/// Invariants after decode: every key is a UTF-8 String TLV, keys are
/// unique, there are at most 1024 entries and the block was at most
/// 100,000 bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OptionBlock<'a> {
    pub entries: Vec<OptionEntry<'a>>,
}

impl<'a> OptionBlock<'a> {
    /// Decodes a whole block; `offset` is where it starts in the body (for
    /// error messages).
    pub fn decode(bytes: &'a [u8], offset: usize) -> Result<Self, WireError> {
        if bytes.len() > OPTIONS_BYTES_MAX {
            return Err(WireError::OptionsTooLarge {
                entries: 0,
                bytes: bytes.len(),
            });
        }
        let mut reader = Reader::new(bytes);
        let mut entries = Vec::new();
        while !reader.is_empty() {
            if entries.len() >= OPTIONS_ENTRIES_MAX {
                return Err(WireError::OptionsTooLarge {
                    entries: entries.len().saturating_add(1),
                    bytes: bytes.len(),
                });
            }
            let key_offset = offset.saturating_add(reader.position());
            let key = Tlv::decode(&mut reader, "option key")?;
            let value = Tlv::decode(&mut reader, "option value")?;
            if key.kind != ValueKind::String as u8 {
                return Err(WireError::UnsupportedOptionKey {
                    offset: key_offset,
                    reason: "option keys must be String TLVs",
                });
            }
            let key =
                std::str::from_utf8(key.bytes).map_err(|_| WireError::UnsupportedOptionKey {
                    offset: key_offset,
                    reason: "option key is not UTF-8",
                })?;
            entries.push(OptionEntry {
                key,
                kind: value.kind,
                value: value.bytes,
            });
        }
        // Sorting a copy of the keys finds duplicates in O(n log n) without
        // hashing; n is at most 1024.
        let mut keys: Vec<&str> = entries.iter().map(|entry| entry.key).collect();
        keys.sort_unstable();
        if let Some(pair) = keys.windows(2).find(|pair| pair.first() == pair.get(1)) {
            let key = pair.first().copied().unwrap_or_default();
            return Err(WireError::DuplicateOptionKey {
                key: key.to_owned(),
            });
        }
        Ok(Self { entries })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry with this key, if present.
    pub fn get(&self, key: &str) -> Option<&OptionEntry<'a>> {
        self.entries.iter().find(|entry| entry.key == key)
    }

    /// Request form: entries without a length prefix (the client's side;
    /// the daemon's tests only).
    #[cfg(test)]
    pub fn encode(&self, out: &mut Vec<u8>) {
        encode_option_entries(&self.entries, out);
    }
}

/// Writes entries back to back (request form, no prefix).
pub fn encode_option_entries(entries: &[OptionEntry<'_>], out: &mut Vec<u8>) {
    for entry in entries {
        entry.encode(out);
    }
}

/// Reply form: `[len u32][entries]`.
pub fn encode_option_block_prefixed(entries: &[OptionEntry<'_>], out: &mut Vec<u8>) {
    let length_at = out.len();
    out.put_u32(0);
    encode_option_entries(entries, out);
    let length = out.len().saturating_sub(length_at).saturating_sub(4);
    let length = u32::try_from(length).unwrap_or(u32::MAX).to_le_bytes();
    if let Some(slot) = out.get_mut(length_at..length_at + 4) {
        slot.copy_from_slice(&length);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codes::Status;

    /// The wire status number a block that must not decode is refused with.
    fn code(block: &[u8]) -> Option<u32> {
        OptionBlock::decode(block, 0)
            .unwrap_err()
            .status()
            .map(Status::code)
    }

    // Proves option blocks round-trip in both request and reply forms.
    #[test]
    fn option_block_round_trip() {
        let block = OptionBlock {
            entries: vec![
                OptionEntry::string("durability", "replicated"),
                OptionEntry {
                    key: "segment_size",
                    kind: ValueKind::Uint64 as u8,
                    value: &[0, 0, 0, 64, 0, 0, 0, 0],
                },
            ],
        };
        let mut out = Vec::new();
        block.encode(&mut out);
        assert_eq!(OptionBlock::decode(&out, 0).unwrap(), block);
        let mut prefixed = Vec::new();
        encode_option_block_prefixed(&block.entries, &mut prefixed);
        assert_eq!(&prefixed[..4], &(out.len() as u32).to_le_bytes());
        assert_eq!(&prefixed[4..], &out[..]);
        assert_eq!(OptionBlock::decode(&[], 0).unwrap(), OptionBlock::default());
        assert_eq!(block.get("durability").unwrap().value, b"replicated");
    }

    // Proves each option-block rule maps to its status code: non-String key
    // 4041, duplicate 4042, too many entries or bytes 4043, broken TLV 3.
    #[test]
    fn option_block_rules() {
        let mut raw_key = Vec::new();
        Tlv {
            kind: 1,
            bytes: b"k",
        }
        .encode(&mut raw_key);
        Tlv {
            kind: 2,
            bytes: b"v",
        }
        .encode(&mut raw_key);
        assert_eq!(code(&raw_key), Some(4041));

        let mut duplicate = Vec::new();
        OptionEntry::string("a", "1").encode(&mut duplicate);
        OptionEntry::string("b", "1").encode(&mut duplicate);
        OptionEntry::string("a", "2").encode(&mut duplicate);
        assert_eq!(code(&duplicate), Some(4042));

        let keys: Vec<String> = (0..=OPTIONS_ENTRIES_MAX)
            .map(|index| format!("k{index}"))
            .collect();
        let mut many = Vec::new();
        for key in &keys {
            OptionEntry::string(key, "v").encode(&mut many);
        }
        assert_eq!(code(&many), Some(4043));
        let big = vec![0u8; OPTIONS_BYTES_MAX + 1];
        assert_eq!(code(&big), Some(4043));

        // Odd number of TLVs, zero kind, zero length, length above 255.
        let mut odd = Vec::new();
        Tlv {
            kind: 2,
            bytes: b"k",
        }
        .encode(&mut odd);
        assert_eq!(code(&odd), Some(3));
        for bad in [
            &[0u8, 1, 0, 0, 0, b'k'][..],
            &[2, 0, 0, 0, 0],
            &[2, 0, 1, 0, 0],
        ] {
            assert_eq!(code(bad), Some(3), "{bad:?}");
        }
    }

    // Proves user headers are checked structurally and by size.
    #[test]
    fn user_headers_validation() {
        let mut headers = Vec::new();
        Tlv {
            kind: 2,
            bytes: b"key",
        }
        .encode(&mut headers);
        Tlv {
            kind: 99,
            bytes: b"unknown kinds are tolerated",
        }
        .encode(&mut headers);
        assert_eq!(validate_user_headers(&headers), Ok(1));
        assert!(validate_user_headers(&headers[..headers.len() - 1]).is_err());
        let big = vec![1u8; USER_HEADERS_BYTES_MAX + 1];
        assert_eq!(
            validate_user_headers(&big)
                .unwrap_err()
                .status()
                .map(Status::code),
            Some(4017)
        );
    }
}
