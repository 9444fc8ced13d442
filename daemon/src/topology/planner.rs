//! The placement rules as a pure function of a [`Machine`], an allowed PU
//! set, a cgroup quota and a [`CpuAllocation`]: no hwloc, no syscalls, so
//! every rule is unit-tested on invented machines. Also the human table.
//!
//! Invariants of every plan: shard numbers are 0..n in order; no PU holds two
//! shards; every PU is in the allowed set; `physical`/`count` never put two
//! shards on one core; a quota cut keeps the first shards of the plan.

use super::{
    AllowedPus, Machine, MachinePu, PlanInputs, PlannedShard, ShardPlan, TopologyError,
    TopologySource,
};
use crate::config::CpuAllocation;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// The planning rules, as a pure function (see the module doc).
///
/// `allowed` may contain PUs the machine lacks (a process mask wider than a
/// narrowed topology); they are ignored. `notes` in the result says what the
/// quota cut and which explicit PUs share a core.
pub fn plan_machine(
    machine: &Machine,
    allowed: &AllowedPus,
    cpu_quota: Option<u32>,
    allocation: &CpuAllocation,
) -> Result<ShardPlan, TopologyError> {
    let by_pu: BTreeMap<u32, &MachinePu> = machine.pus.iter().map(|p| (p.pu, p)).collect();
    let allowed_set: BTreeSet<u32> = allowed
        .pus
        .iter()
        .copied()
        .filter(|pu| by_pu.contains_key(pu))
        .collect();
    let allowed_list: Vec<u32> = allowed_set.iter().copied().collect();
    let allocation_name = allocation_name(allocation);
    let quota_name = cpu_quota.map_or_else(|| "none".to_string(), |q| format!("{q} CPUs"));
    let existing = || {
        let all: Vec<u32> = by_pu.keys().copied().collect();
        format_pu_list(&all)
    };

    if allowed_set.is_empty() {
        return Err(TopologyError::EmptyPlan {
            source_desc: machine.source.to_string(),
            existing: existing(),
            allowed_from: allowed.from.clone(),
            quota: quota_name,
        });
    }

    // Allowed PUs grouped by core, cores in logical order, PUs by OS index
    // (BTreeSet iteration is sorted, so each Vec is too).
    let mut cores: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &pu in &allowed_set {
        if let Some(p) = by_pu.get(&pu) {
            cores.entry(p.core).or_default().push(pu);
        }
    }
    // Physical: the lowest allowed PU of each core; the rest are siblings.
    let physical: Vec<(u32, Vec<u32>)> = cores
        .values()
        .filter_map(|pus| {
            pus.split_first()
                .map(|(first, rest)| (*first, rest.to_vec()))
        })
        .collect();

    let mut notes = Vec::new();
    let chosen: Vec<(u32, Vec<u32>)> = match allocation {
        CpuAllocation::Physical => cut_to_quota(physical, cpu_quota, &mut notes),
        CpuAllocation::All => {
            // Rank-major order: every core's first PU, then every core's
            // second PU... so a quota cut keeps whole cores before siblings.
            let deepest = cores.values().map(Vec::len).max().unwrap_or(0);
            let all = (0..deepest)
                .flat_map(|rank| cores.values().filter_map(move |pus| pus.get(rank)))
                .map(|&pu| (pu, Vec::new()))
                .collect();
            cut_to_quota(all, cpu_quota, &mut notes)
        }
        CpuAllocation::Count(n) => {
            let n = *n;
            if n == 0 {
                return Err(TopologyError::ZeroCount);
            }
            if n > physical.len() {
                return Err(TopologyError::CountTooLarge {
                    asked: n,
                    available: physical.len(),
                    allowed: format_pu_list(&allowed_list),
                    allowed_from: allowed.from.clone(),
                });
            }
            check_quota(&allocation_name, n, cpu_quota)?;
            physical.into_iter().take(n).collect()
        }
        CpuAllocation::List(list) => {
            if list.is_empty() {
                return Err(TopologyError::EmptyList);
            }
            let mut seen = BTreeSet::new();
            for &pu in list {
                if !seen.insert(pu) {
                    return Err(TopologyError::DuplicatePu { pu });
                }
                if !by_pu.contains_key(&pu) {
                    return Err(TopologyError::UnknownPu {
                        pu,
                        source_desc: machine.source.to_string(),
                        existing: existing(),
                        allowed: format_pu_list(&allowed_list),
                    });
                }
                if !allowed_set.contains(&pu) {
                    return Err(TopologyError::PuNotAllowed {
                        pu,
                        allowed: format_pu_list(&allowed_list),
                        allowed_from: allowed.from.clone(),
                    });
                }
            }
            check_quota(&allocation_name, list.len(), cpu_quota)?;
            let mut shared: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
            let chosen = list
                .iter()
                .map(|&pu| {
                    let core = by_pu.get(&pu).map_or(u32::MAX, |p| p.core);
                    shared.entry(core).or_default().push(pu);
                    let siblings = cores
                        .get(&core)
                        .into_iter()
                        .flatten()
                        .copied()
                        .filter(|s| !seen.contains(s))
                        .collect();
                    (pu, siblings)
                })
                .collect();
            for (core, pus) in shared.into_iter().filter(|(_, pus)| pus.len() > 1) {
                notes.push(format!(
                    "PUs {} share core {core} (SMT siblings); kept because the list asks for them",
                    format_pu_list(&pus)
                ));
            }
            chosen
        }
    };

    let shards = chosen
        .into_iter()
        .enumerate()
        .filter_map(|(shard, (pu, skipped_siblings))| {
            by_pu.get(&pu).map(|p| PlannedShard {
                shard,
                pu,
                core: p.core,
                package: p.package,
                numa_node: p.numa_node,
                skipped_siblings,
            })
        })
        .collect::<Vec<PlannedShard>>();
    if shards.len() > crate::limits::SHARDS_MAX {
        return Err(TopologyError::TooManyShards {
            planned: shards.len(),
            max: crate::limits::SHARDS_MAX,
            allocation: allocation_name,
        });
    }

    Ok(ShardPlan {
        allocation: allocation_name,
        shards,
        inputs: PlanInputs {
            topology_source: machine.source.clone(),
            this_system: machine.this_system,
            allowed_pus: allowed_list,
            allowed_from: allowed.from.clone(),
            cpu_quota,
            numa_nodes: machine.numa_nodes,
            packages: machine.packages,
            cores: machine.cores,
            pus: machine.pus.len(),
        },
        notes,
    })
}

/// Keep the first `quota` entries (Physical/All: the quota is a ceiling, not
/// an error) and note what was dropped.
fn cut_to_quota(
    mut chosen: Vec<(u32, Vec<u32>)>,
    quota: Option<u32>,
    notes: &mut Vec<String>,
) -> Vec<(u32, Vec<u32>)> {
    let Some(q) = quota else { return chosen };
    let keep = usize::try_from(q).unwrap_or(usize::MAX);
    if chosen.len() > keep {
        let dropped: Vec<u32> = chosen
            .split_off(keep)
            .into_iter()
            .map(|(pu, _)| pu)
            .collect();
        notes.push(format!(
            "cgroup CPU quota (cpu.max) allows {q} CPUs: kept {keep} shards, left PUs {} unused",
            format_pu_list(&dropped)
        ));
    }
    chosen
}

/// Count/List are explicit: more shards than the quota is the operator's
/// mistake, not something to trim silently.
fn check_quota(allocation: &str, asked: usize, quota: Option<u32>) -> Result<(), TopologyError> {
    match quota {
        Some(q) if usize::try_from(q).is_ok_and(|q| asked > q) => Err(TopologyError::OverQuota {
            allocation: allocation.to_string(),
            asked,
            quota: q,
        }),
        _ => Ok(()),
    }
}

fn allocation_name(allocation: &CpuAllocation) -> String {
    match allocation {
        CpuAllocation::Physical => "physical".into(),
        CpuAllocation::All => "all".into(),
        CpuAllocation::Count(n) => format!("count({n})"),
        CpuAllocation::List(pus) => format!("list({})", format_pu_list(pus)),
    }
}

/// `3 shards`, `1 shard`.
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `[0,1,2,3,8]` -> `"0-3,8"`. Order is kept (a list allocation's order is
/// its shard order); only ascending runs of 3+ collapse. Empty -> `"none"`.
pub fn format_pu_list(pus: &[u32]) -> String {
    if pus.is_empty() {
        return "none".into();
    }
    let mut out = String::new();
    let mut i = 0;
    while i < pus.len() {
        let mut j = i;
        while j + 1 < pus.len() && pus[j].checked_add(1) == Some(pus[j + 1]) {
            j += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        match j - i {
            0 => write!(out, "{}", pus[i]),
            1 => write!(out, "{},{}", pus[i], pus[j]),
            _ => write!(out, "{}-{}", pus[i], pus[j]),
        }
        .unwrap_or(());
        i = j + 1;
    }
    out
}

impl ShardPlan {
    /// A human table: the inputs, then one row per shard.
    pub fn render_table(&self) -> String {
        let i = &self.inputs;
        let mut out = String::new();
        let this = if self.is_this_system() {
            ""
        } else {
            " (not this machine: pinning and memory binding do not apply)"
        };
        let lines = [
            ("topology", format!("{}{this}", i.topology_source)),
            (
                "allowed PUs",
                format!(
                    "{} (from {})",
                    format_pu_list(&i.allowed_pus),
                    i.allowed_from
                ),
            ),
            (
                "cpu quota",
                i.cpu_quota.map_or_else(
                    || "none".to_string(),
                    |q| format!("{q} CPUs (cgroup cpu.max)"),
                ),
            ),
            (
                "machine",
                format!(
                    "{}, {}, {}, {}",
                    count(i.packages, "package"),
                    count(i.cores, "core"),
                    count(i.pus, "PU"),
                    count(i.numa_nodes, "NUMA node")
                ),
            ),
            (
                "allocation",
                format!(
                    "{} -> {}",
                    self.allocation,
                    count(self.shards.len(), "shard")
                ),
            ),
        ];
        for (key, value) in lines {
            out.push_str(&format!("{:<12} {value}\n", format!("{key}:")));
        }
        for note in &self.notes {
            out.push_str(&format!("{:<12} {note}\n", "note:"));
        }
        out.push('\n');

        let opt = |v: Option<u32>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        let header = ["shard", "pu", "core", "package", "numa", "skipped-siblings"];
        let rows: Vec<[String; 6]> = self
            .shards
            .iter()
            .map(|s| {
                [
                    s.shard.to_string(),
                    s.pu.to_string(),
                    s.core.to_string(),
                    opt(s.package),
                    opt(s.numa_node),
                    if s.skipped_siblings.is_empty() {
                        "-".to_string()
                    } else {
                        format_pu_list(&s.skipped_siblings)
                    },
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        // Numbers right-aligned under their header; the last column is a
        // free-form list and stays left-aligned with no trailing spaces.
        let mut push_row = |cells: [&str; 6]| {
            let mut line = String::new();
            for (k, cell) in cells.iter().enumerate() {
                if k > 0 {
                    line.push_str("  ");
                }
                if k + 1 == cells.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:>w$}", w = widths[k]));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        };
        push_row(header);
        for row in &rows {
            push_row(row.each_ref().map(String::as_str));
        }
        out
    }
    /// True when the plan describes this machine (pinning is meaningful).
    pub fn is_this_system(&self) -> bool {
        self.inputs.topology_source == TopologySource::System && self.inputs.this_system
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `packages` × `cores_per_package` × `pus_per_core`, one NUMA node per
    /// package, PU OS indexes numbered like hwloc's synthetic backend does
    /// (siblings adjacent: core 0 = PUs 0,1).
    fn machine(packages: u32, cores_per_package: u32, pus_per_core: u32) -> Machine {
        let mut pus = Vec::new();
        for package in 0..packages {
            for c in 0..cores_per_package {
                let core = package * cores_per_package + c;
                for t in 0..pus_per_core {
                    pus.push(MachinePu {
                        pu: core * pus_per_core + t,
                        core,
                        package: Some(package),
                        numa_node: Some(package),
                    });
                }
            }
        }
        let allowed_pus = pus.iter().map(|p| p.pu).collect();
        Machine {
            source: TopologySource::Synthetic("test".into()),
            this_system: false,
            pus,
            allowed_pus,
            packages: packages as usize,
            cores: (packages * cores_per_package) as usize,
            numa_nodes: packages as usize,
        }
    }

    fn big() -> Machine {
        machine(2, 8, 2)
    }

    fn allowed(pus: impl IntoIterator<Item = u32>) -> AllowedPus {
        AllowedPus {
            pus: pus.into_iter().collect(),
            from: "test mask".into(),
        }
    }

    fn run(m: &Machine, a: &AllowedPus, quota: Option<u32>, alloc: CpuAllocation) -> ShardPlan {
        plan_machine(m, a, quota, &alloc).unwrap()
    }

    fn pus_of(plan: &ShardPlan) -> Vec<u32> {
        plan.shards.iter().map(|s| s.pu).collect()
    }

    #[test]
    fn physical_one_shard_per_core() {
        let m = big();
        let plan = run(&m, &allowed(0..32), None, CpuAllocation::Physical);
        assert_eq!(plan.shards.len(), 16);
        let cores: BTreeSet<u32> = plan.shards.iter().map(|s| s.core).collect();
        assert_eq!(cores.len(), 16, "16 distinct cores");
        for (i, s) in plan.shards.iter().enumerate() {
            assert_eq!(s.shard, i);
            assert_eq!(s.core, i as u32, "ordered by core logical index");
            assert_eq!(s.pu, 2 * i as u32, "lowest PU of the core");
            assert_eq!(s.skipped_siblings, vec![2 * i as u32 + 1]);
            let node = if s.core < 8 { 0 } else { 1 };
            assert_eq!(s.numa_node, Some(node));
            assert_eq!(s.package, Some(node));
        }
        assert_eq!(plan.allocation, "physical");
        assert_eq!(plan.inputs.allowed_pus, (0..32).collect::<Vec<_>>());
        assert_eq!((plan.inputs.cores, plan.inputs.pus), (16, 32));
        assert!(plan.notes.is_empty());
    }

    #[test]
    fn all_takes_every_allowed_pu() {
        let m = big();
        let plan = run(&m, &allowed(0..32), None, CpuAllocation::All);
        assert_eq!(plan.shards.len(), 32);
        let pus: BTreeSet<u32> = pus_of(&plan).into_iter().collect();
        assert_eq!(pus, (0..32).collect());
        // Whole cores first, then their siblings.
        assert_eq!(&pus_of(&plan)[..3], &[0, 2, 4]);
        assert_eq!(plan.shards[16].pu, 1);
        assert!(plan.shards.iter().all(|s| s.skipped_siblings.is_empty()));
    }

    #[test]
    fn count_takes_the_first_physical_shards() {
        let m = big();
        let plan = run(&m, &allowed(0..32), None, CpuAllocation::Count(4));
        assert_eq!(pus_of(&plan), vec![0, 2, 4, 6]);
        assert_eq!(plan.shards[3].skipped_siblings, vec![7]);

        let err = plan_machine(&m, &allowed(0..32), None, &CpuAllocation::Count(17)).unwrap_err();
        let text = err.to_string();
        assert!(matches!(
            err,
            TopologyError::CountTooLarge {
                asked: 17,
                available: 16,
                ..
            }
        ));
        assert!(text.contains("17") && text.contains("16"), "{text}");

        let err = plan_machine(&m, &allowed(0..32), None, &CpuAllocation::Count(0)).unwrap_err();
        assert!(matches!(err, TopologyError::ZeroCount));
    }

    #[test]
    fn list_is_taken_as_given() {
        let m = big();
        let plan = run(
            &m,
            &allowed(0..32),
            None,
            CpuAllocation::List(vec![5, 16, 3]),
        );
        assert_eq!(pus_of(&plan), vec![5, 16, 3]);
        assert_eq!(plan.shards[0].core, 2);
        assert_eq!(plan.shards[0].skipped_siblings, vec![4]);
        assert_eq!(plan.shards[1].numa_node, Some(1));
        assert!(plan.notes.is_empty());

        // Two PUs of one core: allowed, neither is a "skipped" sibling, noted.
        let plan = run(&m, &allowed(0..32), None, CpuAllocation::List(vec![0, 1]));
        assert_eq!(pus_of(&plan), vec![0, 1]);
        assert!(plan.shards.iter().all(|s| s.skipped_siblings.is_empty()));
        assert_eq!(plan.notes.len(), 1);
        assert!(plan.notes[0].contains("share core 0"), "{:?}", plan.notes);
    }

    #[test]
    fn list_errors_name_the_pu_and_the_allowed_set() {
        let m = big();
        let a = allowed([1, 2, 3]);
        let err = plan_machine(&m, &a, None, &CpuAllocation::List(vec![2, 40])).unwrap_err();
        assert!(matches!(err, TopologyError::UnknownPu { pu: 40, .. }));
        let text = err.to_string();
        assert!(
            text.contains("PU 40") && text.contains("allowed: 1-3"),
            "{text}"
        );

        let err = plan_machine(&m, &a, None, &CpuAllocation::List(vec![0])).unwrap_err();
        assert!(matches!(err, TopologyError::PuNotAllowed { pu: 0, .. }));
        let text = err.to_string();
        assert!(text.contains("PU 0") && text.contains("1-3") && text.contains("test mask"));

        let err = plan_machine(&m, &a, None, &CpuAllocation::List(vec![2, 2])).unwrap_err();
        assert!(matches!(err, TopologyError::DuplicatePu { pu: 2 }));

        let err = plan_machine(&m, &a, None, &CpuAllocation::List(vec![])).unwrap_err();
        assert!(matches!(err, TopologyError::EmptyList));
    }

    #[test]
    fn narrowed_allowed_set() {
        let m = big();
        let a = allowed([1, 2, 3]);
        // Core 0 only has PU 1 allowed; core 1 has 2 and 3.
        let plan = run(&m, &a, None, CpuAllocation::Physical);
        assert_eq!(pus_of(&plan), vec![1, 2]);
        assert_eq!(plan.shards[0].core, 0);
        assert!(
            plan.shards[0].skipped_siblings.is_empty(),
            "PU 0 is not allowed"
        );
        assert_eq!(plan.shards[1].skipped_siblings, vec![3]);
        assert_eq!(plan.inputs.allowed_pus, vec![1, 2, 3]);

        let plan = run(&m, &a, None, CpuAllocation::All);
        assert_eq!(pus_of(&plan), vec![1, 2, 3]);

        let err = plan_machine(&m, &a, None, &CpuAllocation::Count(3)).unwrap_err();
        assert!(matches!(
            err,
            TopologyError::CountTooLarge {
                asked: 3,
                available: 2,
                ..
            }
        ));

        // PUs the machine lacks in the mask are ignored, not fatal.
        let plan = run(&m, &allowed([3, 99]), None, CpuAllocation::Physical);
        assert_eq!(pus_of(&plan), vec![3]);
        assert_eq!(plan.inputs.allowed_pus, vec![3]);
    }

    #[test]
    fn quota_limits_the_plan() {
        let m = big();
        let plan = run(&m, &allowed(0..32), Some(2), CpuAllocation::Physical);
        assert_eq!(pus_of(&plan), vec![0, 2]);
        assert_eq!(plan.inputs.cpu_quota, Some(2));
        assert!(
            plan.notes.iter().any(|n| n.contains("quota")),
            "{:?}",
            plan.notes
        );

        let plan = run(&m, &allowed(0..32), Some(2), CpuAllocation::All);
        assert_eq!(pus_of(&plan), vec![0, 2], "whole cores before siblings");

        let plan = run(&m, &allowed(0..32), Some(2), CpuAllocation::Count(2));
        assert_eq!(plan.shards.len(), 2);
        let err = plan_machine(&m, &allowed(0..32), Some(2), &CpuAllocation::Count(3)).unwrap_err();
        assert!(matches!(
            err,
            TopologyError::OverQuota {
                asked: 3,
                quota: 2,
                ..
            }
        ));
        assert!(err.to_string().contains("count(3)"));
        let err = plan_machine(
            &m,
            &allowed(0..32),
            Some(1),
            &CpuAllocation::List(vec![0, 2]),
        )
        .unwrap_err();
        assert!(matches!(
            err,
            TopologyError::OverQuota {
                asked: 2,
                quota: 1,
                ..
            }
        ));
    }

    #[test]
    fn invariants_hold_for_every_allowed_subset() {
        // 1 package × 4 cores × 2 PUs: all 255 non-empty allowed sets.
        let m = machine(1, 4, 2);
        for mask in 1u32..256 {
            let a = allowed((0..8).filter(|pu| mask & (1 << pu) != 0));
            for alloc in [CpuAllocation::Physical, CpuAllocation::All] {
                for quota in [None, Some(1), Some(3)] {
                    let plan = run(&m, &a, quota, alloc.clone());
                    let pus = pus_of(&plan);
                    let distinct: BTreeSet<u32> = pus.iter().copied().collect();
                    assert_eq!(distinct.len(), pus.len(), "a PU holds two shards");
                    assert!(pus.iter().all(|pu| a.pus.contains(pu)), "{mask:b}");
                    assert!(plan.shards.iter().enumerate().all(|(i, s)| s.shard == i));
                    let limit = quota.map_or(usize::MAX, |q| q as usize);
                    let wanted = match alloc {
                        CpuAllocation::All => a.pus.len(),
                        _ => a.pus.iter().map(|pu| pu / 2).collect::<BTreeSet<_>>().len(),
                    };
                    assert_eq!(pus.len(), wanted.min(limit), "{mask:b} {alloc:?} {quota:?}");
                    if alloc == CpuAllocation::Physical {
                        let cores: BTreeSet<u32> = plan.shards.iter().map(|s| s.core).collect();
                        assert_eq!(cores.len(), pus.len(), "two shards on one core");
                        for s in &plan.shards {
                            assert!(s.skipped_siblings.iter().all(|x| *x > s.pu));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn empty_plan_explains_inputs() {
        let m = big();
        let a = AllowedPus {
            pus: vec![40, 41],
            from: "process affinity mask 40-41".into(),
        };
        let err = plan_machine(&m, &a, Some(4), &CpuAllocation::Physical).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, TopologyError::EmptyPlan { .. }));
        assert!(text.contains("40-41") && text.contains("4 CPUs") && text.contains("0-31"));
    }

    #[test]
    fn pu_list_formatting() {
        assert_eq!(format_pu_list(&[0, 1, 2, 3, 8]), "0-3,8");
        assert_eq!(format_pu_list(&[0, 1, 5, 6, 7]), "0,1,5-7");
        assert_eq!(format_pu_list(&[5, 16, 3]), "5,16,3");
        assert_eq!(format_pu_list(&[]), "none");
    }

    #[test]
    fn table_and_json() {
        let m = big();
        let plan = run(&m, &allowed(0..32), None, CpuAllocation::Count(3));
        let table = plan.render_table();
        assert!(table.contains("allowed PUs: 0-31"), "{table}");
        assert!(table.contains("cpu quota:   none"), "{table}");
        assert!(
            table.contains("2 packages, 16 cores, 32 PUs, 2 NUMA nodes"),
            "{table}"
        );
        assert!(table.contains("count(3) -> 3 shards"), "{table}");
        assert!(
            table.contains("shard  pu  core  package  numa  skipped-siblings"),
            "{table}"
        );
        assert!(
            table
                .lines()
                .any(|l| l == "    2   4     2        0     0  5"),
            "{table}"
        );

        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(json["inputs"]["topology_source"]["kind"], "synthetic");
        assert_eq!(json["inputs"]["topology_source"]["value"], "test");
        assert_eq!(json["shards"][2]["skipped_siblings"][0], 5);
        assert_eq!(json["inputs"]["cpu_quota"], serde_json::Value::Null);
        let system = serde_json::to_value(TopologySource::System).unwrap();
        assert_eq!(system["kind"], "system");
    }
}
