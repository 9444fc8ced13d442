//! Scenario suite: the official Rust SDK (`iggy` 0.11.0) against the real
//! `iggyd` binary. Every test starts its own daemon (temp data directory,
//! a free loopback port, readiness from a `NOTIFY_SOCKET` the test owns) and
//! drives it only through the SDK's public API, so a pass means an unchanged
//! Iggy application works against iggyd for that command family.

#[path = "../common/mod.rs"]
mod common;

mod cluster;
mod cluster_admin;
mod cluster_members;
mod cluster_metadata;
mod cluster_metrics;
mod cluster_retention;
mod deletion;
mod deletion_race;
mod errors;
mod groups;
mod handover;
mod messages;
mod nemesis;
mod read_path;
mod restart;
mod retention;
mod streams;
mod system;
mod tls;
mod users;
