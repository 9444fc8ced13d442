//! Seeded randomness for tests: SplitMix64, small and dependency-free, so a
//! failing case reproduces from the seed it prints. Not for anything but
//! tests and simulations (it is not a cryptographic generator).

/// A SplitMix64 generator; the state is the seed.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (0 when `bound` is 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64().checked_rem(bound).unwrap_or(0)
    }

    /// A position in `0..len` (0 when `len` is 0).
    pub fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.below(len as u64)).unwrap_or(0)
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

/// The payload a read-path test stores at `offset` of a partition tagged
/// `tag`: the offset and the tag first, then bytes that depend on both, so
/// a message from another offset or another partition never matches (the
/// suites check every polled message against it).
pub fn stamped(tag: u8, offset: u64, len: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(len + 8);
    bytes.extend_from_slice(&offset.to_le_bytes());
    bytes.push(tag);
    let mut state = offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (u64::from(tag) << 56) | 1;
    while bytes.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves stamped payloads differ by offset and by tag, and take any
    /// length (shorter than the stamp included).
    #[test]
    fn stamped_payloads_name_their_offset_and_tag() {
        assert_eq!(stamped(1, 5, 3), vec![5, 0, 0]);
        assert_eq!(stamped(1, 5, 1000).len(), 1000);
        assert_ne!(stamped(1, 5, 100), stamped(2, 5, 100));
        assert_ne!(stamped(1, 5, 100)[9..], stamped(1, 6, 100)[9..]);
        assert_eq!(stamped(1, 5, 100), stamped(1, 5, 100));
    }

    /// Proves the generator is SplitMix64 (the reference sequence for seed
    /// 0) and that bounds hold, empty ones included.
    #[test]
    fn splitmix64_sequence_and_bounds() {
        let mut rng = Rng(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(rng.below(0), 0);
        assert_eq!(rng.index(0), 0);
        assert!((0..1_000).all(|_| rng.below(7) < 7 && rng.index(3) < 3));
        assert_eq!(rng.bytes(5).len(), 5);
    }
}
