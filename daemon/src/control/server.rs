//! The admin socket server: `AdminSocket` binds `admin.socket` (replacing a
//! stale socket file left by a crashed run, refusing one that another
//! daemon still serves) with mode 0660, or takes a listener back from
//! systemd's file descriptor store (`fdstore`; `boot` does either before
//! any shard starts); `ControlServer` accepts on a thread named `admin`,
//! checks each peer's credentials (`SO_PEERCRED`), and serves each client
//! on its own thread: request lines in, response lines out (`api`). A
//! socket handed over to the next process keeps listening and keeps its
//! file when the server stops.
//!
//! Bounds: at most `limits::ADMIN_CLIENTS_MAX` clients; request lines of at
//! most `api::REQUEST_LINE_BYTES_MAX` bytes; an idle client is closed after
//! `ADMIN_CLIENT_IDLE_TIMEOUT`; a response that cannot be written within
//! `ADMIN_CLIENT_WRITE_TIMEOUT` drops that client. Clients never wait for
//! each other, and nothing here waits for a shard.
//!
//! Who may connect: the file mode (0660, the daemon's user and group) is the
//! first gate; the peer's credentials are the second, so a socket whose mode
//! was loosened by hand still refuses strangers. Allowed are root, the
//! daemon's effective user, and members of the daemon's effective group
//! (primary group, or supplementary membership from the group database).

use crate::control::ControlSource;
use crate::control::api::{self, LineRead, Payload, Request, Response, read_line_capped};
use crate::control::history::Cursor;
use crate::limits;
use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Mode of the socket file: read/write for the daemon's user and group.
pub const SOCKET_MODE: u32 = 0o660;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("admin.socket: cannot create the directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "admin.socket: {path} is served by another running process (a second iggyd?); stop it \
         or set admin.socket to another path"
    )]
    LiveSocket { path: PathBuf },
    #[error("admin.socket: {path} exists and is not a socket; refusing to replace it")]
    NotASocket { path: PathBuf },
    #[error("admin.socket: cannot check whether {path} is still in use: {source}")]
    Probe {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("admin.socket: cannot bind {path}: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("admin.socket: cannot set mode {mode:o} on {path}: {source}")]
    Permissions {
        path: PathBuf,
        mode: u32,
        #[source]
        source: io::Error,
    },
    #[error("admin.socket: cannot start the admin thread: {0}")]
    Spawn(#[source] io::Error),
}

impl ControlError {
    /// Whether the error is the operator's configuration rather than a
    /// transient failure (the exit code follows: EX_CONFIG or a plain failure).
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            ControlError::LiveSocket { .. } | ControlError::NotASocket { .. }
        )
    }
}

/// The admin socket's listener before its server starts: bound here, or
/// taken back from the service manager's file descriptor store (`fdstore`).
#[derive(Debug)]
pub struct AdminSocket {
    path: PathBuf,
    /// Device and inode of the socket file, so `stop` never removes a
    /// file that somebody else put at the same path.
    file_id: (u64, u64),
    listener: UnixListener,
    hand_over: bool,
}

impl AdminSocket {
    /// Bind `path` (replacing a stale socket file, refusing a live one) with
    /// mode 0660.
    pub fn bind(path: &Path) -> Result<AdminSocket, ControlError> {
        let listener = bind(path)?;
        AdminSocket::new(path, listener)
    }

    /// A listener already bound to `path` (checked by `fdstore::adopt_unix`).
    pub fn adopt(path: &Path, listener: UnixListener) -> Result<AdminSocket, ControlError> {
        AdminSocket::new(path, listener)
    }

    fn new(path: &Path, listener: UnixListener) -> Result<AdminSocket, ControlError> {
        let metadata = std::fs::symlink_metadata(path).map_err(|source| ControlError::Bind {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(AdminSocket {
            path: path.to_path_buf(),
            file_id: (metadata.dev(), metadata.ino()),
            listener,
            hand_over: false,
        })
    }

    /// The service manager keeps this socket across a restart: stopping
    /// leaves it listening and its file in place for the next process.
    pub fn hand_over_on_stop(&mut self) {
        self.hand_over = true;
    }

    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.listener)
    }
}

/// The running admin socket. `stop` (or drop) closes every client, ends the
/// threads and removes the socket file if it is still the one bound here
/// (unless it is handed over to the next process).
pub struct ControlServer {
    path: PathBuf,
    /// Device and inode of the bound socket file, so `stop` never removes a
    /// file that somebody else put at the same path.
    file_id: (u64, u64),
    listener: UnixListener,
    hand_over: bool,
    shared: Arc<Shared>,
    accept: Option<std::thread::JoinHandle<()>>,
    /// Thread `history`: feeds the source's history rings once a second.
    history: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for ControlServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlServer")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The credentials the daemon runs with; peers are compared against them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DaemonIdentity {
    pub uid: u32,
    pub gid: u32,
}

impl DaemonIdentity {
    pub fn current() -> DaemonIdentity {
        DaemonIdentity {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        }
    }
}

struct Shared {
    source: Arc<dyn ControlSource>,
    daemon: DaemonIdentity,
    stopping: AtomicBool,
    /// Set with `stopping`, so threads that sleep wake at once.
    stop_signal: (Mutex<bool>, Condvar),
    /// Clones of the connected clients' streams, so `stop` can shut them
    /// down (which wakes their blocked reads and writes).
    clients: Mutex<HashMap<u64, UnixStream>>,
    clients_changed: Condvar,
    next_client: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic aborts the daemon, so a poisoned lock is never observed in
    // practice; if it were, the data (a map of streams) is still consistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ControlServer {
    /// Bind `path` and start serving `source` on it.
    pub fn start(
        path: &Path,
        source: Arc<dyn ControlSource>,
    ) -> Result<ControlServer, ControlError> {
        ControlServer::start_as(path, source, DaemonIdentity::current())
    }

    /// `start` with the identity peers are checked against given explicitly
    /// (tests use it to act as a daemon of another user).
    pub fn start_as(
        path: &Path,
        source: Arc<dyn ControlSource>,
        daemon: DaemonIdentity,
    ) -> Result<ControlServer, ControlError> {
        ControlServer::serve(AdminSocket::bind(path)?, source, daemon)
    }

    /// Serve `source` on a listener bound (or taken back) before.
    pub fn start_on(
        socket: AdminSocket,
        source: Arc<dyn ControlSource>,
    ) -> Result<ControlServer, ControlError> {
        ControlServer::serve(socket, source, DaemonIdentity::current())
    }

    fn serve(
        socket: AdminSocket,
        source: Arc<dyn ControlSource>,
        daemon: DaemonIdentity,
    ) -> Result<ControlServer, ControlError> {
        let AdminSocket {
            path,
            file_id,
            listener,
            hand_over,
        } = socket;
        let shared = Arc::new(Shared {
            source,
            daemon,
            stopping: AtomicBool::new(false),
            stop_signal: (Mutex::new(false), Condvar::new()),
            clients: Mutex::new(HashMap::new()),
            clients_changed: Condvar::new(),
            next_client: AtomicU64::new(0),
        });
        let accept_listener = listener.try_clone().map_err(ControlError::Spawn)?;
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("admin".into())
            .spawn(move || accept_loop(accept_listener, accept_shared))
            .map_err(|error| {
                if !hand_over {
                    let _ = std::fs::remove_file(&path);
                }
                ControlError::Spawn(error)
            })?;
        let history_shared = Arc::clone(&shared);
        let history = std::thread::Builder::new()
            .name("history".into())
            .spawn(move || history_loop(&history_shared));
        let history = match history {
            Ok(history) => Some(history),
            Err(error) => {
                // The socket still serves snapshots; graphs start empty.
                tracing::warn!(%error, "admin socket: cannot start the history thread");
                None
            }
        };
        Ok(ControlServer {
            path,
            file_id,
            listener,
            hand_over,
            shared,
            accept: Some(accept),
            history,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Clients connected right now.
    pub fn clients(&self) -> usize {
        lock(&self.shared.clients).len()
    }

    /// Close every client, end the threads, remove the socket file.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.shared.stopping.store(true, Ordering::SeqCst);
        {
            let (stopped, wake) = &self.shared.stop_signal;
            *lock(stopped) = true;
            wake.notify_all();
        }
        // Shutting the listening socket down makes the blocked accept(2)
        // return at once; the loop then sees `stopping`. A socket handed
        // over must keep listening: a connection to ourselves wakes the
        // accept instead (it is closed unread).
        let woken = self.hand_over && UnixStream::connect(&self.path).is_ok();
        if !woken {
            let _ = nix::sys::socket::shutdown(
                self.listener.as_raw_fd(),
                nix::sys::socket::Shutdown::Both,
            );
        }
        let _ = accept.join();
        if let Some(history) = self.history.take() {
            let _ = history.join();
        }
        let deadline = Instant::now() + limits::ADMIN_STOP_TIMEOUT;
        let mut clients = lock(&self.shared.clients);
        for stream in clients.values() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        while !clients.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    clients = clients.len(),
                    "admin clients still finishing at shutdown"
                );
                break;
            }
            clients = self
                .shared
                .clients_changed
                .wait_timeout(clients, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(clients);
        let still_ours = !self.hand_over
            && std::fs::symlink_metadata(&self.path)
                .map(|metadata| (metadata.dev(), metadata.ino()) == self.file_id)
                .unwrap_or(false);
        if still_ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Bind the socket file, replacing a stale one, and set its mode.
fn bind(path: &Path) -> Result<UnixListener, ControlError> {
    if let Some(parent) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent).map_err(|source| ControlError::CreateDir {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if !metadata.file_type().is_socket() => {
            return Err(ControlError::NotASocket {
                path: path.to_path_buf(),
            });
        }
        Ok(_) => match UnixStream::connect(path) {
            Ok(_) => {
                return Err(ControlError::LiveSocket {
                    path: path.to_path_buf(),
                });
            }
            // Nobody listens: a socket file left behind by a run that
            // crashed or was killed.
            Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => {
                match std::fs::remove_file(path) {
                    Ok(()) => {
                        tracing::info!(path = %path.display(), "removed a stale admin socket")
                    }
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                    Err(source) => {
                        return Err(ControlError::Bind {
                            path: path.to_path_buf(),
                            source,
                        });
                    }
                }
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(ControlError::Probe {
                    path: path.to_path_buf(),
                    source,
                });
            }
        },
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(ControlError::Probe {
                path: path.to_path_buf(),
                source,
            });
        }
    }
    let listener = UnixListener::bind(path).map_err(|source| ControlError::Bind {
        path: path.to_path_buf(),
        source,
    })?;
    // Between bind and chmod the file has the umask's mode; the credential
    // check below still guards that instant.
    if let Err(source) =
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
    {
        let _ = std::fs::remove_file(path);
        return Err(ControlError::Permissions {
            path: path.to_path_buf(),
            mode: SOCKET_MODE,
            source,
        });
    }
    Ok(listener)
}

/// Record the source's history once a second, on the second's cadence,
/// until the server stops.
fn history_loop(shared: &Shared) {
    let mut next = Instant::now();
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        shared.source.record_history();
        next += HISTORY_INTERVAL;
        let now = Instant::now();
        if next <= now {
            next = now + HISTORY_INTERVAL;
        }
        if shared.wait_stopping(next.saturating_duration_since(now)) {
            return;
        }
    }
}

/// How often the history rings get a point.
const HISTORY_INTERVAL: Duration = Duration::from_millis(crate::control::history::SECOND_STEP_MS);

fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    loop {
        let accepted = listener.accept();
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        match accepted {
            Ok((stream, _)) => admit(stream, &shared),
            Err(error) => match error.raw_os_error() {
                Some(libc::EINTR | libc::ECONNABORTED) => {}
                _ => {
                    // Out of descriptors or similar: say so and back off
                    // instead of spinning; the condition usually passes.
                    tracing::warn!(%error, "admin socket: accept failed");
                    std::thread::sleep(Duration::from_millis(100));
                }
            },
        }
    }
}

/// Register a new client and start its thread, or refuse it when full.
fn admit(stream: UnixStream, shared: &Arc<Shared>) {
    let mut clients = lock(&shared.clients);
    if clients.len() >= limits::ADMIN_CLIENTS_MAX {
        drop(clients);
        refuse(
            &stream,
            &format!(
                "too many admin clients: at most {} at once; try again later",
                limits::ADMIN_CLIENTS_MAX
            ),
        );
        return;
    }
    let registered = match stream.try_clone() {
        Ok(registered) => registered,
        Err(error) => {
            drop(clients);
            refuse(&stream, &format!("cannot serve this connection: {error}"));
            return;
        }
    };
    let id = shared.next_client.fetch_add(1, Ordering::Relaxed);
    clients.insert(id, registered);
    drop(clients);
    let client_shared = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("admin-client".into())
        .spawn(move || {
            serve(&stream, &client_shared);
            let _ = stream.shutdown(std::net::Shutdown::Both);
            let mut clients = lock(&client_shared.clients);
            clients.remove(&id);
            client_shared.clients_changed.notify_all();
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "admin socket: cannot start a client thread");
        if let Some(stream) = lock(&shared.clients).remove(&id) {
            refuse(&stream, "cannot serve this connection: no thread available");
        }
    }
}

/// Write one error line (briefly) and close without a reset.
fn refuse(stream: &UnixStream, message: &str) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let _ = write_response(stream, &Response::error(message));
    close_gently(stream, Duration::ZERO);
}

/// Half-close, then read and discard what the client already sent (for up
/// to `linger`, and at most `REQUEST_LINE_BYTES_MAX` bytes) before closing.
/// Closing a Unix socket with unread input resets the connection, and the
/// client would see ECONNRESET instead of our last line followed by end of
/// stream. With a zero `linger` only what has already arrived is drained,
/// so the accept thread never waits here.
fn close_gently(stream: &UnixStream, linger: Duration) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let ready = if linger.is_zero() {
        stream.set_nonblocking(true)
    } else {
        stream.set_read_timeout(Some(linger))
    };
    if ready.is_err() {
        return;
    }
    let deadline = Instant::now() + linger;
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    let mut reader = stream;
    while drained < api::REQUEST_LINE_BYTES_MAX {
        match io::Read::read(&mut reader, &mut sink) {
            Ok(0) | Err(_) => break,
            Ok(length) => drained += length,
        }
        if !linger.is_zero() && Instant::now() >= deadline {
            break;
        }
    }
}

fn write_response(stream: &UnixStream, response: &Response) -> io::Result<()> {
    let mut writer = stream;
    writer.write_all(&response.to_line())
}

/// Decide whether a peer may use the socket. `supplementary_gids` yields
/// the groups the peer's user belongs to (from the group database).
pub fn authorize(
    peer_uid: u32,
    peer_gid: u32,
    daemon: DaemonIdentity,
    supplementary_gids: impl FnOnce(u32, u32) -> Vec<u32>,
) -> Result<(), String> {
    let allowed = peer_uid == 0
        || peer_uid == daemon.uid
        || peer_gid == daemon.gid
        || supplementary_gids(peer_uid, peer_gid).contains(&daemon.gid);
    if allowed {
        Ok(())
    } else {
        Err(format!(
            "permission denied: uid {peer_uid} is not root, the daemon's user or in its group"
        ))
    }
}

/// The groups of user `uid` (primary `gid` included), from the group
/// database; empty when the user is unknown.
fn groups_of(uid: u32, gid: u32) -> Vec<u32> {
    let Ok(Some(user)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) else {
        return Vec::new();
    };
    let Ok(name) = std::ffi::CString::new(user.name.clone()) else {
        return Vec::new();
    };
    match nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(gid)) {
        Ok(groups) => groups.into_iter().map(|group| group.as_raw()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Serve one client until it closes, errs, idles out, or the server stops.
fn serve(stream: &UnixStream, shared: &Shared) {
    let credentials =
        match nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials) {
            Ok(credentials) => credentials,
            Err(errno) => {
                refuse(stream, &format!("cannot read peer credentials: {errno}"));
                return;
            }
        };
    if let Err(message) = authorize(
        credentials.uid(),
        credentials.gid(),
        shared.daemon,
        groups_of,
    ) {
        tracing::warn!(
            uid = credentials.uid(),
            gid = credentials.gid(),
            pid = credentials.pid(),
            "admin socket: refused a client"
        );
        let _ = write_response(stream, &Response::error(message));
        close_gently(stream, limits::ADMIN_CLOSE_LINGER);
        return;
    }
    let _ = stream.set_write_timeout(Some(limits::ADMIN_CLIENT_WRITE_TIMEOUT));
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let _ = stream.set_read_timeout(Some(limits::ADMIN_CLIENT_IDLE_TIMEOUT));
        match read_line_capped(&mut reader, &mut line, api::REQUEST_LINE_BYTES_MAX) {
            Ok(LineRead::Line) => {}
            Ok(LineRead::Eof) | Err(_) => return,
            Ok(LineRead::TooLong) => {
                let message = format!(
                    "request line longer than {} bytes; closing the connection",
                    api::REQUEST_LINE_BYTES_MAX
                );
                let _ = write_response(stream, &Response::error(message));
                close_gently(stream, limits::ADMIN_CLOSE_LINGER);
                return;
            }
        }
        let request = trim_line(&line);
        if request.is_empty() {
            continue;
        }
        let response = match api::parse_request(request) {
            Err(error) => Response::error(error.to_string()),
            Ok(Request::Hello) => Response::payload(Payload::Hello(shared.source.hello())),
            Ok(Request::Snapshot) => snapshot_response(shared, None),
            Ok(Request::History) => match shared.source.history(Cursor::default()) {
                Some((history, _)) => Response::payload(Payload::History {
                    history: Box::new(history),
                }),
                None => Response::error("this daemon keeps no history"),
            },
            Ok(Request::Subscribe { interval, history }) => {
                subscribe(stream, &mut reader, shared, interval, history);
                return;
            }
            Ok(Request::Action(action)) => match shared.source.action(action) {
                Ok(message) => Response::payload(Payload::Done { message }),
                Err(message) => Response::error(message),
            },
            Ok(Request::Cluster(op)) => match shared.source.cluster(op) {
                Ok(payload) => Response::payload(payload),
                Err(message) => Response::error(message),
            },
        };
        if write_response(stream, &response).is_err() {
            return;
        }
    }
}

/// A snapshot line; with a cursor, also the history points after it (and
/// the cursor moves past them).
fn snapshot_response(shared: &Shared, cursor: Option<&mut Cursor>) -> Response {
    let history = cursor.and_then(|cursor| {
        let (history, next) = shared.source.history(*cursor)?;
        *cursor = next;
        Some(Box::new(history))
    });
    Response::payload(Payload::Snapshot {
        snapshot: Box::new(shared.source.snapshot()),
        history,
    })
}

/// Push a snapshot now and then every `interval` until the client goes away
/// (a write fails or times out) or the server stops. With `history`, each
/// line carries the history points this subscriber has not had yet: the
/// whole window first. The client may half-close its side after the
/// request (`echo ... | socat`); it may not send further requests on this
/// connection.
fn subscribe(
    stream: &UnixStream,
    reader: &mut BufReader<&UnixStream>,
    shared: &Shared,
    interval: Duration,
    history: bool,
) {
    let mut cursor = history.then(Cursor::default);
    let mut client_done_sending = false;
    let mut next = Instant::now();
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        if write_response(stream, &snapshot_response(shared, cursor.as_mut())).is_err() {
            tracing::debug!("admin subscriber dropped: it went away or stopped reading");
            return;
        }
        // Keep the cadence; after a slow round, start again from now rather
        // than sending a burst to catch up.
        next += interval;
        let now = Instant::now();
        if next <= now {
            next = now + interval;
        }
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if client_done_sending {
                if shared.wait_stopping(left) {
                    return;
                }
                continue;
            }
            // Waiting in read(2) notices the client closing, and `stop`'s
            // shutdown of this stream wakes it at once.
            let _ = stream.set_read_timeout(Some(left));
            match reader.fill_buf() {
                Ok([]) => client_done_sending = true,
                Ok(_) => {
                    let message = "a subscription takes no further requests; open another \
                                   connection for them";
                    let _ = write_response(stream, &Response::error(message));
                    close_gently(stream, limits::ADMIN_CLOSE_LINGER);
                    return;
                }
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => return,
            }
        }
    }
}

impl Shared {
    /// Sleep up to `timeout`; true when the server is stopping.
    fn wait_stopping(&self, timeout: Duration) -> bool {
        let (stopped, wake) = &self.stop_signal;
        let guard = lock(stopped);
        let (guard, _) = wake
            .wait_timeout_while(guard, timeout, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner);
        *guard
    }
}

/// Strip a trailing `\r` and surrounding ASCII whitespace.
fn trim_line(line: &[u8]) -> &[u8] {
    line.trim_ascii()
}

#[cfg(test)]
mod tests;
