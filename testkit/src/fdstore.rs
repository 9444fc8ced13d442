//! The kit's stand-in for systemd's file descriptor store: what a daemon
//! sends with `FDSTORE=1`/`FDNAME=` (descriptors attached with
//! `SCM_RIGHTS`) is kept here, `FDSTOREREMOVE=1` drops it, and the next
//! start passes it back as systemd does: descriptors from 3 in order,
//! `LISTEN_FDS`, `LISTEN_FDNAMES`, and `LISTEN_PID` naming the new process
//! (a `/bin/sh` that `exec`s the daemon sets it, since the pid is only
//! known after the fork). Duplicates of one socket are kept once, and at
//! most `max` descriptors, as systemd does.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Descriptors kept for the next start, by name, in the order received.
#[derive(Debug)]
pub struct FdStore {
    max: usize,
    fds: Vec<(String, OwnedFd)>,
    /// What the store refused (over `max`), for the failure report.
    pub refused: Vec<String>,
}

impl FdStore {
    pub fn new(max: usize) -> FdStore {
        FdStore {
            max,
            fds: Vec::new(),
            refused: Vec::new(),
        }
    }

    /// The names kept, in order.
    pub fn names(&self) -> Vec<String> {
        self.fds.iter().map(|(name, _)| name.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.fds.len()
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// The descriptor kept as `name`, if any.
    pub fn get(&self, name: &str) -> Option<BorrowedFd<'_>> {
        self.fds
            .iter()
            .find(|(kept, _)| kept == name)
            .map(|(_, fd)| fd.as_fd())
    }

    /// Keep `fd` as `name` (a test planting what a previous run stored).
    pub fn insert(&mut self, name: &str, fd: OwnedFd) {
        if self.fds.len() >= self.max {
            self.refused.push(name.to_string());
            return;
        }
        if self.fds.iter().any(|(_, kept)| same_file(kept, &fd)) {
            return;
        }
        self.fds.push((name.to_string(), fd));
    }

    /// Apply one notification: its text and the descriptors it carried.
    pub fn receive(&mut self, text: &str, fds: Vec<OwnedFd>) {
        let lines: Vec<&str> = text.lines().collect();
        let name = lines
            .iter()
            .find_map(|line| line.strip_prefix("FDNAME="))
            .unwrap_or("stored");
        if lines.contains(&"FDSTOREREMOVE=1") {
            self.fds.retain(|(kept, _)| kept != name);
        }
        if lines.contains(&"FDSTORE=1") {
            for fd in fds {
                self.insert(name, fd);
            }
        }
    }

    /// Make `command` pass every kept descriptor to the process it starts,
    /// as systemd does. Returns the duplicates that must stay open until the
    /// command is spawned.
    pub fn pass_to(&self, command: &mut Command) -> std::io::Result<Vec<OwnedFd>> {
        let count = self.fds.len();
        let first = RawFd::try_from(3 + count).unwrap_or(RawFd::MAX);
        // Duplicates above the target range, so that moving them into place
        // in the child never overwrites one not moved yet.
        let mut high = Vec::with_capacity(count);
        for (_, fd) in &self.fds {
            // SAFETY: F_DUPFD_CLOEXEC on an open descriptor returns a new one
            // that we own.
            let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, first) };
            if dup < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: `dup` was just created and is owned by nobody else.
            high.push(unsafe { OwnedFd::from_raw_fd(dup) });
        }
        let raw: Vec<RawFd> = high.iter().map(AsRawFd::as_raw_fd).collect();
        command
            .env("LISTEN_FDS", count.to_string())
            .env("LISTEN_FDNAMES", self.names().join(":"));
        // SAFETY: the closure runs in the forked child before exec and only
        // calls dup2(2), which is async-signal-safe; the targets 3.. lose
        // close-on-exec, the sources above them keep it and close at exec.
        unsafe {
            command.pre_exec(move || {
                for (index, source) in raw.iter().enumerate() {
                    let target = RawFd::try_from(3 + index).unwrap_or(RawFd::MAX);
                    if libc::dup2(*source, target) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        Ok(high)
    }
}

/// Whether two descriptors are the same open file (sockets are unique
/// inodes of sockfs).
fn same_file(a: &OwnedFd, b: &OwnedFd) -> bool {
    match (nix::sys::stat::fstat(a), nix::sys::stat::fstat(b)) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
        _ => false,
    }
}

/// The shell line that runs `"$0" "$@"` with `LISTEN_PID` set to its own
/// pid (kept by `exec`).
pub const LISTEN_PID_WRAPPER: &str = "LISTEN_PID=$$; export LISTEN_PID; exec \"$0\" \"$@\"";

/// Receive one datagram from `socket` (blocking as its timeout says),
/// with the descriptors it carries (close-on-exec in this process).
pub fn receive(
    socket: &std::os::unix::net::UnixDatagram,
) -> std::io::Result<(String, Vec<OwnedFd>)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut buffer = vec![0u8; 4096];
    let mut space = nix::cmsg_space!([RawFd; 64]);
    let mut iov = [std::io::IoSliceMut::new(&mut buffer)];
    let message = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(std::io::Error::from)?;
    let mut fds = Vec::new();
    if let Ok(cmsgs) = message.cmsgs() {
        for cmsg in cmsgs {
            if let ControlMessageOwned::ScmRights(received) = cmsg {
                for fd in received {
                    // SAFETY: the kernel installed these descriptors in this
                    // process for this message; nobody else owns them.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
    }
    let length = message.bytes;
    let text = String::from_utf8_lossy(&buffer[..length]).into_owned();
    Ok((text, fds))
}
