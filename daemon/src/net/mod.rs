//! Networking of a shard: the per-shard TCP listener, the connection loop
//! (frames in, replies out), per-connection session state, and the request
//! handler that executes the Iggy protocol's commands.

pub mod connection;
pub mod handler;
pub mod listener;
pub mod reply_frame;
pub mod session;
