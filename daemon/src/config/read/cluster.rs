//! The rules that tie the `[cluster]` keys together, and to `tcp.address`,
//! checked only when `cluster.enabled` is true (otherwise each key has only
//! passed its own kind's check). They run over the typed `Config` once every
//! key was accepted on its own, and find the values as given (for the error's
//! value and origin) in the merged figment. Each refusal names one key, the
//! one to change: a node's field as `cluster.nodes[index].field`, the index
//! counting from 0 like the elements of an environment variable's list.
//!
//! Must not: check a value's form (the kinds in `keys` and `read` do), or
//! look at anything outside `[cluster]` but `tcp.address`.

use super::Reader;
use crate::config::{ClusterConfig, Config, ConfigError, from, layers, show};
use figment::value::Value;
use std::net::SocketAddr;

/// The two address fields of a node, in the order they are checked.
const ADDRESS_FIELDS: [&str; 2] = ["address", "replication_address"];

impl Reader<'_> {
    /// Refuses a cluster that cannot work: no nodes, a node address nobody
    /// can reach, two nodes with one id, name or address, this node not
    /// listed, an even number of voters unless allowed, clients sent to a
    /// port this node does not listen on, heartbeats too slow for the
    /// election timeout, or mutual TLS without its files.
    pub(super) fn cluster_checks(&self, config: &Config) -> Result<(), ConfigError> {
        let cluster = &config.cluster;
        if !cluster.enabled {
            return Ok(());
        }
        let nodes_value = self.value("cluster.nodes")?;
        if cluster.nodes.is_empty() {
            return Err(self.fail(
                "cluster.nodes",
                nodes_value,
                "at least one node (a `[[cluster.nodes]]` table each, this node's included) \
                 when `cluster.enabled` is true",
            ));
        }
        self.node_addresses_are_concrete(cluster)?;
        self.node_ids_are_distinct(cluster)?;
        self.node_names_are_distinct(cluster)?;
        self.node_addresses_are_distinct(cluster)?;
        let this = self.this_node(cluster)?;
        self.voters_are_odd(cluster, nodes_value)?;
        self.clients_reach_this_node(config, this)?;
        self.heartbeat_beats_elections(cluster)?;
        self.tls_files_are_set()
    }

    /// Other nodes and clients connect to these addresses, so each names a
    /// concrete IP and a port.
    fn node_addresses_are_concrete(&self, cluster: &ClusterConfig) -> Result<(), ConfigError> {
        for (index, node) in cluster.nodes.iter().enumerate() {
            for (field, address) in ADDRESS_FIELDS
                .into_iter()
                .zip([node.address, node.replication_address])
            {
                if address.ip().is_unspecified() || address.port() == 0 {
                    return Err(self.node_fail(
                        index,
                        field,
                        "an address other nodes and clients can connect to: a concrete IP (not \
                         0.0.0.0 or ::) and a port other than 0",
                    ));
                }
            }
        }
        Ok(())
    }

    fn node_ids_are_distinct(&self, cluster: &ClusterConfig) -> Result<(), ConfigError> {
        for (index, node) in cluster.nodes.iter().enumerate() {
            let earlier = cluster.nodes[..index]
                .iter()
                .position(|other| other.id == node.id);
            if let Some(earlier) = earlier {
                return Err(self.node_fail(
                    index,
                    "id",
                    format!(
                        "an id no other node has (`cluster.nodes[{earlier}].id` is {} too{})",
                        node.id,
                        from(&self.node_origin(earlier, "id"))
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Names are compared as `Config` holds them, so a name left out
    /// (`node-<id>`) clashes with the same name written for another node.
    /// Clients and operators tell nodes apart by name (GetClusterMetadata).
    fn node_names_are_distinct(&self, cluster: &ClusterConfig) -> Result<(), ConfigError> {
        for (index, node) in cluster.nodes.iter().enumerate() {
            let earlier = cluster.nodes[..index]
                .iter()
                .position(|other| other.name == node.name);
            if let Some(earlier) = earlier {
                let key = format!("cluster.nodes[{index}].name");
                let value = match self.node_value(index, "name") {
                    Some(value) => show(&key, value),
                    None => format!("{:?} (its name when left out)", node.name),
                };
                return Err(ConfigError::Invalid {
                    key,
                    value,
                    expected: format!(
                        "a name no other node has (`cluster.nodes[{earlier}].name` is {:?} \
                         too{})",
                        node.name,
                        from(&self.node_origin(earlier, "name"))
                    ),
                    origin: self.node_origin(index, "name"),
                });
            }
        }
        Ok(())
    }

    /// Every address and replication address, of every node, is a
    /// different socket: two listeners cannot share one, and a client or a
    /// peer would reach the wrong one.
    fn node_addresses_are_distinct(&self, cluster: &ClusterConfig) -> Result<(), ConfigError> {
        let mut seen: Vec<(SocketAddr, usize, &str)> = Vec::with_capacity(cluster.nodes.len() * 2);
        for (index, node) in cluster.nodes.iter().enumerate() {
            for (field, address) in ADDRESS_FIELDS
                .into_iter()
                .zip([node.address, node.replication_address])
            {
                if let Some(&(_, earlier, earlier_field)) =
                    seen.iter().find(|(other, ..)| *other == address)
                {
                    return Err(self.node_fail(
                        index,
                        field,
                        format!(
                            "an address no other node or listener uses \
                             (`cluster.nodes[{earlier}].{earlier_field}` is {address} too{})",
                            from(&self.node_origin(earlier, earlier_field))
                        ),
                    ));
                }
                seen.push((address, index, field));
            }
        }
        Ok(())
    }

    /// The index of this node's entry: every node lists itself, a joining
    /// one too (the leader adds it by that entry).
    fn this_node(&self, cluster: &ClusterConfig) -> Result<usize, ConfigError> {
        if let Some(index) = cluster
            .nodes
            .iter()
            .position(|node| node.id == cluster.node_id)
        {
            return Ok(index);
        }
        let ids: Vec<String> = cluster
            .nodes
            .iter()
            .map(|node| node.id.to_string())
            .collect();
        Err(self.fail(
            "cluster.node_id",
            self.value("cluster.node_id")?,
            format!(
                "the id of one of `cluster.nodes` ({}): every node lists itself, one that joins \
                 too",
                ids.join(", ")
            ),
        ))
    }

    /// A majority of 2k voters survives k - 1 failures, no more than one of
    /// 2k - 1: an even count is usually a node too many or too few. A node
    /// that joins initializes nothing with the list (the running cluster's
    /// membership decides), so its list may be even (the current nodes and
    /// itself, midway through a replacement).
    fn voters_are_odd(
        &self,
        cluster: &ClusterConfig,
        nodes_value: &Value,
    ) -> Result<(), ConfigError> {
        let count = cluster.nodes.len();
        if !count.is_multiple_of(2) || cluster.allow_even_voters || cluster.join {
            return Ok(());
        }
        Err(ConfigError::Invalid {
            key: "cluster.nodes".to_string(),
            value: format!("{count} nodes"),
            expected: format!(
                "an odd number of nodes (a majority of {count} survives no more failures \
                 than a majority of {}), or `cluster.allow_even_voters = true`",
                count - 1
            ),
            origin: layers::origin(self.figment, nodes_value),
        })
    }

    /// Clients are sent to this node's `address` (GetClusterMetadata), and
    /// only `tcp.address` listens for them: the ports must agree (the IPs
    /// may differ, behind NAT or on `0.0.0.0`).
    fn clients_reach_this_node(&self, config: &Config, this: usize) -> Result<(), ConfigError> {
        let node = &config.cluster.nodes[this];
        let listen = config.tcp.address;
        if node.address.port() == listen.port() {
            return Ok(());
        }
        let tcp_value = self.value("tcp.address")?;
        Err(self.node_fail(
            this,
            "address",
            format!(
                "the port of `tcp.address` ({}{}) in the entry of this node \
                 (`cluster.node_id` {}): clients are sent to this address, and only \
                 `tcp.address` listens for them",
                show("tcp.address", tcp_value),
                from(&layers::origin(self.figment, tcp_value)),
                config.cluster.node_id
            ),
        ))
    }

    /// A follower that misses one heartbeat must not start an election.
    fn heartbeat_beats_elections(&self, cluster: &ClusterConfig) -> Result<(), ConfigError> {
        if cluster.heartbeat_interval * 2 < cluster.election_timeout {
            return Ok(());
        }
        let election_value = self.value("cluster.election_timeout")?;
        Err(self.fail(
            "cluster.heartbeat_interval",
            self.value("cluster.heartbeat_interval")?,
            format!(
                "below half of `cluster.election_timeout` ({}{}), so that one late heartbeat \
                 does not start an election",
                show("cluster.election_timeout", election_value),
                from(&layers::origin(self.figment, election_value))
            ),
        ))
    }

    /// Nodes authenticate each other with mutual TLS, so all three files.
    fn tls_files_are_set(&self) -> Result<(), ConfigError> {
        for (key, what) in [
            (
                "cluster.tls.ca_file",
                "a PEM file of the CA certificates that issued the nodes' certificates",
            ),
            (
                "cluster.tls.cert_file",
                "a PEM certificate chain file of this node (SAN `node-<node_id>.<name>`)",
            ),
            (
                "cluster.tls.key_file",
                "a PEM private key file of this node's certificate",
            ),
        ] {
            let value = self.value(key)?;
            if matches!(value, Value::String(_, text) if text.is_empty()) {
                return Err(self.fail(
                    key,
                    value,
                    format!("{what} when `cluster.enabled` is true"),
                ));
            }
        }
        Ok(())
    }

    /// The error for field `field` of node `index`, showing the value as
    /// given (or nothing, for a field left out).
    fn node_fail(&self, index: usize, field: &str, expected: impl Into<String>) -> ConfigError {
        let key = format!("cluster.nodes[{index}].{field}");
        let value = match self.node_value(index, field) {
            Some(value) => show(&key, value),
            None => "nothing".to_string(),
        };
        ConfigError::Invalid {
            key,
            value,
            expected: expected.into(),
            origin: self.node_origin(index, field),
        }
    }

    /// Where field `field` of node `index` came from: the field's source,
    /// else its table's (a field left out), else the list's.
    fn node_origin(&self, index: usize, field: &str) -> Option<String> {
        let value = self
            .node_value(index, field)
            .or_else(|| self.node_table(index))
            .or_else(|| self.root.find_ref("cluster.nodes"))?;
        layers::origin(self.figment, value)
    }

    fn node_value(&self, index: usize, field: &str) -> Option<&Value> {
        self.node_table(index)?.as_dict()?.get(field)
    }

    fn node_table(&self, index: usize) -> Option<&Value> {
        match self.root.find_ref("cluster.nodes")? {
            Value::Array(_, items) => items.get(index),
            _ => None,
        }
    }
}
