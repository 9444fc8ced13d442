//! The doctor's checks of how the daemon is configured and started: the
//! configuration's own validation (`Config::load`, the same as start-up),
//! and, when systemd started this process, the sandbox the unit gave it,
//! read from this process itself (`/proc/self/status`, its user, whether
//! `/usr` is read-only).
//!
//! Must not: load the configuration any other way than start-up does, or
//! guess a unit's settings from its file: what is checked is what this
//! process got.

use super::Check;
use crate::config::{Config, Sources};

/// Loads the configuration as start-up does; the check says whether it is
/// valid, and the configuration comes back when it is.
pub(super) fn config(sources: &Sources) -> (Option<Config>, Check) {
    let origin = match &sources.file {
        Some(file) => format!("--config {}", file.display()),
        None => "built-in defaults and /etc/iggyd/iggyd.toml when present".to_string(),
    };
    let environment = sources.env.len();
    match Config::load(sources) {
        Ok(config) => {
            let check = Check::pass(
                "config",
                format!(
                    "valid ({origin}, {environment} IGGYD_/IGGY_ROOT_ environment variables); \
                     data_dir {}",
                    config.data_dir.display()
                ),
            )
            .value("environment_variables", environment as u64)
            .value("data_dir", config.data_dir.display().to_string());
            (Some(config), check)
        }
        Err(error) => {
            let fix = format!(
                "correct `{}` (`iggyd config` prints the effective configuration once it is valid)",
                error.key()
            );
            let check = Check::fail("config", error.to_string(), &fix).value("key", error.key());
            (None, check)
        }
    }
}

/// What the sandbox gave this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Sandbox {
    /// `NoNewPrivs:` of /proc/self/status.
    pub no_new_privs: bool,
    /// `Seccomp:` is 2 (a filter).
    pub seccomp_filter: bool,
    /// `CapEff:` as a bit mask.
    pub effective_capabilities: u64,
    pub uid: u32,
    /// `/usr` is mounted read-only (ProtectSystem=).
    pub usr_read_only: bool,
}

/// The value of a `Name:\tvalue` line of /proc/PID/status.
pub(super) fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':').map(str::trim))
}

impl Sandbox {
    fn of_this_process() -> Result<Sandbox, String> {
        let status = std::fs::read_to_string("/proc/self/status")
            .map_err(|error| format!("cannot read /proc/self/status: {error}"))?;
        let field = |name: &str| status_field(&status, name).unwrap_or_default();
        let usr_read_only = nix::sys::statvfs::statvfs("/usr")
            .map(|stats| {
                stats
                    .flags()
                    .contains(nix::sys::statvfs::FsFlags::ST_RDONLY)
            })
            .unwrap_or(false);
        Ok(Sandbox {
            no_new_privs: field("NoNewPrivs") == "1",
            seccomp_filter: field("Seccomp") == "2",
            effective_capabilities: u64::from_str_radix(field("CapEff"), 16).unwrap_or(u64::MAX),
            uid: nix::unistd::geteuid().as_raw(),
            usr_read_only,
        })
    }

    /// What is missing, each with the directive that gives it.
    pub(super) fn missing(&self) -> Vec<&'static str> {
        let mut missing = Vec::new();
        if !self.no_new_privs {
            missing.push("no_new_privs is off (NoNewPrivileges=yes)");
        }
        if !self.seccomp_filter {
            missing.push("no seccomp filter (SystemCallFilter=@system-service)");
        }
        if self.effective_capabilities != 0 {
            missing.push("effective capabilities (CapabilityBoundingSet= empty)");
        }
        if self.uid == 0 {
            missing.push("runs as root (User=iggyd)");
        }
        if !self.usr_read_only {
            missing.push("/usr is writable (ProtectSystem=strict)");
        }
        missing
    }
}

/// The unit of this process, from its cgroup path (`…/iggyd.service`).
fn unit_name() -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = crate::cgroup::parse_proc_self_cgroup(&text)?;
    path.rsplit('/')
        .find(|part| part.ends_with(".service") || part.ends_with(".scope"))
        .map(str::to_string)
}

/// The sandbox check: only when systemd started this process
/// (`INVOCATION_ID` is set for every unit's processes).
pub(super) fn hardening() -> Check {
    const ID: &str = "systemd_hardening";
    if std::env::var_os("INVOCATION_ID").is_none() {
        return Check::skip(
            ID,
            "not started by systemd (INVOCATION_ID is unset), so there is no unit sandbox to \
             read; run the doctor inside the unit (a drop-in's ExecStartPre=-/usr/bin/iggyd \
             doctor) to check it, or score the unit file with `systemd-analyze security iggyd`",
        );
    }
    let unit = unit_name().unwrap_or_else(|| "this unit".to_string());
    let sandbox = match Sandbox::of_this_process() {
        Ok(sandbox) => sandbox,
        Err(why) => {
            return Check::warn(
                ID,
                format!("{unit}: {why}"),
                "make /proc readable to the service (no ProcSubset=pid)",
            );
        }
    };
    let check = |check: Check| {
        check
            .value("unit", unit.clone())
            .value("no_new_privs", sandbox.no_new_privs)
            .value("seccomp_filter", sandbox.seccomp_filter)
            .value(
                "effective_capabilities",
                format!("{:016x}", sandbox.effective_capabilities),
            )
            .value("uid", sandbox.uid)
            .value("usr_read_only", sandbox.usr_read_only)
    };
    let missing = sandbox.missing();
    if missing.is_empty() {
        return check(Check::pass(
            ID,
            format!(
                "{unit}: no_new_privs, a seccomp filter, no effective capabilities, uid {}, \
                 /usr read-only",
                sandbox.uid
            ),
        ));
    }
    check(Check::warn(
        ID,
        format!("{unit}: {}", missing.join(", ")),
        "use the packaged unit (systemd/iggyd.service) or add the directives named",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves each missing piece of the sandbox is named with the directive
    // that gives it, and a complete sandbox misses nothing.
    #[test]
    fn missing_sandbox_pieces_name_their_directives() {
        let hardened = Sandbox {
            no_new_privs: true,
            seccomp_filter: true,
            effective_capabilities: 0,
            uid: 998,
            usr_read_only: true,
        };
        assert!(hardened.missing().is_empty());
        let bare = Sandbox {
            no_new_privs: false,
            seccomp_filter: false,
            effective_capabilities: 0x1ff,
            uid: 0,
            usr_read_only: false,
        };
        let missing = bare.missing().join(", ");
        for directive in [
            "NoNewPrivileges=yes",
            "SystemCallFilter=",
            "CapabilityBoundingSet=",
            "User=",
            "ProtectSystem=strict",
        ] {
            assert!(missing.contains(directive), "{missing}");
        }
    }

    // Proves /proc/PID/status fields are read by name, not by position.
    #[test]
    fn status_fields_are_read_by_name() {
        let status = "Name:\tiggyd\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n";
        assert_eq!(status_field(status, "Seccomp"), Some("2"));
        assert_eq!(status_field(status, "Seccomp_filters"), Some("1"));
        assert_eq!(status_field(status, "NoNewPrivs"), Some("1"));
        assert_eq!(status_field(status, "CapEff"), None);
    }

    // Proves an invalid configuration is a FAIL naming the key, and a
    // valid one a PASS that hands the configuration on.
    #[test]
    fn the_configuration_check_names_the_bad_key() {
        let bad = Sources {
            env: vec![("IGGYD_MEMORY__BUDGET".into(), "lots".into())],
            ..Sources::default()
        };
        let (loaded, check) = config(&bad);
        assert!(loaded.is_none());
        assert_eq!(check.status, super::super::Status::Fail);
        assert_eq!(check.values["key"], "memory.budget");
        assert!(check.fix.as_deref().unwrap().contains("memory.budget"));
        let (loaded, check) = config(&Sources::default());
        assert!(loaded.is_some());
        assert_eq!(check.status, super::super::Status::Pass, "{check:?}");
    }
}
