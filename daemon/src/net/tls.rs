//! TLS on the Iggy TCP listener (`[tcp.tls]`): loading the certificate
//! chain, its key and the optional client CAs from PEM files into a rustls
//! `ServerConfig` (TLS 1.2 and 1.3, the ring provider named explicitly, no
//! process-wide default), the cell every shard takes the current config
//! from at accept (so SIGHUP can swap in a new pair while open connections
//! keep theirs), and the first-byte check that tells a plaintext client on
//! a TLS port, or a TLS client on a plaintext port, from a real one.
//!
//! A path starting with `$CREDENTIALS_DIRECTORY/` is read from the directory
//! systemd fills from `LoadCredential=`. Files are read whole, each at most
//! `limits::TLS_PEM_FILE_BYTES_MAX`.
//!
//! Must not: implement any cryptography (rustls does), keep a key anywhere
//! but inside the `ServerConfig`, or log key material.

use crate::config::TlsConfig;
use crate::config::resolve_credential;
use crate::limits;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// The first byte of a TLS handshake record (a ClientHello).
pub const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Why a certificate, key or CA file did not load.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{key}` ({}): {message}", .path.display())]
pub struct TlsLoadError {
    /// The configuration key naming the file.
    pub key: &'static str,
    pub path: PathBuf,
    pub message: String,
}

/// A loaded TLS configuration and what an operator needs to tell it apart
/// from another one.
#[derive(Debug, Clone)]
pub struct LoadedTls {
    pub config: Arc<ServerConfig>,
    /// `SHA-256 AB:CD:…` of the leaf certificate, the chain length and
    /// whether clients must present a certificate.
    pub description: String,
}

/// The current TLS configuration, shared by the shards (which take it at
/// each accept) and the supervisor (which replaces it on SIGHUP).
#[derive(Debug, Clone)]
pub struct TlsCell {
    current: Arc<Mutex<LoadedTls>>,
}

impl TlsCell {
    pub fn new(loaded: LoadedTls) -> TlsCell {
        TlsCell {
            current: Arc::new(Mutex::new(loaded)),
        }
    }

    /// The configuration for a connection accepted now.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .config
            .clone()
    }

    pub fn description(&self) -> String {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .description
            .clone()
    }

    /// New connections use `loaded` from now on; open ones keep theirs.
    pub fn replace(&self, loaded: LoadedTls) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = loaded;
    }
}

fn read_pem(
    key: &'static str,
    path: &Path,
    credentials: Option<&Path>,
) -> Result<Vec<u8>, TlsLoadError> {
    let fail = |message: String| TlsLoadError {
        key,
        path: path.to_path_buf(),
        message,
    };
    let resolved = resolve_credential(path, credentials).map_err(fail)?;
    let file = std::fs::File::open(&resolved).map_err(|error| fail(error.to_string()))?;
    let mut bytes = Vec::new();
    use std::io::Read;
    file.take(limits::TLS_PEM_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| fail(error.to_string()))?;
    if bytes.len() as u64 > limits::TLS_PEM_FILE_BYTES_MAX {
        return Err(fail(format!(
            "larger than {} bytes: not a PEM certificate or key",
            limits::TLS_PEM_FILE_BYTES_MAX
        )));
    }
    Ok(bytes)
}

fn certificates(
    key: &'static str,
    path: &Path,
    credentials: Option<&Path>,
) -> Result<Vec<CertificateDer<'static>>, TlsLoadError> {
    let fail = |message: String| TlsLoadError {
        key,
        path: path.to_path_buf(),
        message,
    };
    let pem = read_pem(key, path, credentials)?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| fail(format!("not PEM certificates: {error}")))?;
    if certificates.is_empty() {
        return Err(fail(
            "holds no PEM certificate (BEGIN CERTIFICATE)".to_string(),
        ));
    }
    Ok(certificates)
}

/// The provider every TLS object of the daemon uses.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Load `[tcp.tls]`'s files into a server configuration. Every way it can
/// fail (a missing or unreadable file, no certificate, no key, a key that
/// does not belong to the certificate, unusable CAs) is a `TlsLoadError`
/// naming the key and the file.
pub fn load(tls: &TlsConfig, credentials: Option<&Path>) -> Result<LoadedTls, TlsLoadError> {
    let missing = |key: &'static str| TlsLoadError {
        key,
        path: PathBuf::new(),
        message: "not set, and `tcp.tls.enabled` is true".to_string(),
    };
    let cert_path = tls
        .cert_file
        .as_deref()
        .ok_or_else(|| missing("tcp.tls.cert_file"))?;
    let key_path = tls
        .key_file
        .as_deref()
        .ok_or_else(|| missing("tcp.tls.key_file"))?;
    let chain = certificates("tcp.tls.cert_file", cert_path, credentials)?;
    let key_fail = |message: String| TlsLoadError {
        key: "tcp.tls.key_file",
        path: key_path.to_path_buf(),
        message,
    };
    let key_pem = read_pem("tcp.tls.key_file", key_path, credentials)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|error| key_fail(format!("no PEM private key: {error}")))?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|error| key_fail(error.to_string()))?;
    let fingerprint = fingerprint(&chain[0]);
    let chain_len = chain.len();
    let (builder, client_auth) = match &tls.client_ca_file {
        None => (builder.with_no_client_auth(), "no client certificates"),
        Some(ca_path) => {
            let ca_fail = |message: String| TlsLoadError {
                key: "tcp.tls.client_ca_file",
                path: ca_path.to_path_buf(),
                message,
            };
            let mut roots = rustls::RootCertStore::empty();
            for ca in certificates("tcp.tls.client_ca_file", ca_path, credentials)? {
                roots
                    .add(ca)
                    .map_err(|error| ca_fail(format!("not a usable CA certificate: {error}")))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            )
            .build()
            .map_err(|error| ca_fail(format!("cannot verify clients with it: {error}")))?;
            (
                builder.with_client_cert_verifier(verifier),
                "client certificates required",
            )
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(|error| {
        key_fail(match error {
            rustls::Error::InconsistentKeys(_) => {
                "does not belong to the certificate in `tcp.tls.cert_file`".to_string()
            }
            other => format!("unusable with the certificate: {other}"),
        })
    })?;
    Ok(LoadedTls {
        config: Arc::new(config),
        description: format!(
            "leaf SHA-256 {fingerprint}, {chain_len} certificate(s), {client_auth}"
        ),
    })
}

/// SHA-256 of a certificate as `AB:CD:…`, as `openssl x509 -fingerprint
/// -sha256` prints it.
fn fingerprint(certificate: &CertificateDer<'_>) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, certificate.as_ref());
    digest
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The first byte a client sent, without consuming it: waits until the
/// socket is readable, then peeks. `Ok(None)` when the peer closed first.
pub async fn peek_first_byte(stream: &monoio::net::TcpStream) -> std::io::Result<Option<u8>> {
    use std::os::fd::AsRawFd;
    let fd = stream.as_raw_fd();
    loop {
        stream.readable(false).await?;
        let mut byte = 0u8;
        // SAFETY: `fd` is the stream's open socket and `byte` outlives the
        // call; MSG_PEEK leaves the data in the socket for the real reads.
        let read = unsafe {
            libc::recv(
                fd,
                std::ptr::from_mut(&mut byte).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        match read {
            1 => return Ok(Some(byte)),
            0 => return Ok(None),
            _ => {
                let error = std::io::Error::last_os_error();
                match error.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => continue,
                    _ => return Err(error),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed CA and a leaf for `localhost` it signed, as PEM.
    struct Pair {
        ca_pem: String,
        cert_pem: String,
        key_pem: String,
    }

    fn pair() -> Pair {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        Pair {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn config(cert: &Path, key: &Path, ca: Option<&Path>) -> TlsConfig {
        TlsConfig {
            enabled: true,
            cert_file: Some(cert.to_path_buf()),
            key_file: Some(key.to_path_buf()),
            client_ca_file: ca.map(Path::to_path_buf),
        }
    }

    // Proves a good pair (chain of leaf + CA) loads, with and without
    // client CAs, and that the description names the leaf's fingerprint.
    #[test]
    fn a_good_pair_loads() {
        let dir = tempfile::tempdir().unwrap();
        let pair = pair();
        let chain = write(
            dir.path(),
            "chain.pem",
            &(pair.cert_pem.clone() + &pair.ca_pem),
        );
        let key = write(dir.path(), "key.pem", &pair.key_pem);
        let ca = write(dir.path(), "ca.pem", &pair.ca_pem);
        let loaded = load(&config(&chain, &key, None), None).unwrap();
        assert!(
            loaded
                .description
                .contains("2 certificate(s), no client certificates")
        );
        assert_eq!(loaded.description.matches(':').count(), 31);
        let loaded = load(&config(&chain, &key, Some(&ca)), None).unwrap();
        assert!(loaded.description.ends_with("client certificates required"));
    }

    // Proves every bad input is a typed error naming the key: a missing
    // file, a file without certificates, a key from another pair, garbage
    // as a key, an oversized file, and a credential path without
    // CREDENTIALS_DIRECTORY.
    #[test]
    fn bad_pairs_are_refused_with_the_key_named() {
        let dir = tempfile::tempdir().unwrap();
        let pair = pair();
        let other = self::pair();
        let cert = write(dir.path(), "cert.pem", &pair.cert_pem);
        let key = write(dir.path(), "key.pem", &pair.key_pem);
        let other_key = write(dir.path(), "other.pem", &other.key_pem);
        let garbage = write(dir.path(), "garbage.pem", "not pem at all");
        let huge = write(
            dir.path(),
            "huge.pem",
            &"x".repeat(limits::TLS_PEM_FILE_BYTES_MAX as usize + 1),
        );
        let missing = dir.path().join("missing.pem");
        let error = load(&config(&missing, &key, None), None).unwrap_err();
        assert_eq!(error.key, "tcp.tls.cert_file");
        assert!(error.message.contains("No such file"), "{error}");
        let error = load(&config(&garbage, &key, None), None).unwrap_err();
        assert_eq!(error.key, "tcp.tls.cert_file");
        let error = load(&config(&cert, &other_key, None), None).unwrap_err();
        assert_eq!(error.key, "tcp.tls.key_file");
        assert!(
            error.message.contains("does not belong to the certificate"),
            "{error}"
        );
        let error = load(&config(&cert, &garbage, None), None).unwrap_err();
        assert_eq!(error.key, "tcp.tls.key_file");
        let error = load(&config(&cert, &key, Some(&garbage)), None).unwrap_err();
        assert_eq!(error.key, "tcp.tls.client_ca_file");
        let error = load(&config(&huge, &key, None), None).unwrap_err();
        assert!(error.message.contains("larger than"), "{error}");
        let credential = PathBuf::from("$CREDENTIALS_DIRECTORY/key.pem");
        let error = load(&config(&cert, &credential, None), None).unwrap_err();
        assert!(error.message.contains("LoadCredential="), "{error}");
        assert!(load(&config(&cert, &credential, None), Some(dir.path())).is_ok());
    }

    // Proves credential paths resolve under the directory and other paths
    // stay as they are.
    #[test]
    fn credential_paths() {
        let directory = Path::new("/run/credentials/iggyd.service");
        assert_eq!(
            resolve_credential(Path::new("$CREDENTIALS_DIRECTORY/tls.key"), Some(directory))
                .unwrap(),
            directory.join("tls.key")
        );
        assert_eq!(
            resolve_credential(
                Path::new("${CREDENTIALS_DIRECTORY}/tls.key"),
                Some(directory)
            )
            .unwrap(),
            directory.join("tls.key")
        );
        assert_eq!(
            resolve_credential(Path::new("/etc/iggyd/tls.key"), None).unwrap(),
            PathBuf::from("/etc/iggyd/tls.key")
        );
    }

    // Proves the cell hands out the current configuration and a
    // replacement is seen by the next caller.
    #[test]
    fn the_cell_swaps() {
        let dir = tempfile::tempdir().unwrap();
        let first = pair();
        let second = pair();
        let load_pair = |pair: &Pair, name: &str| {
            let cert = write(dir.path(), &format!("{name}.crt"), &pair.cert_pem);
            let key = write(dir.path(), &format!("{name}.key"), &pair.key_pem);
            load(&config(&cert, &key, None), None).unwrap()
        };
        let cell = TlsCell::new(load_pair(&first, "first"));
        let before = cell.description();
        let held = cell.config();
        cell.replace(load_pair(&second, "second"));
        assert_ne!(cell.description(), before);
        assert!(!Arc::ptr_eq(&held, &cell.config()));
    }
}
