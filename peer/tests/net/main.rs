//! The transport over real sockets on 127.0.0.1 (port 0) and real TLS
//! with certificates from `ClusterCerts`, each test on monoio's legacy
//! driver and on io_uring: calls (`calls.rs`), refused peers
//! (`refusals.rs`), seeded garbage before and after the handshake
//! (`garbage.rs`), and connections that stall, end and come back
//! (`lifecycle.rs`). One test binary.
//!
//! Must not: reach past the crate's public API (the tests are its first
//! callers).

mod harness;

mod calls;
mod garbage;
mod lifecycle;
mod refusals;
