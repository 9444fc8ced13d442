//! Bytes of poll replies held by one shard's connections, bounded
//! (`limits.max_poll_reply_bytes_in_flight`). A poll reply holds its records
//! (copied, or lent from a read window) from the moment the owner's pump
//! built it until the kernel took its last byte; a client that asks for a
//! lot and then stops reading keeps them for as long as its connection
//! lives. Before a poll goes to its owner, the connection reserves up to
//! `limits.max_poll_reply_bytes` of what the shard has left; the pump
//! returns no more records than that beyond the first batch (which always
//! comes whole, so every poll makes progress: the protocol lets a reply
//! hold fewer messages than asked for). The hold then settles on the
//! reply's real size and ends with the frame.
//!
//! So the memory one shard's poll replies hold is at most the budget plus
//! one batch per connection whose reservation found nothing left (a batch
//! is at most a frame).
//!
//! Must not: make a poll wait; a poll that finds the budget spent gets its
//! first batch alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The budget of one shard's connections.
#[derive(Debug)]
pub struct ReplyBudget {
    max_bytes: u64,
    used_bytes: AtomicU64,
}

/// Bytes of one reply held in its shard's budget until dropped.
#[derive(Debug)]
pub struct ReplyHold {
    budget: Arc<ReplyBudget>,
    bytes: u64,
}

impl ReplyBudget {
    pub fn new(max_bytes: u64) -> Arc<ReplyBudget> {
        Arc::new(ReplyBudget {
            max_bytes,
            used_bytes: AtomicU64::new(0),
        })
    }

    /// Bytes held by replies now.
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Relaxed)
    }

    /// Up to `wanted` bytes of what is left, possibly none.
    pub fn reserve(self: &Arc<Self>, wanted: u64) -> ReplyHold {
        let mut used = self.used_bytes.load(Ordering::Relaxed);
        loop {
            let take = wanted.min(self.max_bytes.saturating_sub(used));
            match self.used_bytes.compare_exchange_weak(
                used,
                used + take,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return ReplyHold {
                        budget: self.clone(),
                        bytes: take,
                    };
                }
                Err(now) => used = now,
            }
        }
    }
}

impl ReplyHold {
    /// Bytes reserved: the most a poll may return beyond its first batch.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The reply turned out `actual` bytes: hold exactly that (more than
    /// was reserved when its first batch alone was larger).
    pub fn settle(&mut self, actual: u64) {
        let used = &self.budget.used_bytes;
        if actual > self.bytes {
            used.fetch_add(actual - self.bytes, Ordering::AcqRel);
        } else {
            used.fetch_sub(self.bytes - actual, Ordering::AcqRel);
        }
        self.bytes = actual;
    }
}

impl Drop for ReplyHold {
    fn drop(&mut self) {
        self.budget
            .used_bytes
            .fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reservations take what is left, never more; settling moves the held
    // bytes to the real size (past the budget for an oversized first
    // batch); dropping returns them.
    #[test]
    fn holds_take_what_is_left_and_give_it_back() {
        let budget = ReplyBudget::new(100);
        let mut first = budget.reserve(60);
        assert_eq!(first.bytes(), 60);
        let second = budget.reserve(60);
        assert_eq!(second.bytes(), 40, "only what is left");
        let third = budget.reserve(60);
        assert_eq!(third.bytes(), 0, "spent: the first batch alone");
        assert_eq!(budget.used_bytes(), 100);
        first.settle(10);
        assert_eq!(budget.used_bytes(), 50);
        let mut fourth = budget.reserve(1_000);
        assert_eq!(fourth.bytes(), 50);
        fourth.settle(500);
        assert_eq!(
            budget.used_bytes(),
            550,
            "an oversized first batch is counted"
        );
        drop((first, second, third, fourth));
        assert_eq!(budget.used_bytes(), 0);
    }
}
