//! The live `STATUS=` line: the headline, the node's cluster role,
//! connections, message rates, mesh queue depth, durability and free disk,
//! refreshed every `limits::STATUS_EVERY` from what the shards publish (no
//! shard is asked anything); a watchdog alarm replaces it until it clears.

use crate::cluster::node::ClusterRoster;
use crate::limits;
use crate::shard::heartbeat::{Heartbeats, ShardCounters};
use crate::shard::mesh::Mesh;
use crate::systemd;
use iggyd_metadata::Durability;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// The live `STATUS=` summary: refreshed every `limits::STATUS_EVERY` from
/// the shards' published gauges (no shard is asked anything).
pub(super) struct StatusLine {
    pub(super) headline: String,
    data_dir: PathBuf,
    durability: Durability,
    last_at: Instant,
    last: ShardCounters,
    /// A watchdog problem overrides the summary until it clears.
    pub(super) alarm: Option<String>,
    /// A cluster node: its role is part of the summary.
    pub(super) cluster: Option<Arc<ClusterRoster>>,
}

impl StatusLine {
    pub(super) fn new(headline: String, data_dir: PathBuf, durability: Durability) -> StatusLine {
        StatusLine {
            headline,
            data_dir,
            durability,
            last_at: Instant::now(),
            last: ShardCounters::default(),
            alarm: None,
            cluster: None,
        }
    }

    pub(super) fn tick(&mut self, heartbeats: &Heartbeats, mesh: &Mesh) {
        let elapsed = self.last_at.elapsed();
        if elapsed < limits::STATUS_EVERY {
            return;
        }
        let total = heartbeats.total();
        let seconds = elapsed.as_secs_f64();
        let rate = |now: u64, before: u64| now.saturating_sub(before) as f64 / seconds;
        let messages_in = rate(total.messages_in, self.last.messages_in);
        let messages_out = rate(total.messages_out, self.last.messages_out);
        let queued: usize = (0..mesh.shards()).map(|shard| mesh.depth(shard)).sum();
        let disk = match nix::sys::statvfs::statvfs(&self.data_dir) {
            Ok(stat) => {
                let free = stat.blocks_available() * stat.fragment_size();
                let total = stat.blocks() * stat.fragment_size();
                let percent = if total > 0 {
                    free as f64 * 100.0 / total as f64
                } else {
                    0.0
                };
                format!(
                    "disk {:.1} GiB free ({percent:.0}%)",
                    free as f64 / (1u64 << 30) as f64
                )
            }
            Err(_) => "disk unknown".to_string(),
        };
        let role = match &self.cluster {
            None => String::new(),
            Some(cluster) => match cluster.live_leader() {
                Some(leader) if leader == cluster.node_id => {
                    format!(
                        " · cluster {} node {}: leader",
                        cluster.name, cluster.node_id
                    )
                }
                Some(leader) => format!(
                    " · cluster {} node {}: follower of node {leader}",
                    cluster.name, cluster.node_id
                ),
                None => format!(
                    " · cluster {} node {}: no leader (electing)",
                    cluster.name, cluster.node_id
                ),
            },
        };
        let line = match &self.alarm {
            Some(alarm) => alarm.clone(),
            None => format!(
                "{}{role} · {} connections · in {messages_in:.0} msg/s · out {messages_out:.0} msg/s · {queued} queued · durability {} · {disk}",
                self.headline,
                total.connections,
                self.durability.as_str()
            ),
        };
        systemd::status(&line);
        self.last = total;
        self.last_at = Instant::now();
    }
}
