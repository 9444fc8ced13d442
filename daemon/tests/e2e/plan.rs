//! `iggyd plan` on machines we do not have (hwloc synthetic topologies), on a
//! narrowed affinity mask (taskset) and under an injected cgroup CPU quota.

use iggyd_testkit::{iggyd_command, run};
use serde_json::Value;
use std::collections::BTreeSet;

const TWO_SOCKETS_SMT2: &str = "pack:2 [numa] core:8 pu:2";

fn plan_json(command: &mut std::process::Command) -> Value {
    let output = run(command.args(["plan", "--json"]));
    assert_eq!(output.code(), Some(0), "{output:?}");
    serde_json::from_str(&output.stdout).expect("plan json")
}

fn shards(plan: &Value) -> &Vec<Value> {
    plan["shards"].as_array().expect("shards array")
}

/// Proves `physical` on a 2 packages x 8 cores x 2 PUs machine gives 16
/// shards on 16 distinct cores, never two PUs of one core, with the right
/// NUMA node for each core, and reports the skipped siblings.
#[test]
fn physical_plan_on_a_two_socket_smt_machine() {
    let plan = plan_json(iggyd_command().env("HWLOC_SYNTHETIC", TWO_SOCKETS_SMT2));
    let shards = shards(&plan);
    assert_eq!(shards.len(), 16);
    let cores: BTreeSet<u64> = shards
        .iter()
        .map(|shard| shard["core"].as_u64().unwrap())
        .collect();
    assert_eq!(cores.len(), 16, "distinct cores");
    let pus: BTreeSet<u64> = shards
        .iter()
        .map(|shard| shard["pu"].as_u64().unwrap())
        .collect();
    assert_eq!(pus.len(), 16);
    for shard in shards {
        let pu = shard["pu"].as_u64().unwrap();
        let core = shard["core"].as_u64().unwrap();
        // hwloc numbers synthetic PUs core by core: core c holds PUs 2c, 2c+1.
        assert_eq!(pu / 2, core, "lowest PU of its core: {shard}");
        assert_eq!(shard["numa_node"].as_u64().unwrap(), core / 8, "{shard}");
        assert_eq!(
            shard["skipped_siblings"].as_array().unwrap().len(),
            1,
            "{shard}"
        );
    }
    assert_eq!(plan["inputs"]["numa_nodes"].as_u64(), Some(2));
}

/// Proves `all` takes every PU, siblings included.
#[test]
fn all_plan_takes_every_pu() {
    let plan = plan_json(
        iggyd_command()
            .env("HWLOC_SYNTHETIC", TWO_SOCKETS_SMT2)
            .env("IGGYD_SHARDING__CPU_ALLOCATION", "all"),
    );
    assert_eq!(shards(&plan).len(), 32);
}

/// Proves a cgroup quota of 2 CPUs (injected cgroup directory) caps the plan
/// at 2 shards.
#[test]
fn a_two_cpu_quota_gives_two_shards() {
    let cgroup = tempfile::tempdir().unwrap();
    std::fs::write(cgroup.path().join("cpu.max"), "200000 100000\n").unwrap();
    let plan = plan_json(
        iggyd_command()
            .env("HWLOC_SYNTHETIC", TWO_SOCKETS_SMT2)
            .arg("--cgroup-dir")
            .arg(cgroup.path()),
    );
    assert_eq!(shards(&plan).len(), 2);
    assert_eq!(plan["inputs"]["cpu_quota"].as_u64(), Some(2));
}

/// Proves the affinity mask narrows the plan on the real machine:
/// `taskset -c 1 iggyd plan` plans exactly one shard, on PU 1.
#[test]
fn taskset_narrows_the_plan_to_the_allowed_pu() {
    let online = std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1);
    if online < 2 {
        return iggyd_testkit::skip("this machine has one PU, there is nothing to narrow");
    }
    // The kit's scrubbed environment, for `taskset` running the daemon.
    let mut command = iggyd_testkit::daemon::scrubbed_command(std::path::Path::new("taskset"));
    command.args(["-c", "1", env!("CARGO_BIN_EXE_iggyd")]);
    let plan = plan_json(&mut command);
    let shards = shards(&plan);
    assert_eq!(shards.len(), 1, "{plan}");
    assert_eq!(shards[0]["pu"].as_u64(), Some(1));
}

/// Proves the human table carries the inputs and one row per shard.
#[test]
fn plan_table_names_its_inputs() {
    let output = run(iggyd_command()
        .env("HWLOC_SYNTHETIC", TWO_SOCKETS_SMT2)
        .arg("plan"));
    assert_eq!(output.code(), Some(0), "{output:?}");
    assert!(
        output.stdout.to_lowercase().contains("synthetic"),
        "{}",
        output.stdout
    );
    assert!(
        output.stdout.to_lowercase().contains("quota"),
        "{}",
        output.stdout
    );
}

/// Proves an explicit PU that does not exist is a clear error, not a panic.
#[test]
fn a_pu_that_does_not_exist_is_refused() {
    let output = run(iggyd_command()
        .env("HWLOC_SYNTHETIC", TWO_SOCKETS_SMT2)
        .env("IGGYD_SHARDING__CPU_ALLOCATION", "[0, 99]")
        .args(["plan"]));
    assert_ne!(output.code(), Some(0), "{output:?}");
    assert!(output.stderr.contains("99"), "{}", output.stderr);
    assert!(!output.stderr.contains("panicked"), "{}", output.stderr);
}

/// Proves a machine with more cores than one daemon can run shards (2 × 128
/// cores) is refused at start with exit 78 and a message naming the bound
/// and the knob, instead of an assertion in every shard thread; `255`
/// on the same machine plans 255 shards.
#[test]
fn more_than_255_shards_are_refused_with_exit_78() {
    let machine = "pack:2 core:128 pu:1";
    let dir = tempfile::tempdir().unwrap();
    let output = run(iggyd_command()
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("HWLOC_SYNTHETIC", machine));
    assert_eq!(output.code(), Some(78), "{output:?}");
    assert!(
        output.stderr.contains("256 shards") && output.stderr.contains("cpu_allocation = 255"),
        "{}",
        output.stderr
    );
    assert!(!output.stderr.contains("panicked"), "{}", output.stderr);
    let plan = plan_json(
        iggyd_command()
            .env("HWLOC_SYNTHETIC", machine)
            .env("IGGYD_SHARDING__CPU_ALLOCATION", "255"),
    );
    assert_eq!(shards(&plan).len(), 255);
}
