//! The socket side of the console: a reader thread that connects to the
//! daemon's admin socket, says hello, subscribes with history (the whole
//! window on the first line, then only newer points), and turns every
//! response line into `Event`s for the UI thread. When the connection fails
//! or breaks it reports `Disconnected` and tries again with exponential
//! backoff (200 ms doubling to at most 3 s). It also serves `--once` (one
//! snapshot line, optionally the history line, for scripts), sends the
//! operator's confirmed actions, and asks for the Cluster view's
//! `cluster_status`, each on a connection of its own.
//!
//! It never touches the terminal and never panics on what the socket
//! sends: lines are length-capped and decoded into typed errors.

use crate::api::{self, LineRead, Payload, read_line_capped};
use crate::event::Event;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::Duration;

/// First retry delay after a failed or broken connection.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(200);
/// Retry delays double up to this.
pub const BACKOFF_MAX: Duration = Duration::from_secs(3);
/// A response line longer than this is treated as a broken daemon (a
/// snapshot of many thousands of partitions is still far below it).
pub const RESPONSE_LINE_BYTES_MAX: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub socket: PathBuf,
    /// Subscription interval, sent as `interval_ms`.
    pub interval: Duration,
}

impl ClientConfig {
    /// How long without a line before the connection counts as dead: three
    /// intervals, and never less than 5 s.
    pub fn stale_after(&self) -> Duration {
        (self.interval * 3).max(Duration::from_secs(5))
    }
}

/// Start the reader thread. It ends when `events` has no receiver left.
pub fn spawn(
    config: ClientConfig,
    events: Sender<Event>,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("iggy-top-client".into())
        .spawn(move || run(&config, &events))
}

/// Why a session ended.
enum SessionEnd {
    /// The UI is gone; stop.
    ReceiverGone,
    Failed {
        reason: String,
        /// At least one snapshot arrived (the next retry starts from the
        /// initial backoff again).
        delivered: bool,
    },
}

fn run(config: &ClientConfig, events: &Sender<Event>) {
    let mut backoff = BACKOFF_INITIAL;
    loop {
        match session(config, events) {
            SessionEnd::ReceiverGone => return,
            SessionEnd::Failed { reason, delivered } => {
                if delivered {
                    backoff = BACKOFF_INITIAL;
                }
                let event = Event::Disconnected {
                    reason,
                    retry_in: backoff,
                };
                if events.send(event).is_err() {
                    return;
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

fn session(config: &ClientConfig, events: &Sender<Event>) -> SessionEnd {
    let failed = |reason: String, delivered: bool| SessionEnd::Failed { reason, delivered };
    let stream = match connect(&config.socket, config.stale_after()) {
        Ok(stream) => stream,
        Err(reason) => return failed(reason, false),
    };
    let mut reader = BufReader::new(&stream);
    let mut line = Vec::new();
    let hello = match request(&stream, &mut reader, &mut line, &api::hello_request()) {
        Ok(Payload::Hello(hello)) => hello,
        Ok(other) => return failed(format!("unexpected answer to hello: {other:?}"), false),
        Err(reason) => return failed(reason, false),
    };
    if events.send(Event::Connected(hello)).is_err() {
        return SessionEnd::ReceiverGone;
    }
    let interval_ms = u64::try_from(config.interval.as_millis()).unwrap_or(u64::MAX);
    if let Err(error) = (&stream).write_all(api::subscribe_history_request(interval_ms).as_bytes())
    {
        return failed(format!("cannot subscribe: {error}"), false);
    }
    let mut delivered = false;
    loop {
        let payload = match read_payload(&mut reader, &mut line) {
            Ok(payload) => payload,
            Err(reason) => return failed(reason, delivered),
        };
        let event = match payload {
            Payload::Snapshot { snapshot, history } => {
                if let Some(history) = history
                    && events.send(Event::History(history)).is_err()
                {
                    return SessionEnd::ReceiverGone;
                }
                Event::Snapshot(snapshot)
            }
            other => {
                return failed(
                    format!("unexpected line in a subscription: {other:?}"),
                    delivered,
                );
            }
        };
        if events.send(event).is_err() {
            return SessionEnd::ReceiverGone;
        }
        delivered = true;
    }
}

fn connect(socket: &Path, read_timeout: Duration) -> Result<UnixStream, String> {
    let stream = UnixStream::connect(socket)
        .map_err(|error| format!("cannot connect to {}: {error}", socket.display()))?;
    stream
        .set_read_timeout(Some(read_timeout))
        .and_then(|()| stream.set_write_timeout(Some(read_timeout)))
        .map_err(|error| format!("cannot set socket timeouts: {error}"))?;
    Ok(stream)
}

fn request(
    stream: &UnixStream,
    reader: &mut BufReader<&UnixStream>,
    line: &mut Vec<u8>,
    request: &str,
) -> Result<Payload, String> {
    let mut writer = stream;
    writer
        .write_all(request.as_bytes())
        .map_err(|error| format!("cannot send a request: {error}"))?;
    read_payload(reader, line)
}

fn read_payload(reader: &mut impl BufRead, line: &mut Vec<u8>) -> Result<Payload, String> {
    match read_line_capped(reader, line, RESPONSE_LINE_BYTES_MAX) {
        Ok(LineRead::Line) => api::decode(line),
        Ok(LineRead::Eof) => Err("the daemon closed the connection".into()),
        Ok(LineRead::TooLong) => Err(format!(
            "the daemon sent a line longer than {RESPONSE_LINE_BYTES_MAX} bytes"
        )),
        Err(error)
            if matches!(
                error.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Err("the daemon stopped answering (no line within the timeout)".into())
        }
        Err(error) => Err(format!("reading from the daemon failed: {error}")),
    }
}

/// Send one request line on a connection of its own and return the
/// daemon's `done` message (or its error), for the operator's actions.
pub fn send_action(socket: &Path, line: &str, timeout: Duration) -> Result<String, String> {
    let stream = connect(socket, timeout)?;
    let mut reader = BufReader::new(&stream);
    let mut buffer = Vec::new();
    match request(&stream, &mut reader, &mut buffer, line)? {
        Payload::Done { message } => Ok(message),
        other => Err(format!("unexpected answer: {other:?}")),
    }
}

/// Ask for `cluster_status` on a connection of its own (the Cluster
/// view's refresh). A single node answers with `api::cluster::NO_CLUSTER`.
pub fn fetch_cluster_status(
    socket: &Path,
    timeout: Duration,
) -> Result<Box<api::cluster::ClusterStatus>, String> {
    let stream = connect(socket, timeout)?;
    let mut reader = BufReader::new(&stream);
    let mut line = Vec::new();
    let request_line = api::cluster::cluster_status_request();
    match request(&stream, &mut reader, &mut line, &request_line)? {
        Payload::ClusterStatus { status } => Ok(status),
        other => Err(format!("unexpected answer to cluster_status: {other:?}")),
    }
}

/// Ask for the whole history and return its line as the daemon sent it
/// (for `--once --json --history`).
pub fn fetch_history_line(socket: &Path, timeout: Duration) -> Result<String, String> {
    let stream =
        connect(socket, timeout).map_err(|reason| format!("no iggyd answers: {reason}"))?;
    let mut reader = BufReader::new(&stream);
    let mut line = Vec::new();
    match request(&stream, &mut reader, &mut line, &api::history_request())? {
        Payload::History { .. } => Ok(String::from_utf8_lossy(&line).trim_end().to_string()),
        other => Err(format!("unexpected answer to history: {other:?}")),
    }
}

/// Ask for one snapshot and return its line exactly as the daemon sent it
/// (for `--once --json`), after checking that it is a successful snapshot.
pub fn fetch_snapshot_line(socket: &Path, timeout: Duration) -> Result<String, String> {
    let stream =
        connect(socket, timeout).map_err(|reason| format!("no iggyd answers: {reason}"))?;
    let mut reader = BufReader::new(&stream);
    let mut line = Vec::new();
    match request(&stream, &mut reader, &mut line, &api::snapshot_request())? {
        Payload::Snapshot { .. } => Ok(String::from_utf8_lossy(&line).trim_end().to_string()),
        other => Err(format!("unexpected answer to snapshot: {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_after_is_three_intervals_at_least_five_seconds() {
        let config = |ms| ClientConfig {
            socket: PathBuf::new(),
            interval: Duration::from_millis(ms),
        };
        assert_eq!(config(1000).stale_after(), Duration::from_secs(5));
        assert_eq!(config(10_000).stale_after(), Duration::from_secs(30));
    }
}
