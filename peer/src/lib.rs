//! The node-to-node transport of an iggyd cluster: a multiplexed
//! request/response RPC over one mutual-TLS connection per (local shard,
//! remote node), on monoio. Callers (the Raft layer: AppendEntries, Vote,
//! snapshots; forwarded client requests) encode their calls as bytes and
//! name a `channel` (a Raft group id); this crate moves the bytes, safely:
//! every peer is authenticated by a certificate from the cluster CA that
//! names its node, every frame and every wait is bounded, and a request is
//! never sent twice.
//!
//! Reading order: `identity` (node names and the certificate convention),
//! `tls` (rustls configurations, the certificate → node check), `certs`
//! (generating a cluster's certificates), `frame` and `hello` (the wire,
//! sans-I/O), `limits`, `counters`, `error`, `budget` (calls in flight),
//! `link` (TLS over a split TCP stream, the writer task), `handshake`
//! (setup and identity checks), then the two ends: `client` and `server`.
//!
//! Must not: depend on openraft or the daemon, interpret call bodies, use
//! monoio's vectored-write helpers, or panic on anything a peer sends.

// Bytes from the network are never a programmer error: no unwrap, expect
// or unchecked indexing outside tests.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod identity;
pub mod tls;
pub mod certs;
pub mod frame;
pub mod hello;
pub mod limits;
pub mod counters;
pub mod error;
mod budget;
mod link;
mod handshake;
pub mod client;
pub mod server;

pub use certs::{ClusterCerts, NodeCert};
pub use client::{PeerClient, PeerTarget};
pub use counters::{CountersSnapshot, PeerCounters};
pub use error::{PeerError, PeerFailure};
pub use identity::ClusterName;
pub use limits::{PeerLimits, ValidLimits};
pub use server::{
    LocalBoxFuture, PeerHandler, PeerRequest, ServerStop, StopSignal, serve, stop_signal,
};
pub use tls::{PeerTls, PeerTlsError, Replaced};
