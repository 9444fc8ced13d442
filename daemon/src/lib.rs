//! iggyd: an Apache Iggy-compatible message-streaming daemon.
//!
//! The library exists so that tests, fuzz targets and the simulator can reach
//! the same code the binary runs. Modules are listed in reading order: from
//! configuration, through placement and the shards, to the supervisor that
//! ties them together. The layers below live in their own crates, which
//! cannot import this one: `iggyd-wire` (protocol codec, batch record),
//! `iggyd-storage` (partition logs on disk) and `iggyd-metadata` (streams,
//! topics, users and their journal). See `ARCHITECTURE.md` at the
//! repository root for the map and the invariants.

pub mod config;
pub mod limits;
pub mod cgroup;
pub mod topology;
pub mod preflight;
pub mod shard;
pub mod cluster;
pub mod net;
pub mod systemd;
pub mod fdstore;
pub mod supervisor;
pub mod control;
pub mod logging;
pub mod doctor;
pub mod boot;
pub mod error;
