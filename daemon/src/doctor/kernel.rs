//! The doctor's checks of the kernel: io_uring (the driver start-up would
//! pick, `preflight::choose_driver`, and when it is not io_uring, what
//! blocked it: a seccomp filter, `kernel.io_uring_disabled`, an old kernel,
//! the locked-memory limit), locked memory (as many rings of the shards'
//! size as the plan has shards, created at once), transparent huge pages,
//! and the clock (its source, what a read costs, whether the wall clock
//! stepped while the doctor ran).
//!
//! Must not: change a sysctl or a sysfs file, or keep a ring open past its
//! check.

use super::Check;
use crate::config::human_bytes;
use crate::{limits, preflight};
use nix::errno::Errno;
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::{Duration, Instant, SystemTime};

/// `io_uring_setup(2)` for a ring of `entries` with no flags: its
/// descriptor (closed when dropped), or the errno.
fn setup_ring(entries: u32) -> Result<OwnedFd, Errno> {
    // `struct io_uring_params` is 120 bytes; zeroed, it asks for nothing
    // special. The kernel fills in the offsets, which are not used here.
    let mut params = [0u32; 30];
    // SAFETY: the kernel reads and writes `params`, which is as large as
    // `struct io_uring_params`, during the call only.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_io_uring_setup,
            libc::c_ulong::from(entries),
            params.as_mut_ptr(),
        )
    };
    if fd < 0 {
        return Err(Errno::last());
    }
    let fd = i32::try_from(fd).map_err(|_| Errno::EBADF)?;
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The running kernel's `major.minor`, from /proc/sys/kernel/osrelease.
fn kernel_release() -> (String, Option<(u32, u32)>) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|text| text.trim().to_string())
        .unwrap_or_default();
    let version = parse_release(&release);
    (release, version)
}

fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn read_number(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// What the kernel and this process say about io_uring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct UringFacts {
    /// A two-entry `io_uring_setup`: `Ok` or its errno.
    pub setup: Result<(), Errno>,
    /// `kernel.io_uring_disabled` (since 6.6; `None` before).
    pub disabled: Option<i64>,
    /// `kernel.io_uring_group` (-1: none).
    pub group: Option<i64>,
    /// `Seccomp:` of /proc/self/status (2 = a filter).
    pub seccomp: Option<i64>,
    pub kernel: Option<(u32, u32)>,
    /// `MONOIO_FORCE_LEGACY_DRIVER` is set.
    pub forced_legacy: bool,
}

impl UringFacts {
    fn gather() -> UringFacts {
        let seccomp = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                super::service::status_field(&status, "Seccomp").and_then(|v| v.parse().ok())
            });
        UringFacts {
            setup: setup_ring(2).map(drop),
            disabled: read_number("/proc/sys/kernel/io_uring_disabled"),
            group: read_number("/proc/sys/kernel/io_uring_group"),
            seccomp,
            kernel: kernel_release().1,
            forced_legacy: std::env::var_os("MONOIO_FORCE_LEGACY_DRIVER").is_some(),
        }
    }

    /// Every reason found why io_uring is not usable, each with its fix.
    /// Several may apply at once (a seccomp filter and the sysctl).
    pub(super) fn blockers(&self) -> Vec<(String, &'static str)> {
        let mut found = Vec::new();
        if self.forced_legacy {
            found.push((
                "MONOIO_FORCE_LEGACY_DRIVER is set".to_string(),
                "unset MONOIO_FORCE_LEGACY_DRIVER",
            ));
        }
        let seccomp = self.seccomp == Some(2);
        let seccomp_reason = |errno: Errno| {
            (
                format!(
                    "a seccomp filter is installed (Seccomp: 2 in /proc/self/status) and \
                     io_uring_setup answers {errno}, as container runtimes' default profiles do"
                ),
                "allow io_uring_setup, io_uring_enter and io_uring_register in the seccomp \
                 profile (docker/podman --security-opt seccomp=PROFILE, Kubernetes \
                 seccompProfile, systemd SystemCallFilter=@system-service)",
            )
        };
        match self.setup {
            Ok(()) => {
                if !self.forced_legacy {
                    found.push((
                        "io_uring_setup works, but the kernel lacks an operation monoio uses \
                         (ProvideBuffers, OpenAt, Close, Send, Recv: kernel 5.7 or later)"
                            .to_string(),
                        "run a kernel of 5.7 or later",
                    ));
                }
            }
            Err(Errno::ENOSYS) => {
                if self.kernel.is_some_and(|version| version < (5, 1)) {
                    found.push((
                        "the kernel predates io_uring (5.1)".to_string(),
                        "run a kernel of 5.7 or later",
                    ));
                } else if seccomp {
                    found.push(seccomp_reason(Errno::ENOSYS));
                } else {
                    found.push((
                        "the kernel has no io_uring_setup (built without CONFIG_IO_URING)"
                            .to_string(),
                        "run a kernel built with CONFIG_IO_URING=y",
                    ));
                }
            }
            Err(errno @ (Errno::EPERM | Errno::EACCES)) => {
                match self.disabled {
                    Some(2) => found.push((
                        "kernel.io_uring_disabled = 2: io_uring is off for every process"
                            .to_string(),
                        "sysctl -w kernel.io_uring_disabled=0 (and in /etc/sysctl.d/ to keep it)",
                    )),
                    Some(1) => found.push((
                        format!(
                            "kernel.io_uring_disabled = 1 and this process is not in \
                             kernel.io_uring_group ({})",
                            self.group.unwrap_or(-1)
                        ),
                        "add the service's user to kernel.io_uring_group's group, or sysctl -w \
                         kernel.io_uring_disabled=0",
                    )),
                    _ => {}
                }
                if seccomp {
                    found.push(seccomp_reason(errno));
                }
                if found.is_empty() {
                    found.push((
                        format!(
                            "io_uring_setup answers {errno} with neither the sysctl nor a seccomp \
                             filter in the way: a security module (SELinux, AppArmor) refuses it"
                        ),
                        "allow io_uring in the security module's policy",
                    ));
                }
            }
            Err(Errno::ENOMEM) => found.push((
                "io_uring_setup answers ENOMEM: the locked-memory limit is too low for a ring \
                 (kernels before 5.12 charge rings to RLIMIT_MEMLOCK)"
                    .to_string(),
                "LimitMEMLOCK=infinity in the unit (ulimit -l unlimited)",
            )),
            Err(errno) => found.push((
                format!("io_uring_setup answers {errno}"),
                "see io_uring_setup(2) for that error",
            )),
        }
        found
    }
}

/// The io_uring check and whether io_uring is available.
pub(super) struct IoUring {
    pub check: Check,
    pub available: bool,
}

/// io_uring for this process: PASS when start-up would pick it; otherwise
/// WARN (the shards fall back to epoll) or FAIL (`sharding.require_io_uring`),
/// naming every blocker found.
pub(super) fn io_uring(required: bool) -> IoUring {
    const ID: &str = "io_uring";
    let (release, _) = kernel_release();
    let chosen = preflight::choose_driver(required);
    if matches!(chosen, Ok(preflight::Driver::IoUring)) {
        return IoUring {
            check: Check::pass(
                ID,
                format!("available, with every operation monoio uses (kernel {release})"),
            )
            .value("available", true)
            .value("kernel", release),
            available: true,
        };
    }
    let facts = UringFacts::gather();
    let blockers = facts.blockers();
    let reasons: Vec<&str> = blockers.iter().map(|(reason, _)| reason.as_str()).collect();
    let fixes: Vec<&str> = blockers.iter().map(|(_, fix)| *fix).collect();
    let mut measured = format!("unavailable: {} (kernel {release})", reasons.join("; "));
    let fix = fixes.join("; or ");
    let check = if required {
        measured.push_str("; sharding.require_io_uring = true, so the daemon will not start");
        Check::fail(ID, measured, &fix)
    } else {
        measured.push_str("; the shards would use epoll");
        Check::warn(ID, measured, &fix)
    };
    let setup = match facts.setup {
        Ok(()) => "ok".to_string(),
        Err(errno) => format!("{errno}"),
    };
    IoUring {
        check: check
            .value("available", false)
            .value("kernel", release)
            .value("setup", setup)
            .value("io_uring_disabled", facts.disabled)
            .value("seccomp", facts.seccomp),
        available: false,
    }
}

/// Locked memory: as many io_uring rings of the shards' size as the plan
/// has shards, created at once under this process's RLIMIT_MEMLOCK.
pub(super) fn memlock(io_uring_available: bool, shards: Option<usize>) -> Check {
    const ID: &str = "memlock";
    let (soft, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK)
        .unwrap_or((0, 0));
    let show = |limit: u64| {
        if limit == nix::sys::resource::RLIM_INFINITY {
            "unlimited".to_string()
        } else {
            human_bytes(limit)
        }
    };
    let limit = format!("RLIMIT_MEMLOCK {} (hard {})", show(soft), show(hard));
    if !io_uring_available {
        return Check::skip(
            ID,
            format!("{limit}; io_uring is unavailable (see io_uring), and epoll locks no memory"),
        );
    }
    let shards = shards.unwrap_or(1).max(1);
    let entries = limits::IO_URING_ENTRIES;
    let mut rings = Vec::with_capacity(shards);
    let mut failed = None;
    for _ in 0..shards {
        match setup_ring(entries) {
            Ok(ring) => rings.push(ring),
            Err(errno) => {
                failed = Some(errno);
                break;
            }
        }
    }
    let created = rings.len();
    drop(rings);
    let (_, version) = kernel_release();
    let check = match failed {
        None => {
            let charged = if version.is_some_and(|version| version >= (5, 12)) {
                "this kernel charges rings to the memory cgroup, not to this limit"
            } else {
                "this kernel charges rings to this limit, and they fit"
            };
            Check::pass(
                ID,
                format!(
                    "{limit}: {created} ring(s) of {entries} entries, one a shard, created at \
                     once ({charged})"
                ),
            )
        }
        Some(errno) => Check::fail(
            ID,
            format!(
                "{limit}: ring {} of {shards} ({entries} entries, one a shard) failed with \
                 {errno}",
                created + 1
            ),
            "LimitMEMLOCK=infinity in the unit (ulimit -l unlimited in a shell)",
        ),
    };
    check
        .value("soft_bytes", soft)
        .value("hard_bytes", hard)
        .value("rings", shards as u64)
        .value("rings_created", created as u64)
}

/// The bracketed choice of a sysfs multiple-choice file
/// (`always [madvise] never` → `madvise`).
pub(super) fn bracketed(text: &str) -> Option<&str> {
    let start = text.find('[')?;
    let end = start + text[start..].find(']')?;
    Some(&text[start + 1..end])
}

/// Transparent huge pages: `always` gives every anonymous mapping huge
/// pages (the RSS of the shards' buffers grows past what they use, and with
/// `defrag = always` a page fault can stall compacting memory).
pub(super) fn transparent_hugepages() -> Check {
    const ID: &str = "transparent_hugepages";
    const DIR: &str = "/sys/kernel/mm/transparent_hugepage";
    let read = |name: &str| {
        std::fs::read_to_string(format!("{DIR}/{name}"))
            .ok()
            .and_then(|text| bracketed(&text).map(str::to_string))
    };
    let (Some(enabled), defrag) = (read("enabled"), read("defrag")) else {
        return Check::pass(ID, format!("not in this kernel ({DIR} is absent)"));
    };
    let defrag = defrag.unwrap_or_else(|| "unknown".to_string());
    thp_verdict(&enabled, &defrag)
        .value("enabled", enabled)
        .value("defrag", defrag)
}

fn thp_verdict(enabled: &str, defrag: &str) -> Check {
    const ID: &str = "transparent_hugepages";
    let measured = format!("enabled={enabled} defrag={defrag}");
    if enabled != "always" {
        return Check::pass(ID, measured);
    }
    let stall = if defrag == "always" {
        ", and page faults stall compacting memory (defrag=always)"
    } else {
        ""
    };
    Check::warn(
        ID,
        format!(
            "{measured}: every anonymous mapping gets huge pages, so buffers take more memory \
             than they use{stall}"
        ),
        "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (and defrag), or \
         transparent_hugepage=madvise on the kernel command line",
    )
}

/// Both clocks at one moment, to see whether the wall clock stepped.
#[derive(Debug, Clone, Copy)]
pub(super) struct ClockSample {
    monotonic: Instant,
    wall: SystemTime,
}

impl ClockSample {
    pub(super) fn now() -> ClockSample {
        ClockSample {
            monotonic: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// How far the wall clock moved beyond the monotonic clock since
    /// `earlier` (positive: forward), in microseconds, and the time between.
    fn step_since(&self, earlier: &ClockSample) -> (i128, Duration) {
        let monotonic = self.monotonic.saturating_duration_since(earlier.monotonic);
        let wall = match self.wall.duration_since(earlier.wall) {
            Ok(forward) => forward.as_micros() as i128,
            Err(backward) => -(backward.duration().as_micros() as i128),
        };
        (wall - monotonic.as_micros() as i128, monotonic)
    }
}

/// Clock sources whose reads go to slow hardware (or tick at 1/HZ).
const SLOW_CLOCK_SOURCES: &[&str] = &["hpet", "acpi_pm", "jiffies", "refined-jiffies", "pit"];
/// A clock read slower than this costs every request and every batch stamp.
const CLOCK_READ_SLOW: Duration = Duration::from_nanos(500);
/// A wall clock that moved this much more (or less) than the monotonic
/// clock while the doctor ran was stepped, not slewed (NTP slews at most
/// 500 ppm: 5 ms over the doctor's 10 s at most).
const CLOCK_STEP: Duration = Duration::from_millis(10);

/// The cheapest of a few batches of clock reads, per read.
fn clock_read_cost() -> Duration {
    const READS: u32 = 20_000;
    (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..READS {
                std::hint::black_box(SystemTime::now());
            }
            start.elapsed() / READS
        })
        .min()
        .unwrap_or_default()
}

/// The clock: its source, what a read costs, and whether the wall clock
/// (message timestamps, expiry) stepped since `start`.
pub(super) fn clock(start: &ClockSample) -> Check {
    const BASE: &str = "/sys/devices/system/clocksource/clocksource0";
    let source = std::fs::read_to_string(format!("{BASE}/current_clocksource"))
        .map(|text| text.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string());
    let available = std::fs::read_to_string(format!("{BASE}/available_clocksource"))
        .map(|text| text.trim().to_string())
        .unwrap_or_default();
    let cost = clock_read_cost();
    let (step_us, over) = ClockSample::now().step_since(start);
    clock_verdict(&source, &available, cost, step_us, over)
        .value("source", source)
        .value("available", available)
        .value("read_ns", cost.as_nanos() as u64)
        .value("wall_step_us", step_us as i64)
        .value("observed_ms", over.as_millis() as u64)
}

fn clock_verdict(
    source: &str,
    available: &str,
    cost: Duration,
    step_us: i128,
    over: Duration,
) -> Check {
    const ID: &str = "clock";
    let measured = format!(
        "{source} (available: {available}), {} ns a read; the wall clock moved {step_us} µs \
         against the monotonic clock over {:.1} s",
        cost.as_nanos(),
        over.as_secs_f64()
    );
    if step_us.unsigned_abs() > CLOCK_STEP.as_micros() {
        return Check::warn(
            ID,
            format!("{measured}: it was stepped while the doctor ran"),
            "let chrony or systemd-timesyncd slew the clock (makestep only at boot) so \
             message timestamps and expiry do not jump",
        );
    }
    if SLOW_CLOCK_SOURCES.contains(&source) || cost > CLOCK_READ_SLOW {
        return Check::warn(
            ID,
            format!(
                "{measured}: a slow clock (over {} ns a read, or a slow source) costs every \
                 request",
                CLOCK_READ_SLOW.as_nanos()
            ),
            "use tsc (or kvm-clock in a VM): echo tsc > \
             /sys/devices/system/clocksource/clocksource0/current_clocksource, and check dmesg \
             for 'clocksource tsc unstable'",
        );
    }
    Check::pass(ID, measured)
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::*;

    fn facts(setup: Result<(), Errno>) -> UringFacts {
        UringFacts {
            setup,
            disabled: Some(0),
            group: Some(-1),
            seccomp: Some(0),
            kernel: Some((6, 8)),
            forced_legacy: false,
        }
    }

    // Proves every way io_uring can be blocked is told apart: the sysctl
    // (both values), a seccomp filter (EPERM and ENOSYS), an old kernel, a
    // kernel without io_uring, the memlock limit, missing operations, and
    // the environment switch; and two blockers at once are both named.
    #[test]
    fn io_uring_blockers_are_told_apart() {
        let reasons = |facts: UringFacts| {
            facts
                .blockers()
                .into_iter()
                .map(|(reason, _)| reason)
                .collect::<Vec<_>>()
                .join(" | ")
        };
        let disabled = UringFacts {
            disabled: Some(2),
            ..facts(Err(Errno::EPERM))
        };
        assert!(reasons(disabled).contains("io_uring_disabled = 2"));
        let group = UringFacts {
            disabled: Some(1),
            group: Some(1234),
            ..facts(Err(Errno::EPERM))
        };
        assert!(reasons(group).contains("io_uring_group (1234)"));
        let seccomp = UringFacts {
            seccomp: Some(2),
            ..facts(Err(Errno::EPERM))
        };
        assert!(reasons(seccomp).contains("seccomp"));
        let both = reasons(UringFacts {
            seccomp: Some(2),
            disabled: Some(2),
            ..facts(Err(Errno::EPERM))
        });
        assert!(both.contains("seccomp") && both.contains("io_uring_disabled"));
        let enosys_filter = UringFacts {
            seccomp: Some(2),
            ..facts(Err(Errno::ENOSYS))
        };
        assert!(reasons(enosys_filter).contains("seccomp"));
        let old = UringFacts {
            kernel: Some((4, 19)),
            ..facts(Err(Errno::ENOSYS))
        };
        assert!(reasons(old).contains("predates io_uring"));
        assert!(reasons(facts(Err(Errno::ENOSYS))).contains("CONFIG_IO_URING"));
        assert!(reasons(facts(Err(Errno::ENOMEM))).contains("RLIMIT_MEMLOCK"));
        assert!(reasons(facts(Err(Errno::EPERM))).contains("security module"));
        assert!(reasons(facts(Ok(()))).contains("lacks an operation"));
        let forced = UringFacts {
            forced_legacy: true,
            ..facts(Ok(()))
        };
        assert_eq!(reasons(forced), "MONOIO_FORCE_LEGACY_DRIVER is set");
    }

    // Proves kernel releases parse to (major, minor), distribution suffixes
    // and all.
    #[test]
    fn kernel_releases_parse() {
        assert_eq!(parse_release("6.18.44-fc-v1147"), Some((6, 18)));
        assert_eq!(parse_release("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(parse_release("4.19"), Some((4, 19)));
        assert_eq!(parse_release("weird"), None);
    }

    // Proves huge pages warn only when `always`, and say more when defrag
    // stalls faults too.
    #[test]
    fn transparent_hugepages_warn_only_when_always() {
        assert_eq!(bracketed("always [madvise] never\n"), Some("madvise"));
        assert_eq!(bracketed("no choice"), None);
        assert_eq!(thp_verdict("madvise", "always").status, Status::Pass);
        assert_eq!(thp_verdict("never", "madvise").status, Status::Pass);
        let always = thp_verdict("always", "madvise");
        assert_eq!(always.status, Status::Warn);
        assert!(!always.measured.contains("stall"));
        assert!(thp_verdict("always", "always").measured.contains("stall"));
    }

    // Proves the clock warns for a slow source, a slow read and a step of
    // the wall clock, and passes a fast steady one.
    #[test]
    fn clock_verdicts() {
        let fast = Duration::from_nanos(25);
        let over = Duration::from_secs(2);
        assert_eq!(
            clock_verdict("tsc", "tsc hpet", fast, 300, over).status,
            Status::Pass
        );
        assert_eq!(
            clock_verdict("hpet", "tsc hpet", fast, 0, over).status,
            Status::Warn
        );
        let slow = Duration::from_micros(2);
        assert_eq!(
            clock_verdict("xen", "xen", slow, 0, over).status,
            Status::Warn
        );
        let stepped = clock_verdict("tsc", "tsc", fast, -60_000, over);
        assert_eq!(stepped.status, Status::Warn);
        assert!(stepped.measured.contains("stepped"), "{stepped:?}");
    }

    // Proves the step is measured between two samples of both clocks: two
    // samples taken back to back moved together.
    #[test]
    fn back_to_back_samples_show_no_step() {
        let first = ClockSample::now();
        let (step_us, over) = ClockSample::now().step_since(&first);
        assert!(step_us.unsigned_abs() < 5_000, "{step_us}");
        assert!(over < Duration::from_secs(1));
    }
}
