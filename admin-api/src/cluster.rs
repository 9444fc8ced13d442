//! The cluster's admin ops (`iggyd cluster …`): what `cluster_status`
//! answers (this node, every configured node, every Raft group as this node
//! sees it from openraft's metrics), what `transfer_leader` answers (what
//! moved), their request lines, and the aligned tables the CLI prints.
//! Values and text only: no I/O.
//!
//! ```text
//! {"v":1,"op":"cluster_status"}
//!   -> {"v":1,"ok":true,"type":"cluster_status","status":{...}}
//! {"v":1,"op":"transfer_leader","to":2}                      (every group this node leads)
//! {"v":1,"op":"transfer_leader","to":2,"group":"metadata"}   (or "<stream>/<topic>/<partition>")
//!   -> {"v":1,"ok":true,"type":"transfer_leader","transfer":{...}}
//! {"v":1,"op":"add_node","id":4,"address":"10.0.0.4:8090",
//!  "replication_address":"10.0.0.4:8091","name":"node-4"}          (name optional)
//! {"v":1,"op":"remove_node","id":3}
//!   -> {"v":1,"ok":true,"type":"membership_change","change":{...}}
//! ```

use crate::PROTOCOL_VERSION;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The error the cluster's ops answer on a daemon that runs no cluster
/// (the console tells a single node from a failure by it).
pub const NO_CLUSTER: &str = "this daemon runs no cluster ([cluster] enabled = false)";

/// The metadata group's name in `group` fields and `--group`.
pub const METADATA_GROUP: &str = "metadata";

/// A node's role in a group (openraft's server state), or in the cluster
/// (its role in the metadata group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Leader,
    Follower,
    Candidate,
    Learner,
    /// The group stopped (or, for a node, it is in no group's membership).
    Shutdown,
    /// Not known from here (a node this one has no metrics for).
    Unknown,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
            Role::Candidate => "candidate",
            Role::Learner => "learner",
            Role::Shutdown => "shutdown",
            Role::Unknown => "unknown",
        }
    }
}

/// One configured node, as this node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub id: u64,
    pub name: String,
    /// The Iggy (client) address.
    pub address: String,
    /// The node-to-node address.
    pub replication_address: String,
    /// Whether this node reached it: itself always; another node when its
    /// replication address accepted a TCP connection just now.
    pub reachable: bool,
    /// Its role in the metadata group as this node knows it.
    pub role: Role,
    pub this_node: bool,
}

/// A follower's replication progress, as its leader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowerStatus {
    pub node: u64,
    /// The last log index the follower is known to hold (none yet).
    pub matched: Option<u64>,
    /// Entries the leader holds beyond `matched`.
    pub lag: u64,
}

/// One Raft group on this node (openraft's metrics).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStatus {
    /// `metadata`, or `<stream>/<topic>/<partition>` (ids).
    pub group: String,
    /// The partition's storage id (none for the metadata group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_id: Option<u64>,
    /// The shard that runs it here.
    pub shard: u32,
    pub leader: Option<u64>,
    pub term: u64,
    /// This node's role in it.
    pub role: Role,
    pub last_log: Option<u64>,
    pub committed: Option<u64>,
    pub applied: Option<u64>,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    /// Only when this node leads: every other member's progress.
    #[serde(default)]
    pub followers: Vec<FollowerStatus>,
}

/// `cluster_status`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    pub cluster: String,
    pub node_id: u64,
    pub nodes: Vec<NodeStatus>,
    /// The metadata group first, then the partitions' groups by name.
    pub groups: Vec<GroupStatus>,
    /// Shards that did not answer in time (their groups are missing).
    #[serde(default)]
    pub shards_silent: Vec<u32>,
}

impl ClusterStatus {
    /// The metadata group, when this node runs it.
    pub fn metadata(&self) -> Option<&GroupStatus> {
        self.groups
            .iter()
            .find(|group| group.group == METADATA_GROUP)
    }

    /// The groups that have no leader as this node sees them.
    pub fn leaderless(&self) -> impl Iterator<Item = &GroupStatus> {
        self.groups.iter().filter(|group| group.leader.is_none())
    }

    /// Whether every group has a leader and every shard answered (the
    /// CLI's exit 0).
    pub fn healthy(&self) -> bool {
        self.leaderless().next().is_none() && self.shards_silent.is_empty()
    }
}

/// One group `transfer_leader` asked to move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub group: String,
    pub from: u64,
    pub to: u64,
    /// Whether this node saw `to` lead it within the wait.
    pub moved: bool,
    /// The leader this node saw last.
    pub leader: Option<u64>,
    /// From asking to seeing `to` lead (or to giving up).
    pub elapsed_ms: u64,
}

/// `transfer_leader`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    pub node_id: u64,
    pub to: u64,
    pub moves: Vec<Move>,
}

impl Transfer {
    pub fn all_moved(&self) -> bool {
        self.moves.iter().all(|moved| moved.moved)
    }
}

/// What `add_node` and `remove_node` did to one group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupChange {
    pub group: String,
    /// Whether the group's membership is now what was asked.
    pub done: bool,
    /// What happened: "changed", "unchanged" (nothing to do), or why not.
    pub outcome: String,
    /// The group's voters after the change, when it was made.
    pub voters: Vec<u64>,
    pub elapsed_ms: u64,
}

/// `add_node`'s and `remove_node`'s answer: every group and its outcome
/// (the metadata group first: it decides the roster and the voters new
/// partitions start with).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipChange {
    /// The node the request ran on.
    pub node_id: u64,
    /// "add" or "remove".
    pub change: String,
    /// The node added or removed.
    pub target: u64,
    pub groups: Vec<GroupChange>,
    /// Something the operator should know (an even voter count left by an
    /// addition: finish the replacement by removing a node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl MembershipChange {
    pub fn all_done(&self) -> bool {
        self.groups.iter().all(|group| group.done)
    }
}

/// `add_node`: node `id` with its client and replication addresses.
pub fn add_node_request(
    id: u64,
    address: &str,
    replication_address: &str,
    name: Option<&str>,
) -> String {
    let mut request = serde_json::json!({
        "v": PROTOCOL_VERSION,
        "op": "add_node",
        "id": id,
        "address": address,
        "replication_address": replication_address,
    });
    if let (Some(name), Some(object)) = (name, request.as_object_mut()) {
        object.insert("name".into(), serde_json::Value::from(name));
    }
    format!("{request}\n")
}

pub fn remove_node_request(id: u64) -> String {
    format!("{{\"v\":{PROTOCOL_VERSION},\"op\":\"remove_node\",\"id\":{id}}}\n")
}

/// `iggyd cluster add-node|remove-node`'s human form.
pub fn render_membership_change(change: &MembershipChange) -> String {
    let mut rows = vec![vec![
        "GROUP".to_string(),
        "RESULT".to_string(),
        "VOTERS".to_string(),
        "MS".to_string(),
    ]];
    for group in &change.groups {
        rows.push(vec![
            group.group.clone(),
            if group.done {
                group.outcome.clone()
            } else {
                format!("NOT DONE: {}", group.outcome)
            },
            group
                .voters
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(","),
            group.elapsed_ms.to_string(),
        ]);
    }
    let mut out = format!(
        "{} node {} (asked on node {})\n",
        change.change, change.target, change.node_id
    );
    out.push_str(&align(&rows));
    let missed = change.groups.iter().filter(|group| !group.done).count();
    if missed > 0 {
        let _ = writeln!(
            out,
            "\n{missed} group(s) not done: run it again to retry them"
        );
    }
    if let Some(note) = &change.note {
        let _ = writeln!(out, "\nnote: {note}");
    }
    out
}

pub fn cluster_status_request() -> String {
    format!("{{\"v\":{PROTOCOL_VERSION},\"op\":\"cluster_status\"}}\n")
}

/// `group`: `None` for every group this node leads. JSON-escaped.
pub fn transfer_leader_request(to: u64, group: Option<&str>) -> String {
    match group {
        None => format!("{{\"v\":{PROTOCOL_VERSION},\"op\":\"transfer_leader\",\"to\":{to}}}\n"),
        Some(group) => {
            let group = serde_json::Value::from(group);
            format!(
                "{{\"v\":{PROTOCOL_VERSION},\"op\":\"transfer_leader\",\"to\":{to},\"group\":{group}}}\n"
            )
        }
    }
}

/// A group as `--group` and `transfer_leader` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupName {
    Metadata,
    /// Stream, topic and partition ids (the partition counts from 0, as the
    /// SDK's partition ids do).
    Partition {
        stream: u32,
        topic: u32,
        partition: u32,
    },
}

impl GroupName {
    /// `metadata` or `<stream>/<topic>/<partition>` (numeric ids).
    pub fn parse(text: &str) -> Result<GroupName, String> {
        let text = text.trim();
        if text == METADATA_GROUP {
            return Ok(GroupName::Metadata);
        }
        let parts: Vec<&str> = text.split('/').collect();
        let id = |part: &str, what: &str| -> Result<u32, String> {
            part.parse::<u32>()
                .map_err(|_| format!("group {text:?}: the {what} {part:?} is not a numeric id"))
        };
        match parts.as_slice() {
            [stream, topic, partition] => Ok(GroupName::Partition {
                stream: id(stream, "stream")?,
                topic: id(topic, "topic")?,
                partition: id(partition, "partition")?,
            }),
            _ => Err(format!(
                "group {text:?}: expected \"{METADATA_GROUP}\" or <stream>/<topic>/<partition> \
                 (numeric ids, as `iggyd cluster status` shows them)"
            )),
        }
    }
}

impl std::fmt::Display for GroupName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupName::Metadata => f.write_str(METADATA_GROUP),
            GroupName::Partition {
                stream,
                topic,
                partition,
            } => write!(f, "{stream}/{topic}/{partition}"),
        }
    }
}

fn or_dash(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_string(), |value| value.to_string())
}

fn ids(ids: &[u64]) -> String {
    if ids.is_empty() {
        return "-".to_string();
    }
    ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// Rows as columns padded to their widest cell (two spaces apart, no
/// trailing blanks).
pub fn align(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|column| {
            rows.iter()
                .filter_map(|row| row.get(column))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            if column > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            let width = widths.get(column).copied().unwrap_or(0);
            if column + 1 < row.len() {
                line.extend(std::iter::repeat_n(
                    ' ',
                    width.saturating_sub(cell.chars().count()),
                ));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `iggyd cluster status`'s human form.
pub fn render_status(status: &ClusterStatus) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "cluster {} — node {}", status.cluster, status.node_id);
    match status.metadata() {
        Some(metadata) => {
            let _ = writeln!(
                out,
                "metadata: leader {}, term {}, committed {}",
                or_dash(metadata.leader),
                metadata.term,
                or_dash(metadata.committed)
            );
        }
        None => {
            let _ = writeln!(out, "metadata: not running on this node");
        }
    }
    out.push('\n');
    let mut nodes = vec![vec![
        "NODE".to_string(),
        "NAME".to_string(),
        "ADDRESS".to_string(),
        "REPLICATION".to_string(),
        "REACHABLE".to_string(),
        "ROLE".to_string(),
    ]];
    for node in &status.nodes {
        nodes.push(vec![
            if node.this_node {
                format!("{}*", node.id)
            } else {
                node.id.to_string()
            },
            node.name.clone(),
            node.address.clone(),
            node.replication_address.clone(),
            if node.reachable { "yes" } else { "no" }.to_string(),
            node.role.as_str().to_string(),
        ]);
    }
    out.push_str(&align(&nodes));
    out.push('\n');
    let mut groups = vec![vec![
        "GROUP".to_string(),
        "SHARD".to_string(),
        "LEADER".to_string(),
        "TERM".to_string(),
        "ROLE".to_string(),
        "LAST".to_string(),
        "COMMITTED".to_string(),
        "APPLIED".to_string(),
        "VOTERS".to_string(),
        "LEARNERS".to_string(),
        "FOLLOWERS (node:matched/lag)".to_string(),
    ]];
    for group in &status.groups {
        let followers = if group.followers.is_empty() {
            "-".to_string()
        } else {
            group
                .followers
                .iter()
                .map(|follower| {
                    format!(
                        "{}:{}/{}",
                        follower.node,
                        or_dash(follower.matched),
                        follower.lag
                    )
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        groups.push(vec![
            group.group.clone(),
            group.shard.to_string(),
            group
                .leader
                .map_or_else(|| "none".to_string(), |leader| leader.to_string()),
            group.term.to_string(),
            group.role.as_str().to_string(),
            or_dash(group.last_log),
            or_dash(group.committed),
            or_dash(group.applied),
            ids(&group.voters),
            ids(&group.learners),
            followers,
        ]);
    }
    out.push_str(&align(&groups));
    let leaderless = status.leaderless().count();
    if !status.shards_silent.is_empty() {
        let _ = writeln!(
            out,
            "\nshards that did not answer in time (their groups are missing): {}",
            ids(&status
                .shards_silent
                .iter()
                .map(|shard| u64::from(*shard))
                .collect::<Vec<_>>())
        );
    }
    if leaderless > 0 {
        let _ = writeln!(out, "\n{leaderless} group(s) without a leader");
    }
    out
}

/// `iggyd cluster transfer-leader`'s human form.
pub fn render_transfer(transfer: &Transfer) -> String {
    if transfer.moves.is_empty() {
        return format!(
            "node {} leads no group: nothing to move to node {}\n",
            transfer.node_id, transfer.to
        );
    }
    let mut rows = vec![vec![
        "GROUP".to_string(),
        "FROM".to_string(),
        "TO".to_string(),
        "RESULT".to_string(),
    ]];
    for moved in &transfer.moves {
        rows.push(vec![
            moved.group.clone(),
            moved.from.to_string(),
            moved.to.to_string(),
            if moved.moved {
                format!("moved in {} ms", moved.elapsed_ms)
            } else {
                format!(
                    "not moved after {} ms (leader: {})",
                    moved.elapsed_ms,
                    moved
                        .leader
                        .map_or_else(|| "none".to_string(), |leader| leader.to_string())
                )
            },
        ]);
    }
    align(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str, leader: Option<u64>) -> GroupStatus {
        GroupStatus {
            group: name.to_string(),
            storage_id: (name != METADATA_GROUP).then_some(7),
            shard: 0,
            leader,
            term: 3,
            role: Role::Leader,
            last_log: Some(12),
            committed: Some(11),
            applied: Some(11),
            voters: vec![1, 2, 3],
            learners: vec![],
            followers: vec![
                FollowerStatus {
                    node: 2,
                    matched: Some(12),
                    lag: 0,
                },
                FollowerStatus {
                    node: 3,
                    matched: None,
                    lag: 13,
                },
            ],
        }
    }

    fn status() -> ClusterStatus {
        ClusterStatus {
            cluster: "prod".into(),
            node_id: 1,
            nodes: vec![
                NodeStatus {
                    id: 1,
                    name: "node-1".into(),
                    address: "10.0.0.1:8090".into(),
                    replication_address: "10.0.0.1:8091".into(),
                    reachable: true,
                    role: Role::Leader,
                    this_node: true,
                },
                NodeStatus {
                    id: 2,
                    name: "node-2".into(),
                    address: "10.0.0.2:8090".into(),
                    replication_address: "10.0.0.2:8091".into(),
                    reachable: false,
                    role: Role::Follower,
                    this_node: false,
                },
            ],
            groups: vec![group(METADATA_GROUP, Some(1)), group("1/1/0", Some(1))],
            shards_silent: vec![],
        }
    }

    #[test]
    fn the_status_table_is_aligned_and_names_every_field() {
        let text = render_status(&status());
        let expected = "\
cluster prod — node 1
metadata: leader 1, term 3, committed 11

NODE  NAME    ADDRESS        REPLICATION    REACHABLE  ROLE
1*    node-1  10.0.0.1:8090  10.0.0.1:8091  yes        leader
2     node-2  10.0.0.2:8090  10.0.0.2:8091  no         follower

GROUP     SHARD  LEADER  TERM  ROLE    LAST  COMMITTED  APPLIED  VOTERS  LEARNERS  FOLLOWERS (node:matched/lag)
metadata  0      1       3     leader  12    11         11       1,2,3   -         2:12/0 3:-/13
1/1/0     0      1       3     leader  12    11         11       1,2,3   -         2:12/0 3:-/13
";
        assert_eq!(text, expected);
        assert!(status().healthy());
    }

    #[test]
    fn a_group_without_a_leader_or_a_silent_shard_is_unhealthy_and_said() {
        let mut status = status();
        status.groups[1].leader = None;
        let text = render_status(&status);
        assert!(text.contains("1/1/0     0      none"), "{text}");
        assert!(text.ends_with("1 group(s) without a leader\n"), "{text}");
        assert!(!status.healthy());
        status.groups[1].leader = Some(2);
        status.shards_silent = vec![1];
        assert!(!status.healthy());
        assert!(render_status(&status).contains("did not answer in time"));
    }

    #[test]
    fn the_status_round_trips_through_json() {
        let status = status();
        let json = serde_json::to_string(&status).unwrap();
        assert!(json.contains("\"role\":\"leader\""), "{json}");
        let back: ClusterStatus = serde_json::from_str(&json).unwrap();
        assert_eq!(back, status);
    }

    #[test]
    fn transfers_render_what_moved_and_what_did_not() {
        let transfer = Transfer {
            node_id: 1,
            to: 2,
            moves: vec![
                Move {
                    group: METADATA_GROUP.into(),
                    from: 1,
                    to: 2,
                    moved: true,
                    leader: Some(2),
                    elapsed_ms: 120,
                },
                Move {
                    group: "1/1/0".into(),
                    from: 1,
                    to: 2,
                    moved: false,
                    leader: None,
                    elapsed_ms: 10_000,
                },
            ],
        };
        assert_eq!(
            render_transfer(&transfer),
            "\
GROUP     FROM  TO  RESULT
metadata  1     2   moved in 120 ms
1/1/0     1     2   not moved after 10000 ms (leader: none)
"
        );
        assert!(!transfer.all_moved());
        let nothing = Transfer {
            node_id: 3,
            to: 2,
            moves: vec![],
        };
        assert!(render_transfer(&nothing).contains("node 3 leads no group"));
        assert!(nothing.all_moved());
    }

    #[test]
    fn group_names_parse_and_print_back() {
        assert_eq!(GroupName::parse("metadata"), Ok(GroupName::Metadata));
        let name = GroupName::parse(" 1/2/0 ").unwrap();
        assert_eq!(
            name,
            GroupName::Partition {
                stream: 1,
                topic: 2,
                partition: 0
            }
        );
        assert_eq!(name.to_string(), "1/2/0");
        assert!(
            GroupName::parse("orders/2/0")
                .unwrap_err()
                .contains("stream")
        );
        assert!(GroupName::parse("1/2").unwrap_err().contains("expected"));
        assert!(
            GroupName::parse("1/2/-1")
                .unwrap_err()
                .contains("partition")
        );
        assert!(GroupName::parse("").is_err());
    }

    #[test]
    fn request_lines_are_json_with_an_escaped_group() {
        let line = transfer_leader_request(2, Some("a\"b"));
        let value: serde_json::Value = serde_json::from_str(line.trim_end()).unwrap();
        assert_eq!(value["op"], "transfer_leader");
        assert_eq!(value["to"], 2);
        assert_eq!(value["group"], "a\"b");
        let line = transfer_leader_request(3, None);
        let value: serde_json::Value = serde_json::from_str(line.trim_end()).unwrap();
        assert!(value.get("group").is_none());
        assert!(cluster_status_request().ends_with('\n'));
    }
}
