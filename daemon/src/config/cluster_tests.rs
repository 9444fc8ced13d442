//! Tests of the `[cluster]` keys as an operator meets them: their defaults,
//! a node list from a file and from the environment (figment's value syntax),
//! each field's refused values named as `cluster.nodes[index].field`, unknown
//! fields with suggestions, every rule that ties the keys together when the
//! cluster is on (one test per refusal, each asserting the key the error
//! names), and `iggyd config`'s round trip. Every load passes a config file,
//! so the machine's `/etc/iggyd/iggyd.toml` is never read (the config tests'
//! `load`).
//!
//! Must not: read the machine's config file or the process environment
//! (every load passes a file and its environment).

use super::tests::{load, load_err};
use super::*;

/// A valid three-node cluster as node 1 sees it, on `tcp.address`'s
/// default port (8090). Each refusal test changes one thing in it.
const VALID: &str = "[cluster]\n\
    enabled = true\n\
    name = \"orders\"\n\
    node_id = 1\n\
    [[cluster.nodes]]\n\
    id = 1\n\
    address = \"10.0.0.1:8090\"\n\
    replication_address = \"10.0.0.1:8091\"\n\
    [[cluster.nodes]]\n\
    id = 2\n\
    name = \"second\"\n\
    address = \"10.0.0.2:8090\"\n\
    replication_address = \"10.0.0.2:8091\"\n\
    [[cluster.nodes]]\n\
    id = 3\n\
    address = \"10.0.0.3:8090\"\n\
    replication_address = \"10.0.0.3:8091\"\n\
    [cluster.tls]\n\
    ca_file = \"/etc/iggyd/cluster/ca.pem\"\n\
    cert_file = \"/etc/iggyd/cluster/node-1.pem\"\n\
    key_file = \"/etc/iggyd/cluster/node-1.key\"\n";

/// `VALID` with `from` (which must occur exactly once) replaced by `to`.
fn valid_with(from: &str, to: &str) -> String {
    assert_eq!(VALID.matches(from).count(), 1, "{from:?} in VALID");
    VALID.replace(from, to)
}

/// Loads `toml`, expects a refusal and checks that it names `key` (by
/// `ConfigError::key` and in the line), in one line; returns the line.
fn refused(toml: &str, env: &[(&str, &str)], key: &str) -> String {
    let error = load(toml, env).unwrap_err();
    let message = error.to_string();
    assert_eq!(error.key(), key, "{message}\n{toml}");
    assert!(
        message.starts_with(&format!("config key `{key}`")),
        "{message}"
    );
    assert!(message.contains("expected"), "{message}");
    assert!(!message.contains('\n'), "{message}");
    message
}

/// With nothing set the cluster is off, named `iggyd`, node 1 of no nodes,
/// with 1 s elections, 200 ms heartbeats and no TLS files; `iggyd config`
/// prints all of it.
#[test]
fn defaults() {
    let config = load("", &[]).unwrap();
    assert_eq!(
        config.cluster,
        ClusterConfig {
            enabled: false,
            name: "iggyd".to_string(),
            node_id: 1,
            join: false,
            nodes: Vec::new(),
            election_timeout: Duration::from_secs(1),
            heartbeat_interval: Duration::from_millis(200),
            allow_even_voters: false,
            metadata_snapshot_entries: 1024,
            tls: ClusterTlsConfig {
                ca_file: None,
                cert_file: None,
                key_file: None,
            },
        }
    );
    let printed = config.to_toml();
    assert!(
        printed.ends_with(
            "\n[cluster]\nenabled = false\nname = \"iggyd\"\nnode_id = 1\njoin = false\n\
             nodes = []\nelection_timeout = \"1 s\"\nheartbeat_interval = \"200 ms\"\n\
             allow_even_voters = false\nmetadata_snapshot_entries = 1024\n\n[cluster.tls]\nca_file = \"\"\ncert_file = \"\"\n\
             key_file = \"\"\n"
        ),
        "{printed}"
    );
}

/// Proves a node list from a file: every field read, a name left out is
/// `node-<id>`, and the rest of `[cluster]` as written.
#[test]
fn a_three_node_cluster_loads() {
    let config = load(VALID, &[]).unwrap();
    let cluster = &config.cluster;
    assert!(cluster.enabled);
    assert_eq!(cluster.name, "orders");
    assert_eq!(cluster.node_id, 1);
    assert_eq!(
        cluster.nodes,
        [
            ClusterNode {
                id: 1,
                name: "node-1".to_string(),
                address: "10.0.0.1:8090".parse().unwrap(),
                replication_address: "10.0.0.1:8091".parse().unwrap(),
            },
            ClusterNode {
                id: 2,
                name: "second".to_string(),
                address: "10.0.0.2:8090".parse().unwrap(),
                replication_address: "10.0.0.2:8091".parse().unwrap(),
            },
            ClusterNode {
                id: 3,
                name: "node-3".to_string(),
                address: "10.0.0.3:8090".parse().unwrap(),
                replication_address: "10.0.0.3:8091".parse().unwrap(),
            },
        ]
    );
    assert_eq!(
        cluster.tls.key_file,
        Some(PathBuf::from("/etc/iggyd/cluster/node-1.key"))
    );
}

/// Proves `iggyd config` prints a cluster as `[[cluster.nodes]]` sections
/// that load back to an equal `Config`, IPv6 addresses and derived names
/// included, and that the printed names are explicit.
#[test]
fn round_trip_through_iggyd_config() {
    let ipv6 = valid_with("\"10.0.0.3:8090\"", "\"[fd00::3]:8090\"")
        + "[tcp]\naddress = \"0.0.0.0:8090\"\n";
    let even = valid_with(
        "node_id = 1\n",
        "node_id = 2\nallow_even_voters = true\njoin = true\n",
    )
    .replace(
        "[[cluster.nodes]]\nid = 3\naddress = \"10.0.0.3:8090\"\n\
             replication_address = \"10.0.0.3:8091\"\n",
        "",
    );
    for source in [VALID.to_string(), ipv6, even] {
        let config = load(&source, &[]).unwrap_or_else(|e| panic!("{e}\n{source}"));
        let printed = config.to_toml();
        let reloaded = load(&printed, &[]).unwrap_or_else(|e| panic!("{e}\n{printed}"));
        assert_eq!(reloaded, config, "{printed}");
    }
    let printed = load(VALID, &[]).unwrap().to_toml();
    assert!(
        printed.contains(
            "allow_even_voters = false\nmetadata_snapshot_entries = 1024\n\n[[cluster.nodes]]\nid = 1\nname = \"node-1\"\n\
             address = \"10.0.0.1:8090\"\nreplication_address = \"10.0.0.1:8091\"\n\n\
             [[cluster.nodes]]\nid = 2\nname = \"second\"\n"
        ),
        "{printed}"
    );
    assert!(
        printed.contains("\n\n[cluster.tls]\nca_file = \"/etc/iggyd/cluster/ca.pem\"\n"),
        "{printed}"
    );
}

/// Proves the environment sets every kind of cluster key, the list in
/// figment's value syntax (`[{k=v, …}, …]`: strings quoted or, without
/// `,{}[]`, bare; IPv6 addresses quoted because of their brackets), and
/// that the variable's list replaces the file's whole.
#[test]
fn environment_forms() {
    let nodes = "[{id=1,address=\"127.0.0.1:8090\",replication_address=\"127.0.0.1:8091\"}, \
                 {id = 2, name = \"b\", address = 127.0.0.2:8090, \
                 replication_address = 127.0.0.2:8091}, \
                 {id=3,address=\"[::1]:8090\",replication_address=\"[::1]:8091\"}]";
    let env = [
        ("IGGYD_CLUSTER__ENABLED", "true"),
        ("IGGYD_CLUSTER__NODE_ID", "2"),
        ("IGGYD_CLUSTER__NAME", "c123"),
        ("IGGYD_CLUSTER__NODES", nodes),
        ("IGGYD_CLUSTER__ELECTION_TIMEOUT", "2 s"),
        ("IGGYD_CLUSTER__HEARTBEAT_INTERVAL", "100 ms"),
        (
            "IGGYD_CLUSTER__TLS__CA_FILE",
            "$CREDENTIALS_DIRECTORY/ca.pem",
        ),
        ("IGGYD_CLUSTER__TLS__CERT_FILE", "/c.pem"),
        ("IGGYD_CLUSTER__TLS__KEY_FILE", "/k.pem"),
    ];
    let config = load(VALID, &env).unwrap();
    let cluster = &config.cluster;
    assert!(cluster.enabled);
    assert_eq!(cluster.node_id, 2);
    assert_eq!(cluster.name, "c123");
    // Taken verbatim, like every string key (not the number 123), and
    // refused for what it is as a name.
    let message = refused("", &[("IGGYD_CLUSTER__NAME", "123")], "cluster.name");
    assert!(
        message.contains("\"123\"") && message.contains("starting with a letter"),
        "{message}"
    );
    assert_eq!(cluster.election_timeout, Duration::from_secs(2));
    assert_eq!(cluster.heartbeat_interval, Duration::from_millis(100));
    assert_eq!(
        cluster.tls.ca_file,
        Some(PathBuf::from("$CREDENTIALS_DIRECTORY/ca.pem"))
    );
    let ids: Vec<u64> = cluster.nodes.iter().map(|node| node.id).collect();
    assert_eq!(ids, [1, 2, 3]);
    assert_eq!(cluster.nodes[1].name, "b");
    assert_eq!(
        cluster.nodes[1].replication_address,
        "127.0.0.2:8091".parse().unwrap()
    );
    assert_eq!(cluster.nodes[2].address, "[::1]:8090".parse().unwrap());

    // A list that does not parse is one string, refused with the syntax.
    let message = refused(
        "",
        &[("IGGYD_CLUSTER__NODES", "[{id=1,address=\"10.0.0.1:8090\"")],
        "cluster.nodes",
    );
    assert!(
        message.contains(
            "from environment variable `IGGYD_CLUSTER__NODES`: \"[{id=1,address=\\\"10.0.0.1:8090\\\"\" \
             is not accepted; expected an array of tables with the keys id, name, address, \
             replication_address"
        ),
        "{message}"
    );
    // A field of an element is named by its index.
    let message = refused(
        "",
        &[(
            "IGGYD_CLUSTER__NODES",
            "[{id=1,address=[::1]:1,replication_address=\"[::1]:2\"}]",
        )],
        "cluster.nodes",
    );
    assert!(message.contains("IGGYD_CLUSTER__NODES"), "{message}");
    refused(
        "",
        &[(
            "IGGYD_CLUSTER__NODES",
            "[{id=0,address=\"10.0.0.1:1\",replication_address=\"10.0.0.1:2\"}]",
        )],
        "cluster.nodes[0].id",
    );
}

/// Proves the brief spelling `IGGYD_CLUSTER_ENABLED` (one underscore) is
/// not a cluster key: like every other key, nesting takes `__`, and the
/// error names the variable to set.
#[test]
fn environment_names_nest_with_two_underscores() {
    let message = load_err("", &[("IGGYD_CLUSTER_ENABLED", "true")]);
    assert!(
        message.contains("did you mean `IGGYD_CLUSTER__ENABLED`?"),
        "{message}"
    );
    let message = load_err("", &[("IGGYD_CLUSTER_NODE_ID", "2")]);
    assert!(
        message.contains("did you mean `IGGYD_CLUSTER__NODE_ID`?"),
        "{message}"
    );
}

/// Proves every field and key is checked by its kind even with the cluster
/// off, each error naming the key (a node field by its index).
#[test]
fn each_value_is_checked_by_its_kind() {
    let long_name = format!("\"{}\"", "n".repeat(256));
    let cases: &[(&str, &str, &str)] = &[
        ("\nid = 2\n", "\nid = 0\n", "cluster.nodes[1].id"),
        ("\nid = 2\n", "\nid = \"two\"\n", "cluster.nodes[1].id"),
        ("\nid = 2\n", "\nid = -2\n", "cluster.nodes[1].id"),
        ("name = \"second\"", "name = \"\"", "cluster.nodes[1].name"),
        ("name = \"second\"", "name = 2", "cluster.nodes[1].name"),
        (
            "name = \"second\"",
            &format!("name = {long_name}"),
            "cluster.nodes[1].name",
        ),
        (
            "\"10.0.0.3:8090\"",
            "\"10.0.0.3\"",
            "cluster.nodes[2].address",
        ),
        (
            "\"10.0.0.3:8091\"",
            "\"node3:8091\"",
            "cluster.nodes[2].replication_address",
        ),
        ("\"10.0.0.2:8090\"", "8090", "cluster.nodes[1].address"),
        ("enabled = true", "enabled = \"yes\"", "cluster.enabled"),
        ("node_id = 1", "node_id = 0", "cluster.node_id"),
        ("node_id = 1", "node_id = 1\njoin = 1", "cluster.join"),
        (
            "node_id = 1",
            "node_id = 1\nallow_even_voters = \"no\"",
            "cluster.allow_even_voters",
        ),
        (
            "node_id = 1",
            "node_id = 1\nelection_timeout = \"149 ms\"",
            "cluster.election_timeout",
        ),
        (
            "node_id = 1",
            "node_id = 1\nelection_timeout = \"61 s\"",
            "cluster.election_timeout",
        ),
        (
            "node_id = 1",
            "node_id = 1\nelection_timeout = 1",
            "cluster.election_timeout",
        ),
        (
            "node_id = 1",
            "node_id = 1\nheartbeat_interval = \"19 ms\"",
            "cluster.heartbeat_interval",
        ),
        (
            "node_id = 1",
            "node_id = 1\nmetadata_snapshot_entries = 15",
            "cluster.metadata_snapshot_entries",
        ),
        (
            "node_id = 1",
            "node_id = 1\nmetadata_snapshot_entries = 1000001",
            "cluster.metadata_snapshot_entries",
        ),
        (
            "node_id = 1",
            "node_id = 1\nheartbeat_interval = \"11 s\"",
            "cluster.heartbeat_interval",
        ),
        (
            "ca_file = \"/etc/iggyd/cluster/ca.pem\"",
            "ca_file = 5",
            "cluster.tls.ca_file",
        ),
        (
            "key_file = \"/etc/iggyd/cluster/node-1.key\"",
            "key_file = \" \"",
            "cluster.tls.key_file",
        ),
    ];
    for (from, to, key) in cases {
        let on = valid_with(from, to);
        refused(&on, &[], key);
        let off = on.replace("enabled = true", "enabled = false");
        if *key != "cluster.enabled" {
            refused(&off, &[], key);
        }
    }
    // A TOML file cannot hold an integer above `i64::MAX`; the environment
    // can, and is refused at the key.
    let message = refused(
        VALID,
        &[("IGGYD_CLUSTER__NODE_ID", "9223372036854775808")],
        "cluster.node_id",
    );
    assert!(
        message.contains("expected a whole number from 1 to 9223372036854775807"),
        "{message}"
    );
    let message = refused(
        &valid_with("\nid = 2\n", "\nid = 0\n"),
        &[],
        "cluster.nodes[1].id",
    );
    assert!(
        message.contains("from file `"),
        "a node field's origin is its file: {message}"
    );
    assert!(
        message.ends_with(
            "0 is not accepted; expected a whole number from 1 to 9223372036854775807, like 1"
        ),
        "{message}"
    );
}

/// Proves the bounds of the durations: 150 ms and 60 s elections, 20 ms and
/// 10 s heartbeats are accepted (the cluster off, so no ratio applies).
#[test]
fn duration_bounds_are_inclusive() {
    let config = load(
        "[cluster]\nelection_timeout = \"150 ms\"\nheartbeat_interval = \"10 s\"\n",
        &[],
    )
    .unwrap();
    assert_eq!(config.cluster.election_timeout, Duration::from_millis(150));
    assert_eq!(config.cluster.heartbeat_interval, Duration::from_secs(10));
    let config = load(
        "[cluster]\nelection_timeout = \"60 s\"\nheartbeat_interval = \"20 ms\"\n",
        &[],
    )
    .unwrap();
    assert_eq!(config.cluster.election_timeout, Duration::from_secs(60));
    assert_eq!(config.cluster.heartbeat_interval, Duration::from_millis(20));
}

/// Proves `cluster.name` is a DNS label, exactly as written (no folding of
/// case).
#[test]
fn the_cluster_name_is_a_dns_label() {
    let longest = "a".repeat(63);
    for name in ["orders", "a", "a-b-1", "c0", longest.as_str()] {
        let config = load(&format!("[cluster]\nname = \"{name}\"\n"), &[]).unwrap();
        assert_eq!(config.cluster.name, name);
    }
    let too_long = "a".repeat(64);
    for name in [
        "",
        "-a",
        "a-",
        // `node-1.0` would read as an address, and `iggyd` refused it at
        // start after `iggyd config` had accepted it.
        "0",
        "1abc",
        "Orders",
        "a_b",
        "a.b",
        "ö",
        " a",
        too_long.as_str(),
    ] {
        let message = refused(
            &format!("[cluster]\nname = \"{name}\"\n"),
            &[],
            "cluster.name",
        );
        assert!(
            message.contains(
                "expected a name of 1 to 63 characters a-z, 0-9 and '-', starting with a letter"
            ),
            "{message}"
        );
    }
}

/// Proves the shape of the list: a table where the list goes, an element
/// that is not a table, and a table that leaves out a required field, each
/// named.
#[test]
fn the_node_list_has_its_shape() {
    let message = refused("[cluster.nodes]\nid = 1\n", &[], "cluster.nodes");
    assert!(
        message.contains("`[[cluster.nodes]]` sections"),
        "{message}"
    );
    refused("[cluster]\nnodes = [1]\n", &[], "cluster.nodes[0]");
    refused(
        "[cluster]\nnodes = \"10.0.0.1:8090\"\n",
        &[],
        "cluster.nodes",
    );
    let message = refused(
        &valid_with("replication_address = \"10.0.0.2:8091\"\n", ""),
        &[],
        "cluster.nodes[1].replication_address",
    );
    assert!(message.contains("from file `"), "{message}");
    assert!(
        message.contains(": nothing is not accepted; expected an IP address and port"),
        "{message}"
    );
    assert!(message.ends_with("(the key is required)"), "{message}");
    refused(&valid_with("\nid = 2\n", "\n"), &[], "cluster.nodes[1].id");
}

/// Proves unknown fields inside a node's table are refused with the
/// closest field suggested, from a file and inside an environment value
/// (where the suggestion is the field, not a variable).
#[test]
fn unknown_node_fields_are_refused_with_a_suggestion() {
    let error = load(
        &valid_with("address = \"10.0.0.2:8090\"", "adress = \"10.0.0.2:8090\""),
        &[],
    )
    .unwrap_err();
    assert_eq!(error.key(), "cluster.nodes[1].adress");
    let message = error.to_string();
    assert!(
        message.contains("did you mean `cluster.nodes[1].address`?"),
        "{message}"
    );
    assert!(
        message.contains(
            "the keys under `cluster.nodes[1]` are cluster.nodes[1].id, cluster.nodes[1].name, \
             cluster.nodes[1].address, cluster.nodes[1].replication_address"
        ),
        "{message}"
    );
    let error = load(
        "",
        &[(
            "IGGYD_CLUSTER__NODES",
            "[{id=1,address=\"10.0.0.1:1\",replication_adress=\"10.0.0.1:2\"}]",
        )],
    )
    .unwrap_err();
    assert_eq!(error.key(), "cluster.nodes[0].replication_adress");
    let message = error.to_string();
    assert!(
        message.contains(
            "from environment variable `IGGYD_CLUSTER__NODES` is not known; did you mean \
             `cluster.nodes[0].replication_address`?"
        ),
        "{message}"
    );
    // An unknown key of `[cluster]` itself gets the usual suggestion.
    let message = load_err("[cluster]\nnode = 1\n", &[]);
    assert!(
        message.contains("did you mean `cluster.nodes`?"),
        "{message}"
    );
}

/// Proves the cluster off skips every rule between keys: no nodes, one id
/// twice, an even count, unspecified addresses and no TLS files load.
#[test]
fn a_cluster_that_is_off_is_not_cross_checked() {
    let toml = "[cluster]\nnode_id = 9\n\
                [[cluster.nodes]]\nid = 1\naddress = \"0.0.0.0:0\"\nreplication_address = \"0.0.0.0:0\"\n\
                [[cluster.nodes]]\nid = 1\naddress = \"0.0.0.0:0\"\nreplication_address = \"0.0.0.0:0\"\n";
    let config = load(toml, &[]).unwrap();
    assert!(!config.cluster.enabled);
    assert_eq!(config.cluster.nodes.len(), 2);
    assert!(load("[cluster]\nheartbeat_interval = \"1 s\"\n", &[]).is_ok());
}

/// Refusal: the cluster on with no nodes.
#[test]
fn refuses_no_nodes() {
    let message = refused("[cluster]\nenabled = true\n", &[], "cluster.nodes");
    assert!(message.contains("at least one node"), "{message}");
}

/// Refusal: two nodes with one id; the later one is named, the earlier one
/// shown.
#[test]
fn refuses_a_duplicate_node_id() {
    let message = refused(
        &valid_with("\nid = 3\n", "\nid = 2\n"),
        &[],
        "cluster.nodes[2].id",
    );
    assert!(
        message.contains(
            "expected an id no other node has (`cluster.nodes[1].id` is 2 too from file `"
        ),
        "{message}"
    );
}

/// Refusal: two nodes with one name, written or left out (`node-<id>`);
/// the later one is named, the earlier one shown.
#[test]
fn refuses_a_duplicate_node_name() {
    let message = refused(
        &valid_with("name = \"second\"", "name = \"node-1\""),
        &[],
        "cluster.nodes[1].name",
    );
    assert!(
        message.contains(
            "\"node-1\" is not accepted; expected a name no other node has \
             (`cluster.nodes[0].name` is \"node-1\" too from file `"
        ),
        "{message}"
    );
    // Node 3 leaves its name out, so it is `node-3`, which node 2 took.
    let message = refused(
        &valid_with("name = \"second\"", "name = \"node-3\""),
        &[],
        "cluster.nodes[2].name",
    );
    assert!(
        message.contains(
            "\"node-3\" (its name when left out) is not accepted; expected a name no other \
             node has (`cluster.nodes[1].name` is \"node-3\" too from file `"
        ),
        "{message}"
    );
}

/// Refusal: two nodes with one address.
#[test]
fn refuses_a_duplicate_address() {
    let message = refused(
        &valid_with("\"10.0.0.3:8090\"", "\"10.0.0.1:8090\""),
        &[],
        "cluster.nodes[2].address",
    );
    assert!(
        message.contains("(`cluster.nodes[0].address` is 10.0.0.1:8090 too"),
        "{message}"
    );
}

/// Refusal: two nodes with one replication address.
#[test]
fn refuses_a_duplicate_replication_address() {
    let message = refused(
        &valid_with("\"10.0.0.2:8091\"", "\"10.0.0.3:8091\""),
        &[],
        "cluster.nodes[2].replication_address",
    );
    assert!(
        message.contains("(`cluster.nodes[1].replication_address` is 10.0.0.3:8091 too"),
        "{message}"
    );
}

/// Refusal: one socket as a node's address and a replication address (its
/// own or another node's): two listeners cannot share it.
#[test]
fn refuses_an_address_that_is_also_a_replication_address() {
    let message = refused(
        &valid_with("\"10.0.0.2:8091\"", "\"10.0.0.2:8090\""),
        &[],
        "cluster.nodes[1].replication_address",
    );
    assert!(
        message.contains("(`cluster.nodes[1].address` is"),
        "{message}"
    );
    refused(
        &valid_with("\"10.0.0.3:8090\"", "\"10.0.0.2:8091\""),
        &[],
        "cluster.nodes[2].address",
    );
}

/// Refusal: this node's id is not among the nodes, also when it joins.
#[test]
fn refuses_a_node_id_that_is_not_listed() {
    for extra in ["", "\njoin = true"] {
        let message = refused(
            &valid_with("node_id = 1", &format!("node_id = 4{extra}")),
            &[],
            "cluster.node_id",
        );
        assert!(
            message
                .contains("4 is not accepted; expected the id of one of `cluster.nodes` (1, 2, 3)"),
            "{message}"
        );
    }
    // Listed, a joining node is accepted.
    let config = load(&valid_with("node_id = 1", "node_id = 3\njoin = true"), &[]);
    assert!(config.unwrap().cluster.join);
}

/// Refusal: an even number of nodes, unless `allow_even_voters`.
#[test]
fn refuses_an_even_number_of_nodes() {
    let two = valid_with(
        "[[cluster.nodes]]\nid = 3\naddress = \"10.0.0.3:8090\"\nreplication_address = \"10.0.0.3:8091\"\n",
        "",
    );
    let message = refused(&two, &[], "cluster.nodes");
    assert!(
        message.contains(
            "2 nodes is not accepted; expected an odd number of nodes (a majority of 2 \
             survives no more failures than a majority of 1), or \
             `cluster.allow_even_voters = true`"
        ),
        "{message}"
    );
    let allowed = two.replace("node_id = 1\n", "node_id = 1\nallow_even_voters = true\n");
    assert_eq!(load(&allowed, &[]).unwrap().cluster.nodes.len(), 2);
    let allowed = load(&two, &[("IGGYD_CLUSTER__ALLOW_EVEN_VOTERS", "true")]).unwrap();
    assert!(allowed.cluster.allow_even_voters);
}

/// Refusal: a heartbeat interval not below half the election timeout
/// (exactly half is refused; just under it is accepted).
#[test]
fn refuses_a_heartbeat_not_below_half_the_election_timeout() {
    let message = refused(
        VALID,
        &[("IGGYD_CLUSTER__HEARTBEAT_INTERVAL", "500 ms")],
        "cluster.heartbeat_interval",
    );
    assert!(
        message.contains(
            "from environment variable `IGGYD_CLUSTER__HEARTBEAT_INTERVAL`: \"500 ms\" is not \
             accepted; expected below half of `cluster.election_timeout` (\"1 s\")"
        ),
        "{message}"
    );
    refused(
        &valid_with("node_id = 1", "node_id = 1\nelection_timeout = \"150 ms\""),
        &[],
        "cluster.heartbeat_interval",
    );
    let config = load(VALID, &[("IGGYD_CLUSTER__HEARTBEAT_INTERVAL", "499 ms")]).unwrap();
    assert_eq!(
        config.cluster.heartbeat_interval,
        Duration::from_millis(499)
    );
}

/// Refusal: each of the three TLS files unset.
#[test]
fn refuses_each_unset_tls_file() {
    for (line, key) in [
        (
            "ca_file = \"/etc/iggyd/cluster/ca.pem\"",
            "cluster.tls.ca_file",
        ),
        (
            "cert_file = \"/etc/iggyd/cluster/node-1.pem\"",
            "cluster.tls.cert_file",
        ),
        (
            "key_file = \"/etc/iggyd/cluster/node-1.key\"",
            "cluster.tls.key_file",
        ),
    ] {
        let message = refused(&valid_with(line, ""), &[], key);
        assert!(
            message.contains("when `cluster.enabled` is true"),
            "{message}"
        );
    }
}

/// Refusal: a node address that no one can connect to: an unspecified IP
/// (0.0.0.0, ::) or port 0, as address or replication address.
#[test]
fn refuses_an_unspecified_address_or_port_zero() {
    for (from, to, key) in [
        (
            "\"10.0.0.2:8090\"",
            "\"0.0.0.0:8090\"",
            "cluster.nodes[1].address",
        ),
        (
            "\"10.0.0.2:8090\"",
            "\"[::]:8090\"",
            "cluster.nodes[1].address",
        ),
        (
            "\"10.0.0.2:8090\"",
            "\"10.0.0.2:0\"",
            "cluster.nodes[1].address",
        ),
        (
            "\"10.0.0.3:8091\"",
            "\"0.0.0.0:8091\"",
            "cluster.nodes[2].replication_address",
        ),
        (
            "\"10.0.0.3:8091\"",
            "\"[::]:8091\"",
            "cluster.nodes[2].replication_address",
        ),
        (
            "\"10.0.0.1:8091\"",
            "\"10.0.0.1:0\"",
            "cluster.nodes[0].replication_address",
        ),
    ] {
        let message = refused(&valid_with(from, to), &[], key);
        assert!(
            message.contains(&format!(
                "{to} is not accepted; expected an address other nodes"
            )),
            "{message}"
        );
    }
}

/// Refusal: this node's address on another port than `tcp.address`: the
/// error names the node's address and `tcp.address` with its value and
/// source.
#[test]
fn refuses_this_nodes_port_unlike_tcp_address() {
    let message = refused(
        VALID,
        &[("IGGYD_TCP__ADDRESS", "0.0.0.0:9000")],
        "cluster.nodes[0].address",
    );
    assert!(
        message.contains(
            "\"10.0.0.1:8090\" is not accepted; expected the port of `tcp.address` \
             (\"0.0.0.0:9000\" from environment variable `IGGYD_TCP__ADDRESS`)"
        ),
        "{message}"
    );
    // The other nodes' ports are theirs; only this node's is compared, and
    // the IPs may differ (`0.0.0.0` here).
    let config = load(
        &(valid_with("\"10.0.0.2:8090\"", "\"10.0.0.2:9999\"")
            + "[tcp]\naddress = \"0.0.0.0:8090\"\n"),
        &[],
    );
    assert!(config.is_ok(), "{config:?}");
}

/// Proves the reload flags: every cluster key needs a restart (a SIGHUP
/// logs a change as such) but the TLS files, which SIGHUP loads again
/// (`supervisor/reload.rs`).
#[test]
fn every_cluster_key_but_the_tls_files_needs_a_restart() {
    let cluster_keys: Vec<&str> = keys::KEYS
        .iter()
        .map(|key| key.name)
        .filter(|name| name.starts_with("cluster."))
        .collect();
    assert_eq!(cluster_keys.len(), 12, "{cluster_keys:?}");
    for name in cluster_keys {
        assert_eq!(
            applies_live(name),
            name.starts_with("cluster.tls."),
            "{name}"
        );
    }
}

/// Proves the commented three-node example of `packaging/iggyd.toml`,
/// uncommented, is a valid cluster: its fields are the daemon's, its ids,
/// names and addresses pass every rule.
#[test]
fn the_packaged_example_is_a_valid_cluster() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let packaged = std::fs::read_to_string(root.join("packaging/iggyd.toml")).unwrap();
    let example: String = packaged
        .lines()
        .skip_while(|line| *line != "#[[cluster.nodes]]")
        .take_while(|line| line.starts_with('#'))
        .filter_map(|line| line.strip_prefix('#'))
        .filter(|line| !line.is_empty())
        .map(|line| format!("{line}\n"))
        .collect();
    assert_eq!(example.matches("[[cluster.nodes]]").count(), 3, "{example}");
    let toml = format!(
        "[cluster]\nenabled = true\n{example}[cluster.tls]\nca_file = \"/ca\"\n\
         cert_file = \"/c\"\nkey_file = \"/k\"\n"
    );
    let config = load(&toml, &[]).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    assert_eq!(config.cluster.nodes.len(), 3);
}

/// Proves the README's `IGGYD_CLUSTER__NODES` example, as written (over
/// several lines), is a list figment's value syntax reads and the daemon
/// accepts.
#[test]
fn the_readme_environment_example_loads() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let start = readme.find("IGGYD_CLUSTER__NODES='").unwrap() + "IGGYD_CLUSTER__NODES='".len();
    let length = readme[start..].find('\'').unwrap();
    let nodes = &readme[start..start + length];
    assert!(nodes.contains('\n'), "{nodes}");
    let config = load(
        "[cluster]\nenabled = true\n[cluster.tls]\nca_file = \"/ca\"\ncert_file = \"/c\"\n\
         key_file = \"/k\"\n",
        &[("IGGYD_CLUSTER__NODES", nodes)],
    )
    .unwrap_or_else(|e| panic!("{e}\n{nodes}"));
    let names: Vec<&str> = config
        .cluster
        .nodes
        .iter()
        .map(|node| node.name.as_str())
        .collect();
    assert_eq!(names, ["node-1", "node-2", "node-3"]);
}
