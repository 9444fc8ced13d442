//! `iggyd doctor` on the real binary, on this host and on hosts made to fail
//! each check: a low open-files limit (prlimit), io_uring refused by a
//! seccomp filter, a file system without O_DIRECT and one in memory, a
//! throttled cgroup for the write and fsync latency, a nearly full disk and
//! retention larger than the disk, a CPU mask the plan cannot use, a memory
//! budget beyond the machine, an invalid configuration, huge pages and a slow
//! clock source as sysfs shows them, and a bare or hardened sandbox under
//! "systemd". Each change lives in the test's own process tree: mounts in a
//! private mount namespace (`unshare -m`, gone with it), limits and filters
//! in the child only, the cgroup and the host tmpfs removed by a guard, so
//! the host is as it was also when a test fails. The global sysctl
//! `kernel.io_uring_disabled` is not flipped (other work on the machine
//! would lose io_uring meanwhile): the doctor is shown the value through a
//! bind mount while a seccomp filter makes the kernel refuse for real.

use crate::messages::logged_in;
use iggyd::doctor::CHECKS;
use iggyd_testkit::daemon::scrubbed_command;
use iggyd_testkit::wire::{Identifier, OptionEntry};
use iggyd_testkit::{Output, TestDaemon, iggyd_command, run};
use serde_json::Value;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_iggyd")
}

/// `doctor --json` on `data_dir` with a latency probe of `probe`.
fn doctor_args(data_dir: &Path, probe: &str) -> Vec<OsString> {
    let mut args: Vec<OsString> = ["doctor", "--json", "--probe-time", probe, "--data-dir"]
        .iter()
        .map(OsString::from)
        .collect();
    args.push(data_dir.as_os_str().to_owned());
    args
}

/// `iggyd doctor` with a `probe` long latency probe, run through `wrapper`
/// (a program and its arguments, put before the binary), with the kit's
/// scrubbed environment and no `INVOCATION_ID` (the test runner may itself
/// run under systemd).
fn wrapped_probe(wrapper: &[&str], data_dir: &Path, probe: &str) -> Command {
    let (program, args) = wrapper.split_first().expect("a wrapper program");
    let mut command = scrubbed_command(Path::new(program));
    command
        .args(args)
        .arg(binary())
        .args(doctor_args(data_dir, probe))
        .env_remove("INVOCATION_ID");
    command
}

/// [`wrapped_probe`] with a 100 ms probe.
fn wrapped(wrapper: &[&str], data_dir: &Path) -> Command {
    wrapped_probe(wrapper, data_dir, "100ms")
}

/// `iggyd doctor` itself, 100 ms probe.
fn plain(data_dir: &Path) -> Command {
    let mut command = iggyd_command();
    command
        .args(doctor_args(data_dir, "100ms"))
        .env_remove("INVOCATION_ID");
    command
}

/// `iggyd doctor` run by the shell `script` (which ends by exec-ing
/// `"$0" "$@"`, the doctor and its arguments) in a new mount namespace:
/// whatever the script mounts vanishes with the namespace.
fn shell_in_mount_namespace(script: &str, data_dir: &Path) -> Command {
    wrapped(
        &[
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
        ],
        data_dir,
    )
}

/// `iggyd doctor` in a new mount namespace, after the shell commands
/// `setup` ran there.
fn in_mount_namespace(setup: &str, data_dir: &Path) -> Command {
    shell_in_mount_namespace(&format!("{setup} && exec \"$0\" \"$@\""), data_dir)
}

/// Whether this process may make mount namespaces and mount in them.
fn namespaces_work() -> bool {
    Command::new("unshare")
        .args([
            "-m",
            "--propagation",
            "private",
            "mount",
            "-t",
            "tmpfs",
            "t",
            "/mnt",
        ])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A path for a shell command line, single-quoted.
fn quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}

/// A finished doctor run: its exit code and its parsed JSON.
struct Report {
    output: Output,
    json: Value,
}

impl Report {
    fn of(command: &mut Command) -> Report {
        let output = run(command);
        let json = serde_json::from_str(&output.stdout)
            .unwrap_or_else(|error| panic!("doctor --json: {error}\n{output:?}"));
        Report { output, json }
    }

    fn code(&self) -> Option<i32> {
        self.output.code()
    }

    fn check(&self, id: &str) -> &Value {
        self.json["checks"]
            .as_array()
            .and_then(|checks| checks.iter().find(|check| check["id"] == id))
            .unwrap_or_else(|| panic!("no check {id}: {}", self.json))
    }

    fn status(&self, id: &str) -> &str {
        self.check(id)["status"].as_str().unwrap_or_default()
    }

    fn measured(&self, id: &str) -> &str {
        self.check(id)["measured"].as_str().unwrap_or_default()
    }

    /// Fails with the whole report unless check `id` has `status` and its
    /// figure contains every one of `words`.
    fn expect(&self, id: &str, status: &str, words: &[&str]) {
        let check = self.check(id);
        assert_eq!(self.status(id), status, "{id}: {check:#}");
        for word in words {
            assert!(
                self.measured(id).contains(word),
                "{id} lacks {word:?}: {check:#}"
            );
        }
        if status == "pass" || status == "skip" {
            assert!(check["fix"].is_null(), "{check:#}");
        } else {
            assert!(
                check["fix"].as_str().is_some_and(|fix| !fix.is_empty()),
                "{check:#}"
            );
        }
    }
}

/// The names and sizes of every file under `dir`, sorted.
fn listing(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        for entry in std::fs::read_dir(&path).expect("read_dir").flatten() {
            let meta = entry.metadata().expect("metadata");
            if meta.is_dir() {
                stack.push(entry.path());
            }
            found.push((entry.path(), meta.len()));
        }
    }
    found.sort();
    found
}

/// Proves a run on this host reports every check once, in order, with a
/// status, a figure and a fix exactly when not passing; that the exit code
/// is the worst status; that the human form says the same in one line a
/// check; that it stays well under 10 s with the default 2 s probe; and
/// that the data directory (with a daemon's files in it) is left exactly
/// as it was.
#[test]
fn a_run_reports_every_check_and_changes_nothing() {
    let mut daemon = TestDaemon::start();
    daemon.stop();
    let data_dir = daemon.data_dir();
    let before = listing(&data_dir);

    let started = Instant::now();
    let mut command = iggyd_command();
    command
        .args(["doctor", "--json", "--data-dir"])
        .arg(&data_dir)
        .env_remove("INVOCATION_ID");
    let report = Report::of(&mut command);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert_eq!(
        listing(&data_dir),
        before,
        "the doctor changed the data directory"
    );

    let checks = report.json["checks"].as_array().expect("checks");
    let ids: Vec<&str> = checks.iter().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(ids, CHECKS);
    let mut worst = 0;
    for check in checks {
        let status = check["status"].as_str().unwrap_or_default();
        let rank = ["skip", "pass", "warn", "fail"]
            .iter()
            .position(|known| *known == status)
            .unwrap_or_else(|| panic!("status {status:?}: {check:#}"));
        worst = worst.max(rank);
        assert!(
            check["measured"].as_str().is_some_and(|m| !m.is_empty()),
            "{check:#}"
        );
        assert!(check["values"].is_object(), "{check:#}");
        assert_eq!(check["fix"].is_null(), rank <= 1, "{check:#}");
    }
    let expected_code = [0, 0, 1, 2][worst];
    assert_eq!(report.code(), Some(expected_code), "{:#}", report.json);
    assert_eq!(report.json["exit_code"], expected_code);
    assert_eq!(report.json["version"], 1);
    // The latency probe wrote for about two seconds.
    let latency = report.check("write_latency");
    assert!(
        latency["values"]["samples"].as_u64().unwrap_or(0) > 0,
        "{latency:#}"
    );
    // Not started by systemd: nothing to read.
    report.expect("systemd_hardening", "skip", &["INVOCATION_ID"]);

    let text = run(iggyd_command()
        .args(["doctor", "--probe-time", "100ms", "--data-dir"])
        .arg(&data_dir)
        .env_remove("INVOCATION_ID"));
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines.len(), CHECKS.len() + 1, "{}", text.stdout);
    for (line, id) in lines.iter().zip(CHECKS) {
        let mut words = line.split_whitespace();
        let status = words.next().unwrap_or_default();
        assert!(["PASS", "WARN", "FAIL", "SKIP"].contains(&status), "{line}");
        assert_eq!(words.next(), Some(id), "{line}");
        assert_eq!(
            line.contains("; fix: "),
            ["WARN", "FAIL"].contains(&status),
            "{line}"
        );
    }
    assert!(
        lines[CHECKS.len()].starts_with("13 checks:"),
        "{}",
        text.stdout
    );
    assert_eq!(listing(&data_dir), before);
}

/// Proves an invalid configuration fails (exit 2) naming its key, skips
/// the checks that need it, and still runs those that do not.
#[test]
fn an_invalid_configuration_fails_and_skips_what_needs_it() {
    let dir = tempfile::tempdir().unwrap();
    let report = Report::of(plain(dir.path()).env("IGGYD_MEMORY__BUDGET", "lots"));
    assert_eq!(report.code(), Some(2));
    report.expect("config", "fail", &["memory.budget", "lots"]);
    for id in ["o_direct", "write_latency", "disk_space", "shard_plan"] {
        report.expect(id, "skip", &["configuration is invalid"]);
    }
    assert_ne!(report.status("io_uring"), "skip");
    assert_ne!(report.status("clock"), "skip");
}

/// Proves a file system that refuses O_DIRECT warns (ramfs: tmpfs takes
/// O_DIRECT since Linux 6.6), the probe then writes buffered, and a file
/// system in memory (ramfs, tmpfs) fails the device check.
#[test]
fn a_file_system_without_o_direct_warns_and_one_in_memory_fails() {
    if !namespaces_work() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("ram");
    std::fs::create_dir(&mount).unwrap();
    let setup = format!("mount -t ramfs ramfs {}", quoted(&mount));
    let report = Report::of(&mut in_mount_namespace(&setup, &mount));
    assert_eq!(report.code(), Some(2), "{:#}", report.json);
    report.expect("o_direct", "warn", &["ramfs", "refuses O_DIRECT"]);
    assert_eq!(report.check("write_latency")["values"]["direct"], false);
    assert!(
        report.measured("write_latency").contains("buffered"),
        "{:#}",
        report.json
    );
    report.expect("write_cache", "fail", &["ramfs", "memory"]);
    report.expect("disk_space", "warn", &["no size"]);

    let setup = format!("mount -t tmpfs -o size=32m tmpfs {}", quoted(&mount));
    let report = Report::of(&mut in_mount_namespace(&setup, &mount));
    report.expect("write_cache", "fail", &["tmpfs", "memory"]);
    // The probe's file stays within a quarter of the 32 MiB: no ENOSPC.
    let latency = report.check("write_latency");
    assert!(
        latency["values"]["samples"].as_u64().unwrap_or(0) > 0,
        "{latency:#}"
    );
    assert!(
        std::fs::read_dir(&mount).unwrap().next().is_none(),
        "the namespace's mounts never reached the host"
    );
}

/// Proves a low open-files limit fails (no room for clients after the
/// descriptors kept for storage) and a `limits.max_connections` larger than
/// what fits warns.
#[test]
fn a_low_descriptor_limit_fails_and_an_oversized_cap_warns() {
    let dir = tempfile::tempdir().unwrap();
    let report = Report::of(&mut wrapped(&["prlimit", "--nofile=100:100"], dir.path()));
    assert_eq!(report.code(), Some(2));
    report.expect("descriptors", "fail", &["RLIMIT_NOFILE 100 soft, 100 hard"]);
    assert_eq!(report.check("descriptors")["values"]["for_clients"], 0);

    let report = Report::of(
        wrapped(&["prlimit", "--nofile=1000:1000"], dir.path())
            .env("IGGYD_LIMITS__MAX_CONNECTIONS", "5000"),
    );
    report.expect("descriptors", "warn", &["limits.max_connections = 5000"]);
}

/// Makes `command`'s process, and all it execs, run under a seccomp filter
/// that answers `io_uring_setup` with EPERM (as container runtimes' default
/// profiles do), or allows every call (`deny_io_uring = false`: a filter
/// all the same).
fn seccomp(command: &mut Command, deny_io_uring: bool) {
    use std::os::unix::process::CommandExt;
    let statement = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let allow = libc::SECCOMP_RET_ALLOW;
    let io_uring = if deny_io_uring {
        libc::SECCOMP_RET_ERRNO | libc::EPERM as u32
    } else {
        allow
    };
    let program = [
        // Load seccomp_data.nr (offset 0).
        statement(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_io_uring_setup as u32,
        },
        statement(libc::BPF_RET | libc::BPF_K, io_uring),
        statement(libc::BPF_RET | libc::BPF_K, allow),
    ];
    // SAFETY: the closure runs in the forked child before exec and only
    // calls prctl, which is async-signal-safe; `program` is a copy it owns.
    unsafe {
        command.pre_exec(move || {
            let fprog = libc::sock_fprog {
                len: program.len() as u16,
                filter: program.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &fprog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Proves io_uring refused by a seccomp filter warns (the shards would use
/// epoll) naming the filter, fails when `sharding.require_io_uring` is set,
/// and that locked memory is then not checked.
#[test]
fn io_uring_blocked_by_seccomp_warns_and_fails_when_required() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = plain(dir.path());
    seccomp(&mut command, true);
    let report = Report::of(&mut command);
    report.expect(
        "io_uring",
        "warn",
        &["unavailable", "seccomp", "EPERM", "epoll"],
    );
    assert!(
        report.check("io_uring")["fix"]
            .as_str()
            .unwrap()
            .contains("io_uring_setup")
    );
    report.expect("memlock", "skip", &["io_uring is unavailable"]);

    let mut command = plain(dir.path());
    command.env("IGGYD_SHARDING__REQUIRE_IO_URING", "true");
    seccomp(&mut command, true);
    let report = Report::of(&mut command);
    assert_eq!(report.code(), Some(2));
    report.expect("io_uring", "fail", &["seccomp", "require_io_uring"]);
}

/// Proves `kernel.io_uring_disabled = 2` is named when io_uring_setup is
/// refused with it: the kernel refuses (seccomp, EPERM, as the sysctl
/// does) while the doctor reads 2 from the sysctl's file (a bind mount in
/// its own namespace; the real sysctl is global and stays as it is).
#[test]
fn the_io_uring_disabled_sysctl_is_named() {
    if !namespaces_work() {
        return;
    }
    let sysctl = Path::new("/proc/sys/kernel/io_uring_disabled");
    if !sysctl.exists() {
        return iggyd_testkit::skip("doctor: this kernel (before 6.6) has no io_uring_disabled");
    }
    let dir = tempfile::tempdir().unwrap();
    let value = dir.path().join("io_uring_disabled");
    std::fs::write(&value, "2\n").unwrap();
    let setup = format!("mount --bind {} {}", quoted(&value), quoted(sysctl));
    let mut command = in_mount_namespace(&setup, dir.path());
    seccomp(&mut command, true);
    let report = Report::of(&mut command);
    report.expect("io_uring", "warn", &["kernel.io_uring_disabled = 2"]);
    assert!(
        report.check("io_uring")["fix"]
            .as_str()
            .unwrap()
            .contains("sysctl -w")
    );
    assert_eq!(report.check("io_uring")["values"]["io_uring_disabled"], 2);
}

/// Proves locked memory is measured, not inferred: with RLIMIT_MEMLOCK at
/// 0 the doctor creates one ring a shard; on kernels from 5.12 (rings are
/// charged to the memory cgroup) they are created and the check passes,
/// before 5.12 the first ring fails and so does the check.
#[test]
fn locked_memory_is_measured_by_creating_the_rings() {
    let dir = tempfile::tempdir().unwrap();
    let report = Report::of(&mut wrapped(&["prlimit", "--memlock=0:0"], dir.path()));
    if report.status("io_uring") != "pass" {
        return iggyd_testkit::skip("doctor: io_uring is unavailable here");
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut parts = release.trim().split(['.', '-']);
    let major: u32 = parts.next().unwrap().parse().unwrap();
    let minor: u32 = parts.next().unwrap().parse().unwrap();
    let memlock = report.check("memlock");
    let shards = report.check("shard_plan")["values"]["shards"].clone();
    assert_eq!(memlock["values"]["soft_bytes"], 0, "{memlock:#}");
    assert_eq!(memlock["values"]["rings"], shards, "{memlock:#}");
    if (major, minor) >= (5, 12) {
        report.expect(
            "memlock",
            "pass",
            &["RLIMIT_MEMLOCK 0 B", "created at once"],
        );
        assert_eq!(memlock["values"]["rings_created"], shards);
    } else {
        report.expect("memlock", "fail", &["RLIMIT_MEMLOCK 0 B"]);
    }
}

/// A cgroup whose writes to one block device are held to a few I/Os a
/// second (v2 `io.max` when the io controller is on, else v1
/// `blkio.throttle.write_iops_device`); removed when dropped.
struct Throttle {
    dir: PathBuf,
}

impl Throttle {
    fn new(device: &str, iops: u32) -> Result<Throttle, String> {
        let name = format!("iggyd-doctor-test-{}", std::process::id());
        let v2 = Path::new("/sys/fs/cgroup");
        let controllers = std::fs::read_to_string(v2.join("cgroup.subtree_control"));
        let (dir, file, line) = if controllers.is_ok_and(|text| text.contains("io")) {
            (v2.join(&name), "io.max", format!("{device} wiops={iops}"))
        } else if Path::new("/sys/fs/cgroup/blkio").is_dir() {
            (
                Path::new("/sys/fs/cgroup/blkio").join(&name),
                "blkio.throttle.write_iops_device",
                format!("{device} {iops}"),
            )
        } else {
            return Err("neither the v2 io controller nor v1 blkio is available".into());
        };
        std::fs::create_dir(&dir).map_err(|error| format!("{}: {error}", dir.display()))?;
        let throttle = Throttle { dir };
        std::fs::write(throttle.dir.join(file), &line)
            .map_err(|error| format!("{file} <- {line}: {error}"))?;
        Ok(throttle)
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        // The doctor has exited: the cgroup is empty and can go.
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// `major:minor` of the whole disk under `path` (a partition's parent), or
/// `None` when no block device holds it.
fn disk_of(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).ok()?.dev();
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    if major == 0 {
        return None;
    }
    let sys = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    let disk = if sys.join("partition").exists() {
        sys.parent()?.to_path_buf()
    } else {
        sys
    };
    Some(
        std::fs::read_to_string(disk.join("dev"))
            .ok()?
            .trim()
            .to_string(),
    )
}

/// Proves a device held to 10 writes a second (flushes count) fails the
/// latency probe: the fdatasync p99 is tens of milliseconds, above what
/// `persisted` tolerates.
#[test]
fn a_throttled_cgroup_fails_the_latency_probe() {
    let dir = tempfile::tempdir().unwrap();
    let Some(device) = disk_of(dir.path()) else {
        return iggyd_testkit::skip("doctor: the temp directory is on no block device");
    };
    let throttle = match Throttle::new(&device, 10) {
        Ok(throttle) => throttle,
        Err(why) => return iggyd_testkit::skip(&format!("doctor: no throttled cgroup: {why}")),
    };
    let procs = quoted(&throttle.dir.join("cgroup.procs"));
    let script = format!("echo $$ > {procs} && exec \"$0\" \"$@\"");
    let report = Report::of(&mut wrapped_probe(&["sh", "-c", &script], dir.path(), "1s"));
    drop(throttle);
    report.expect("write_latency", "fail", &["fdatasync", "p99"]);
    let values = &report.check("write_latency")["values"];
    assert!(
        values["fdatasync_p99_us"].as_u64().unwrap() >= 50_000,
        "{values:#}"
    );
    assert_eq!(report.code(), Some(2));
}

/// Proves a nearly full file system fails the space check (a filler leaves
/// less than 5 % of a 16 MiB tmpfs free).
#[test]
fn a_nearly_full_disk_fails() {
    if !namespaces_work() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("small");
    std::fs::create_dir(&mount).unwrap();
    let setup = format!(
        "mount -t tmpfs -o size=16m tmpfs {m} && head -c 16000000 /dev/zero > {m}/filler",
        m = quoted(&mount)
    );
    let report = Report::of(&mut in_mount_namespace(&setup, &mount));
    report.expect("disk_space", "fail", &["under", "ENOSPC"]);
    assert!(
        report.check("disk_space")["values"]["free_bytes"]
            .as_u64()
            .unwrap()
            < 1 << 20
    );
}

/// Unmounts a host tmpfs when dropped (after the daemon on it is gone).
struct HostTmpfs {
    mount: PathBuf,
    daemon: Option<TestDaemon>,
}

impl Drop for HostTmpfs {
    fn drop(&mut self) {
        drop(self.daemon.take());
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

/// Proves retention is weighed against the disk: a topic whose size limit
/// (1 GiB) is more than its 64 MiB file system can hold fails, and a topic
/// without any limit is named among those that keep every message.
#[test]
fn retention_larger_than_the_disk_fails() {
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("data");
    std::fs::create_dir(&mount).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64m", "tmpfs"])
        .arg(&mount)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !mounted {
        return iggyd_testkit::skip("doctor: cannot mount a tmpfs (needs root)");
    }
    let mut guard = HostTmpfs {
        mount: mount.clone(),
        daemon: None,
    };
    let daemon = guard
        .daemon
        .insert(TestDaemon::builder().parent_dir(&mount).spawn());
    let mut client = logged_in(daemon.address, "iggy", "iggy");
    client.create_stream("big").expect("create stream");
    let limited = [
        OptionEntry::uint64("segment_size", 1024 * 1024),
        OptionEntry::uint64("max_topic_size", 1 << 30),
    ];
    client
        .create_topic(Identifier::Name("big"), "limited", 2, &limited)
        .expect("create topic");
    client
        .create_topic(Identifier::Name("big"), "forever", 1, &[])
        .expect("create topic");
    drop(client);
    daemon.stop();
    let report = Report::of(&mut plain(&daemon.data_dir()));
    report.expect(
        "disk_space",
        "fail",
        &["2 topic(s)", "1 without any limit", "more than"],
    );
    let values = &report.check("disk_space")["values"];
    assert_eq!(
        values["bounded_bytes"],
        (1u64 << 30) + 2 * 1024 * 1024,
        "{values:#}"
    );
    assert_eq!(values["unlimited_topics"], 1);
    // Three partitions' descriptors are kept for storage.
    assert!(
        report.measured("descriptors").contains("3 partition(s)"),
        "{:#}",
        report.json
    );
}

/// Proves a CPU mask the configured plan cannot use fails (two shards
/// asked for, one PU allowed by taskset), and shards sharing physical
/// cores warn (every PU of a 2-core SMT2 machine, a synthetic topology,
/// which also warns that it is not this machine).
#[test]
fn a_plan_the_mask_cannot_hold_fails_and_shared_cores_warn() {
    if std::thread::available_parallelism().map_or(1, usize::from) < 2 {
        return iggyd_testkit::skip("doctor: one PU, nothing to narrow");
    }
    let dir = tempfile::tempdir().unwrap();
    let report = Report::of(
        wrapped(&["taskset", "-c", "1"], dir.path()).env("IGGYD_SHARDING__CPU_ALLOCATION", "2"),
    );
    assert_eq!(report.code(), Some(2));
    report.expect("shard_plan", "fail", &["asks for 2 shards"]);
    report.expect("memory_budget", "skip", &["no shard plan"]);

    let report = Report::of(
        plain(dir.path())
            .env("HWLOC_SYNTHETIC", "core:2 pu:2")
            .env("IGGYD_SHARDING__CPU_ALLOCATION", "all"),
    );
    report.expect(
        "shard_plan",
        "warn",
        &["share physical cores", "not this machine"],
    );
    assert_eq!(report.check("shard_plan")["values"]["shards"], 4);
}

/// Proves a memory budget beyond what the machine gives fails with the
/// numbers and the knob.
#[test]
fn a_memory_budget_beyond_the_machine_fails() {
    let dir = tempfile::tempdir().unwrap();
    let report = Report::of(plain(dir.path()).env("IGGYD_MEMORY__BUDGET", "64 TiB"));
    assert_eq!(report.code(), Some(2));
    report.expect("memory_budget", "fail", &["memory.budget", "MemAvailable"]);
}

/// Proves huge pages set to `always` warn and a slow clock source warns,
/// as sysfs shows them to the doctor (files bound over the sysfs ones in
/// its own mount namespace; the host's settings are not touched).
#[test]
fn huge_pages_always_and_a_slow_clock_source_warn() {
    if !namespaces_work() {
        return;
    }
    let thp = Path::new("/sys/kernel/mm/transparent_hugepage");
    let clock = Path::new("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    if !thp.join("enabled").exists() || !clock.exists() {
        return iggyd_testkit::skip("doctor: no huge pages or clock source in sysfs here");
    }
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        quoted(&path)
    };
    let setup = format!(
        "mount --bind {} {} && mount --bind {} {} && mount --bind {} {}",
        write("enabled", "[always] madvise never\n"),
        quoted(&thp.join("enabled")),
        write("defrag", "[always] defer defer+madvise madvise never\n"),
        quoted(&thp.join("defrag")),
        write("clocksource", "hpet\n"),
        quoted(clock),
    );
    let report = Report::of(&mut in_mount_namespace(&setup, dir.path()));
    report.expect(
        "transparent_hugepages",
        "warn",
        &["enabled=always", "stall"],
    );
    report.expect("clock", "warn", &["hpet", "slow"]);
    assert_eq!(report.code().map(|code| code >= 1), Some(true));
}

/// Proves the unit's sandbox is read when systemd started the doctor
/// (`INVOCATION_ID` set): bare (root, no filter, /usr writable) it warns
/// naming each missing directive; hardened (a seccomp filter, no new
/// privileges, user nobody without capabilities, /usr read-only in its own
/// mount namespace) it passes.
#[test]
fn the_unit_sandbox_is_read_under_systemd() {
    if !namespaces_work() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = Report::of(plain(dir.path()).env("INVOCATION_ID", "0123456789abcdef"));
    report.expect(
        "systemd_hardening",
        "warn",
        &[
            "NoNewPrivileges=yes",
            "SystemCallFilter=",
            "User=",
            "ProtectSystem=strict",
        ],
    );

    // Nobody must be able to write the data directory.
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let script = "mount --bind /usr /usr && mount -o remount,bind,ro /usr && \
                  exec setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs \
                  \"$0\" \"$@\"";
    let mut command = shell_in_mount_namespace(script, &data);
    command.env("INVOCATION_ID", "0123456789abcdef");
    seccomp(&mut command, false);
    let report = Report::of(&mut command);
    report.expect(
        "systemd_hardening",
        "pass",
        &[
            "no_new_privs",
            "seccomp filter",
            "no effective capabilities",
            "uid 65534",
        ],
    );
}

/// Proves README.md's table of checks names every check the doctor
/// reports, in the report's order.
#[test]
fn the_readme_documents_every_check_in_order() {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(readme).expect("README.md");
    let documented: Vec<&str> = readme
        .lines()
        .skip_while(|line| !line.starts_with("| check | measures |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .filter_map(|row| row.split('`').nth(1))
        .collect();
    assert_eq!(documented, CHECKS);
}
