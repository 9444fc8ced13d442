//! The doctor's checks of what this process is given: the shard plan
//! (`topology::plan`: physical cores in the affinity mask, SMT siblings,
//! NUMA nodes, the cgroup CPU quota), the memory budget
//! (`preflight::check_memory` against MemAvailable and `memory.max`), and
//! the open-files limit against `[limits]` and the descriptors kept for
//! storage (as `net::admission` counts them).
//!
//! Must not: pin a thread, bind memory or raise a limit; the limits read
//! are this process's, so the doctor says to run it as the service runs.

use super::Check;
use super::data_dir::DataDir;
use crate::cgroup::CgroupLimits;
use crate::config::Config;
use crate::config::human_bytes;
use crate::topology::{self, PlanEnv, format_pu_list};
use crate::{limits, preflight};
use std::collections::BTreeMap;
use std::path::Path;

/// The plan check and the shard count it found.
pub(super) struct Plan {
    pub check: Check,
    pub shards: Option<usize>,
}

pub(super) fn shard_plan(config: &Config, cgroup_dir: Option<&Path>) -> Plan {
    const ID: &str = "shard_plan";
    let env = PlanEnv {
        cgroup_dir: cgroup_dir.map(Path::to_path_buf),
    };
    let plan = match topology::plan(&config.sharding.cpu_allocation, &env) {
        Ok(plan) => plan,
        Err(error) => {
            return Plan {
                check: Check::fail(
                    ID,
                    error.to_string(),
                    "set sharding.cpu_allocation to what this machine allows, or widen the \
                     affinity mask (CPUAffinity=, taskset) or the CPU quota (CPUQuota=, cpu.max)",
                ),
                shards: None,
            };
        }
    };
    let inputs = &plan.inputs;
    let shards = plan.shards.len();
    let pus: Vec<u32> = plan.shards.iter().map(|shard| shard.pu).collect();
    let mut by_core: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for shard in &plan.shards {
        by_core.entry(shard.core).or_default().push(shard.pu);
    }
    let sharing: Vec<String> = by_core
        .iter()
        .filter(|(_, pus)| pus.len() > 1)
        .map(|(core, pus)| format!("core {core} holds PUs {}", format_pu_list(pus)))
        .collect();
    let idle: Vec<u32> = plan
        .shards
        .iter()
        .flat_map(|shard| shard.skipped_siblings.iter().copied())
        .collect();
    let quota = inputs.cpu_quota.map_or_else(
        || "no CPU quota".to_string(),
        |q| format!("a CPU quota of {q}"),
    );
    let mut measured = format!(
        "{shards} shard(s) on PUs {} ({}), {} of the machine's {} physical core(s); allowed PUs \
         {}; {} SMT sibling(s) in the mask left to other threads; {} NUMA node(s); {quota}",
        format_pu_list(&pus),
        plan.allocation,
        by_core.len(),
        inputs.cores,
        format_pu_list(&inputs.allowed_pus),
        idle.len(),
        inputs.numa_nodes,
    );
    for note in &plan.notes {
        measured.push_str("; ");
        measured.push_str(note);
    }
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    if !plan.is_this_system() {
        problems.push(format!(
            "the topology comes from {}, not this machine",
            inputs.topology_source
        ));
        fixes.push(
            "unset HWLOC_SYNTHETIC / HWLOC_XMLFILE: the daemon only runs on its own topology",
        );
    }
    if !sharing.is_empty() {
        problems.push(format!(
            "shards share physical cores ({}): SMT siblings halve each other",
            sharing.join(", ")
        ));
        fixes.push(
            "sharding.cpu_allocation = \"physical\" (one shard a core), or list one PU a core",
        );
    }
    let check = if problems.is_empty() {
        Check::pass(ID, measured)
    } else {
        Check::warn(
            ID,
            format!("{measured}; {}", problems.join("; ")),
            &fixes.join("; "),
        )
    };
    let check = check
        .value("shards", shards as u64)
        .value(
            "pus",
            pus.iter().map(|pu| u64::from(*pu)).collect::<Vec<_>>(),
        )
        .value("cores", inputs.cores as u64)
        .value("idle_siblings", idle.len() as u64)
        .value("numa_nodes", inputs.numa_nodes as u64)
        .value("cpu_quota", inputs.cpu_quota)
        .value("allocation", plan.allocation.clone());
    Plan {
        check,
        shards: Some(shards),
    }
}

/// The memory budget against what the machine and the cgroup give.
pub(super) fn memory_budget(
    config: &Config,
    shards: Option<usize>,
    cgroup_dir: Option<&Path>,
) -> Check {
    const ID: &str = "memory_budget";
    let Some(shards) = shards else {
        return Check::skip(
            ID,
            "no shard plan (see shard_plan) to share the budget among",
        );
    };
    let cgroup = CgroupLimits::read(cgroup_dir);
    let plan = match preflight::check_memory(config.memory.budget_bytes, shards.max(1), &cgroup) {
        Ok(plan) => plan,
        Err(error) => {
            return Check::fail(
                ID,
                error.to_string(),
                "lower memory.budget (or \"auto\"), run fewer shards, or give the service more \
                 memory (MemoryMax=)",
            );
        }
    };
    let how = if plan.derived {
        format!(
            "auto: {} % of {}",
            limits::DERIVED_BUDGET_PERCENT,
            human_bytes(plan.available_bytes)
        )
    } else {
        "memory.budget".to_string()
    };
    let cgroup_text = plan.cgroup_max_bytes.map_or_else(
        || "no cgroup memory.max".to_string(),
        |max| format!("cgroup memory.max {}", human_bytes(max)),
    );
    let measured = format!(
        "budget {} ({how}), {} a shard for {} shard(s); MemAvailable {}, {cgroup_text}",
        human_bytes(plan.budget_bytes),
        human_bytes(plan.per_shard_bytes),
        plan.shards,
        human_bytes(plan.mem_available_bytes),
    );
    let check = if cgroup.warnings.is_empty() {
        Check::pass(ID, measured)
    } else {
        Check::warn(
            ID,
            format!("{measured}; {}", cgroup.warnings.join("; ")),
            "fix the cgroup files named (the limits were read as no limit)",
        )
    };
    check
        .value("budget_bytes", plan.budget_bytes)
        .value("per_shard_bytes", plan.per_shard_bytes)
        .value("mem_available_bytes", plan.mem_available_bytes)
        .value("cgroup_max_bytes", plan.cgroup_max_bytes)
}

/// Descriptors kept for storage with `shards` shards and `partitions`
/// partitions (a base, some a shard, some a partition; see
/// `limits::DESCRIPTORS_RESERVED_BASE`).
fn descriptors_reserved(shards: u64, partitions: u64) -> u64 {
    limits::DESCRIPTORS_RESERVED_BASE
        .saturating_add(limits::DESCRIPTORS_RESERVED_PER_SHARD.saturating_mul(shards))
        .saturating_add(limits::DESCRIPTORS_PER_PARTITION.saturating_mul(partitions))
}

/// The open-files limit the daemon would run with against `[limits]`.
pub(super) fn descriptors(config: &Config, shards: Option<usize>, state: &DataDir) -> Check {
    const ID: &str = "descriptors";
    use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit};
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(error) => {
            return Check::fail(
                ID,
                format!("getrlimit(RLIMIT_NOFILE) failed: {error}"),
                "allow getrlimit/prlimit64 to the service (its seccomp filter)",
            );
        }
    };
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|text| text.trim().parse().ok());
    // Start-up raises the soft limit to the hard one (capped at fs.nr_open).
    let effective = soft.max(preflight::nofile_target(hard, nr_open));
    let shards = shards.unwrap_or(1) as u64;
    let partitions = state.partitions();
    let reserved = descriptors_reserved(shards, partitions);
    let show = |limit: u64| {
        if limit == RLIM_INFINITY {
            "unlimited".to_string()
        } else {
            limit.to_string()
        }
    };
    let figures = Descriptors {
        effective,
        reserved,
        configured: config.limits.max_connections,
    };
    let measured = format!(
        "RLIMIT_NOFILE {} soft, {} hard: the daemon runs with {effective}, keeps {reserved} for \
         storage ({shards} shard(s), {partitions} partition(s)), leaving {} for clients; \
         limits.max_connections = {}",
        show(soft),
        show(hard),
        figures.for_clients(),
        figures
            .configured
            .map_or_else(|| "auto".to_string(), |n| n.to_string())
    );
    descriptors_verdict(&figures, measured)
        .value("soft", soft)
        .value("hard", hard)
        .value("effective", effective)
        .value("reserved", reserved)
        .value("for_clients", figures.for_clients())
        .value("max_connections", figures.configured)
}

#[derive(Debug, Clone, Copy)]
struct Descriptors {
    effective: u64,
    reserved: u64,
    configured: Option<u64>,
}

impl Descriptors {
    fn for_clients(&self) -> u64 {
        self.effective.saturating_sub(self.reserved)
    }
}

fn descriptors_verdict(figures: &Descriptors, measured: String) -> Check {
    const ID: &str = "descriptors";
    const FIX: &str = "raise the open-files limit: LimitNOFILE=1048576 in the unit (the packaged \
                       unit has it), or ulimit -n in a shell";
    let room = figures.for_clients();
    if room < limits::CONNECTIONS_FEW {
        return Check::fail(
            ID,
            format!(
                "{measured}: fewer than {} client connections fit",
                limits::CONNECTIONS_FEW
            ),
            FIX,
        );
    }
    if let Some(configured) = figures.configured
        && configured > room
    {
        return Check::warn(
            ID,
            format!("{measured}: limits.max_connections asks for more than fit"),
            FIX,
        );
    }
    Check::pass(ID, measured)
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::*;

    // Proves the reserve counts a base, each shard and each partition, as
    // admission does.
    #[test]
    fn the_reserve_counts_shards_and_partitions() {
        assert_eq!(
            descriptors_reserved(0, 0),
            limits::DESCRIPTORS_RESERVED_BASE
        );
        assert_eq!(
            descriptors_reserved(2, 10),
            limits::DESCRIPTORS_RESERVED_BASE
                + 2 * limits::DESCRIPTORS_RESERVED_PER_SHARD
                + 10 * limits::DESCRIPTORS_PER_PARTITION
        );
    }

    // Proves too few descriptors for clients fail, a configured cap over
    // what fits warns, and room for it passes.
    #[test]
    fn descriptor_verdicts() {
        let status = |effective, configured| {
            descriptors_verdict(
                &Descriptors {
                    effective,
                    reserved: 200,
                    configured,
                },
                String::new(),
            )
            .status
        };
        assert_eq!(status(100, None), Status::Fail);
        assert_eq!(
            status(200 + limits::CONNECTIONS_FEW - 1, None),
            Status::Fail
        );
        assert_eq!(status(1024, None), Status::Pass);
        assert_eq!(status(1024, Some(5000)), Status::Warn);
        assert_eq!(status(1024, Some(824)), Status::Pass);
    }
}
