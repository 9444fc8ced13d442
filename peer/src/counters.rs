//! What the peer transport counts, for Prometheus and for tests: one
//! [`PeerCounters`] per shard, written by that shard's clients and server
//! (relaxed atomics, single writer) and read from any thread as a
//! [`CountersSnapshot`].
//!
//! Must not: hold anything but counters (no locks, no per-peer maps: a
//! label per peer belongs to whoever exports them).

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// The transport's counters (see each field of `CountersSnapshot`).
        #[derive(Debug, Default)]
        pub struct PeerCounters {
            $($name: AtomicU64,)*
        }

        /// The counters at one moment.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct CountersSnapshot {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl PeerCounters {
            pub fn snapshot(&self) -> CountersSnapshot {
                CountersSnapshot {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                }
            }
        }
    };
}

counters! {
    /// Connections open now, either direction (a gauge).
    connections_open,
    /// Connections a server accepted (before any check).
    connections_accepted,
    /// Connections that passed TLS and the hello, either direction.
    connections_established,
    /// Connection attempts a client began.
    connect_attempts,
    /// Client attempts that failed (connect, TLS, hello, timeout).
    connect_failures,
    /// Accepted connections closed at once: the server was at
    /// `connections_max`.
    refused_capacity,
    /// Connections refused in the TLS handshake: not TLS, no certificate,
    /// a certificate the cluster CA did not issue, a timeout.
    refused_tls,
    /// Connections whose certificate does not name exactly the node its
    /// hello claims, or that meant to reach another node.
    refused_identity,
    /// Connections refused at the hello: not a hello, another version,
    /// another cluster, a timeout.
    refused_hello,
    /// Established connections closed for bytes that are not a valid
    /// frame: garbage, an oversized length, an unknown kind, a frame
    /// kind the other side never sends.
    refused_frames,
    /// Established connections closed because the peer stalled mid-frame,
    /// stopped taking bytes, or went silent past the idle timeout.
    connections_timed_out,
    /// Requests a client wrote.
    calls_sent,
    /// Requests a server read.
    calls_received,
    /// Calls answered with a failure (a client received one, or a
    /// server's handler returned one).
    calls_failed,
    /// Calls a client gave up on at their timeout.
    calls_timed_out,
    /// Calls that failed because their connection ended.
    calls_disconnected,
    /// Calls that failed because no connection could be made.
    calls_unreachable,
    /// Answers that arrived after their call had timed out.
    responses_discarded,
    /// Bytes read from peer sockets (TLS records included).
    bytes_in,
    /// Bytes written to peer sockets (TLS records included).
    bytes_out,
}

/// Which counter a connection refusal adds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    Capacity,
    Tls,
    Identity,
    Hello,
    Frames,
}

impl PeerCounters {
    fn add(counter: &AtomicU64, count: u64) {
        counter.fetch_add(count, Ordering::Relaxed);
    }

    pub(crate) fn opened(&self) {
        Self::add(&self.connections_open, 1);
    }

    pub(crate) fn closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn accepted(&self) {
        Self::add(&self.connections_accepted, 1);
    }

    pub(crate) fn established(&self) {
        Self::add(&self.connections_established, 1);
    }

    pub(crate) fn connect_attempt(&self) {
        Self::add(&self.connect_attempts, 1);
    }

    pub(crate) fn connect_failure(&self) {
        Self::add(&self.connect_failures, 1);
    }

    pub(crate) fn refused(&self, why: Refused) {
        Self::add(
            match why {
                Refused::Capacity => &self.refused_capacity,
                Refused::Tls => &self.refused_tls,
                Refused::Identity => &self.refused_identity,
                Refused::Hello => &self.refused_hello,
                Refused::Frames => &self.refused_frames,
            },
            1,
        );
    }

    pub(crate) fn timed_out(&self) {
        Self::add(&self.connections_timed_out, 1);
    }

    pub(crate) fn call_sent(&self) {
        Self::add(&self.calls_sent, 1);
    }

    pub(crate) fn call_received(&self) {
        Self::add(&self.calls_received, 1);
    }

    pub(crate) fn call_failed(&self) {
        Self::add(&self.calls_failed, 1);
    }

    pub(crate) fn call_timed_out(&self) {
        Self::add(&self.calls_timed_out, 1);
    }

    pub(crate) fn call_disconnected(&self) {
        Self::add(&self.calls_disconnected, 1);
    }

    pub(crate) fn call_unreachable(&self) {
        Self::add(&self.calls_unreachable, 1);
    }

    pub(crate) fn response_discarded(&self) {
        Self::add(&self.responses_discarded, 1);
    }

    pub(crate) fn bytes_read(&self, count: usize) {
        Self::add(&self.bytes_in, count as u64);
    }

    pub(crate) fn bytes_written(&self, count: usize) {
        Self::add(&self.bytes_out, count as u64);
    }
}

/// Counts a connection open while it lives.
#[derive(Debug)]
pub(crate) struct OpenConnection(std::sync::Arc<PeerCounters>);

impl OpenConnection {
    pub(crate) fn new(counters: std::sync::Arc<PeerCounters>) -> OpenConnection {
        counters.opened();
        OpenConnection(counters)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.closed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves each recording method moves its own counter, and the open
    // gauge follows the guard.
    #[test]
    fn counters_move_and_the_gauge_follows_its_guard() {
        let counters = std::sync::Arc::new(PeerCounters::default());
        counters.refused(Refused::Identity);
        counters.bytes_read(10);
        counters.bytes_written(7);
        let open = OpenConnection::new(counters.clone());
        assert_eq!(counters.snapshot().connections_open, 1);
        drop(open);
        let snapshot = counters.snapshot();
        assert_eq!(
            snapshot,
            CountersSnapshot {
                refused_identity: 1,
                bytes_in: 10,
                bytes_out: 7,
                ..CountersSnapshot::default()
            }
        );
    }
}
