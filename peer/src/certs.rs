//! Making a cluster's certificates (rcgen): a CA and, for each node, a
//! certificate and key that follow `identity.rs`'s convention (the DNS
//! name `node-<id>.<cluster>`, serverAuth and clientAuth), as PEM text,
//! and writing them to a directory: `ca.pem`, `node-<id>.pem` and
//! `node-<id>.key` (mode 0600). For tests and local clusters; a production
//! cluster's CA lives in the operator's own tooling, so the CA key is
//! never kept or written (to add a node, generate the cluster again).
//!
//! Must not: overwrite a file (an existing key is never clobbered), or
//! write a key readable by anyone but its owner.

use crate::identity::{ClusterName, ClusterNameError};
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A node's certificate and private key, PEM.
#[derive(Clone)]
pub struct NodeCert {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for NodeCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCert").finish_non_exhaustive()
    }
}

/// A cluster's CA certificate and every node's certificate and key.
#[derive(Debug, Clone)]
pub struct ClusterCerts {
    pub cluster: ClusterName,
    pub ca_pem: String,
    pub nodes: BTreeMap<u64, NodeCert>,
}

#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error(transparent)]
    ClusterName(#[from] ClusterNameError),
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{}: {error}", .path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl ClusterCerts {
    /// A new CA for `cluster_name` and a certificate for each of
    /// `node_ids` (repeated ids get one).
    pub fn generate(cluster_name: &str, node_ids: &[u64]) -> Result<ClusterCerts, CertsError> {
        let cluster = ClusterName::new(cluster_name)?;
        let ca_key = rcgen::KeyPair::generate()?;
        let mut ca_params = rcgen::CertificateParams::new(Vec::new())?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        ca_params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("iggyd cluster {cluster} CA"),
        );
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca_pem = ca_params.self_signed(&ca_key)?.pem();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let mut nodes = BTreeMap::new();
        for &node_id in node_ids {
            let name = cluster.node_dns_name(node_id);
            let key = rcgen::KeyPair::generate()?;
            let mut params = rcgen::CertificateParams::new(vec![name.clone()])?;
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
            params.extended_key_usages = vec![
                rcgen::ExtendedKeyUsagePurpose::ServerAuth,
                rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            ];
            params.use_authority_key_identifier_extension = true;
            let certificate = params.signed_by(&key, &issuer)?;
            nodes.insert(
                node_id,
                NodeCert {
                    cert_pem: certificate.pem(),
                    key_pem: key.serialize_pem(),
                },
            );
        }
        Ok(ClusterCerts {
            cluster,
            ca_pem,
            nodes,
        })
    }

    /// The CA certificate's file in a directory `write_to` filled.
    pub fn ca_file(dir: &Path) -> PathBuf {
        dir.join("ca.pem")
    }

    /// Node `node_id`'s certificate file.
    pub fn cert_file(dir: &Path, node_id: u64) -> PathBuf {
        dir.join(format!("node-{node_id}.pem"))
    }

    /// Node `node_id`'s key file.
    pub fn key_file(dir: &Path, node_id: u64) -> PathBuf {
        dir.join(format!("node-{node_id}.key"))
    }

    /// Writes every file into `dir` (created with mode 0700 if missing).
    /// Fails, writing nothing more, at the first file that already exists.
    pub fn write_to(&self, dir: &Path) -> Result<(), CertsError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| CertsError::Io { path, error }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io(dir))?;
        write_new(&ClusterCerts::ca_file(dir), &self.ca_pem, 0o644)?;
        for (&node_id, node) in &self.nodes {
            write_new(
                &ClusterCerts::cert_file(dir, node_id),
                &node.cert_pem,
                0o644,
            )?;
            write_new(&ClusterCerts::key_file(dir, node_id), &node.key_pem, 0o600)?;
        }
        Ok(())
    }
}

/// Creates `path` (never replacing a file) with `mode` and `text`.
fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), CertsError> {
    let fail = |error| CertsError::Io {
        path: path.to_path_buf(),
        error,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(fail)?;
    file.write_all(text.as_bytes()).map_err(fail)?;
    file.sync_all().map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    // Proves the files written: names, contents, key modes 0600, and that
    // nothing is overwritten.
    #[test]
    fn writes_every_file_once_with_private_keys() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("certs");
        let certs = ClusterCerts::generate("local", &[1, 2, 3, 2]).unwrap();
        assert_eq!(certs.nodes.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
        certs.write_to(&target).unwrap();
        let mode = |path: PathBuf| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(target.clone()), 0o700);
        assert_eq!(
            std::fs::read_to_string(ClusterCerts::ca_file(&target)).unwrap(),
            certs.ca_pem
        );
        for node in 1..=3 {
            assert_eq!(mode(ClusterCerts::key_file(&target, node)), 0o600);
            assert_eq!(
                std::fs::read_to_string(ClusterCerts::key_file(&target, node)).unwrap(),
                certs.nodes[&node].key_pem
            );
            assert_eq!(
                std::fs::read_to_string(ClusterCerts::cert_file(&target, node)).unwrap(),
                certs.nodes[&node].cert_pem
            );
        }
        let again = certs.write_to(&target).unwrap_err();
        assert!(
            matches!(&again, CertsError::Io { error, .. } if error.kind() == std::io::ErrorKind::AlreadyExists),
            "{again}"
        );
        assert!(ClusterCerts::generate("Bad", &[1]).is_err());
    }
}
