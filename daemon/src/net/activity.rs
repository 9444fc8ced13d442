//! What the console shows about each client connection: its counters
//! (requests, bytes in and out, last command, when it last spoke, TLS or
//! not) and a way to close it from the admin socket. The connection task
//! updates its `Activity` (plain `Cell`s: one thread, no atomics on the
//! request path); the shard's once-a-second report copies every activity
//! into a `ClientReport` (`shard::front`), which is all the admin side
//! ever reads.
//!
//! Must not: be shared across shards, or make a request wait: closing
//! sends one message on a bounded channel of one, which the connection's
//! frame loop selects on.

use crate::shard::front::ClientReport;
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::time::Instant;

/// One connection's counters, owned by its shard.
#[derive(Debug)]
pub struct Activity {
    connected_at: Instant,
    tls: Cell<bool>,
    requests: Cell<u64>,
    bytes_in: Cell<u64>,
    bytes_out: Cell<u64>,
    last_command: Cell<u32>,
    last_request_at: Cell<Instant>,
    /// The login's session number (0 before login): the key it joins
    /// consumer groups under, so the console can name a group's members.
    session: Cell<u64>,
    /// Sending on it closes the connection (taken by the first close).
    close: RefCell<Option<flume::Sender<()>>>,
    closed: flume::Receiver<()>,
}

impl Default for Activity {
    fn default() -> Activity {
        Activity::new(Instant::now())
    }
}

impl Activity {
    pub fn new(now: Instant) -> Activity {
        let (close, closed) = flume::bounded(1);
        Activity {
            connected_at: now,
            tls: Cell::new(false),
            requests: Cell::new(0),
            bytes_in: Cell::new(0),
            bytes_out: Cell::new(0),
            last_command: Cell::new(0),
            last_request_at: Cell::new(now),
            session: Cell::new(0),
            close: RefCell::new(Some(close)),
            closed,
        }
    }

    pub fn set_tls(&self) {
        self.tls.set(true);
    }

    /// The connection logged in as session `session` (0: it logged out).
    pub fn set_session(&self, session: u64) {
        self.session.set(session);
    }

    /// A request frame of `bytes` (header included) with `command` arrived.
    pub fn request(&self, command: u32, bytes: usize) {
        self.requests.set(self.requests.get().saturating_add(1));
        self.bytes_in
            .set(self.bytes_in.get().saturating_add(bytes as u64));
        self.last_command.set(command);
        self.last_request_at.set(Instant::now());
    }

    /// A reply of `bytes` was written.
    pub fn replied(&self, bytes: usize) {
        self.bytes_out
            .set(self.bytes_out.get().saturating_add(bytes as u64));
    }

    /// Ask the connection to close; false when it was asked already.
    pub fn close(&self) -> bool {
        match self.close.borrow_mut().take() {
            Some(close) => close.try_send(()).is_ok(),
            None => false,
        }
    }

    /// Resolves once `close` was called.
    pub fn closed(&self) -> flume::Receiver<()> {
        self.closed.clone()
    }

    pub fn report(&self, client_id: u32, peer: SocketAddr, user_id: Option<u32>) -> ClientReport {
        let now = Instant::now();
        ClientReport {
            client_id,
            peer,
            user_id,
            session: self.session.get(),
            tls: self.tls.get(),
            requests: self.requests.get(),
            bytes_in: self.bytes_in.get(),
            bytes_out: self.bytes_out.get(),
            last_command: self.last_command.get(),
            idle: now.saturating_duration_since(self.last_request_at.get()),
            connected: now.saturating_duration_since(self.connected_at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves the counters add up into the report and a close is delivered
    /// once: the second close reports that it was asked already.
    #[test]
    fn counts_and_closes_once() {
        let activity = Activity::default();
        activity.set_tls();
        activity.request(101, 300);
        activity.request(100, 56);
        activity.replied(1000);
        activity.set_session(77);
        let peer: SocketAddr = "127.0.0.1:5".parse().unwrap();
        let report = activity.report(9, peer, Some(1));
        assert_eq!(
            (report.requests, report.bytes_in, report.bytes_out),
            (2, 356, 1000)
        );
        assert_eq!((report.last_command, report.tls), (100, true));
        assert_eq!(report.session, 77);
        let closed = activity.closed();
        assert!(closed.try_recv().is_err());
        assert!(activity.close());
        assert!(closed.try_recv().is_ok());
        assert!(!activity.close());
    }
}
