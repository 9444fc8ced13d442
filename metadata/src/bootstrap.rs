//! Root user bootstrap: on first start (no users at all) create the root
//! user, id 0, with every permission, from the configured credentials
//! (`root.username` / `root.password`, defaults `iggy` / `iggy`, also
//! `IGGY_ROOT_USERNAME` / `IGGY_ROOT_PASSWORD`).
//!
//! Packaged mode (`root.password = ""`): a random password is generated and
//! written ONCE to `<data_dir>/root-credentials`, mode 0600, created with
//! `O_EXCL` so an existing file is never overwritten (a later start reads
//! the password back from it). Must not: log or print a password, or
//! create root when any user exists (the operator may have renamed or
//! re-permissioned users; bootstrap is not a repair tool).

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::ROOT_USER_ID;
use super::apply::validate_username;
use super::auth::{self, CredentialError, HashCost};
use super::command::{Applied, MetadataCommand};
use super::error::MetadataError;
use super::io::MetadataIo;
use super::model::UserStatus;
use super::permissions::all_permissions;
use super::store::{ExecuteError, MetadataStore, StoreError};

/// File the generated root credentials go to, inside the data directory.
pub const ROOT_CREDENTIALS_FILE: &str = "root-credentials";

/// Random bytes behind a generated password (base64url → 32 characters).
const GENERATED_PASSWORD_BYTES: usize = 24;

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("root credentials are invalid: {0}")]
    Invalid(MetadataError),
    #[error(transparent)]
    Credential(#[from] CredentialError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("root credentials file {path}: {source}")]
    File { path: PathBuf, source: io::Error },
    #[error("root credentials file {path} exists but holds no password line")]
    Unreadable { path: PathBuf },
}

/// Where the root password comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootPassword {
    /// The configured password (3..=100 characters).
    Configured(String),
    /// Packaged mode: generate into `<data_dir>/root-credentials`.
    Generate { data_dir: PathBuf },
}

impl RootPassword {
    /// `root.password = ""` means generate.
    pub fn from_config(password: &str, data_dir: &Path) -> Self {
        if password.is_empty() {
            Self::Generate {
                data_dir: data_dir.to_path_buf(),
            }
        } else {
            Self::Configured(password.to_owned())
        }
    }
}

/// Creates root if there are no users. Returns `Some(0)` when it did.
pub fn bootstrap_root<Io: MetadataIo>(
    store: &mut MetadataStore<Io>,
    username: &str,
    password: &RootPassword,
    cost: HashCost,
    now_us: u64,
) -> Result<Option<u32>, BootstrapError> {
    if store.metadata().users().next().is_some() {
        return Ok(None);
    }
    validate_username(username).map_err(BootstrapError::Invalid)?;
    let password = match password {
        RootPassword::Configured(password) => password.clone(),
        RootPassword::Generate { data_dir } => root_credentials(data_dir, username)?,
    };
    auth::validate_password(&password).map_err(BootstrapError::Invalid)?;
    let password_hash = auth::hash_password(&password, cost)?;
    let applied = store
        .execute(MetadataCommand::CreateUser {
            username: username.to_owned(),
            password_hash,
            status: UserStatus::Active,
            permissions: Some(all_permissions()),
            created_at_us: now_us,
        })
        .map_err(|error| match error {
            ExecuteError::Rejected(error) => BootstrapError::Invalid(error),
            ExecuteError::Fatal(error) => BootstrapError::Store(error),
        })?;
    // With no users the lowest free id is 0: root is always user 0.
    assert_eq!(
        applied,
        Applied::UserCreated {
            user_id: ROOT_USER_ID
        }
    );
    tracing::info!(username, "created the root user");
    Ok(Some(ROOT_USER_ID))
}

/// The packaged-mode password: read from `<data_dir>/root-credentials` if
/// the file exists, else generated and written there once (0600, O_EXCL,
/// fsync'ed with its directory).
///
/// File format (text):
/// ```text
/// # iggyd root credentials, written once at first start. …
/// username: <username>
/// password: <password>
/// ```
pub fn root_credentials(data_dir: &Path, username: &str) -> Result<String, BootstrapError> {
    let path = data_dir.join(ROOT_CREDENTIALS_FILE);
    let file_error = |source| BootstrapError::File {
        path: path.clone(),
        source,
    };
    let mut bytes = [0u8; GENERATED_PASSWORD_BYTES];
    auth::random_bytes(&mut bytes)?;
    let password = auth::base64_url(&bytes);
    fs::create_dir_all(data_dir).map_err(file_error)?;
    let created = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path);
    let mut file = match created {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            return read_password(&path);
        }
        Err(error) => return Err(file_error(error)),
    };
    let text = format!(
        "# iggyd root credentials, written once at first start. Log in with them and\n\
         # change the password (iggy user change-password); this file is never rewritten.\n\
         username: {username}\npassword: {password}\n"
    );
    file.write_all(text.as_bytes()).map_err(file_error)?;
    file.sync_all().map_err(file_error)?;
    fs::File::open(data_dir)
        .and_then(|dir| dir.sync_all())
        .map_err(file_error)?;
    tracing::warn!(
        path = %path.display(),
        "generated a root password; it is in the root credentials file (not logged)"
    );
    Ok(password)
}

fn read_password(path: &Path) -> Result<String, BootstrapError> {
    let text = fs::read_to_string(path).map_err(|source| BootstrapError::File {
        path: path.to_path_buf(),
        source,
    })?;
    text.lines()
        .find_map(|line| line.strip_prefix("password: "))
        .map(|password| password.trim().to_owned())
        .filter(|password| !password.is_empty())
        .ok_or_else(|| BootstrapError::Unreadable {
            path: path.to_path_buf(),
        })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::io::SimDirIo;

    fn store() -> MetadataStore<SimDirIo> {
        MetadataStore::open(SimDirIo::new(1)).unwrap().0
    }

    // Proves first start creates root (id 0, every permission) from the
    // configured credentials, login works, and a second bootstrap is a no-op.
    #[test]
    fn creates_root_once() {
        let mut store = store();
        let password = RootPassword::from_config("iggy", Path::new("/nonexistent"));
        let created = bootstrap_root(&mut store, "iggy", &password, HashCost::cheap(), 10).unwrap();
        assert_eq!(created, Some(0));
        let root = store.metadata().user_by_id(0).unwrap();
        assert_eq!(root.username, "iggy");
        assert_eq!(root.permissions, Some(all_permissions()));
        assert_eq!(store.metadata().verify_password("iggy", "iggy"), Ok(0));
        let again = bootstrap_root(&mut store, "other", &password, HashCost::cheap(), 11).unwrap();
        assert_eq!(again, None);
        assert_eq!(store.metadata().users().count(), 1);
        let bad = bootstrap_root(&mut self::store(), "ab", &password, HashCost::cheap(), 1);
        assert!(matches!(bad, Err(BootstrapError::Invalid(_))));
    }

    // Proves packaged mode writes a 0600 credentials file once, never
    // overwrites it, and reuses its password on a later bootstrap.
    #[test]
    fn generated_credentials_file() {
        let dir = tempfile::tempdir().unwrap();
        let password = RootPassword::from_config("", dir.path());
        let mut store = store();
        bootstrap_root(&mut store, "iggy", &password, HashCost::cheap(), 1).unwrap();
        let path = dir.path().join(ROOT_CREDENTIALS_FILE);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = fs::read_to_string(&path).unwrap();
        let written = read_password(&path).unwrap();
        assert_eq!(written.len(), 32);
        assert!(text.contains("username: iggy\n"));
        assert_eq!(store.metadata().verify_password("iggy", &written), Ok(0));

        // A fresh metadata directory with the same data dir: same password,
        // file untouched.
        let mut fresh = self::store();
        bootstrap_root(&mut fresh, "iggy", &password, HashCost::cheap(), 2).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), text);
        assert_eq!(fresh.metadata().verify_password("iggy", &written), Ok(0));
    }
}
