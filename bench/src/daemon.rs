//! Starting a fresh iggyd for a benchmark or a smoke test: a temp data
//! directory, `--listen 127.0.0.1:0`, and `NOTIFY_SOCKET` pointed at a
//! datagram socket this process owns. Ready means `READY=1` arrived and the
//! `STATUS=serving on ADDR: …` line carried the bound address; no sleeps.
//!
//! This file owns the child process and stops it (SIGTERM, then wait) on
//! drop. It does not talk the Iggy protocol.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running daemon started by this process.
#[derive(Debug)]
pub struct SpawnedDaemon {
    child: Child,
    pub address: std::net::SocketAddr,
    pub dir: PathBuf,
    /// The `STATUS=` text at readiness (shards, cores, driver).
    pub status: String,
    remove_dir: bool,
}

impl SpawnedDaemon {
    /// Starts `binary` on a new directory under `parent` and waits up to
    /// `timeout` for readiness. Logs go to `DIR/daemon.log`.
    pub fn start(binary: &Path, parent: &Path, timeout: Duration) -> Result<SpawnedDaemon, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
        let dir = parent.join(format!("iggyd-bench-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|error| format!("{}: {error}", dir.display()))?;
        let notify_path = dir.join("notify.sock");
        let notify = UnixDatagram::bind(&notify_path)
            .map_err(|error| format!("binding {}: {error}", notify_path.display()))?;
        let log = std::fs::File::create(dir.join("daemon.log"))
            .map_err(|error| format!("daemon log: {error}"))?;
        let stderr = log
            .try_clone()
            .map_err(|error| format!("daemon log: {error}"))?;
        let mut command = Command::new(binary);
        command
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .env("NOTIFY_SOCKET", &notify_path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr);
        for (key, _) in std::env::vars() {
            if key.starts_with("IGGYD_") {
                command.env_remove(key);
            }
        }
        let child = command
            .spawn()
            .map_err(|error| format!("spawning {}: {error}", binary.display()))?;
        let mut daemon = SpawnedDaemon {
            child,
            address: "127.0.0.1:0".parse().expect("literal address"),
            dir,
            status: String::new(),
            remove_dir: true,
        };
        let deadline = Instant::now() + timeout;
        let mut ready = false;
        let mut buffer = vec![0u8; 4096];
        while !(ready && daemon.address.port() != 0) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "iggyd not ready within {timeout:?}; log:\n{}",
                    daemon.log()
                ));
            }
            notify
                .set_read_timeout(Some(left.min(Duration::from_millis(200))))
                .map_err(|error| error.to_string())?;
            match notify.recv(&mut buffer) {
                Ok(length) => {
                    let text = String::from_utf8_lossy(&buffer[..length]).into_owned();
                    for line in text.lines() {
                        if line == "READY=1" {
                            ready = true;
                        }
                        if let Some(status) = line.strip_prefix("STATUS=serving on ") {
                            daemon.status = status.to_owned();
                            if let Some((address, _)) = status.split_once(": ")
                                && let Ok(address) = address.parse()
                            {
                                daemon.address = address;
                            }
                        }
                    }
                }
                Err(_) => {
                    if let Ok(Some(exit)) = daemon.child.try_wait() {
                        return Err(format!(
                            "iggyd exited with {exit} before READY=1; log:\n{}",
                            daemon.log()
                        ));
                    }
                }
            }
        }
        Ok(daemon)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    /// Keep the directory (data and log) after the daemon stops.
    pub fn keep_dir(&mut self) {
        self.remove_dir = false;
    }

    /// SIGTERM and wait (up to 30 s, then SIGKILL).
    pub fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let pid = self.child.id() as i32;
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SpawnedDaemon {
    fn drop(&mut self) {
        self.stop();
        if self.remove_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `VmRSS` of `pid` in KiB, from `/proc/PID/status`.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}
