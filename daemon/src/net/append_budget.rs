//! Bytes of appends in flight to one owner shard, bounded
//! (`limits.max_append_bytes_in_flight`). A shard's inbox is bounded by
//! count, and every Append carries its frame's buffer (up to 64 MiB), so
//! without this 4,096 queued appends could hold 256 GiB. A sender takes a
//! permit for its frame's bytes before the Append enters the owner's inbox
//! and drops it when the owner answered; beyond the bound senders wait, in
//! arrival order, on a channel (the shard's loop never blocks).
//!
//! Each owner shard has one budget, shared by the senders of every shard:
//! a mutex held for a few arithmetic operations, never across an await,
//! plus one bounded(1) channel per waiting sender. A frame larger than the
//! whole budget still goes, alone. A waiter that gives up (its connection
//! closed) loses nothing: a grant sent to it is a permit, which frees its
//! bytes when dropped unread.
//!
//! Must not: drop or reorder an append; it only delays the sender.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The budget of one owner shard.
#[derive(Debug)]
pub struct AppendBudget {
    max_bytes: u64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    used_bytes: u64,
    waiters: VecDeque<(u64, flume::Sender<Permit>)>,
}

/// Bytes held in the budget until dropped.
#[derive(Debug)]
pub struct Permit {
    budget: Arc<AppendBudget>,
    bytes: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.release(self.bytes);
        }
    }
}

impl AppendBudget {
    pub fn new(max_bytes: u64) -> Arc<AppendBudget> {
        assert!(max_bytes > 0);
        Arc::new(AppendBudget {
            max_bytes,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes held now.
    pub fn used_bytes(&self) -> u64 {
        self.lock().used_bytes
    }

    /// Senders waiting now.
    pub fn waiting(&self) -> usize {
        self.lock().waiters.len()
    }

    /// A permit for `bytes`, at once when they fit and nobody waits, else
    /// after the senders before this one.
    pub async fn acquire(self: &Arc<Self>, bytes: u64) -> Permit {
        let bytes = bytes.clamp(1, self.max_bytes);
        let receiver = {
            let mut state = self.lock();
            if state.waiters.is_empty() && state.used_bytes + bytes <= self.max_bytes {
                state.used_bytes += bytes;
                return Permit {
                    budget: self.clone(),
                    bytes,
                };
            }
            let (sender, receiver) = flume::bounded(1);
            state.waiters.push_back((bytes, sender));
            receiver
        };
        match receiver.recv_async().await {
            Ok(permit) => permit,
            // The sender lives in the queue until it is granted, and a
            // grant always sends; a closed channel cannot happen. Should it,
            // the append goes without a permit rather than never.
            Err(_) => Permit {
                budget: self.clone(),
                bytes: 0,
            },
        }
    }

    /// Give `bytes` back and grant the waiters, in order, that now fit.
    fn release(self: &Arc<Self>, bytes: u64) {
        // Senders are dropped after the lock is released: dropping the last
        // sender of a channel whose receiver went away drops the permit in
        // it, whose own release must not find the lock held.
        let mut granted = Vec::new();
        {
            let mut state = self.lock();
            state.used_bytes = state.used_bytes.saturating_sub(bytes);
            while let Some((wanted, _)) = state.waiters.front() {
                let wanted = *wanted;
                if state.used_bytes + wanted > self.max_bytes && state.used_bytes > 0 {
                    break;
                }
                let Some((_, sender)) = state.waiters.pop_front() else {
                    break;
                };
                state.used_bytes += wanted;
                let permit = Permit {
                    budget: self.clone(),
                    bytes: wanted,
                };
                match sender.send(permit) {
                    Ok(()) => granted.push(sender),
                    Err(flume::SendError(mut unwanted)) => {
                        // The waiter gave up: take its bytes back here.
                        unwanted.bytes = 0;
                        state.used_bytes -= wanted;
                        granted.push(sender);
                    }
                }
            }
        }
        drop(granted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: Future>(future: F) -> F::Output {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .unwrap()
            .block_on(future)
    }

    // Proves the bound: permits fit until the budget is used, the next
    // sender waits until bytes come back, then goes; waiters go in order;
    // a frame larger than the budget goes alone.
    #[test]
    fn senders_wait_beyond_the_budget_in_order() {
        let budget = AppendBudget::new(100);
        block_on(async {
            let first = budget.acquire(60).await;
            let second = budget.acquire(40).await;
            assert_eq!(budget.used_bytes(), 100);
            let order = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
            let mut tasks = Vec::new();
            for (name, bytes) in [("a", 50u64), ("b", 10), ("c", 1000)] {
                let budget = budget.clone();
                let order = order.clone();
                tasks.push(monoio::spawn(async move {
                    let permit = budget.acquire(bytes).await;
                    order.borrow_mut().push(name);
                    permit
                }));
                monoio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            assert_eq!(budget.waiting(), 3);
            assert!(order.borrow().is_empty());
            drop(first);
            // 60 back: "a" (50) fits, "b" (10) fits behind it, "c" waits.
            let a = tasks.remove(0).await;
            let b = tasks.remove(0).await;
            assert_eq!(*order.borrow(), ["a", "b"]);
            assert_eq!(budget.used_bytes(), 100);
            drop((second, a, b));
            // "c" is larger than the budget: it goes alone, capped.
            let c = tasks.remove(0).await;
            assert_eq!(budget.used_bytes(), 100);
            drop(c);
            assert_eq!(budget.used_bytes(), 0);
        });
    }

    // Proves a waiter that gives up (its future dropped, as when its
    // connection closes) loses no bytes, before or after its grant.
    #[test]
    fn a_waiter_that_gives_up_loses_nothing() {
        let budget = AppendBudget::new(10);
        block_on(async {
            let held = budget.acquire(10).await;
            let gone_before = monoio::spawn({
                let budget = budget.clone();
                async move { budget.acquire(5).await }
            });
            monoio::time::sleep(std::time::Duration::from_millis(1)).await;
            // A waiter whose future is dropped while queued.
            {
                let mut waiting = std::pin::pin!(budget.acquire(5));
                let polled = std::future::poll_fn(|cx| {
                    std::task::Poll::Ready(waiting.as_mut().poll(cx).is_pending())
                })
                .await;
                assert!(polled);
            }
            assert_eq!(budget.waiting(), 2);
            drop(held);
            let kept = gone_before.await;
            assert_eq!(budget.used_bytes(), 5);
            drop(kept);
            assert_eq!(budget.used_bytes(), 0);
            assert_eq!(budget.waiting(), 0);
        });
    }
}
