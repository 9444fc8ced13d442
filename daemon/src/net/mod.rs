//! Networking of a shard: the per-shard TCP listener. Serving the Iggy
//! protocol on accepted connections arrives with the protocol layer.

pub mod listener;
