//! Credentials: Argon2id password hashing, personal access token generation
//! and hashing, and the two login checks (`verify_password`,
//! `verify_token`) every shard can run against its published view.
//!
//! Must not: log or keep a raw password or token, or run inside
//! `Metadata::apply` (hashing draws a random salt; the caller hashes before
//! building the command). Argon2id with the crate's default parameters
//! (19 MiB, t = 2, p = 1) costs tens of milliseconds of one core, so login
//! checks run on the login pool (`net::login`), never on a shard; tests use
//! [`HashCost::cheap`] to keep the suite fast.

use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use argon2::{Algorithm, Argon2, Params, Version};
use blake2::{Blake2b256, Digest};

use super::PAT_TOKEN_BYTES;
use super::error::MetadataError;
use super::model::{Metadata, TokenHash, UserStatus};
use crate::limits::{PASSWORD_LEN_MAX, PASSWORD_LEN_MIN, USERNAME_LEN_MAX, USERNAME_LEN_MIN};

/// The random source failed (getrandom); the only way these helpers fail
/// besides bad input.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("the operating system's random source failed: {0}")]
    Random(getrandom::Error),
    #[error("password hashing failed: {0}")]
    Hash(String),
}

/// Argon2id cost parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashCost {
    pub memory_kib: u32,
    pub iterations: u32,
    pub parallelism: u32,
}

impl HashCost {
    /// The `argon2` crate's defaults (OWASP's first recommendation).
    pub const PRODUCTION: Self = Self {
        memory_kib: Params::DEFAULT_M_COST,
        iterations: Params::DEFAULT_T_COST,
        parallelism: Params::DEFAULT_P_COST,
    };

    /// Minimal parameters for tests only: a hash costs microseconds.
    pub const fn cheap() -> Self {
        Self {
            memory_kib: Params::MIN_M_COST,
            iterations: 1,
            parallelism: 1,
        }
    }
}

/// Checks a new password's length (3..=100 characters) → 44.
pub fn validate_password(password: &str) -> Result<(), MetadataError> {
    let len = password.chars().count();
    if (PASSWORD_LEN_MIN..=PASSWORD_LEN_MAX).contains(&len) {
        Ok(())
    } else {
        Err(MetadataError::InvalidPassword { len })
    }
}

/// Fills `bytes` from the operating system's CSPRNG.
pub fn random_bytes(bytes: &mut [u8]) -> Result<(), CredentialError> {
    getrandom::fill(bytes).map_err(CredentialError::Random)
}

/// Argon2id PHC string of `password` with a fresh 16-byte salt. The caller
/// validated the length first (`validate_password`).
pub fn hash_password(password: &str, cost: HashCost) -> Result<String, CredentialError> {
    let params = Params::new(cost.memory_kib, cost.iterations, cost.parallelism, None)
        .map_err(|error| CredentialError::Hash(error.to_string()))?;
    let mut salt = [0u8; 16];
    random_bytes(&mut salt)?;
    let hash = Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
        .hash_password_with_salt(password.as_bytes(), &salt)
        .map_err(|error| CredentialError::Hash(error.to_string()))?;
    Ok(hash.to_string())
}

/// Whether `password` matches the PHC string (its own parameters are used,
/// so hashes made with other costs still verify). A malformed stored hash
/// never matches.
pub fn password_matches(password: &str, phc: &str) -> bool {
    Argon2::default()
        .verify_password(password.as_bytes(), phc)
        .is_ok()
}

/// A new raw token: URL-safe base64 (no padding) of 32 CSPRNG bytes, 43
/// characters.
pub fn generate_token() -> Result<String, CredentialError> {
    let mut bytes = [0u8; PAT_TOKEN_BYTES];
    random_bytes(&mut bytes)?;
    Ok(base64_url(&bytes))
}

/// What is stored for a token: Blake2b-256 of the raw token. A fast hash is
/// enough because tokens carry 256 random bits (no dictionary to attack).
pub fn hash_token(raw: &str) -> TokenHash {
    let digest = Blake2b256::digest(raw.as_bytes());
    let mut hash = [0u8; 32];
    hash.copy_from_slice(digest.as_slice());
    hash
}

/// URL-safe base64 without padding (RFC 4648 §5).
pub fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b0 = u32::from(chunk.first().copied().unwrap_or(0));
        let b1 = u32::from(chunk.get(1).copied().unwrap_or(0));
        let b2 = u32::from(chunk.get(2).copied().unwrap_or(0));
        let group = (b0 << 16) | (b1 << 8) | b2;
        let symbols = chunk.len() + 1;
        for index in 0..symbols {
            let shift = 18 - 6 * index;
            let value = usize::try_from((group >> shift) & 63).unwrap_or(0);
            out.push(char::from(ALPHABET.get(value).copied().unwrap_or(b'A')));
        }
    }
    out
}

impl Metadata {
    /// Password login (§6.2): lengths outside 3..=50 / 3..=100, an unknown
    /// user, an inactive user and a wrong password are all 42, so a client
    /// cannot tell which one it was.
    pub fn verify_password(&self, username: &str, password: &str) -> Result<u32, MetadataError> {
        let username_len = username.chars().count();
        let password_len = password.chars().count();
        if !(USERNAME_LEN_MIN..=USERNAME_LEN_MAX).contains(&username_len)
            || !(PASSWORD_LEN_MIN..=PASSWORD_LEN_MAX).contains(&password_len)
        {
            return Err(MetadataError::InvalidCredentials);
        }
        let user = self
            .user_by_name(username)
            .ok_or(MetadataError::InvalidCredentials)?;
        if user.status != UserStatus::Active || !password_matches(password, &user.password_hash) {
            return Err(MetadataError::InvalidCredentials);
        }
        Ok(user.id)
    }

    /// Whether `password` is the current password of `user_id`
    /// (ChangePassword's check; a mismatch is 42).
    pub fn check_current_password(
        &self,
        user_id: u32,
        password: &str,
    ) -> Result<(), MetadataError> {
        let user = self
            .user_by_id(user_id)
            .ok_or(MetadataError::UserNotFound)?;
        if password_matches(password, &user.password_hash) {
            Ok(())
        } else {
            Err(MetadataError::InvalidCredentials)
        }
    }

    /// Token login (§6.2): unknown → 53 (eviction reason 10), expired → 54
    /// (reason 10 too, as the caller decides), owner inactive → 47
    /// (reason 11).
    pub fn verify_token(&self, raw: &str, now_us: u64) -> Result<u32, MetadataError> {
        let (user, token) = self
            .token_by_hash(&hash_token(raw))
            .ok_or(MetadataError::InvalidPersonalAccessToken)?;
        if token.is_expired(now_us) {
            return Err(MetadataError::PersonalAccessTokenExpired {
                user_id: user.id,
                expiry_at_us: token.expiry_at_us.unwrap_or(0),
            });
        }
        if user.status != UserStatus::Active {
            return Err(MetadataError::UserInactive { user_id: user.id });
        }
        Ok(user.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves hashing round-trips with cheap parameters, wrong passwords and
    // garbage hashes do not match, and salts differ per hash.
    #[test]
    fn password_hash_round_trip() {
        let first = hash_password("secret", HashCost::cheap()).unwrap();
        let second = hash_password("secret", HashCost::cheap()).unwrap();
        assert!(first.starts_with("$argon2id$v=19$"));
        assert_ne!(first, second);
        assert!(password_matches("secret", &first));
        assert!(!password_matches("Secret", &first));
        assert!(!password_matches("secret", "not a hash"));
        assert_eq!(validate_password("ab").unwrap_err().status().code(), 44);
        assert_eq!(
            validate_password(&"x".repeat(101))
                .unwrap_err()
                .status()
                .code(),
            44
        );
        assert!(validate_password("abc").is_ok());
    }

    // Proves tokens are 43 URL-safe characters, distinct, and hash stably.
    #[test]
    fn tokens() {
        let first = generate_token().unwrap();
        let second = generate_token().unwrap();
        assert_eq!(first.len(), 43);
        assert_ne!(first, second);
        assert!(
            first
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_eq!(hash_token(&first), hash_token(&first));
        assert_ne!(hash_token(&first), hash_token(&second));
        assert_eq!(base64_url(b"foob"), "Zm9vYg");
        assert_eq!(base64_url(b"\xfb\xff"), "-_8");
    }
}
