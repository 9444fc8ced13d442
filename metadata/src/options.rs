//! The topic option catalog (§4.9): turning a CreateTopic/UpdateTopic option
//! block into validated [`TopicOptions`], and back into the two option
//! blocks of a TopicHeader (explicit = keys the client sent, derived =
//! defaults the server filled in). Also the (empty) stream and user catalogs.
//!
//! Must not: read server state beyond what the caller passes (the server's
//! default durability), or accept a value it cannot give back: every
//! accepted value has one canonical encoding, so the reply blocks are
//! stable and replay-safe.
//!
//! Accepted forms: numbers as any unsigned integer TLV (Uint8..Uint64, exact
//! widths) or a decimal String; sizes also as size strings ("1 GiB",
//! "500 MB", "unlimited"); expiry also as humantime strings ("7 days",
//! "none"); compression as String `none`/`gzip` or Uint8 1/2; booleans as
//! Bool or "true"/"false". Unknown key → 4041, bad value → 4042,
//! `max_topic_size` below `segment_size` → 1019.
//!
//! `enforce_fsync` (from Apache's main branch tools): `true` means
//! `durability = persisted`; `false` asks for nothing (the server default
//! applies). Sent together with a contradicting `durability` it is 4042.

use serde::{Deserialize, Serialize};

use super::error::MetadataError;
use crate::limits::{
    MESSAGES_REQUIRED_TO_SAVE_DEFAULT, MESSAGES_REQUIRED_TO_SAVE_MAX, SEGMENT_SIZE_ALIGN_BYTES,
    SEGMENT_SIZE_DEFAULT_BYTES, SEGMENT_SIZE_MAX_BYTES, SEGMENT_SIZE_MIN_BYTES,
    SIZE_OF_MESSAGES_REQUIRED_TO_SAVE_DEFAULT_BYTES, SIZE_OF_MESSAGES_REQUIRED_TO_SAVE_MAX_BYTES,
};
use iggyd_wire::protocol::options::{OptionBlock, OptionEntry, ValueKind};
use iggyd_wire::protocol::reply::CompressionAlgorithm;

/// Per-topic durability, the one type the admin API shows too (its variant
/// order is the journal's encoding; see the type's own doc).
pub use iggyd_admin_api::Durability;

/// Compression recorded for a topic (metadata only; the server does not
/// compress). Codes 1 and 2 on the wire; 0 is unrepresentable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Compression {
    #[default]
    None,
    Gzip,
}

impl Compression {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
        }
    }

    /// The reply type of the codec.
    pub fn to_wire(self) -> CompressionAlgorithm {
        match self {
            Self::None => CompressionAlgorithm::None,
            Self::Gzip => CompressionAlgorithm::Gzip,
        }
    }
}

/// Every key of the catalog, in reply order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum OptionKey {
    CompressionAlgorithm,
    MessageExpiry,
    MaxTopicSize,
    SegmentSize,
    Durability,
    ConsumerOffsetDurability,
    MessagesRequiredToSave,
    SizeOfMessagesRequiredToSave,
    PreallocateSegments,
}

impl OptionKey {
    pub const ALL: [Self; 9] = [
        Self::CompressionAlgorithm,
        Self::MessageExpiry,
        Self::MaxTopicSize,
        Self::SegmentSize,
        Self::Durability,
        Self::ConsumerOffsetDurability,
        Self::MessagesRequiredToSave,
        Self::SizeOfMessagesRequiredToSave,
        Self::PreallocateSegments,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::CompressionAlgorithm => "compression_algorithm",
            Self::MessageExpiry => "message_expiry",
            Self::MaxTopicSize => "max_topic_size",
            Self::SegmentSize => "segment_size",
            Self::Durability => "durability",
            Self::ConsumerOffsetDurability => "consumer_offset_durability",
            Self::MessagesRequiredToSave => "messages_required_to_save",
            Self::SizeOfMessagesRequiredToSave => "size_of_messages_required_to_save",
            Self::PreallocateSegments => "preallocate_segments",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|key| key.name() == name)
    }

    /// Whether UpdateTopic may change it.
    pub fn is_updatable(self) -> bool {
        matches!(
            self,
            Self::CompressionAlgorithm | Self::MessageExpiry | Self::MaxTopicSize
        )
    }
}

/// The legacy key of Apache's main branch (see the module doc).
pub const ENFORCE_FSYNC_KEY: &str = "enforce_fsync";

/// A topic's validated options.
///
/// Invariants: `segment_size_bytes` is a multiple of 512 in 1 MiB..=1 GiB;
/// `max_topic_size_bytes`, when limited, is at least `segment_size_bytes`;
/// `messages_required_to_save` in 1..=16,777,216;
/// `size_of_messages_required_to_save_bytes` in 1..=1 GiB;
/// `explicit` is sorted and holds each key at most once.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TopicOptions {
    /// µs; `None` = never expire.
    pub message_expiry_us: Option<u64>,
    /// bytes; `None` = unlimited.
    pub max_topic_size_bytes: Option<u64>,
    pub compression: Compression,
    pub segment_size_bytes: u64,
    pub durability: Durability,
    pub consumer_offset_durability: Durability,
    pub messages_required_to_save: u32,
    pub size_of_messages_required_to_save_bytes: u64,
    pub preallocate_segments: bool,
    /// Keys the client set (at create, or later by UpdateTopic).
    pub explicit: Vec<OptionKey>,
}

impl TopicOptions {
    /// Server defaults; `durability` is the configured default for topics
    /// that do not say (iggyd's config: `persisted`).
    pub fn defaults(durability: Durability) -> Self {
        Self {
            message_expiry_us: None,
            max_topic_size_bytes: None,
            compression: Compression::None,
            segment_size_bytes: SEGMENT_SIZE_DEFAULT_BYTES,
            durability,
            consumer_offset_durability: durability,
            messages_required_to_save: MESSAGES_REQUIRED_TO_SAVE_DEFAULT,
            size_of_messages_required_to_save_bytes:
                SIZE_OF_MESSAGES_REQUIRED_TO_SAVE_DEFAULT_BYTES,
            preallocate_segments: false,
            explicit: Vec::new(),
        }
    }

    /// `message_expiry` as the TopicHeader field: u64::MAX = never.
    pub fn message_expiry_wire(&self) -> u64 {
        self.message_expiry_us.unwrap_or(u64::MAX)
    }

    /// `max_topic_size` as the TopicHeader field: u64::MAX = unlimited.
    pub fn max_topic_size_wire(&self) -> u64 {
        self.max_topic_size_bytes.unwrap_or(u64::MAX)
    }

    /// Checks the cross-field rule: a size cap below one segment could never
    /// hold the active segment (1019).
    pub fn check_topic_size(&self) -> Result<(), MetadataError> {
        match self.max_topic_size_bytes {
            Some(max) if max < self.segment_size_bytes => Err(MetadataError::InvalidTopicSize {
                max_topic_size: max,
                segment_size: self.segment_size_bytes,
            }),
            _ => Ok(()),
        }
    }

    fn mark_explicit(&mut self, key: OptionKey) {
        if let Err(position) = self.explicit.binary_search(&key) {
            self.explicit.insert(position, key);
        }
    }

    /// The canonical TLV of one key's current value.
    pub fn canonical(&self, key: OptionKey) -> OwnedOption {
        let (kind, value) = match key {
            OptionKey::CompressionAlgorithm => (
                ValueKind::String,
                self.compression.as_str().as_bytes().to_vec(),
            ),
            OptionKey::MessageExpiry => (
                ValueKind::Uint64,
                self.message_expiry_wire().to_le_bytes().to_vec(),
            ),
            OptionKey::MaxTopicSize => (
                ValueKind::Uint64,
                self.max_topic_size_wire().to_le_bytes().to_vec(),
            ),
            OptionKey::SegmentSize => (
                ValueKind::Uint64,
                self.segment_size_bytes.to_le_bytes().to_vec(),
            ),
            OptionKey::Durability => (
                ValueKind::String,
                self.durability.as_str().as_bytes().to_vec(),
            ),
            OptionKey::ConsumerOffsetDurability => (
                ValueKind::String,
                self.consumer_offset_durability.as_str().as_bytes().to_vec(),
            ),
            OptionKey::MessagesRequiredToSave => (
                ValueKind::Uint32,
                self.messages_required_to_save.to_le_bytes().to_vec(),
            ),
            OptionKey::SizeOfMessagesRequiredToSave => (
                ValueKind::Uint64,
                self.size_of_messages_required_to_save_bytes
                    .to_le_bytes()
                    .to_vec(),
            ),
            OptionKey::PreallocateSegments => {
                (ValueKind::Bool, vec![u8::from(self.preallocate_segments)])
            }
        };
        OwnedOption {
            key: key.name(),
            kind: kind as u8,
            value,
        }
    }

    /// The TopicHeader's two blocks (§7.2): (explicit, derived).
    pub fn option_blocks(&self) -> (Vec<OwnedOption>, Vec<OwnedOption>) {
        let mut explicit = Vec::new();
        let mut derived = Vec::new();
        for key in OptionKey::ALL {
            let entry = self.canonical(key);
            if self.explicit.contains(&key) {
                explicit.push(entry);
            } else {
                derived.push(entry);
            }
        }
        (explicit, derived)
    }

    /// Merges an update (UpdateTopic) and re-checks the size rule.
    pub fn updated(&self, update: &TopicOptionsUpdate) -> Result<Self, MetadataError> {
        let mut next = self.clone();
        if let Some(compression) = update.compression {
            next.compression = compression;
            next.mark_explicit(OptionKey::CompressionAlgorithm);
        }
        if let Some(expiry) = update.message_expiry_us {
            next.message_expiry_us = expiry;
            next.mark_explicit(OptionKey::MessageExpiry);
        }
        if let Some(size) = update.max_topic_size_bytes {
            next.max_topic_size_bytes = size;
            next.mark_explicit(OptionKey::MaxTopicSize);
        }
        next.check_topic_size()?;
        Ok(next)
    }
}

/// One option entry owning its bytes, for reply encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedOption {
    pub key: &'static str,
    pub kind: u8,
    pub value: Vec<u8>,
}

impl OwnedOption {
    pub fn as_entry(&self) -> OptionEntry<'_> {
        OptionEntry {
            key: self.key,
            kind: self.kind,
            value: &self.value,
        }
    }
}

/// Borrowed entries for `protocol::reply::TopicInfo`.
pub fn as_entries(options: &[OwnedOption]) -> Vec<OptionEntry<'_>> {
    options.iter().map(OwnedOption::as_entry).collect()
}

/// The three keys UpdateTopic may change; `None` = leave unchanged. For
/// expiry and size, `Some(None)` = never / unlimited.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TopicOptionsUpdate {
    pub compression: Option<Compression>,
    pub message_expiry_us: Option<Option<u64>>,
    pub max_topic_size_bytes: Option<Option<u64>>,
}

/// CreateTopic: the block's keys over the server defaults.
pub fn parse_create_options(
    block: &OptionBlock<'_>,
    default_durability: Durability,
) -> Result<TopicOptions, MetadataError> {
    let mut options = TopicOptions::defaults(default_durability);
    let mut enforce_fsync = None;
    for entry in &block.entries {
        if entry.key == ENFORCE_FSYNC_KEY {
            enforce_fsync = Some(parse_bool(entry)?);
            continue;
        }
        let key = OptionKey::from_name(entry.key).ok_or_else(|| unsupported(entry.key))?;
        match key {
            OptionKey::CompressionAlgorithm => options.compression = parse_compression(entry)?,
            OptionKey::MessageExpiry => options.message_expiry_us = parse_expiry(entry)?,
            OptionKey::MaxTopicSize => options.max_topic_size_bytes = parse_max_size(entry)?,
            OptionKey::SegmentSize => options.segment_size_bytes = parse_segment_size(entry)?,
            OptionKey::Durability => options.durability = parse_durability(entry)?,
            OptionKey::ConsumerOffsetDurability => {
                options.consumer_offset_durability = parse_durability(entry)?;
            }
            OptionKey::MessagesRequiredToSave => {
                let value = parse_number(entry)?;
                if !(1..=u64::from(MESSAGES_REQUIRED_TO_SAVE_MAX)).contains(&value) {
                    return Err(MetadataError::invalid_option(
                        entry.key,
                        format!("must be 1..={MESSAGES_REQUIRED_TO_SAVE_MAX}"),
                    ));
                }
                options.messages_required_to_save = u32::try_from(value)
                    .map_err(|_| MetadataError::invalid_option(entry.key, "too large"))?;
            }
            OptionKey::SizeOfMessagesRequiredToSave => {
                let value = parse_size(entry)?
                    .ok_or_else(|| MetadataError::invalid_option(entry.key, "must be a size"))?;
                if !(1..=SIZE_OF_MESSAGES_REQUIRED_TO_SAVE_MAX_BYTES).contains(&value) {
                    return Err(MetadataError::invalid_option(
                        entry.key,
                        format!("must be 1..={SIZE_OF_MESSAGES_REQUIRED_TO_SAVE_MAX_BYTES} bytes"),
                    ));
                }
                options.size_of_messages_required_to_save_bytes = value;
            }
            OptionKey::PreallocateSegments => options.preallocate_segments = parse_bool(entry)?,
        }
        options.mark_explicit(key);
    }
    if enforce_fsync == Some(true) {
        if options.explicit.contains(&OptionKey::Durability)
            && options.durability != Durability::Persisted
        {
            return Err(MetadataError::invalid_option(
                ENFORCE_FSYNC_KEY,
                "enforce_fsync = true contradicts durability = replicated",
            ));
        }
        options.durability = Durability::Persisted;
        options.mark_explicit(OptionKey::Durability);
    }
    options.check_topic_size()?;
    Ok(options)
}

/// UpdateTopic: only the three updatable keys; anything else → 4041.
pub fn parse_update_options(block: &OptionBlock<'_>) -> Result<TopicOptionsUpdate, MetadataError> {
    let mut update = TopicOptionsUpdate::default();
    for entry in &block.entries {
        let key = OptionKey::from_name(entry.key)
            .filter(|key| key.is_updatable())
            .ok_or_else(|| unsupported(entry.key))?;
        match key {
            OptionKey::CompressionAlgorithm => update.compression = Some(parse_compression(entry)?),
            OptionKey::MessageExpiry => update.message_expiry_us = Some(parse_expiry(entry)?),
            OptionKey::MaxTopicSize => update.max_topic_size_bytes = Some(parse_max_size(entry)?),
            _ => return Err(unsupported(entry.key)),
        }
    }
    Ok(update)
}

/// Stream and user option blocks: no keys are defined, any key → 4041.
pub fn check_no_options(block: &OptionBlock<'_>) -> Result<(), MetadataError> {
    match block.entries.first() {
        Some(entry) => Err(unsupported(entry.key)),
        None => Ok(()),
    }
}

fn unsupported(key: &str) -> MetadataError {
    MetadataError::UnsupportedOptionKey {
        key: key.to_owned(),
    }
}

fn text<'a>(entry: &OptionEntry<'a>) -> Option<&'a str> {
    if entry.kind != ValueKind::String as u8 {
        return None;
    }
    std::str::from_utf8(entry.value).ok().map(str::trim)
}

/// An unsigned integer TLV of exact width, or a decimal String.
fn unsigned(entry: &OptionEntry<'_>) -> Option<u64> {
    let width = match ValueKind::from_u8(entry.kind)? {
        ValueKind::Uint8 => 1,
        ValueKind::Uint16 => 2,
        ValueKind::Uint32 => 4,
        ValueKind::Uint64 => 8,
        ValueKind::String => return text(entry)?.parse().ok(),
        _ => return None,
    };
    if entry.value.len() != width {
        return None;
    }
    let mut bytes = [0u8; 8];
    bytes.get_mut(..width)?.copy_from_slice(entry.value);
    Some(u64::from_le_bytes(bytes))
}

fn parse_number(entry: &OptionEntry<'_>) -> Result<u64, MetadataError> {
    unsigned(entry).ok_or_else(|| MetadataError::invalid_option(entry.key, "not a number"))
}

fn parse_bool(entry: &OptionEntry<'_>) -> Result<bool, MetadataError> {
    let bad = || MetadataError::invalid_option(entry.key, "not a boolean");
    if entry.kind == ValueKind::Bool as u8 {
        return match entry.value {
            [0] => Ok(false),
            [1] => Ok(true),
            _ => Err(bad()),
        };
    }
    match text(entry).map(str::to_ascii_lowercase).as_deref() {
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        _ => Err(bad()),
    }
}

fn parse_compression(entry: &OptionEntry<'_>) -> Result<Compression, MetadataError> {
    if entry.kind == ValueKind::Uint8 as u8 {
        return match entry.value {
            [1] => Ok(Compression::None),
            [2] => Ok(Compression::Gzip),
            _ => Err(MetadataError::invalid_option(
                entry.key,
                "code must be 1 or 2",
            )),
        };
    }
    match text(entry).map(str::to_ascii_lowercase).as_deref() {
        Some("none") => Ok(Compression::None),
        Some("gzip") => Ok(Compression::Gzip),
        _ => Err(MetadataError::invalid_option(
            entry.key,
            "must be none or gzip",
        )),
    }
}

fn parse_durability(entry: &OptionEntry<'_>) -> Result<Durability, MetadataError> {
    match text(entry).map(str::to_ascii_lowercase).as_deref() {
        Some("persisted") => Ok(Durability::Persisted),
        Some("replicated") => Ok(Durability::Replicated),
        _ => Err(MetadataError::invalid_option(
            entry.key,
            "must be persisted or replicated",
        )),
    }
}

fn is_unbounded_word(text: &str) -> bool {
    matches!(
        text.to_ascii_lowercase().as_str(),
        "none" | "never" | "unlimited" | "disabled"
    )
}

/// IggyExpiry: 0 = server default (never), u64::MAX = never, else µs.
fn parse_expiry(entry: &OptionEntry<'_>) -> Result<Option<u64>, MetadataError> {
    if let Some(text) = text(entry) {
        if is_unbounded_word(text) {
            return Ok(None);
        }
        if let Ok(number) = text.parse::<u64>() {
            return Ok(expiry_from_number(number));
        }
        let duration = humantime::parse_duration(text)
            .map_err(|_| MetadataError::invalid_option(entry.key, "not a duration"))?;
        let micros = u64::try_from(duration.as_micros())
            .map_err(|_| MetadataError::invalid_option(entry.key, "duration too long"))?;
        return Ok(expiry_from_number(micros));
    }
    Ok(expiry_from_number(parse_number(entry)?))
}

fn expiry_from_number(micros: u64) -> Option<u64> {
    match micros {
        0 | u64::MAX => None,
        micros => Some(micros),
    }
}

/// A size: number of bytes or a size string; `None` for the unbounded
/// words. The numeric 0 / u64::MAX conventions are the caller's.
fn parse_size(entry: &OptionEntry<'_>) -> Result<Option<u64>, MetadataError> {
    if let Some(text) = text(entry) {
        if is_unbounded_word(text) {
            return Ok(None);
        }
        return parse_size_text(text)
            .map(Some)
            .ok_or_else(|| MetadataError::invalid_option(entry.key, "not a size"));
    }
    parse_number(entry).map(Some)
}

/// MaxTopicSize: 0 = server default (unlimited), u64::MAX = unlimited.
fn parse_max_size(entry: &OptionEntry<'_>) -> Result<Option<u64>, MetadataError> {
    Ok(match parse_size(entry)? {
        None | Some(0) | Some(u64::MAX) => None,
        Some(bytes) => Some(bytes),
    })
}

fn parse_segment_size(entry: &OptionEntry<'_>) -> Result<u64, MetadataError> {
    let bytes = parse_size(entry)?
        .ok_or_else(|| MetadataError::invalid_option(entry.key, "must be a size"))?;
    if !(SEGMENT_SIZE_MIN_BYTES..=SEGMENT_SIZE_MAX_BYTES).contains(&bytes)
        || bytes % SEGMENT_SIZE_ALIGN_BYTES != 0
    {
        return Err(MetadataError::invalid_option(
            entry.key,
            format!(
                "must be a multiple of {SEGMENT_SIZE_ALIGN_BYTES} bytes in \
                 {SEGMENT_SIZE_MIN_BYTES}..={SEGMENT_SIZE_MAX_BYTES} bytes"
            ),
        ));
    }
    Ok(bytes)
}

const SIZE_UNITS: &[(&str, u64)] = &[
    ("b", 1),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("pb", 1_000_000_000_000_000),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
    ("pib", 1 << 50),
];

/// `"<whole>[.<fraction>] [unit]"`, exact integer arithmetic: a value that
/// is not a whole number of bytes is rejected rather than rounded.
pub fn parse_size_text(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let factor = if unit.is_empty() {
        1
    } else {
        SIZE_UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, factor)| *factor)?
    };
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (number, ""),
    };
    if whole.is_empty() || fraction.len() > 18 {
        return None;
    }
    let whole: u128 = whole.parse().ok()?;
    let mut total = whole.checked_mul(u128::from(factor))?;
    if !fraction.is_empty() {
        let digits: u128 = fraction.parse().ok()?;
        let scale = 10u128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
        let scaled = digits.checked_mul(u128::from(factor))?;
        if scaled % scale != 0 {
            return None;
        }
        total = total.checked_add(scaled / scale)?;
    }
    u64::try_from(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the journal encoding of `Durability` did not move when the
    /// type moved to the admin-API crate: postcard writes the variant
    /// index, persisted 0 and replicated 1, as records already on disk say.
    #[test]
    fn durability_keeps_its_journal_encoding() {
        assert_eq!(postcard::to_stdvec(&Durability::Persisted).unwrap(), [0]);
        assert_eq!(postcard::to_stdvec(&Durability::Replicated).unwrap(), [1]);
        let decoded: Durability = postcard::from_bytes(&[1]).unwrap();
        assert_eq!(decoded, Durability::Replicated);
    }

    fn block<'a>(entries: &[OptionEntry<'a>]) -> OptionBlock<'a> {
        OptionBlock {
            entries: entries.to_vec(),
        }
    }

    fn create(entries: &[OptionEntry<'_>]) -> Result<TopicOptions, MetadataError> {
        parse_create_options(&block(entries), Durability::Persisted)
    }

    fn code(result: Result<TopicOptions, MetadataError>) -> u32 {
        result.unwrap_err().status().code()
    }

    // Proves an empty block gives the documented defaults, all derived,
    // with the configured default durability.
    #[test]
    fn defaults_are_derived() {
        let options = create(&[]).unwrap();
        assert_eq!(options, TopicOptions::defaults(Durability::Persisted));
        let (explicit, derived) = options.option_blocks();
        assert!(explicit.is_empty());
        assert_eq!(derived.len(), 9);
        assert_eq!(options.message_expiry_wire(), u64::MAX);
        assert_eq!(options.max_topic_size_wire(), u64::MAX);
        let replicated = parse_create_options(&block(&[]), Durability::Replicated).unwrap();
        assert_eq!(replicated.durability, Durability::Replicated);
    }

    // Proves every key in every accepted form, and that sent keys land in
    // the explicit block with their canonical encoding.
    #[test]
    fn every_key_and_form() {
        let segment = (16u64 << 20).to_le_bytes();
        let messages = 10u32.to_le_bytes();
        let options = create(&[
            OptionEntry::string("compression_algorithm", "gzip"),
            OptionEntry::string("message_expiry", "7 days"),
            OptionEntry::string("max_topic_size", "1 GiB"),
            OptionEntry {
                key: "segment_size",
                kind: ValueKind::Uint64 as u8,
                value: &segment,
            },
            OptionEntry::string("durability", "replicated"),
            OptionEntry::string("consumer_offset_durability", "persisted"),
            OptionEntry {
                key: "messages_required_to_save",
                kind: ValueKind::Uint32 as u8,
                value: &messages,
            },
            OptionEntry::string("size_of_messages_required_to_save", "2 MiB"),
            OptionEntry::string("preallocate_segments", "true"),
        ])
        .unwrap();
        assert_eq!(options.compression, Compression::Gzip);
        assert_eq!(options.message_expiry_us, Some(7 * 86_400 * 1_000_000));
        assert_eq!(options.max_topic_size_bytes, Some(1 << 30));
        assert_eq!(options.segment_size_bytes, 16 << 20);
        assert_eq!(options.durability, Durability::Replicated);
        assert_eq!(options.consumer_offset_durability, Durability::Persisted);
        assert_eq!(options.messages_required_to_save, 10);
        assert_eq!(options.size_of_messages_required_to_save_bytes, 2 << 20);
        assert!(options.preallocate_segments);
        let (explicit, derived) = options.option_blocks();
        assert_eq!(explicit.len(), 9);
        assert!(derived.is_empty());
        assert_eq!(explicit[0].value, b"gzip");

        let compression_code = create(&[OptionEntry {
            key: "compression_algorithm",
            kind: ValueKind::Uint8 as u8,
            value: &[2],
        }])
        .unwrap();
        assert_eq!(compression_code.compression, Compression::Gzip);
        let never = create(&[
            OptionEntry::string("message_expiry", "none"),
            OptionEntry::string("max_topic_size", "unlimited"),
            OptionEntry {
                key: "preallocate_segments",
                kind: ValueKind::Bool as u8,
                value: &[1],
            },
        ])
        .unwrap();
        assert_eq!(never.message_expiry_us, None);
        assert_eq!(never.max_topic_size_bytes, None);
        assert!(never.preallocate_segments);
        let numeric_never = create(&[OptionEntry {
            key: "message_expiry",
            kind: ValueKind::Uint64 as u8,
            value: &u64::MAX.to_le_bytes(),
        }])
        .unwrap();
        assert_eq!(numeric_never.message_expiry_us, None);
    }

    // Proves the legacy enforce_fsync key: true forces persisted, false
    // leaves the default, a contradiction is 4042.
    #[test]
    fn enforce_fsync_is_accepted() {
        let forced = parse_create_options(
            &block(&[OptionEntry::string("enforce_fsync", "true")]),
            Durability::Replicated,
        )
        .unwrap();
        assert_eq!(forced.durability, Durability::Persisted);
        assert!(forced.explicit.contains(&OptionKey::Durability));
        let as_bool = parse_create_options(
            &block(&[OptionEntry {
                key: "enforce_fsync",
                kind: ValueKind::Bool as u8,
                value: &[1],
            }]),
            Durability::Replicated,
        )
        .unwrap();
        assert_eq!(as_bool.durability, Durability::Persisted);
        let off = parse_create_options(
            &block(&[OptionEntry::string("enforce_fsync", "false")]),
            Durability::Replicated,
        )
        .unwrap();
        assert_eq!(off.durability, Durability::Replicated);
        assert!(off.explicit.is_empty());
        assert_eq!(
            code(create(&[
                OptionEntry::string("enforce_fsync", "true"),
                OptionEntry::string("durability", "replicated")
            ])),
            4042
        );
        assert_eq!(
            code(create(&[OptionEntry::string("enforce_fsync", "yes")])),
            4042
        );
    }

    // Proves unknown keys are 4041, bad values 4042 and a size cap below the
    // segment size 1019.
    #[test]
    fn option_error_codes() {
        assert_eq!(
            code(create(&[OptionEntry::string("replication_factor", "3")])),
            4041
        );
        for (key, value) in [
            ("compression_algorithm", "zstd"),
            ("message_expiry", "soon"),
            ("max_topic_size", "big"),
            ("segment_size", "1000 B"),
            ("segment_size", "2 GiB"),
            ("segment_size", "1048577"),
            ("durability", "eventually"),
            ("messages_required_to_save", "0"),
            ("messages_required_to_save", "16777217"),
            ("size_of_messages_required_to_save", "2 GiB"),
            ("preallocate_segments", "maybe"),
        ] {
            assert_eq!(
                code(create(&[OptionEntry::string(key, value)])),
                4042,
                "{key}={value}"
            );
        }
        assert_eq!(
            code(create(&[OptionEntry {
                key: "segment_size",
                kind: ValueKind::Uint32 as u8,
                value: &[0, 0, 16],
            }])),
            4042
        );
        assert_eq!(
            code(create(&[OptionEntry {
                key: "compression_algorithm",
                kind: ValueKind::Uint8 as u8,
                value: &[0],
            }])),
            4042
        );
        assert_eq!(
            code(create(&[
                OptionEntry::string("segment_size", "16 MiB"),
                OptionEntry::string("max_topic_size", "8 MiB")
            ])),
            1019
        );
        // Default segment (1 GiB) against a 1 MiB cap.
        assert_eq!(
            code(create(&[OptionEntry::string("max_topic_size", "1 MiB")])),
            1019
        );
    }

    // Proves UpdateTopic takes only the three updatable keys and re-checks
    // the size rule on merge.
    #[test]
    fn update_keys() {
        let update = parse_update_options(&block(&[
            OptionEntry::string("compression_algorithm", "gzip"),
            OptionEntry::string("message_expiry", "1h"),
            OptionEntry::string("max_topic_size", "unlimited"),
        ]))
        .unwrap();
        assert_eq!(update.compression, Some(Compression::Gzip));
        assert_eq!(update.message_expiry_us, Some(Some(3_600_000_000)));
        assert_eq!(update.max_topic_size_bytes, Some(None));
        let before = TopicOptions::defaults(Durability::Persisted);
        let after = before.updated(&update).unwrap();
        assert_eq!(after.explicit.len(), 3);
        assert_eq!(
            parse_update_options(&block(&[OptionEntry::string("segment_size", "16 MiB")]))
                .unwrap_err()
                .status()
                .code(),
            4041
        );
        let shrink =
            parse_update_options(&block(&[OptionEntry::string("max_topic_size", "1 MiB")]))
                .unwrap();
        assert_eq!(before.updated(&shrink).unwrap_err().status().code(), 1019);
        assert!(check_no_options(&block(&[])).is_ok());
        assert_eq!(
            check_no_options(&block(&[OptionEntry::string("x", "y")]))
                .unwrap_err()
                .status()
                .code(),
            4041
        );
    }

    // Proves size strings are exact.
    #[test]
    fn size_strings() {
        assert_eq!(parse_size_text("1 GiB"), Some(1 << 30));
        assert_eq!(parse_size_text("500MB"), Some(500_000_000));
        assert_eq!(parse_size_text("1.5 KiB"), Some(1536));
        assert_eq!(parse_size_text("1048576"), Some(1 << 20));
        assert_eq!(parse_size_text("0.1 B"), None);
        assert_eq!(parse_size_text("1 parsec"), None);
        assert_eq!(parse_size_text("99999999 PiB"), None);
    }
}
