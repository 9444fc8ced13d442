//! Mutual TLS between the nodes of one cluster: [`PeerTls`] holds this
//! node's identity and the two rustls configurations built from the
//! cluster CA, this node's certificate and its key (PEM). The server side
//! requires a client certificate the cluster CA issued
//! (`WebPkiClientVerifier`); the client side presents this node's
//! certificate and trusts the cluster CA only, verifying the server's
//! certificate for the DNS name of the node it means to reach
//! (`identity.rs` states the naming convention).
//!
//! TLS 1.3 only (both ends are iggyd), the ring provider named explicitly
//! (no process-wide default, as in the daemon's `net/tls.rs`), and no
//! session resumption: every connection presents and verifies full
//! certificates, so the identity checks below always see the peer's
//! certificate. After the handshake, `node_named_by` reads the node a
//! certificate names (x509-parser; rustls has verified the chain);
//! `handshake.rs` compares it with the peer's hello.
//!
//! `PeerTls::from_pem` also checks this node's own certificate: the CA
//! issued it for both uses and it names exactly this node, so a node with
//! a wrong certificate fails at start, not at its first connection.
//!
//! Must not: implement cryptography or certificate path validation
//! (rustls and webpki do), hand-parse DER, or log key material.

use crate::identity::{ClusterName, ClusterNameError};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::collections::BTreeSet;
use std::sync::Arc;

/// This node's TLS identity and configurations. Cheap to clone; clones
/// share the configurations, which [`PeerTls::replace`] swaps for new
/// connections (a certificate rotation) on every clone at once.
#[derive(Clone)]
pub struct PeerTls {
    node_id: u64,
    cluster: ClusterName,
    current: Arc<std::sync::RwLock<Configs>>,
}

/// The configurations new connections use, and what they were built from.
struct Configs {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    /// The CA certificates, this node's chain and its key, as loaded (to
    /// tell a rotation from a reload of the same files).
    source: Vec<Vec<u8>>,
}

/// What [`PeerTls::replace`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaced {
    /// The same certificates and key as before.
    Unchanged,
    /// New connections use the new ones; open connections keep theirs.
    Applied,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerTls")
            .field("node_id", &self.node_id)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

/// Why a `PeerTls` could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerTlsError {
    #[error(transparent)]
    ClusterName(#[from] ClusterNameError),
    #[error("the cluster CA: {0}")]
    Ca(String),
    #[error("this node's certificate: {0}")]
    Certificate(String),
    #[error("this node's key: {0}")]
    Key(String),
}

/// Why a certificate does not name one node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamingError {
    #[error("no certificate was presented")]
    NoCertificate,
    #[error("the certificate does not parse: {0}")]
    Unparsable(String),
    #[error("the certificate names no node of cluster {cluster} (no DNS name node-<id>.{cluster})")]
    NoNode { cluster: String },
    #[error("the certificate names several nodes ({nodes:?}); a node's names exactly one")]
    SeveralNodes { nodes: Vec<u64> },
}

/// The provider every TLS object of the transport uses.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl PeerTls {
    /// Builds node `node_id`'s configurations for cluster `cluster_name`
    /// from PEM: `ca_pem` the cluster CA (one or more certificates, all
    /// trusted), `cert_pem` this node's certificate (then any
    /// intermediates), `key_pem` its private key.
    pub fn from_pem(
        ca_pem: &[u8],
        cert_pem: &[u8],
        key_pem: &[u8],
        node_id: u64,
        cluster_name: &str,
    ) -> Result<PeerTls, PeerTlsError> {
        let cluster = ClusterName::new(cluster_name)?;
        let cas = CertificateDer::pem_slice_iter(ca_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| PeerTlsError::Ca(format!("not PEM certificates: {error}")))?;
        if cas.is_empty() {
            return Err(PeerTlsError::Ca(
                "holds no PEM certificate (BEGIN CERTIFICATE)".to_string(),
            ));
        }
        let mut roots = RootCertStore::empty();
        for ca in cas {
            roots
                .add(ca)
                .map_err(|error| PeerTlsError::Ca(format!("not a usable CA: {error}")))?;
        }
        let roots = Arc::new(roots);
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| PeerTlsError::Certificate(format!("not PEM: {error}")))?;
        let Some((end_entity, intermediates)) = chain.split_first() else {
            return Err(PeerTlsError::Certificate(
                "holds no PEM certificate (BEGIN CERTIFICATE)".to_string(),
            ));
        };
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|error| PeerTlsError::Key(format!("no PEM private key: {error}")))?;

        let named = node_named_by(Some(end_entity), &cluster)
            .map_err(|error| PeerTlsError::Certificate(error.to_string()))?;
        if named != node_id {
            return Err(PeerTlsError::Certificate(format!(
                "it names node {named} ({}), and this is node {node_id}",
                cluster.node_dns_name(named)
            )));
        }
        let server_verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(roots.clone(), provider())
                .build()
                .map_err(|error| PeerTlsError::Ca(format!("cannot verify servers: {error}")))?;
        let client_verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|error| PeerTlsError::Ca(format!("cannot verify clients: {error}")))?;
        let own_name = ServerName::try_from(cluster.node_dns_name(node_id))
            .map_err(|error| PeerTlsError::Certificate(format!("its DNS name: {error}")))?;
        let now = UnixTime::now();
        server_verifier
            .verify_server_cert(end_entity, intermediates, &own_name, &[], now)
            .map_err(|error| {
                PeerTlsError::Certificate(format!(
                    "the cluster CA does not vouch for it as node {node_id}'s server \
                     certificate: {error}"
                ))
            })?;
        client_verifier
            .verify_client_cert(end_entity, intermediates, now)
            .map_err(|error| {
                PeerTlsError::Certificate(format!(
                    "the cluster CA does not vouch for it as a client certificate: {error}"
                ))
            })?;

        let mut server = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|error| PeerTlsError::Key(error.to_string()))?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(key_error)?;
        server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        server.send_tls13_tickets = 0;
        let mut client = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|error| PeerTlsError::Key(error.to_string()))?
            .with_webpki_verifier(server_verifier)
            .with_client_auth_cert(chain, key)
            .map_err(key_error)?;
        client.resumption = rustls::client::Resumption::disabled();
        Ok(PeerTls {
            node_id,
            cluster,
            current: Arc::new(std::sync::RwLock::new(Configs {
                server: Arc::new(server),
                client: Arc::new(client),
                source: vec![ca_pem.to_vec(), cert_pem.to_vec(), key_pem.to_vec()],
            })),
        })
    }

    /// Makes `next` (loaded from rotated files) what new connections of
    /// this identity and all its clones use. Refused when `next` is
    /// another node's or another cluster's identity.
    pub fn replace(&self, next: &PeerTls) -> Result<Replaced, PeerTlsError> {
        if next.node_id != self.node_id || next.cluster != self.cluster {
            return Err(PeerTlsError::Certificate(format!(
                "it names node {} of cluster {}, and this is node {} of cluster {}",
                next.node_id,
                next.cluster.as_str(),
                self.node_id,
                self.cluster.as_str()
            )));
        }
        let (server, client, source) = {
            let next = next.read();
            (
                next.server.clone(),
                next.client.clone(),
                next.source.clone(),
            )
        };
        let mut current = self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if current.source == source {
            return Ok(Replaced::Unchanged);
        }
        *current = Configs {
            server,
            client,
            source,
        };
        Ok(Replaced::Applied)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Configs> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    pub fn cluster(&self) -> &ClusterName {
        &self.cluster
    }

    /// The configuration connections accepted from other nodes use.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.read().server.clone()
    }

    /// The configuration connections to other nodes use.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.read().client.clone()
    }

    /// The name a client verifies the server's certificate for when it
    /// means to reach node `node_id`.
    pub fn server_name(&self, node_id: u64) -> Result<ServerName<'static>, String> {
        ServerName::try_from(self.cluster.node_dns_name(node_id)).map_err(|error| error.to_string())
    }
}

fn key_error(error: rustls::Error) -> PeerTlsError {
    PeerTlsError::Key(match error {
        rustls::Error::InconsistentKeys(_) => "does not belong to the certificate".to_string(),
        other => format!("unusable with the certificate: {other}"),
    })
}

/// The one node of `cluster` that `certificate` (an end-entity
/// certificate, DER) names in its subject alternative names. Names of
/// other clusters and other shapes are ignored; none or several nodes is
/// an error.
pub fn node_named_by(
    certificate: Option<&CertificateDer<'_>>,
    cluster: &ClusterName,
) -> Result<u64, NamingError> {
    let certificate = certificate.ok_or(NamingError::NoCertificate)?;
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref())
        .map_err(|error| NamingError::Unparsable(error.to_string()))?;
    let names = parsed
        .subject_alternative_name()
        .map_err(|error| NamingError::Unparsable(error.to_string()))?;
    let mut nodes = BTreeSet::new();
    for name in names.iter().flat_map(|names| &names.value.general_names) {
        if let x509_parser::extensions::GeneralName::DNSName(dns) = name
            && let Some(node) = cluster.node_of_dns_name(dns)
        {
            nodes.insert(node);
        }
    }
    let mut nodes = nodes.into_iter();
    match (nodes.next(), nodes.next()) {
        (Some(node), None) => Ok(node),
        (None, _) => Err(NamingError::NoNode {
            cluster: cluster.to_string(),
        }),
        (Some(first), Some(second)) => Err(NamingError::SeveralNodes {
            nodes: [first, second].into_iter().chain(nodes).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::ClusterCerts;

    fn load(certs: &ClusterCerts, node: u64, as_node: u64) -> Result<PeerTls, PeerTlsError> {
        let own = &certs.nodes[&node];
        PeerTls::from_pem(
            certs.ca_pem.as_bytes(),
            own.cert_pem.as_bytes(),
            own.key_pem.as_bytes(),
            as_node,
            certs.cluster.as_str(),
        )
    }

    // Proves a node's generated certificate loads as that node, and is
    // refused as another node, under another cluster's CA, with another
    // node's key, or under another cluster name.
    #[test]
    fn a_node_loads_only_its_own_identity() {
        let certs = ClusterCerts::generate("prod", &[1, 2]).unwrap();
        let other = ClusterCerts::generate("prod", &[1]).unwrap();
        let tls = load(&certs, 1, 1).unwrap();
        assert_eq!((tls.node_id(), tls.cluster().as_str()), (1, "prod"));
        let error = load(&certs, 1, 2).unwrap_err();
        assert!(error.to_string().contains("names node 1"), "{error}");
        let foreign = PeerTls::from_pem(
            other.ca_pem.as_bytes(),
            certs.nodes[&1].cert_pem.as_bytes(),
            certs.nodes[&1].key_pem.as_bytes(),
            1,
            "prod",
        )
        .unwrap_err();
        assert!(foreign.to_string().contains("does not vouch"), "{foreign}");
        let wrong_key = PeerTls::from_pem(
            certs.ca_pem.as_bytes(),
            certs.nodes[&1].cert_pem.as_bytes(),
            certs.nodes[&2].key_pem.as_bytes(),
            1,
            "prod",
        )
        .unwrap_err();
        assert_eq!(
            wrong_key,
            PeerTlsError::Key("does not belong to the certificate".to_string())
        );
        let renamed = PeerTls::from_pem(
            certs.ca_pem.as_bytes(),
            certs.nodes[&1].cert_pem.as_bytes(),
            certs.nodes[&1].key_pem.as_bytes(),
            1,
            "staging",
        )
        .unwrap_err();
        assert!(renamed.to_string().contains("names no node"), "{renamed}");
        assert!(matches!(
            PeerTls::from_pem(b"", b"", b"", 1, "prod"),
            Err(PeerTlsError::Ca(_))
        ));
        assert!(matches!(
            PeerTls::from_pem(b"", b"", b"", 1, "Prod"),
            Err(PeerTlsError::ClusterName(_))
        ));
    }

    // Proves the certificate reader: one node among other names, several
    // nodes refused, none refused, garbage refused.
    #[test]
    fn node_named_by_reads_exactly_one_node() {
        let cluster = ClusterName::new("prod").unwrap();
        let issue = |names: &[&str]| {
            let key = rcgen::KeyPair::generate().unwrap();
            let params = rcgen::CertificateParams::new(
                names
                    .iter()
                    .map(|name| name.to_string())
                    .collect::<Vec<_>>(),
            )
            .unwrap();
            CertificateDer::from(params.self_signed(&key).unwrap().der().to_vec())
        };
        let mixed = issue(&["localhost", "node-4.staging", "node-4.prod"]);
        assert_eq!(node_named_by(Some(&mixed), &cluster), Ok(4));
        let several = issue(&["node-2.prod", "node-3.prod"]);
        assert_eq!(
            node_named_by(Some(&several), &cluster),
            Err(NamingError::SeveralNodes { nodes: vec![2, 3] })
        );
        let twice = issue(&["node-2.prod", "NODE-2.prod"]);
        assert_eq!(node_named_by(Some(&twice), &cluster), Ok(2));
        let none = issue(&["node-2.staging"]);
        assert!(matches!(
            node_named_by(Some(&none), &cluster),
            Err(NamingError::NoNode { .. })
        ));
        let garbage = CertificateDer::from(vec![0x30, 0x03, 1, 2, 3]);
        assert!(matches!(
            node_named_by(Some(&garbage), &cluster),
            Err(NamingError::Unparsable(_))
        ));
        assert_eq!(
            node_named_by(None, &cluster),
            Err(NamingError::NoCertificate)
        );
    }
}
