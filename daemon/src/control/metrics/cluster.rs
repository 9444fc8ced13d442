//! A cluster node's Prometheus series (`iggyd_cluster_*`): each Raft
//! group's state as `iggyd cluster status` reports it (term, indexes,
//! whether this node leads, its followers' lag), and each shard's
//! counters (elections, requests forwarded to a leader, 58 and 57
//! answers). A single node has no [`ClusterSeries`] and exports none of
//! them.
//!
//! Label cardinality is bounded by the data: `group` takes one value per
//! replicated partition plus `metadata` (as many as the partitions, which
//! `[limits]` caps), `follower` one per other node of the group, and only
//! on the node that leads it; the counters carry the shard's labels.
//!
//! Must not: read shard state or the clock (everything is in the input).

use super::{Labels, MetricsInput, ShardSeries, counter_family, gauge_family};
use iggyd_admin_api::cluster::{GroupStatus, Role};
use prometheus_client::encoding::DescriptorEncoder;

/// What a cluster node's scrape adds: its groups, gathered the way
/// `cluster_status` gathers them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterSeries {
    /// Every group of this node, as `cluster_status` orders them.
    pub groups: Vec<GroupStatus>,
    /// Shards that did not report their groups in time.
    pub shards_silent: Vec<u32>,
}

/// A per-group gauge: name, help, value (`None`: no sample).
type GroupGauge = (&'static str, &'static str, fn(&GroupStatus) -> Option<u64>);

fn group_gauges() -> Vec<GroupGauge> {
    vec![
        (
            "iggyd_cluster_group_term",
            "The group's current Raft term as this node knows it.",
            |group| Some(group.term),
        ),
        (
            "iggyd_cluster_group_last_log_index",
            "Index of the last entry in this node's log of the group.",
            |group| group.last_log,
        ),
        (
            "iggyd_cluster_group_commit_index",
            "Index of the group's last entry this node knows is committed.",
            |group| group.committed,
        ),
        (
            "iggyd_cluster_group_applied_index",
            "Index of the group's last entry this node applied.",
            |group| group.applied,
        ),
        (
            "iggyd_cluster_group_leader",
            "1 while this node leads the group, else 0.",
            |group| Some(u64::from(group.role == Role::Leader)),
        ),
    ]
}

/// A per-shard counter: name (before `_total`), help, labels beyond the
/// shard's, value.
type ShardCounter = (
    &'static str,
    &'static str,
    Option<(&'static str, &'static str)>,
    fn(&ShardSeries) -> u64,
);

fn shard_counters() -> Vec<ShardCounter> {
    vec![
        (
            "iggyd_cluster_elections",
            "Elections of this shard's groups: the sum of their Raft terms (a term rises only \
             when a node starts an election), whether this node started or learned of them.",
            None,
            |series| series.cluster.replication.elections,
        ),
        (
            "iggyd_cluster_forwarded",
            "Client requests a follower on this shard forwarded to the partition's leader.",
            Some(("kind", "messages")),
            |series| series.cluster.replication.forwarded_messages,
        ),
        (
            "iggyd_cluster_forwarded",
            "",
            Some(("kind", "offsets")),
            |series| series.cluster.replication.forwarded_offsets,
        ),
        (
            "iggyd_cluster_refusals",
            "Requests answered 58 (not accepted: the client looks for the leader) or 57 (not \
             committed: the client resends) by this shard's connections.",
            Some(("status", "not_accepted")),
            |series| series.cluster.not_accepted,
        ),
        (
            "iggyd_cluster_refusals",
            "",
            Some(("status", "not_committed")),
            |series| series.cluster.not_committed,
        ),
    ]
}

/// Writes the cluster's families; `shards` are each shard's labels and
/// series. Nothing without a [`ClusterSeries`].
pub(super) fn encode(
    encoder: &mut DescriptorEncoder,
    input: &MetricsInput,
    shards: &[(Labels, ShardSeries)],
) -> Result<(), std::fmt::Error> {
    let Some(cluster) = &input.cluster else {
        return Ok(());
    };
    for (name, help, value) in group_gauges() {
        let samples: Vec<(Labels, f64)> = cluster
            .groups
            .iter()
            .filter_map(|group| {
                let value = value(group)?;
                Some((vec![("group", group.group.clone())], value as f64))
            })
            .collect();
        gauge_family(encoder, name, help, None, &samples)?;
    }
    let lags: Vec<(Labels, f64)> = cluster
        .groups
        .iter()
        .filter(|group| group.role == Role::Leader)
        .flat_map(|group| {
            group.followers.iter().map(|follower| {
                let labels = vec![
                    ("group", group.group.clone()),
                    ("follower", follower.node.to_string()),
                ];
                (labels, follower.lag as f64)
            })
        })
        .collect();
    gauge_family(
        encoder,
        "iggyd_cluster_follower_lag",
        "Entries this node, the group's leader, holds beyond what the follower is known to hold.",
        None,
        &lags,
    )?;
    gauge_family(
        encoder,
        "iggyd_cluster_shards_silent",
        "Shards that did not report their groups in time for this scrape (their groups are missing).",
        None,
        &[(Vec::new(), cluster.shards_silent.len() as f64)],
    )?;
    // Counters sharing a name are one family: its descriptor once, then
    // every labelled sample.
    let counters = shard_counters();
    let mut index = 0;
    while let Some((name, help, _, _)) = counters.get(index) {
        let family: Vec<&ShardCounter> = counters
            .iter()
            .skip(index)
            .take_while(|(other, ..)| other == name)
            .collect();
        let mut samples = Vec::new();
        for (_, _, label, value) in &family {
            for (labels, series) in shards {
                let mut labels = labels.clone();
                if let Some((key, label_value)) = label {
                    labels.push((key, (*label_value).to_string()));
                }
                samples.push((labels, value(series) as f64));
            }
        }
        counter_family(encoder, name, help, None, &samples)?;
        index += family.len();
    }
    Ok(())
}
