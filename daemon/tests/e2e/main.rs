//! End-to-end tests: one binary that drives the real `iggyd` executable.
//! Each test starts its own daemon (temp data directory, a free loopback port,
//! readiness from a `NOTIFY_SOCKET` the test owns) and talks to it like an
//! operator or a client would.

mod disk_full;
mod bad_input;
mod golden;
mod harness;
mod control;
mod lifecycle;
mod logging;
mod plan;
mod systemd;
mod wire_client;
