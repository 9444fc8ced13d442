//! Placement: the affinity mask (`sched_getaffinity`) ∩ the cgroup v2 CPU quota
//! ∩ the hwloc topology -> a `ShardPlan` (shard -> PU -> core -> package -> NUMA
//! node). Also pins a thread to its PU and binds its memory to its NUMA node.
//! Pure planning is separated from the system reads so it can be tested on
//! synthetic machines.
//!
//! The layers, from the outside in:
//! - [`plan`]: what the supervisor calls. Loads the topology ([`LoadedTopology`]),
//!   reads the affinity mask and the cgroup quota, then plans.
//! - [`LoadedTopology`]: one hwloc topology, loaded once, honouring
//!   `HWLOC_SYNTHETIC` / `HWLOC_XMLFILE`. It is `Send + Sync`, so an `Arc` of it
//!   can be handed to every shard thread to bind its memory at start-up.
//! - [`Machine`]: a plain description extracted from hwloc (PU -> core ->
//!   package -> NUMA node).
//! - [`plan_machine`] (`topology/planner.rs`): a pure function of a `Machine`,
//!   an allowed PU set, a quota and an allocation. Every placement rule lives
//!   there and is unit-tested without hwloc.

use crate::cgroup::CgroupLimits;
use crate::config::CpuAllocation;
use hwlocality::Topology;
use hwlocality::memory::binding::{MemoryBindingFlags, MemoryBindingPolicy};
use hwlocality::object::types::ObjectType;
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

mod planner;
pub use planner::{format_pu_list, plan_machine};

/// Where the topology came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum TopologySource {
    /// This machine, as hwloc discovered it.
    System,
    /// `HWLOC_SYNTHETIC`.
    Synthetic(String),
    /// `HWLOC_XMLFILE`.
    XmlFile(PathBuf),
}

impl TopologySource {
    /// The source hwloc would use given these environment variables.
    ///
    /// Mirrors `hwloc_topology_load`: `HWLOC_FSROOT` and `HWLOC_CPUID_PATH`
    /// win over `HWLOC_SYNTHETIC`, which wins over `HWLOC_XMLFILE`; empty
    /// values count as unset. With `HWLOC_FSROOT`/`HWLOC_CPUID_PATH` hwloc
    /// still discovers "the system" (from another root), so that is `System`;
    /// [`Machine::this_system`] then tells it is not this one.
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> TopologySource {
        let set = |name: &str| var(name).filter(|v| !v.is_empty());
        if set("HWLOC_FSROOT").is_some() || set("HWLOC_CPUID_PATH").is_some() {
            return TopologySource::System;
        }
        if let Some(desc) = set("HWLOC_SYNTHETIC") {
            return TopologySource::Synthetic(desc.to_string_lossy().into_owned());
        }
        if let Some(path) = set("HWLOC_XMLFILE") {
            return TopologySource::XmlFile(PathBuf::from(path));
        }
        TopologySource::System
    }

    /// The source selected by this process's environment.
    pub fn from_env() -> TopologySource {
        Self::from_vars(|name| std::env::var_os(name))
    }
}

impl fmt::Display for TopologySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologySource::System => f.write_str("this system"),
            TopologySource::Synthetic(desc) => write!(f, "HWLOC_SYNTHETIC={desc:?}"),
            TopologySource::XmlFile(path) => write!(f, "HWLOC_XMLFILE={}", path.display()),
        }
    }
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
    /// hwloc's "is this system" flag: false for synthetic and XML topologies
    /// (unless `HWLOC_THISSYSTEM=1`) and for `HWLOC_FSROOT`.
    pub this_system: bool,
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
    /// Things the operator should know but that are not errors (quota cut
    /// the plan, two listed PUs share a core, cgroup files were malformed).
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("cannot load the hwloc topology from {source_desc}: {reason}")]
    Load { source_desc: String, reason: String },
    #[error("the hwloc topology from {source_desc} is unusable: {detail}")]
    Inconsistent { source_desc: String, detail: String },
    #[error("cannot read this process's CPU affinity mask (sched_getaffinity): {0}")]
    AffinityMask(nix::errno::Errno),
    #[error("cpu_allocation = count(0) asks for no shards; give at least 1")]
    ZeroCount,
    #[error("cpu_allocation = list([]) names no PU; give at least one PU OS index")]
    EmptyList,
    #[error(
        "cpu_allocation = count({asked}) asks for {asked} shards, but only {available} physical \
         cores have an allowed PU (allowed PUs: {allowed}, from {allowed_from})"
    )]
    CountTooLarge {
        asked: usize,
        available: usize,
        allowed: String,
        allowed_from: String,
    },
    #[error(
        "cpu_allocation = {allocation} asks for {asked} shards, but the cgroup CPU quota \
         (cpu.max) allows only {quota} CPUs"
    )]
    OverQuota {
        allocation: String,
        asked: usize,
        quota: u32,
    },
    #[error(
        "cpu_allocation lists PU {pu}, which the topology ({source_desc}) does not have; \
         its PUs are {existing}, allowed: {allowed}"
    )]
    UnknownPu {
        pu: u32,
        source_desc: String,
        existing: String,
        allowed: String,
    },
    #[error(
        "cpu_allocation lists PU {pu}, which is not allowed; allowed PUs: {allowed} (from {allowed_from})"
    )]
    PuNotAllowed {
        pu: u32,
        allowed: String,
        allowed_from: String,
    },
    #[error("cpu_allocation lists PU {pu} more than once; each PU can hold one shard")]
    DuplicatePu { pu: u32 },
    #[error(
        "the plan has {planned} shards ({allocation} on this machine), more than the {max} one          daemon runs; narrow it with sharding.cpu_allocation = {max} (a shard count) or a PU range"
    )]
    TooManyShards {
        planned: usize,
        max: usize,
        allocation: String,
    },
    #[error(
        "no shard can be placed: no PU of the topology ({source_desc}, PUs {existing}) is \
         allowed; allowed set: {allowed_from}; cgroup CPU quota: {quota}"
    )]
    EmptyPlan {
        source_desc: String,
        existing: String,
        allowed_from: String,
        quota: String,
    },
    #[error("cannot pin this thread to PU {pu}: {reason}")]
    Pin { pu: u32, reason: String },
    #[error("cannot bind this thread's memory to NUMA node {node}: {reason}")]
    BindMemory { node: u32, reason: String },
}

/// Where the cgroup files are read from (injectable for tests).
#[derive(Debug, Clone, Default)]
pub struct PlanEnv {
    /// Directory holding this process's cgroup v2 files (`cpu.max`,
    /// `memory.max`); `None` = discovered from `/proc/self/cgroup`.
    pub cgroup_dir: Option<PathBuf>,
}

/// One PU of a [`Machine`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MachinePu {
    /// OS index (what `sched_setaffinity` and `taskset` use).
    pub pu: u32,
    /// Logical index of the physical core holding it.
    pub core: u32,
    /// Logical index of the package, if the topology has packages.
    pub package: Option<u32>,
    /// OS index of the NUMA node local to it.
    pub numa_node: Option<u32>,
}

/// A plain description of a machine, extracted from hwloc once, so the
/// planning rules can be tested on any invented machine.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Machine {
    pub source: TopologySource,
    /// hwloc's "is this system" flag.
    pub this_system: bool,
    pub pus: Vec<MachinePu>,
    /// PUs the topology itself allows (hwloc's allowed cpuset; on this system
    /// it already reflects the cgroup `cpuset` controller).
    pub allowed_pus: Vec<u32>,
    pub packages: usize,
    pub cores: usize,
    pub numa_nodes: usize,
}

impl Machine {
    /// True when this describes the machine we run on, so the process mask,
    /// pinning and memory binding mean something.
    pub fn is_this_system(&self) -> bool {
        self.source == TopologySource::System && self.this_system
    }
}

/// The PUs a plan may use and a human account of where they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedPus {
    pub pus: Vec<u32>,
    pub from: String,
}

impl AllowedPus {
    /// The allowed set for `machine`: on this system the process affinity
    /// mask ∩ the topology's allowed set; elsewhere the topology's own set,
    /// because this process's mask describes this machine, not that one.
    pub fn for_machine(machine: &Machine) -> Result<AllowedPus, TopologyError> {
        if !machine.is_this_system() {
            return Ok(AllowedPus {
                pus: machine.allowed_pus.clone(),
                from: "the topology's own allowed cpuset (not this machine: this process's \
                       affinity mask does not apply)"
                    .into(),
            });
        }
        let mask = process_affinity_mask()?;
        let topo: BTreeSet<u32> = machine.allowed_pus.iter().copied().collect();
        let pus: Vec<u32> = mask
            .iter()
            .copied()
            .filter(|pu| topo.contains(pu))
            .collect();
        Ok(AllowedPus {
            pus,
            from: format!(
                "sched_getaffinity mask {} ∩ hwloc allowed cpuset {}",
                format_pu_list(&mask),
                format_pu_list(&machine.allowed_pus)
            ),
        })
    }
}

/// The calling thread's affinity mask (at start-up: the process's), as PU OS
/// indexes. nix's fixed-size `CpuSet` covers PUs 0..1024.
fn process_affinity_mask() -> Result<Vec<u32>, TopologyError> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .map_err(TopologyError::AffinityMask)?;
    Ok((0..nix::sched::CpuSet::count())
        .filter(|&i| set.is_set(i).unwrap_or(false))
        .filter_map(|i| u32::try_from(i).ok())
        .collect())
}

/// A loaded hwloc topology plus where it came from. Load it once at start-up;
/// it is `Send + Sync` (hwloc topologies are safe for concurrent read-only
/// use), so shard threads can share it through an `Arc` to bind memory.
pub struct LoadedTopology {
    topology: Topology,
    source: TopologySource,
}

impl fmt::Debug for LoadedTopology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedTopology")
            .field("source", &self.source)
            .field("this_system", &self.topology.is_this_system())
            .finish_non_exhaustive()
    }
}

impl LoadedTopology {
    /// Load the topology the environment asks for (see [`TopologySource::from_vars`]).
    pub fn from_env() -> Result<LoadedTopology, TopologyError> {
        Self::load(TopologySource::from_env())
    }

    /// Load from an explicit source. Synthetic and XML sources are given to
    /// hwloc explicitly rather than left to its env-var handling, so a bad
    /// description or unreadable file is an error here instead of a silent
    /// fallback to this machine under a misleading label.
    pub fn load(source: TopologySource) -> Result<LoadedTopology, TopologyError> {
        let load_err = |reason: String| TopologyError::Load {
            source_desc: source.to_string(),
            reason,
        };
        let builder = Topology::builder();
        let builder = match &source {
            TopologySource::System => builder,
            TopologySource::Synthetic(desc) => builder.from_synthetic(desc).map_err(|e| {
                load_err(format!("{e} (expected e.g. \"pack:2 [numa] core:8 pu:2\")"))
            })?,
            TopologySource::XmlFile(path) => {
                // Read it ourselves: hwlocality's `from_xml_file` panics on
                // errors other than EINVAL (a missing file is ENOENT).
                let xml = std::fs::read_to_string(path)
                    .map_err(|e| load_err(format!("cannot read the file: {e}")))?;
                builder
                    .from_xml(&xml)
                    .map_err(|e| load_err(format!("{e} (expected `lstopo --of xml` output)")))?
            }
        };
        let topology = builder.build().map_err(|e| load_err(e.to_string()))?;
        Ok(LoadedTopology { topology, source })
    }

    pub fn source(&self) -> &TopologySource {
        &self.source
    }

    /// The underlying hwloc topology, for read-only queries.
    pub fn hwloc(&self) -> &Topology {
        &self.topology
    }

    /// True when the topology describes the machine we run on.
    pub fn is_this_system(&self) -> bool {
        self.source == TopologySource::System && self.topology.is_this_system()
    }

    /// Extract the plain description the planner works on.
    pub fn machine(&self) -> Result<Machine, TopologyError> {
        let topo = &self.topology;
        let inconsistent = |detail: String| TopologyError::Inconsistent {
            source_desc: self.source.to_string(),
            detail,
        };
        let to_u32 = |what: &str, v: usize| {
            u32::try_from(v).map_err(|_| inconsistent(format!("{what} {v} does not fit in u32")))
        };
        let cores = topo.objects_with_type(ObjectType::Core).len();
        let allowed = topo.allowed_cpuset();
        let mut pus = Vec::new();
        let mut allowed_pus = Vec::new();
        for obj in topo.objects_with_type(ObjectType::PU) {
            let Some(os) = obj.os_index() else {
                return Err(inconsistent(format!(
                    "PU L#{} has no OS index, so it cannot be pinned",
                    obj.logical_index()
                )));
            };
            let pu = to_u32("PU OS index", os)?;
            // A PU without a Core ancestor (some VMs and architectures) is its
            // own core; number it after the real cores so indexes never clash.
            let core = match obj.first_ancestor_with_type(ObjectType::Core) {
                Some(core) => core.logical_index(),
                None => cores + obj.logical_index(),
            };
            let package = obj
                .first_ancestor_with_type(ObjectType::Package)
                .map(|p| to_u32("package logical index", p.logical_index()))
                .transpose()?;
            // hwloc 2 attaches NUMA nodes beside the CPU tree; a PU's nodeset
            // holds the nodes local to it. With several (DRAM + HBM) the
            // lowest OS index is the ordinary DRAM node.
            let numa_node = obj
                .nodeset()
                .and_then(|set| set.first_set())
                .map(|n| to_u32("NUMA node OS index", usize::from(n)))
                .transpose()?;
            if allowed.is_set(os) {
                allowed_pus.push(pu);
            }
            pus.push(MachinePu {
                pu,
                core: to_u32("core logical index", core)?,
                package,
                numa_node,
            });
        }
        if pus.is_empty() {
            return Err(inconsistent("it has no PU".into()));
        }
        pus.sort_by_key(|p| p.pu);
        allowed_pus.sort_unstable();
        Ok(Machine {
            source: self.source.clone(),
            this_system: topo.is_this_system(),
            cores: if cores == 0 { pus.len() } else { cores },
            packages: topo.objects_with_type(ObjectType::Package).len(),
            numa_nodes: topo.objects_with_type(ObjectType::NUMANode).len(),
            pus,
            allowed_pus,
        })
    }

    /// Plan on this topology with this process's mask and cgroup quota.
    ///
    /// The cgroup quota of this process applies only when the topology is this
    /// machine or when `env.cgroup_dir` was given explicitly: a synthetic
    /// 32-PU plan should not be cut by the quota of the VM that computes it.
    pub fn plan(
        &self,
        allocation: &CpuAllocation,
        env: &PlanEnv,
    ) -> Result<ShardPlan, TopologyError> {
        let machine = self.machine()?;
        let allowed = AllowedPus::for_machine(&machine)?;
        let mut notes = Vec::new();
        let quota = if machine.is_this_system() || env.cgroup_dir.is_some() {
            let limits = CgroupLimits::read(env.cgroup_dir.as_deref());
            notes.extend(limits.warnings);
            limits.cpu_quota
        } else {
            notes.push(
                "not this machine: this process's cgroup CPU quota does not apply".to_string(),
            );
            None
        };
        let mut plan = plan_machine(&machine, &allowed, quota, allocation)?;
        notes.append(&mut plan.notes);
        plan.notes = notes;
        Ok(plan)
    }

    /// Bind the calling thread's future allocations to NUMA node `node` (OS
    /// index). Safe to call from several threads at once.
    pub fn bind_current_thread_memory(&self, node: u32) -> Result<(), TopologyError> {
        let fail = |reason: String| TopologyError::BindMemory { node, reason };
        if !self.is_this_system() {
            // hwloc silently ignores binding on foreign topologies; say so
            // instead of pretending it worked.
            return Err(fail(format!(
                "the topology comes from {}, not this machine",
                self.source
            )));
        }
        let nodes = self.topology.objects_with_type(ObjectType::NUMANode);
        let existing: Vec<u32> = nodes
            .clone()
            .filter_map(|n| n.os_index().and_then(|i| u32::try_from(i).ok()))
            .collect();
        let target = nodes
            .filter(|n| n.os_index() == usize::try_from(node).ok())
            .find_map(|n| n.nodeset())
            .ok_or_else(|| {
                fail(format!(
                    "no such node; this machine has NUMA nodes {}",
                    format_pu_list(&existing)
                ))
            })?;
        self.topology
            .bind_memory(
                target,
                MemoryBindingPolicy::Bind,
                MemoryBindingFlags::THREAD,
            )
            .map_err(|e| fail(e.to_string()))
    }
}

/// Plan placement for this process: topology (honouring `HWLOC_SYNTHETIC` /
/// `HWLOC_XMLFILE`) ∩ affinity mask ∩ cgroup quota.
pub fn plan(allocation: &CpuAllocation, env: &PlanEnv) -> Result<ShardPlan, TopologyError> {
    LoadedTopology::from_env()?.plan(allocation, env)
}

/// Pin the calling thread to one PU. Fatal for a shard when it fails.
pub fn pin_current_thread(pu: u32) -> Result<(), TopologyError> {
    let fail = |reason: String| TopologyError::Pin { pu, reason };
    let index = usize::try_from(pu).map_err(|_| fail("index does not fit in usize".into()))?;
    let mut set = nix::sched::CpuSet::new();
    set.set(index).map_err(|e| {
        fail(format!(
            "{e} (this build handles PUs 0..{})",
            nix::sched::CpuSet::count()
        ))
    })?;
    // pid 0 = the calling thread (sched_setaffinity works per thread on Linux).
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| fail(format!("sched_setaffinity failed: {e} ({})", e as i32)))
}

/// Bind the calling thread's memory to one NUMA node (hwloc). Call only when
/// the machine has more than one node.
///
/// Loads a topology for each call; shard threads starting together should
/// rather share one [`LoadedTopology`] and call its method.
pub fn bind_current_thread_memory(numa_node: u32) -> Result<(), TopologyError> {
    LoadedTopology::from_env()
        .map_err(|e| TopologyError::BindMemory {
            node: numa_node,
            reason: e.to_string(),
        })?
        .bind_current_thread_memory(numa_node)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pus_of(plan: &ShardPlan) -> Vec<u32> {
        plan.shards.iter().map(|s| s.pu).collect()
    }

    #[test]
    fn source_from_vars_mirrors_hwloc_precedence() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        assert_eq!(TopologySource::from_vars(vars(&[])), TopologySource::System);
        assert_eq!(
            TopologySource::from_vars(vars(&[
                ("HWLOC_XMLFILE", "/t.xml"),
                ("HWLOC_SYNTHETIC", "pu:2")
            ])),
            TopologySource::Synthetic("pu:2".into())
        );
        assert_eq!(
            TopologySource::from_vars(vars(&[
                ("HWLOC_XMLFILE", "/t.xml"),
                ("HWLOC_SYNTHETIC", "")
            ])),
            TopologySource::XmlFile("/t.xml".into())
        );
        assert_eq!(
            TopologySource::from_vars(vars(&[("HWLOC_FSROOT", "/r"), ("HWLOC_SYNTHETIC", "pu:2")])),
            TopologySource::System
        );
    }

    // ---- through real hwloc ----

    const SYNTHETIC: &str = "pack:2 [numa] core:8 pu:2";

    #[test]
    fn hwloc_synthetic_extraction() {
        let topo = LoadedTopology::load(TopologySource::Synthetic(SYNTHETIC.into())).unwrap();
        assert!(!topo.is_this_system());
        let m = topo.machine().unwrap();
        assert_eq!(
            (m.packages, m.cores, m.pus.len(), m.numa_nodes),
            (2, 16, 32, 2)
        );
        assert_eq!(m.allowed_pus, (0..32).collect::<Vec<_>>());
        for p in &m.pus {
            assert_eq!(p.core, p.pu / 2, "{p:?}");
            let package = if p.core < 8 { 0 } else { 1 };
            assert_eq!(p.package, Some(package), "{p:?}");
            assert_eq!(p.numa_node, Some(package), "{p:?}");
        }
        // Foreign topology: its own allowed set, no process quota.
        let plan = topo
            .plan(&CpuAllocation::Physical, &PlanEnv::default())
            .unwrap();
        assert_eq!(plan.shards.len(), 16);
        assert!(!plan.is_this_system());
        assert!(plan.inputs.allowed_from.contains("does not apply"));
        assert_eq!(plan.inputs.cpu_quota, None);
        let nodes: Vec<Option<u32>> = plan.shards.iter().map(|s| s.numa_node).collect();
        assert_eq!(&nodes[..8], &[Some(0); 8]);
        assert_eq!(&nodes[8..], &[Some(1); 8]);
        // Binding memory to a foreign topology's node must not pretend.
        assert!(matches!(
            topo.bind_current_thread_memory(1),
            Err(TopologyError::BindMemory { node: 1, .. })
        ));
    }

    #[test]
    fn hwloc_synthetic_with_injected_quota() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("cpu.max"), "250000 100000\n").unwrap();
        let topo = LoadedTopology::load(TopologySource::Synthetic(SYNTHETIC.into())).unwrap();
        let env = PlanEnv {
            cgroup_dir: Some(tmp.path().to_path_buf()),
        };
        let plan = topo.plan(&CpuAllocation::Physical, &env).unwrap();
        assert_eq!(plan.inputs.cpu_quota, Some(3));
        assert_eq!(pus_of(&plan), vec![0, 2, 4]);
    }

    #[test]
    fn hwloc_bad_sources_are_errors() {
        let err =
            LoadedTopology::load(TopologySource::Synthetic("pack:banana".into())).unwrap_err();
        assert!(matches!(err, TopologyError::Load { .. }), "{err}");
        assert!(err.to_string().contains("pack:banana"));
        let err = LoadedTopology::load(TopologySource::XmlFile("/nonexistent/topo.xml".into()))
            .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/topo.xml"), "{err}");

        let tmp = tempfile::tempdir().unwrap();
        let garbage = tmp.path().join("garbage.xml");
        std::fs::write(&garbage, "<topology>no</topology>").unwrap();
        let err = LoadedTopology::load(TopologySource::XmlFile(garbage.clone())).unwrap_err();
        assert!(matches!(err, TopologyError::Load { .. }), "{err}");
        std::fs::write(&garbage, "not xml at all").unwrap();
        assert!(LoadedTopology::load(TopologySource::XmlFile(garbage)).is_err());
    }

    #[test]
    fn hwloc_xml_round_trip() {
        // An XML export of a synthetic machine loads as that machine.
        let synthetic = LoadedTopology::load(TopologySource::Synthetic(SYNTHETIC.into())).unwrap();
        let xml = synthetic
            .hwloc()
            .export_xml(hwlocality::topology::export::xml::XMLExportFlags::empty())
            .unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("topo.xml");
        std::fs::write(&path, &*xml).unwrap();
        let topo = LoadedTopology::load(TopologySource::XmlFile(path.clone())).unwrap();
        assert!(!topo.is_this_system());
        let mut from_xml = topo.machine().unwrap();
        assert_eq!(from_xml.source, TopologySource::XmlFile(path));
        from_xml.source = synthetic.source().clone();
        assert_eq!(from_xml, synthetic.machine().unwrap());
    }

    #[test]
    fn this_machine_plans_pins_and_binds() {
        let topo = LoadedTopology::load(TopologySource::System).unwrap();
        assert!(topo.is_this_system());
        let plan = topo
            .plan(&CpuAllocation::Physical, &PlanEnv::default())
            .unwrap();
        assert!(!plan.shards.is_empty());
        assert!(plan.is_this_system());
        assert!(plan.inputs.allowed_from.contains("sched_getaffinity"));
        let all = topo.plan(&CpuAllocation::All, &PlanEnv::default()).unwrap();
        assert!(all.shards.len() >= plan.shards.len());

        // Pin and bind on a scratch thread so the test runner's threads keep
        // their masks.
        let first = plan.shards[0].clone();
        let topo = std::sync::Arc::new(topo);
        let shared = std::sync::Arc::clone(&topo);
        std::thread::spawn(move || {
            pin_current_thread(first.pu).unwrap();
            let mask = process_affinity_mask().unwrap();
            assert_eq!(mask, vec![first.pu]);
            if let Some(node) = first.numa_node {
                shared.bind_current_thread_memory(node).unwrap();
            }
            let err = shared.bind_current_thread_memory(4096).unwrap_err();
            assert!(err.to_string().contains("4096"), "{err}");
        })
        .join()
        .unwrap();

        let err = pin_current_thread(1 << 20).unwrap_err();
        assert!(err.to_string().contains("PU 1048576"), "{err}");
    }
}
