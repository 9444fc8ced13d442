//! Certificates for tests, made on the spot (rcgen): a CA, and server or
//! client certificates it issued, as PEM text and files; and the rustls
//! client configuration the kit's wire client (`wire::Client::connect_tls`)
//! and the benchmarks speak TLS with. The ring provider is named
//! explicitly, never installed process-wide, so whatever else the test
//! binary links (the official SDK installs aws-lc-rs) does not matter.
//!
//! It panics on failure: these are test instruments, and a certificate
//! that cannot be made is a broken test, not a case to handle.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A certificate authority of one test.
pub struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// The CA certificate (what clients trust), PEM.
    pub pem: String,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

/// A certificate a `TestCa` issued and its private key, PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl TestCa {
    /// A new self-signed CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::new(Vec::new()).expect("CA params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let certificate = params.self_signed(&key).expect("self-signed CA");
        TestCa {
            pem: certificate.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A server certificate for `names` (DNS names or IP addresses).
    pub fn server(&self, names: &[&str]) -> Issued {
        self.issue(names, rcgen::ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate (for `tcp.tls.client_ca_file`).
    pub fn client(&self, name: &str) -> Issued {
        self.issue(&[name], rcgen::ExtendedKeyUsagePurpose::ClientAuth)
    }

    fn issue(&self, names: &[&str], usage: rcgen::ExtendedKeyUsagePurpose) -> Issued {
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let names: Vec<String> = names.iter().map(|name| (*name).to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names.clone()).expect("leaf params");
        if let Some(first) = names.first() {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, first.as_str());
        }
        params.extended_key_usages = vec![usage];
        params.use_authority_key_identifier_extension = true;
        let certificate = params.signed_by(&key, &self.issuer).expect("signed leaf");
        Issued {
            cert_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    path
}

/// A client configuration that trusts `ca_pem` only and, with `identity`,
/// presents that certificate.
pub fn client_config(ca_pem: &str, identity: Option<&Issued>) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(certificate.expect("CA PEM"))
            .expect("CA certificate");
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some(identity) => {
            let chain = CertificateDer::pem_slice_iter(identity.cert_pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("client certificate PEM");
            let key =
                PrivateKeyDer::from_pem_slice(identity.key_pem.as_bytes()).expect("client key PEM");
            builder
                .with_client_auth_cert(chain, key)
                .expect("client certificate and key")
        }
    };
    Arc::new(config)
}

/// The SHA-256 fingerprint of the certificate a TLS connection's peer
/// presented first, as hex bytes `AB:CD:…` (the form the daemon logs).
pub fn peer_fingerprint(connection: &rustls::ClientConnection) -> Option<String> {
    let certificate = connection.peer_certificates()?.first()?;
    let digest = ring::digest::digest(&ring::digest::SHA256, certificate.as_ref());
    Some(
        digest
            .as_ref()
            .iter()
            .map(|byte| format!("{byte:02X}"))
            .collect::<Vec<_>>()
            .join(":"),
    )
}
