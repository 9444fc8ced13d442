//! End-to-end tests: one binary that drives the real `iggyd` executable.
//! Each test starts its own daemon through the workspace's test kit
//! (`iggyd_testkit::TestDaemon`: temp data directory, a free loopback port,
//! readiness from a `NOTIFY_SOCKET` the test owns) and talks to it like an
//! operator or a client would. The codec tests (`codec`, `golden`) hold the
//! daemon's decoder against the kit's independent encoder and against frames
//! the official SDK sent.

mod disk_full;
mod doctor;
mod bad_clients;
mod bad_input;
mod codec;
mod golden;
mod groups;
mod handover;
mod hostile;
mod io_modes;
mod control;
mod control_actions;
mod control_cost;
mod lifecycle;
mod logging;
mod memory;
mod messages;
mod plan;
mod read_path;
mod request_of;
mod sessions;
mod systemd;
mod tls;
