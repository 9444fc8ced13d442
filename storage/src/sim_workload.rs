//! What the deterministic simulations share (test-only): the seed runner and
//! the producer-batch generator. The storage simulation (`sim_test.rs`), the
//! pump simulation (`shard/pump_sim.rs`) and the metadata crash simulation
//! (`metadata/sim_test.rs`) all run their seeds through [`run_seeds`], so
//! `IGGYD_SIM_SEED=S` reproduces one seed of any of them, `IGGYD_SIM_SEEDS=N`
//! runs N, and a failure names its seed the same way.
//!
//! Must stay deterministic: all randomness comes from the caller's
//! [`SimRng`]; nothing here reads a clock.

use super::sim::SimRng;
use iggyd_wire::batch::{self, MessageSpec, encode_producer_batch};

/// The seeds to run: only `IGGYD_SIM_SEED` when it is set, else
/// `0..IGGYD_SIM_SEEDS`, else `0..default_count`.
pub fn seeds(default_count: u64) -> Vec<u64> {
    if let Ok(seed) = std::env::var("IGGYD_SIM_SEED") {
        return vec![seed.parse().expect("IGGYD_SIM_SEED is a u64")];
    }
    let count = std::env::var("IGGYD_SIM_SEEDS")
        .ok()
        .map_or(default_count, |count| {
            count.parse().expect("IGGYD_SIM_SEEDS is a count")
        });
    (0..count).collect()
}

/// Runs `run` for every seed of [`seeds`] and returns what each run
/// reported, in seed order. A panicking seed is named (`<simulation>
/// simulation failed; reproduce with IGGYD_SIM_SEED=<seed>`) before the
/// panic goes on.
pub fn run_seeds<T>(simulation: &str, default_count: u64, run: impl Fn(u64) -> T) -> Vec<T> {
    let mut results = Vec::new();
    for seed in seeds(default_count) {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(seed))) {
            Ok(result) => results.push(result),
            Err(panic) => {
                eprintln!("{simulation} simulation failed; reproduce with IGGYD_SIM_SEED={seed}");
                std::panic::resume_unwind(panic);
            }
        }
    }
    results
}

/// The shape of random producer batches: mostly a few small messages, now
/// and then a large batch or large payloads, some user headers.
#[derive(Debug, Clone, Copy)]
pub struct BatchShape {
    /// One batch in this many is large.
    pub large_batch_one_in: u64,
    pub small_batch_max: u64,
    pub large_batch_max: u64,
    /// One batch in this many has large payloads.
    pub large_payloads_one_in: u64,
    pub small_payload_max: u64,
    pub large_payload_max: u64,
    /// One message in this many has user headers.
    pub user_headers_one_in: u64,
    pub user_headers_max: u64,
    /// Timestamp delta between consecutive messages of a batch.
    pub timestamp_step: u32,
}

/// Producer batches of one shape, with message ids unique across the run.
#[derive(Debug, Clone)]
pub struct BatchGenerator {
    shape: BatchShape,
    next_message_id: u128,
}

impl BatchGenerator {
    pub fn new(shape: BatchShape) -> BatchGenerator {
        BatchGenerator {
            shape,
            next_message_id: 1,
        }
    }

    /// A valid producer batch stamped at `now_micros`, and the bytes of each
    /// of its frames (what a reader must get back).
    pub fn next(&mut self, rng: &mut SimRng, now_micros: u64) -> (Vec<u8>, Vec<Vec<u8>>) {
        let shape = self.shape;
        let count = if rng.chance(1, shape.large_batch_one_in) {
            rng.range(1, shape.large_batch_max)
        } else {
            rng.range(1, shape.small_batch_max)
        };
        let payload_max = if rng.chance(1, shape.large_payloads_one_in) {
            shape.large_payload_max
        } else {
            shape.small_payload_max
        };
        let mut specs = Vec::new();
        for index in 0..count {
            let mut payload = vec![0u8; rng.range(0, payload_max) as usize];
            rng.fill(&mut payload);
            let mut user_headers = Vec::new();
            if rng.chance(1, shape.user_headers_one_in) {
                // One key/value entry (§4.8), so the block passes the
                // producer check: a String key TLV, a Raw value TLV.
                for kind in [2u8, 1] {
                    let mut bytes = vec![0u8; rng.range(1, shape.user_headers_max) as usize];
                    rng.fill(&mut bytes);
                    user_headers.push(kind);
                    user_headers.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                    user_headers.extend_from_slice(&bytes);
                }
            }
            specs.push(MessageSpec {
                id: self.next_message_id,
                timestamp_delta: index as u32 * shape.timestamp_step,
                payload,
                user_headers,
            });
            self.next_message_id += 1;
        }
        let bytes = encode_producer_batch(now_micros, &specs);
        let frames = batch::frames(&bytes)
            .expect("a generated batch is valid")
            .map(|frame| bytes[frame.expect("a generated frame is valid").frame].to_vec())
            .collect();
        (bytes, frames)
    }
}
