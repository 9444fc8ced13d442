//! Who a node is: its id (`u64`), the cluster it belongs to
//! ([`ClusterName`]), and the one naming convention that ties a node to
//! its certificate.
//!
//! **The convention.** Node `<id>` of cluster `<cluster>` holds a
//! certificate, issued by the cluster's CA, whose subject alternative names
//! include the DNS name `node-<id>.<cluster>` (the id in decimal without
//! leading zeros, e.g. `node-3.prod-eu`) and no other `node-*` name of the
//! same cluster. The certificate serves both ends of a connection (extended
//! key usages serverAuth and clientAuth): a node accepts calls with it and
//! makes calls with it. A cluster name is 1 to 63 characters of
//! `[a-z0-9-]` starting with a letter and not ending with `-`: one DNS
//! label, so `node-<id>.<cluster>` is a valid DNS name that certificate
//! verifiers accept (a last label of digits only would read as an IP
//! address, hence the letter).
//!
//! Must not: parse certificates (`tls.rs` reads the names out of one) or do
//! I/O.

use std::fmt;

/// The longest cluster name: one DNS label.
pub const CLUSTER_NAME_BYTES_MAX: usize = 63;

/// A cluster's name, checked against the convention above.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterName(String);

/// Why a cluster name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cluster name {name:?}: {reason} (1 to 63 characters of [a-z0-9-], starting with a letter, \
     not ending with '-')"
)]
pub struct ClusterNameError {
    pub name: String,
    pub reason: &'static str,
}

impl ClusterName {
    pub fn new(name: &str) -> Result<ClusterName, ClusterNameError> {
        let fail = |reason| ClusterNameError {
            name: name.to_string(),
            reason,
        };
        if name.is_empty() {
            return Err(fail("empty"));
        }
        if name.len() > CLUSTER_NAME_BYTES_MAX {
            return Err(fail("longer than 63 characters"));
        }
        if !name
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
        {
            return Err(fail("a character outside [a-z0-9-]"));
        }
        if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
            return Err(fail("does not start with a letter"));
        }
        if name.ends_with('-') {
            return Err(fail("ends with '-'"));
        }
        Ok(ClusterName(name.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The DNS name node `node_id` of this cluster carries in its
    /// certificate: `node-<id>.<cluster>`.
    pub fn node_dns_name(&self, node_id: u64) -> String {
        format!("node-{node_id}.{}", self.0)
    }

    /// The node a DNS name from a certificate names in this cluster, if it
    /// follows the convention: `node-<id>.<cluster>` with a canonical
    /// decimal id (no sign, no leading zero). DNS names compare without
    /// regard to ASCII case. Names of other clusters and other shapes are
    /// `None`.
    pub fn node_of_dns_name(&self, dns_name: &str) -> Option<u64> {
        let lower = dns_name.to_ascii_lowercase();
        let rest = lower.strip_prefix("node-")?;
        let (id, cluster) = rest.split_once('.')?;
        if cluster != self.0 {
            return None;
        }
        let canonical = !id.is_empty()
            && id.bytes().all(|byte| byte.is_ascii_digit())
            && (id == "0" || !id.starts_with('0'));
        if !canonical {
            return None;
        }
        id.parse().ok()
    }
}

impl fmt::Display for ClusterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the name rules: what is accepted, and each refusal's reason.
    #[test]
    fn cluster_names_follow_the_rules() {
        for good in ["a", "prod-eu-1", "c0", &"a".repeat(63)] {
            assert_eq!(ClusterName::new(good).unwrap().as_str(), good);
        }
        let reason = |name: &str| ClusterName::new(name).unwrap_err().reason;
        assert_eq!(reason(""), "empty");
        assert_eq!(reason(&"a".repeat(64)), "longer than 63 characters");
        assert_eq!(reason("Prod"), "a character outside [a-z0-9-]");
        assert_eq!(reason("a.b"), "a character outside [a-z0-9-]");
        assert_eq!(reason("a_b"), "a character outside [a-z0-9-]");
        assert_eq!(reason("1abc"), "does not start with a letter");
        assert_eq!(reason("-abc"), "does not start with a letter");
        assert_eq!(reason("abc-"), "ends with '-'");
    }

    // Proves a node's DNS name reads back as its id, and that names of
    // other clusters, other shapes and non-canonical ids name no node.
    #[test]
    fn node_names_round_trip_and_nothing_else_matches() {
        let cluster = ClusterName::new("prod").unwrap();
        for id in [0, 1, 42, u64::MAX] {
            let name = cluster.node_dns_name(id);
            assert_eq!(cluster.node_of_dns_name(&name), Some(id));
        }
        assert_eq!(cluster.node_of_dns_name("NODE-7.PROD"), Some(7));
        for other in [
            "node-7.other",
            "node-7.prod.example",
            "node-7",
            "node-.prod",
            "node-07.prod",
            "node-+7.prod",
            "node--7.prod",
            "node-7a.prod",
            "node-18446744073709551616.prod",
            "xnode-7.prod",
            "",
        ] {
            assert_eq!(cluster.node_of_dns_name(other), None, "{other}");
        }
    }
}
