//! Start, readiness, stop and start-up refusals of the real daemon.

use iggyd_testkit::{TestDaemon, iggyd_command, run};
use std::time::Duration;

/// Proves the daemon becomes ready (READY=1 with the bound address in
/// STATUS=), accepts TCP connections on that address, and stops cleanly with
/// exit 0 and STOPPING=1 within a second of SIGTERM.
#[test]
fn ready_then_sigterm_stops_cleanly_within_a_second() {
    let mut daemon = TestDaemon::start();
    assert_ne!(daemon.address.port(), 0);
    std::net::TcpStream::connect(daemon.address).expect("listener accepts");
    let log = daemon.log();
    assert!(log.contains("shard plan"), "plan is logged:\n{log}");
    assert!(
        log.contains("shard ready"),
        "each shard logs its driver:\n{log}"
    );
    let (status, took) = daemon.stop();
    assert!(status.success(), "exit status {status}");
    assert!(took < Duration::from_secs(1), "SIGTERM took {took:?}");
    daemon.wait_notification("STOPPING=1", Duration::from_secs(1));
    assert!(daemon.log().contains("stopped cleanly"));
    daemon.assert_clean_log();
}

/// Proves every planned shard is a named thread (`shard-N`), visible to
/// `top -H`/`ps -L`, one per allowed physical core of this machine.
#[test]
fn shards_are_named_threads_one_per_planned_core() {
    let daemon = TestDaemon::start();
    let plan = run(iggyd_command().args(["plan", "--json"]));
    let plan: serde_json::Value = serde_json::from_str(&plan.stdout).expect("plan json");
    let planned = plan["shards"].as_array().expect("shards").len();
    let tasks = std::fs::read_dir(format!("/proc/{}/task", daemon.pid())).expect("tasks");
    let mut names: Vec<String> = tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .filter(|name| name.starts_with("shard-"))
        .collect();
    names.sort();
    let expected: Vec<String> = (0..planned).map(|shard| format!("shard-{shard}")).collect();
    assert_eq!(names, expected);
}

/// Proves an impossible memory budget is refused before any shard starts:
/// exit 78, one message naming the numbers and the knobs, no panic.
#[test]
fn impossible_memory_budget_exits_78_with_the_knobs() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(iggyd_command()
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("IGGYD_MEMORY__BUDGET", "64 TiB"));
    assert_eq!(output.code(), Some(78), "{output:?}");
    assert!(output.stderr.contains("memory.budget"), "{}", output.stderr);
    assert!(output.stderr.contains("MiB"), "{}", output.stderr);
    assert!(!output.stderr.contains("panicked"), "{}", output.stderr);
    assert!(
        !output.stderr.contains("shard ready"),
        "no shard may start: {}",
        output.stderr
    );

    // A budget that fits the machine but not the shards is refused too.
    let output = run(iggyd_command()
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("IGGYD_MEMORY__BUDGET", "2 MiB"));
    assert_eq!(output.code(), Some(78), "{output:?}");
    assert!(
        output.stderr.contains("sharding.cpu_allocation"),
        "{}",
        output.stderr
    );
}

/// Proves two daemons never share a data directory: the second one exits 78
/// naming the lock, and the first keeps serving.
#[test]
fn a_second_daemon_on_the_same_data_dir_is_refused() {
    let mut first = TestDaemon::start();
    let output = run(iggyd_command()
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(first.data_dir()));
    assert_eq!(output.code(), Some(78), "{output:?}");
    assert!(
        output.stderr.contains("already in use"),
        "{}",
        output.stderr
    );
    std::net::TcpStream::connect(first.address).expect("first daemon still serves");
    let (status, _) = first.stop();
    assert!(status.success());
}

/// Proves a port that is already taken is a start-up error, not a hang.
#[test]
fn a_taken_port_is_a_clear_start_up_error() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let output = run(iggyd_command()
        .args(["--listen", &taken, "--data-dir"])
        .arg(dir.path()));
    assert_eq!(output.code(), Some(1), "{output:?}");
    assert!(output.stderr.contains(&taken), "{}", output.stderr);
}

/// Proves invalid configuration exits 78 with one line naming the key, for
/// both the `config` subcommand and a daemon start.
#[test]
fn invalid_configuration_exits_78_naming_the_key() {
    let output = run(iggyd_command()
        .arg("config")
        .env("IGGYD_LOGGING__ROTATION_CHECK_INTERVAL", "0 s"));
    assert_eq!(output.code(), Some(78), "{output:?}");
    assert!(
        output.stderr.contains("logging.rotation_check_interval"),
        "{}",
        output.stderr
    );
    assert_eq!(
        output.stderr.trim().lines().count(),
        1,
        "one line: {}",
        output.stderr
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("iggyd.toml");
    std::fs::write(&file, "[tcp]\nadress = \"127.0.0.1:1\"\n").unwrap();
    let output = run(iggyd_command().arg("--config").arg(&file).arg("config"));
    assert_eq!(output.code(), Some(78), "{output:?}");
    assert!(
        output.stderr.contains("address"),
        "did you mean: {}",
        output.stderr
    );

    let output = run(iggyd_command().arg("config"));
    assert_eq!(output.code(), Some(0), "{output:?}");
    assert!(
        output.stdout.contains("127.0.0.1:8090"),
        "{}",
        output.stdout
    );
}

/// One refused cluster configuration: the file, at most one environment
/// variable over it, and the key the error must name.
struct Refusal {
    toml: String,
    env: Option<(&'static str, &'static str)>,
    key: &'static str,
}

/// A three-node cluster as node 1 sees it, on port 8090.
const CLUSTER: &str = "[cluster]\nenabled = true\nname = \"orders\"\nnode_id = 1\n\
    [[cluster.nodes]]\nid = 1\naddress = \"127.0.0.1:8090\"\nreplication_address = \"127.0.0.1:8091\"\n\
    [[cluster.nodes]]\nid = 2\naddress = \"127.0.0.2:8090\"\nreplication_address = \"127.0.0.2:8091\"\n\
    [[cluster.nodes]]\nid = 3\naddress = \"127.0.0.3:8090\"\nreplication_address = \"127.0.0.3:8091\"\n\
    [cluster.tls]\nca_file = \"/ca.pem\"\ncert_file = \"/node-1.pem\"\nkey_file = \"/node-1.key\"\n";

/// Proves a `[cluster]` that cannot work stops `iggyd config` and a daemon
/// start with exit 78 and one stderr line naming the key (a node's field by
/// its index from 0), before any shard starts, for refusals from a file,
/// the environment and a flag; and that a valid cluster prints as
/// `[[cluster.nodes]]` sections.
#[test]
fn invalid_cluster_configuration_exits_78_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("iggyd.toml");
    let cases = [
        Refusal {
            toml: "[cluster]\nenabled = true\n".to_string(),
            env: None,
            key: "cluster.nodes",
        },
        Refusal {
            toml: CLUSTER.replace("id = 3", "id = 2"),
            env: None,
            key: "cluster.nodes[2].id",
        },
        Refusal {
            toml: CLUSTER.replace("id = 2\n", "id = 2\nname = \"node-1\"\n"),
            env: None,
            key: "cluster.nodes[1].name",
        },
        Refusal {
            toml: CLUSTER.replace("127.0.0.3:8091", "127.0.0.2:8091"),
            env: None,
            key: "cluster.nodes[2].replication_address",
        },
        Refusal {
            toml: CLUSTER.replace("\"127.0.0.2:8090\"", "\"0.0.0.0:8090\""),
            env: None,
            key: "cluster.nodes[1].address",
        },
        Refusal {
            toml: CLUSTER.replace("node_id = 1", "node_id = 4"),
            env: None,
            key: "cluster.node_id",
        },
        Refusal {
            toml: CLUSTER.to_string(),
            env: Some(("IGGYD_CLUSTER__HEARTBEAT_INTERVAL", "500 ms")),
            key: "cluster.heartbeat_interval",
        },
        Refusal {
            toml: CLUSTER.replace("ca_file", "#ca_file"),
            env: None,
            key: "cluster.tls.ca_file",
        },
        Refusal {
            toml: CLUSTER.to_string(),
            env: Some((
                "IGGYD_CLUSTER__NODES",
                "[{id=1,address=\"127.0.0.1:8090\",replication_address=\"127.0.0.1:8091\"},\
                 {id=2,address=\"127.0.0.2:8090\",replication_address=\"127.0.0.2:8091\"}]",
            )),
            key: "cluster.nodes",
        },
        Refusal {
            toml: CLUSTER.replace("\naddress = \"127.0.0.2", "\nadress = \"127.0.0.2"),
            env: None,
            key: "cluster.nodes[1].adress",
        },
    ];
    for Refusal { toml, env, key } in cases {
        std::fs::write(&file, toml).unwrap();
        let output = run(iggyd_command()
            .arg("--config")
            .arg(&file)
            .arg("config")
            .envs(env));
        assert_eq!(output.code(), Some(78), "{key}: {output:?}");
        assert!(
            output.stderr.contains(&format!("config key `{key}`")),
            "{key}: {}",
            output.stderr
        );
        assert_eq!(
            output.stderr.trim().lines().count(),
            1,
            "one line: {}",
            output.stderr
        );
    }

    // A start: clients would be sent to port 8090, but `--listen` takes
    // another port; both keys are named, and no shard starts.
    std::fs::write(&file, CLUSTER).unwrap();
    let output = run(iggyd_command()
        .arg("--config")
        .arg(&file)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data")));
    assert_eq!(output.code(), Some(78), "{output:?}");
    assert!(
        output
            .stderr
            .contains("config key `cluster.nodes[0].address` from file `"),
        "{}",
        output.stderr
    );
    assert!(
        output
            .stderr
            .contains("the port of `tcp.address` (\"127.0.0.1:0\" from flag `--listen`)"),
        "{}",
        output.stderr
    );
    assert!(!output.stderr.contains("shard ready"), "{}", output.stderr);
    assert!(!output.stderr.contains("panicked"), "{}", output.stderr);

    let output = run(iggyd_command().arg("--config").arg(&file).arg("config"));
    assert_eq!(output.code(), Some(0), "{output:?}");
    assert!(
        output
            .stdout
            .contains("\n[[cluster.nodes]]\nid = 3\nname = \"node-3\"\n"),
        "{}",
        output.stdout
    );
}

/// A daemon with this `shutdown.drain_timeout` whose shard 0 is frozen
/// (fault injection), so a graceful stop can never finish.
fn frozen_daemon(drain_timeout: &str) -> TestDaemon {
    let mut daemon = TestDaemon::builder()
        .env("IGGYD_SHUTDOWN__DRAIN_TIMEOUT", drain_timeout)
        .spawn();
    daemon.allow_log("freez");
    crate::control::freeze_shard(&daemon, 0);
    daemon
}

/// Proves the drain timeout ends the daemon through `boot`, not below it: a
/// frozen shard never finishes draining, so with a 1 s
/// `shutdown.drain_timeout` SIGTERM ends in exit code 1 after about a
/// second, and the reason (the timeout and the stuck shard) is logged and
/// sent as `STATUS=failed: …`.
#[test]
fn drain_timeout_exits_through_boot_with_a_failure() {
    let mut daemon = frozen_daemon("1 s");
    daemon.allow_log("drain timeout");
    let (status, took) = daemon.stop();
    assert_eq!(status.code(), Some(1), "exit status {status}");
    assert!(took >= Duration::from_millis(900), "stopped after {took:?}");
    assert!(took < Duration::from_secs(10), "stopped after {took:?}");
    let failed = daemon.wait_notification("STATUS=failed: drain timeout", Duration::from_secs(1));
    assert!(failed.contains("shard 0"), "{failed}");
    assert!(
        daemon.log().contains("iggyd: drain timeout: shard 0"),
        "{}",
        daemon.log()
    );
    daemon.assert_clean_log();
}

/// Proves a second SIGTERM during the drain ends the daemon at once with
/// exit code 1 through `boot` (logged, `STATUS=failed: second signal…`),
/// long before the 30 s drain timeout runs out on a frozen shard.
#[test]
fn second_signal_during_the_drain_exits_at_once() {
    let mut daemon = frozen_daemon("30 s");
    daemon.allow_log("second signal");
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    daemon.wait_notification("STOPPING=1", Duration::from_secs(5));
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    let (status, took) = daemon.wait_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "exit status {status}");
    assert!(took < Duration::from_secs(5), "exited after {took:?}");
    daemon.wait_notification("STATUS=failed: second signal", Duration::from_secs(1));
    assert!(
        daemon
            .log()
            .contains("iggyd: second signal (SIGTERM) during shutdown"),
        "{}",
        daemon.log()
    );
    daemon.assert_clean_log();
}
