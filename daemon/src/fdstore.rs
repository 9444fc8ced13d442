//! Listening sockets that outlive the process: systemd's file descriptor
//! store. Under a unit with `FileDescriptorStoreMax=`, every listener the
//! daemon binds (one Iggy listener per shard, `iggy-<shard>`; the metrics
//! endpoint, `metrics`; the admin socket, `admin`) is handed to the service
//! manager with `FDSTORE=1` and `FDNAME=`; the manager keeps a duplicate
//! across a restart (`systemctl restart`, `Restart=`, `try-restart`) and
//! passes it back in `LISTEN_FDS`/`LISTEN_FDNAMES`. A socket kept there
//! never stops listening, so a client that connects while the daemon
//! restarts waits in the kernel's accept queue and is served by the next
//! process instead of being refused.
//!
//! This module reads what was passed back (`Inherited`: `LISTEN_PID` must
//! be this process; anything malformed is logged and ignored, never a
//! panic), checks each socket against the configuration (`adopt_tcp`,
//! `adopt_unix`: kind, listening, address, `SO_REUSEPORT`), and talks to
//! the store (`FdStore`: keep, forget). It decides nothing about what to
//! bind: `boot` takes a socket when it matches and binds anew when not
//! (saying why), and `listeners` below does that for the shards' group.
//! Outside systemd (no `NOTIFY_SOCKET`, or not started by it) the store is
//! off and nothing is sent.

use crate::limits;
use socket2::{Socket, Type};
use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::Path;

/// The first descriptor the service manager passes (`SD_LISTEN_FDS_START`).
const LISTEN_FDS_START: RawFd = 3;

/// Name of shard `shard`'s Iggy listener in the store.
pub fn iggy_name(shard: usize) -> String {
    format!("iggy-{shard}")
}

/// Name of the metrics listener in the store.
pub const METRICS: &str = "metrics";
/// Name of the admin socket's listener in the store.
pub const ADMIN: &str = "admin";

/// Whether the service manager keeps what the daemon stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdStore {
    enabled: bool,
    /// `$FDSTORE` (systemd ≥ 254): how many descriptors the unit keeps.
    max: Option<usize>,
    /// Why it is on or off, for the start-up log line.
    reason: String,
}

impl FdStore {
    /// Off: nothing is sent (tests, and every run outside systemd).
    pub fn off(reason: &str) -> FdStore {
        FdStore {
            enabled: false,
            max: None,
            reason: reason.to_string(),
        }
    }

    /// From this process's environment: `NOTIFY_SOCKET`, `FDSTORE` and
    /// `SYSTEMD_EXEC_PID`.
    pub fn from_env() -> FdStore {
        let notify = std::env::var_os("NOTIFY_SOCKET").is_some();
        let fdstore = std::env::var("FDSTORE").ok();
        let exec_pid = std::env::var("SYSTEMD_EXEC_PID").ok();
        FdStore::detect(
            notify,
            fdstore.as_deref(),
            exec_pid.as_deref(),
            std::process::id(),
        )
    }

    /// systemd ≥ 254 sets `FDSTORE` to the unit's `FileDescriptorStoreMax=`
    /// (absent when 0). Older ones (Debian 12 has 252) say nothing; a
    /// process systemd started itself (`SYSTEMD_EXEC_PID`, systemd ≥ 248)
    /// assumes the store the shipped unit configures.
    pub fn detect(
        notify: bool,
        fdstore: Option<&str>,
        exec_pid: Option<&str>,
        own_pid: u32,
    ) -> FdStore {
        if !notify {
            return FdStore::off("no NOTIFY_SOCKET: not run by a service manager");
        }
        if let Some(text) = fdstore {
            return match text.trim().parse::<usize>() {
                Ok(0) => FdStore::off("FDSTORE=0: the unit keeps no descriptors"),
                Ok(max) => FdStore {
                    enabled: true,
                    max: Some(max),
                    reason: format!("FDSTORE={max} (FileDescriptorStoreMax=)"),
                },
                Err(_) => FdStore::off(&format!("FDSTORE={text:?} is not a number")),
            };
        }
        let started_by_systemd = exec_pid
            .and_then(|pid| pid.trim().parse::<u32>().ok())
            .is_some_and(|pid| pid == own_pid);
        if started_by_systemd {
            FdStore {
                enabled: true,
                max: None,
                reason: "started by systemd, which does not say (before 254) whether the unit \
                         keeps descriptors; the shipped unit sets FileDescriptorStoreMax="
                    .to_string(),
            }
        } else {
            FdStore::off("no FDSTORE and not started by systemd itself (SYSTEMD_EXEC_PID)")
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    pub fn max(&self) -> Option<usize> {
        self.max
    }

    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// `FDSTORE=1` + `FDNAME=name` with a duplicate of `fd`. A failure is
    /// logged: the daemon runs the same, only that socket is bound anew at
    /// the next start.
    pub fn keep(&self, name: &str, fd: BorrowedFd<'_>) {
        if !self.enabled {
            return;
        }
        let text = format!("FDSTORE=1\nFDNAME={name}\n");
        match send(&text, &[fd.as_raw_fd()]) {
            Ok(()) => tracing::debug!(name, "listener handed to the file descriptor store"),
            Err(error) => tracing::warn!(
                name,
                %error,
                "cannot hand the listener to the file descriptor store; a restart binds it anew"
            ),
        }
    }

    /// `FDSTOREREMOVE=1` + `FDNAME=name`: the manager closes every
    /// descriptor stored under `name`.
    pub fn forget(&self, name: &str) {
        if !self.enabled {
            return;
        }
        let text = format!("FDSTOREREMOVE=1\nFDNAME={name}\n");
        if let Err(error) = send(&text, &[]) {
            tracing::warn!(name, %error, "cannot remove a descriptor from the store");
        }
    }
}

/// One datagram to `NOTIFY_SOCKET` with `fds` attached (`SCM_RIGHTS`).
fn send(text: &str, fds: &[RawFd]) -> io::Result<()> {
    use nix::sys::socket::{
        AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, UnixAddr, sendmsg, socket,
    };
    let path = std::env::var_os("NOTIFY_SOCKET")
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "NOTIFY_SOCKET is not set"))?;
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    let address = match bytes.strip_prefix(b"@") {
        Some(abstract_name) => UnixAddr::new_abstract(abstract_name),
        None => UnixAddr::new(path.as_os_str()),
    }
    .map_err(io::Error::from)?;
    let socket = socket(
        AddressFamily::Unix,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(io::Error::from)?;
    let iov = [io::IoSlice::new(text.as_bytes())];
    let rights = [ControlMessage::ScmRights(fds)];
    let control: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
    let sent = sendmsg(
        socket.as_raw_fd(),
        &iov,
        control,
        MsgFlags::empty(),
        Some(&address),
    )
    .map_err(io::Error::from)?;
    if sent == text.len() {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short notification",
        ))
    }
}

/// The descriptors the service manager passed to this process, by name.
#[derive(Debug, Default)]
pub struct Inherited {
    fds: BTreeMap<String, Vec<OwnedFd>>,
    /// What was wrong with `LISTEN_*`, logged by `report` once logging is up.
    problems: Vec<String>,
}

impl Inherited {
    /// Takes what `LISTEN_PID`/`LISTEN_FDS`/`LISTEN_FDNAMES` describe. Must
    /// run before the process opens any descriptor of its own: a malformed
    /// `LISTEN_FDS` could otherwise name one. A malformed environment is
    /// noted and ignored (the daemon binds as usual); descriptors that are
    /// not open are skipped. Each taken descriptor is marked close-on-exec.
    pub fn capture() -> Inherited {
        let pid = std::env::var("LISTEN_PID").ok();
        let count = std::env::var("LISTEN_FDS").ok();
        let names = std::env::var("LISTEN_FDNAMES").ok();
        let mut inherited = Inherited::default();
        let listed = match parse_listen_env(
            pid.as_deref(),
            count.as_deref(),
            names.as_deref(),
            std::process::id(),
        ) {
            Ok(listed) => listed,
            Err(problem) => {
                inherited
                    .problems
                    .push(format!("{problem}; binding every listener anew"));
                return inherited;
            }
        };
        for (fd, name) in listed {
            // SAFETY: F_GETFD only reads the descriptor table entry.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            if flags < 0 {
                inherited.problems.push(format!(
                    "LISTEN_FDS names descriptor {fd} ({name}), which is not open; skipped"
                ));
                continue;
            }
            // SAFETY: the descriptor is open (checked above), this runs
            // before the process opened any of its own, and with LISTEN_PID
            // naming this process the service manager passed it to us to
            // own (sd_listen_fds(3)).
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: setting FD_CLOEXEC on a descriptor we own.
            unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
            inherited.fds.entry(name).or_default().push(owned);
        }
        inherited
    }

    /// Log what `capture` found (once logging is up).
    pub fn report(&self) {
        for problem in &self.problems {
            tracing::warn!("{problem}");
        }
        if !self.fds.is_empty() {
            let names: Vec<&str> = self.fds.keys().map(String::as_str).collect();
            tracing::info!(
                descriptors = self.len(),
                names = %names.join(","),
                "descriptors passed by the service manager (LISTEN_FDS)"
            );
        }
    }

    /// How many descriptors are left.
    pub fn len(&self) -> usize {
        self.fds.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// The descriptor stored as `name` (the first, when several share it;
    /// the others stay for `discard_rest`).
    pub fn take(&mut self, name: &str) -> Option<OwnedFd> {
        let fds = self.fds.get_mut(name)?;
        let fd = (!fds.is_empty()).then(|| fds.remove(0));
        if fds.is_empty() {
            self.fds.remove(name);
        }
        fd
    }

    /// Close everything not taken and remove it from the store: no longer
    /// configured (fewer shards, metrics off), or not the daemon's.
    pub fn discard_rest(self, store: &FdStore) {
        for (name, fds) in self.fds {
            tracing::info!(
                name,
                descriptors = fds.len(),
                "a descriptor from the service manager is not used by this configuration: \
                 closed and removed from the store"
            );
            drop(fds);
            store.forget(&name);
        }
    }
}

/// `LISTEN_*` as sd_listen_fds_with_names(3) reads them: `None` fields or
/// another process's `LISTEN_PID` give nothing; a malformed value is an
/// `Err` saying which. Names default to `unknown`.
pub fn parse_listen_env(
    pid: Option<&str>,
    count: Option<&str>,
    names: Option<&str>,
    own_pid: u32,
) -> Result<Vec<(RawFd, String)>, String> {
    let (Some(pid), Some(count)) = (pid, count) else {
        return Ok(Vec::new());
    };
    let pid: u32 = pid
        .trim()
        .parse()
        .map_err(|_| format!("LISTEN_PID={pid:?} is not a process id"))?;
    if pid != own_pid {
        return Ok(Vec::new());
    }
    let count: usize = count
        .trim()
        .parse()
        .map_err(|_| format!("LISTEN_FDS={count:?} is not a count of descriptors"))?;
    if count > limits::INHERITED_FDS_MAX {
        return Err(format!(
            "LISTEN_FDS={count} is more than the {} descriptors iggyd takes",
            limits::INHERITED_FDS_MAX
        ));
    }
    let names: Vec<String> = match names {
        None => vec!["unknown".to_string(); count],
        Some(names) => {
            let names: Vec<String> = names.split(':').map(str::to_string).collect();
            if names.len() != count {
                return Err(format!(
                    "LISTEN_FDNAMES names {} descriptors, LISTEN_FDS says {count}",
                    names.len()
                ));
            }
            names
        }
    };
    Ok((LISTEN_FDS_START..).zip(names).take(count).collect())
}

/// Whether a socket bound to `bound` serves `wanted` (port 0 in `wanted`
/// means any port).
pub fn address_matches(bound: SocketAddr, wanted: SocketAddr) -> bool {
    bound.ip() == wanted.ip() && (wanted.port() == 0 || bound.port() == wanted.port())
}

/// Checks that `fd` is a listening TCP socket bound to `wanted` (any port
/// when `wanted`'s is 0) and, with `reuse_port`, that it has
/// `SO_REUSEPORT`; returns it non-blocking or not as asked. `Err` says why
/// it does not fit (it is closed).
pub fn adopt_tcp(
    fd: OwnedFd,
    wanted: SocketAddr,
    reuse_port: bool,
    nonblocking: bool,
) -> Result<TcpListener, String> {
    let socket = stream_listener(fd)?;
    let bound = socket
        .local_addr()
        .map_err(|error| format!("its address cannot be read: {error}"))?
        .as_socket()
        .ok_or_else(|| "it is not an IP socket".to_string())?;
    if !address_matches(bound, wanted) {
        return Err(format!(
            "it is bound to {bound}, the configuration asks for {wanted}"
        ));
    }
    if reuse_port && !socket.reuse_port().unwrap_or(false) {
        return Err("it lacks SO_REUSEPORT, which the shards' listeners share a port by".into());
    }
    prepare(&socket, nonblocking)?;
    Ok(socket.into())
}

/// Checks that `fd` is a listening Unix stream socket bound to `path` and
/// that `path` still is a socket file (else nobody could reach it).
pub fn adopt_unix(fd: OwnedFd, path: &Path) -> Result<UnixListener, String> {
    use std::os::unix::fs::FileTypeExt;
    let socket = stream_listener(fd)?;
    let bound = socket
        .local_addr()
        .map_err(|error| format!("its address cannot be read: {error}"))?;
    match bound.as_pathname() {
        Some(bound) if bound == path => {}
        Some(bound) => {
            return Err(format!(
                "it is bound to {}, the configuration asks for {}",
                bound.display(),
                path.display()
            ));
        }
        None => return Err("it is not bound to a path".into()),
    }
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_socket() => {}
        Ok(_) => return Err(format!("{} is no longer a socket file", path.display())),
        Err(error) => return Err(format!("{}: {error}", path.display())),
    }
    prepare(&socket, false)?;
    Ok(UnixListener::from(OwnedFd::from(socket)))
}

fn stream_listener(fd: OwnedFd) -> Result<Socket, String> {
    let socket = Socket::from(fd);
    match socket.r#type() {
        Ok(Type::STREAM) => {}
        Ok(_) => return Err("it is not a stream socket".into()),
        Err(error) => return Err(format!("it is not a socket: {error}")),
    }
    match socket.is_listener() {
        Ok(true) => Ok(socket),
        Ok(false) => Err("it is not listening".into()),
        Err(error) => Err(format!("cannot tell whether it listens: {error}")),
    }
}

/// Blocking mode as the server wants it, close-on-exec, and no socket
/// filter (a daemon that stopped without a store attaches one that drops
/// new handshakes; none may survive into this process).
fn prepare(socket: &Socket, nonblocking: bool) -> Result<(), String> {
    socket
        .set_nonblocking(nonblocking)
        .and_then(|()| socket.set_cloexec(true))
        .map_err(|error| format!("cannot set its flags: {error}"))?;
    match socket.detach_filter() {
        Ok(()) => Ok(()),
        Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(error) => Err(format!("cannot detach its socket filter: {error}")),
    }
}

/// The shards' Iggy listeners and what happened to the ones passed back.
#[derive(Debug)]
pub struct Listeners {
    /// The address they share (port 0 resolved).
    pub address: SocketAddr,
    pub listeners: Vec<TcpListener>,
    /// How many came from the store.
    pub taken: usize,
}

/// One listener per shard on `wanted`: `iggy-<shard>` from `inherited`
/// when it still fits, else one from `bind` (on the port the others
/// share), handed to `store`. Every one rebound is logged with the reason.
pub fn iggy_listeners(
    inherited: &mut Inherited,
    store: &FdStore,
    wanted: SocketAddr,
    shards: usize,
    mut bind: impl FnMut(SocketAddr) -> io::Result<TcpListener>,
) -> io::Result<Listeners> {
    let mut slots: Vec<Option<TcpListener>> = Vec::with_capacity(shards);
    let mut address = wanted;
    for shard in 0..shards {
        let name = iggy_name(shard);
        let Some(fd) = inherited.take(&name) else {
            slots.push(None);
            continue;
        };
        // Every taken socket must share one port; the first taken fixes it
        // when the configuration leaves it to the kernel (port 0).
        match adopt_tcp(fd, address, true, true) {
            Ok(listener) => {
                if address.port() == 0 {
                    address = listener.local_addr()?;
                }
                tracing::info!(name, %address, "Iggy listener taken from the file descriptor store");
                slots.push(Some(listener));
            }
            Err(why) => {
                tracing::info!(name, %wanted, "binding the Iggy listener anew: the stored one does not fit: {why}");
                store.forget(&name);
                slots.push(None);
            }
        }
    }
    let taken = slots.iter().filter(|slot| slot.is_some()).count();
    let mut listeners = Vec::with_capacity(shards);
    for (shard, slot) in slots.into_iter().enumerate() {
        let listener = match slot {
            Some(listener) => listener,
            None => {
                let listener = bind(address)?;
                if address.port() == 0 {
                    address = listener.local_addr()?;
                }
                store.keep(&iggy_name(shard), listener.as_fd());
                listener
            }
        };
        listeners.push(listener);
    }
    if taken > 0 && taken < shards {
        tracing::info!(
            taken,
            shards,
            "some shards' listeners were bound anew (more shards than stored listeners, or some did not fit)"
        );
    }
    Ok(Listeners {
        address,
        listeners,
        taken,
    })
}

#[cfg(test)]
mod tests;
