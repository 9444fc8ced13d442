//! Placement: the affinity mask (`sched_getaffinity`) ∩ the cgroup v2 CPU quota
//! ∩ the hwloc topology -> a `ShardPlan` (shard -> PU -> core -> package -> NUMA
//! node). Also pins a thread to its PU and binds its memory to its NUMA node.
//! Pure planning is separated from the system reads so it can be tested on
//! synthetic machines.

use crate::config::CpuAllocation;
use std::path::PathBuf;

/// Where the topology came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TopologySource {
    /// This machine, as hwloc discovered it.
    System,
    /// `HWLOC_SYNTHETIC`.
    Synthetic(String),
    /// `HWLOC_XMLFILE`.
    XmlFile(PathBuf),
}

/// One shard's placement.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlannedShard {
    pub shard: usize,
    /// OS index of the PU the shard is pinned to.
    pub pu: u32,
    /// Logical index of the physical core.
    pub core: u32,
    pub package: Option<u32>,
    pub numa_node: Option<u32>,
    /// Allowed PUs of the same core that get no shard (SMT siblings).
    pub skipped_siblings: Vec<u32>,
}

/// What the plan was computed from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlanInputs {
    pub topology_source: TopologySource,
    /// The allowed PU set used: the process affinity mask on `System`, the
    /// topology's own allowed set otherwise.
    pub allowed_pus: Vec<u32>,
    pub allowed_from: String,
    /// cgroup v2 `cpu.max`, rounded up to whole CPUs; `None` = no quota.
    pub cpu_quota: Option<u32>,
    pub numa_nodes: usize,
    pub packages: usize,
    pub cores: usize,
    pub pus: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShardPlan {
    pub allocation: String,
    pub shards: Vec<PlannedShard>,
    pub inputs: PlanInputs,
}

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("{0}")]
    Plan(String),
}

/// Where the cgroup files are read from (injectable for tests).
#[derive(Debug, Clone, Default)]
pub struct PlanEnv {
    /// Directory holding this process's cgroup v2 files (`cpu.max`,
    /// `memory.max`); `None` = discovered from `/proc/self/cgroup`.
    pub cgroup_dir: Option<PathBuf>,
}

pub fn plan(allocation: &CpuAllocation, env: &PlanEnv) -> Result<ShardPlan, TopologyError> {
    let _ = (allocation, env);
    Err(TopologyError::Plan("not built yet".into()))
}

impl ShardPlan {
    pub fn render_table(&self) -> String {
        String::new()
    }
    /// True when the plan describes this machine (pinning is meaningful).
    pub fn is_this_system(&self) -> bool {
        self.inputs.topology_source == TopologySource::System
    }
}

/// Pin the calling thread to one PU. Fatal for a shard when it fails.
pub fn pin_current_thread(pu: u32) -> Result<(), TopologyError> {
    let _ = pu;
    Ok(())
}

/// Bind the calling thread's memory to one NUMA node (hwloc). Call only when
/// the machine has more than one node.
pub fn bind_current_thread_memory(numa_node: u32) -> Result<(), TopologyError> {
    let _ = numa_node;
    Ok(())
}
