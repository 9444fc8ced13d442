//! `iggyd-compat` has no library code: its tests (`compat/tests/`) drive the
//! real `iggyd` binary with the official Apache Iggy Rust SDK (`iggy` 0.11.0).
//! The crate is a separate workspace member so that the daemon's own test
//! binary does not pay for building the SDK.
