//! iggy-top: the live console for iggyd, attached over the daemon's admin
//! Unix socket (protocol v1, newline-delimited JSON). The library holds
//! everything but the terminal itself, so tests can drive it: `api` (the
//! v1 wire types: the shared `iggyd-admin-api` crate), `event` (what the
//! app reacts to), `app` (state and `update`, no I/O), `client` (the socket
//! reader thread and actions), `series` (windows over the daemon's
//! history), `theme` (colour depth), `ui` (pure render functions). `main.rs` owns the
//! terminal and the event loop.
//!
//! This crate must not depend on the daemon crate (`iggyd`); the socket's
//! JSON, written once in `iggyd-admin-api`, is the only contract between
//! them.

pub use iggyd_admin_api as api;
pub mod app;
pub mod client;
pub mod event;
pub mod series;
pub mod theme;
pub mod ui;
