//! iggyd's wire layer, the lowest crate of the workspace: the Apache Iggy
//! 0.11.0 TCP codec (`protocol`: headers, frames, command decoding, reply
//! encoding, status codes, the wire's own limits) and the message batch
//! record (`batch`: its layout, validation, stamping and slicing), which the
//! wire and the disk share byte for byte.
//!
//! Must not: do I/O, use a runtime, or know about sessions, partitions or
//! files; depend on any other crate of the workspace. Every byte it reads
//! comes from a socket or a disk, so nothing here panics on input: clippy
//! denies `unwrap`, `expect` and unchecked indexing crate-wide outside
//! tests, with narrow `#[expect]`s where an invariant proves a site.
//!
//! Inside the crate: `protocol::{limits, codes}` are the floor;
//! `protocol::{reader, primitives, options, permissions}` and `batch` build
//! on them; `protocol::{header, frame, command, reply}` on all of those
//! (the tidy test checks the order).

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod batch;
pub mod protocol;
