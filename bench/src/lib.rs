//! Benchmarks for iggyd: a load generator that speaks the Iggy 0.11.0 TCP
//! protocol (`iggyd-bench`) and a storage benchmark that drives the daemon's
//! own `PartitionLog`s and `Pump`s (`iggyd-storage-bench`).
//!
//! Every measurement is reported next to a baseline measured in the same run
//! on the same machine (raw loopback TCP with the same frames, raw file I/O
//! with the same chunks) and as a ratio to it, so numbers from a noisy or
//! slow machine still mean something. Nothing here asserts on time; the
//! targets are printed, not enforced. Modules, in reading order: `report`
//! (histograms, tables, JSON), `client` (the scenarios' commands on the
//! workspace's blocking wire client, `iggyd_testkit::wire`), `loopback`
//! (the raw TCP baselines), `load` (producer/consumer scenarios), `storage`
//! (the storage benchmarks). `--spawn` starts its daemon with the kit's
//! `TestDaemon` (readiness from `READY=1`, no sleeps).

pub mod client;
pub mod load;
pub mod loopback;
pub mod report;
pub mod storage;
