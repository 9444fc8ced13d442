//! The client side of `iggyd cluster status`, `transfer-leader`,
//! `add-node` and `remove-node`: one request on the local node's admin socket, its
//! answer rendered (an aligned table, or `--json`), and the exit code.
//! `boot` prints what this returns; nothing here prints or exits.
//!
//! Exit codes: 0 done (status: every group has a leader and every shard
//! answered; transfer: every group moved; add-node, remove-node: every
//! group's membership changed, or already as asked); 1 not (status: a
//! group without a leader or a silent shard; transfer: a group whose new
//! leader was not seen in time; add-node, remove-node: a group not changed,
//! named with why); 69 (`EX_UNAVAILABLE`) the admin socket did not answer;
//! 78 (`EX_CONFIG`) the request cannot work: no cluster configured, or the
//! daemon refused it (an unknown node, a node that is not a voter, a group
//! this node does not lead, a removal that would leave no quorum: the
//! message says which).

use crate::control::api::cluster::{self, GroupName};
use crate::control::api::{self, LineRead, Payload, read_line_capped};
use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Not done (a group without a leader, a transfer not seen in time).
pub const EXIT_FAILURE: u8 = 1;
/// `EX_UNAVAILABLE` from sysexits.h: the admin socket did not answer.
pub const EXIT_UNAVAILABLE: u8 = 69;
/// `EX_CONFIG` from sysexits.h, as `error::EXIT_CONFIG` (this floor is
/// below `error`): no cluster configured, or the request refused.
pub const EXIT_CONFIG: u8 = 78;

/// Longest answer line read (a status of many thousand groups).
const ANSWER_BYTES_MAX: usize = 64 * 1024 * 1024;

/// How long the CLI waits for the daemon's answer: longer than the daemon
/// waits for a transfer or a membership change, plus time to gather the
/// groups.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// What `iggyd cluster …` asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterCommand {
    Status,
    TransferLeader {
        to: u64,
        group: Option<GroupName>,
    },
    AddNode {
        id: u64,
        address: String,
        replication_address: String,
        name: Option<String>,
    },
    RemoveNode {
        id: u64,
    },
}

/// What `boot` prints and returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliOutcome {
    pub stdout: String,
    /// One line for stderr (without `iggyd: `), when something failed.
    pub error: Option<String>,
    pub code: u8,
}

impl CliOutcome {
    fn failed(code: u8, error: String) -> CliOutcome {
        CliOutcome {
            stdout: String::new(),
            error: Some(error),
            code,
        }
    }
}

/// The refusal when the configuration runs no cluster.
pub fn no_cluster(socket: &Path) -> CliOutcome {
    CliOutcome::failed(
        EXIT_CONFIG,
        format!(
            "cluster: this node's configuration runs no cluster ([cluster] enabled = false); \
             pass the configuration of a cluster node with --config, or its admin socket with \
             --socket (the configured one is {})",
            socket.display()
        ),
    )
}

/// Runs `command` against the admin socket at `socket`.
pub fn run(socket: &Path, command: &ClusterCommand, json: bool) -> CliOutcome {
    let request = match command {
        ClusterCommand::Status => cluster::cluster_status_request(),
        ClusterCommand::TransferLeader { to, group } => {
            cluster::transfer_leader_request(*to, group.map(|g| g.to_string()).as_deref())
        }
        ClusterCommand::AddNode {
            id,
            address,
            replication_address,
            name,
        } => cluster::add_node_request(*id, address, replication_address, name.as_deref()),
        ClusterCommand::RemoveNode { id } => cluster::remove_node_request(*id),
    };
    let line = match exchange(socket, &request) {
        Ok(line) => line,
        Err(error) => return CliOutcome::failed(EXIT_UNAVAILABLE, error),
    };
    outcome(&line, json)
}

/// The answer `line` as printed output and exit code.
pub fn outcome(line: &[u8], json: bool) -> CliOutcome {
    let payload = match api::decode(line) {
        Ok(payload) => payload,
        // The daemon refused the request: its message says why.
        Err(error) => return CliOutcome::failed(EXIT_CONFIG, format!("cluster: {error}")),
    };
    let (stdout, good) = match &payload {
        Payload::ClusterStatus { status } => (
            if json {
                to_json(status)
            } else {
                cluster::render_status(status)
            },
            status.healthy(),
        ),
        Payload::TransferLeader { transfer } => (
            if json {
                to_json(transfer)
            } else {
                cluster::render_transfer(transfer)
            },
            transfer.all_moved(),
        ),
        Payload::MembershipChange { change } => (
            if json {
                to_json(change)
            } else {
                cluster::render_membership_change(change)
            },
            change.all_done(),
        ),
        other => {
            return CliOutcome::failed(
                EXIT_UNAVAILABLE,
                format!("cluster: unexpected answer from the daemon: {other:?}"),
            );
        }
    };
    CliOutcome {
        stdout,
        error: None,
        code: if good { 0 } else { EXIT_FAILURE },
    }
}

fn to_json(value: &impl serde::Serialize) -> String {
    match serde_json::to_string_pretty(value) {
        Ok(mut text) => {
            text.push('\n');
            text
        }
        Err(error) => format!("{{\"error\":{:?}}}\n", error.to_string()),
    }
}

/// One request line out, one answer line back.
fn exchange(socket: &Path, request: &str) -> Result<Vec<u8>, String> {
    let mut stream = UnixStream::connect(socket).map_err(|error| {
        format!(
            "cannot reach the admin socket {}: {error} (is iggyd running, and is this its \
             admin.socket?)",
            socket.display()
        )
    })?;
    stream
        .set_read_timeout(Some(ANSWER_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(ANSWER_TIMEOUT)))
        .map_err(|error| format!("admin socket: {error}"))?;
    stream
        .write_all(request.as_bytes())
        .map_err(|error| format!("admin socket {}: {error}", socket.display()))?;
    let mut reader = BufReader::new(&stream);
    let mut line = Vec::new();
    match read_line_capped(&mut reader, &mut line, ANSWER_BYTES_MAX) {
        Ok(LineRead::Line) => Ok(line),
        Ok(LineRead::Eof) => Err("the daemon closed the admin connection without answering".into()),
        Ok(LineRead::TooLong) => Err(format!(
            "the daemon's answer is longer than {ANSWER_BYTES_MAX} bytes"
        )),
        Err(error) => Err(format!("admin socket {}: {error}", socket.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_a_usage_error_with_the_daemons_words() {
        let out = outcome(
            br#"{"v":1,"ok":false,"error":"unknown node 9: the cluster's nodes are 1, 2, 3"}"#,
            false,
        );
        assert_eq!(out.code, EXIT_CONFIG);
        assert!(
            out.error.as_deref().unwrap().contains("unknown node 9"),
            "{out:?}"
        );
        assert!(out.stdout.is_empty());
    }

    #[test]
    fn status_exits_1_without_a_leader_and_json_is_parseable() {
        let status = cluster::ClusterStatus {
            cluster: "c".into(),
            node_id: 1,
            nodes: vec![],
            groups: vec![cluster::GroupStatus {
                group: "metadata".into(),
                storage_id: None,
                shard: 0,
                leader: None,
                term: 1,
                role: cluster::Role::Candidate,
                last_log: None,
                committed: None,
                applied: None,
                voters: vec![1, 2, 3],
                learners: vec![],
                followers: vec![],
            }],
            shards_silent: vec![],
        };
        let line = api::Response::payload(Payload::ClusterStatus {
            status: Box::new(status.clone()),
        })
        .to_line();
        let out = outcome(&line, true);
        assert_eq!(out.code, EXIT_FAILURE);
        let back: cluster::ClusterStatus = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(back, status);
        let mut healthy = status;
        healthy.groups[0].leader = Some(2);
        let line = api::Response::payload(Payload::ClusterStatus {
            status: Box::new(healthy),
        })
        .to_line();
        let out = outcome(&line, false);
        assert_eq!(out.code, 0);
        assert!(out.stdout.contains("metadata: leader 2"), "{}", out.stdout);
    }

    #[test]
    fn an_absent_socket_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let out = run(
            &dir.path().join("none.sock"),
            &ClusterCommand::Status,
            false,
        );
        assert_eq!(out.code, EXIT_UNAVAILABLE);
        assert!(out.error.unwrap().contains("cannot reach the admin socket"));
    }
}
