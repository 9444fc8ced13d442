//! The one test kit of the workspace: everything a test needs to run the
//! real `iggyd` binary and talk to it, written once.
//!
//! - `daemon`: `TestDaemon`, a daemon on a temp data directory and a free
//!   loopback port, with the environment scrubbed, readiness from a
//!   `NOTIFY_SOCKET` the test owns (no sleeps), a log gate at teardown and a
//!   failure dump (command, notifications, data-directory listing, log).
//! - `fdstore`: systemd's file descriptor store as a test plays it: what a
//!   daemon stores with `FDSTORE=1`, passed back in `LISTEN_FDS` at its
//!   next start.
//! - `wire`: a blocking Iggy 0.11.0 client: request headers and bodies as
//!   the SDK lays them out, reply frames, result sections and evictions.
//! - `ci`: `skip`, the only way a test may skip, which fails under `CI=true`.
//! - `rng`: seeded SplitMix64, so a failing case reproduces from its seed,
//!   and the offset-stamped payloads the read-path suites check replies by.
//! - `tls`: certificates made on the spot (a CA, server and client
//!   certificates) and the rustls client configuration the wire client
//!   speaks TLS with.
//!
//! It must not depend on the daemon crate (`iggyd` takes it as a
//! dev-dependency, and an encoder written independently of the decoder is
//! what makes the round-trip tests worth running). It panics with context
//! on misuse and in its test-facing helpers; the `try_` and `Result` forms
//! are for tools (the load generator) that report instead.

pub mod ci;
pub mod daemon;
pub mod fdstore;
pub mod rng;
pub mod tls;
pub mod wire;

pub use ci::skip;
pub use daemon::{Builder, Output, TestDaemon, iggyd_binary, iggyd_command, run};
