//! The bound on calls in flight on one connection (count and request
//! bytes): a client's callers and a server's reader wait here for room
//! (`room`), then take it (`take`); a [`Grant`] gives it back when dropped
//! (answered, failed, timed out or cancelled alike). A server waits for
//! room *before* it reads the next request, so it reads no request it
//! cannot run. Single-threaded (`Rc`, `Cell`): it lives on one shard.
//!
//! The count is exact. The bytes are bounded to `bytes_max` plus one
//! frame: a call is let in while the bytes in flight are below the bound,
//! whatever its own size, so a call larger than the bound never waits for
//! ever.
//!
//! Must not: refuse or drop a call (waiting is the whole bound; the
//! caller's timeout decides how long).

use std::cell::Cell;
use std::rc::Rc;

#[derive(Debug)]
struct Inner {
    calls_max: usize,
    bytes_max: usize,
    calls: Cell<usize>,
    bytes: Cell<usize>,
    /// A token wakes one waiter to check again; a waiter that takes room
    /// and leaves room passes a token on, so every waiter that fits is
    /// woken in turn. The budget holds the sender, so receiving never
    /// fails.
    wake_sender: flume::Sender<()>,
    wake: flume::Receiver<()>,
}

/// Room for calls in flight.
#[derive(Debug, Clone)]
pub(crate) struct Budget(Rc<Inner>);

/// One call's room, returned on drop.
#[derive(Debug)]
pub(crate) struct Grant {
    budget: Rc<Inner>,
    bytes: usize,
}

impl Budget {
    pub(crate) fn new(calls_max: usize, bytes_max: usize) -> Budget {
        assert!(calls_max > 0);
        let (wake_sender, wake) = flume::bounded(1);
        Budget(Rc::new(Inner {
            calls_max,
            bytes_max,
            calls: Cell::new(0),
            bytes: Cell::new(0),
            wake_sender,
            wake,
        }))
    }

    /// Calls in flight now.
    #[cfg(test)]
    pub(crate) fn calls(&self) -> usize {
        self.0.calls.get()
    }

    fn has_room(&self) -> bool {
        let inner = &self.0;
        inner.calls.get() < inner.calls_max && inner.bytes.get() < inner.bytes_max
    }

    /// Waits until there is room for one more call.
    pub(crate) async fn room(&self) {
        while !self.has_room() {
            // Cannot fail: the budget holds a sender.
            let _ = self.0.wake.recv_async().await;
        }
    }

    /// Takes room for a call of `bytes`; `room` said there is some.
    pub(crate) fn take(&self, bytes: usize) -> Grant {
        assert!(self.has_room());
        let inner = &self.0;
        inner.calls.set(inner.calls.get() + 1);
        inner.bytes.set(inner.bytes.get().saturating_add(bytes));
        if self.has_room() {
            // Another waiter may fit too: pass the wake-up on.
            let _ = inner.wake_sender.try_send(());
        }
        Grant {
            budget: self.0.clone(),
            bytes,
        }
    }

    /// Waits for room, then takes it (no await between the two).
    pub(crate) async fn admit(&self, bytes: usize) -> Grant {
        self.room().await;
        self.take(bytes)
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        let inner = &self.budget;
        assert!(inner.calls.get() > 0);
        assert!(inner.bytes.get() >= self.bytes);
        inner.calls.set(inner.calls.get() - 1);
        inner.bytes.set(inner.bytes.get() - self.bytes);
        // A full channel already holds a wake-up for the next waiter.
        let _ = inner.wake_sender.try_send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn runtime() -> monoio::Runtime<monoio::time::TimeDriver<monoio::LegacyDriver>> {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .unwrap()
    }

    /// Whether `future` completes before a short guard passes.
    async fn completes<F: std::future::Future>(future: F) -> bool {
        monoio::time::timeout(Duration::from_millis(50), future)
            .await
            .is_ok()
    }

    // Proves the count bound: a third call waits while two are in flight
    // and gets in when one leaves; many waiters all get in, in turn, as
    // room frees up.
    #[test]
    fn the_call_count_is_bounded_and_waiters_get_in_in_turn() {
        runtime().block_on(async {
            let budget = Budget::new(2, 1 << 20);
            let first = budget.admit(1).await;
            let _second = budget.admit(1).await;
            assert!(!completes(budget.admit(1)).await);
            drop(first);
            let third = budget.admit(1).await;
            assert_eq!(budget.calls(), 2);
            drop(third);
            let waiters: Vec<_> = (0..10)
                .map(|_| {
                    let budget = budget.clone();
                    monoio::spawn(async move { drop(budget.admit(1).await) })
                })
                .collect();
            drop(_second);
            for waiter in waiters {
                waiter.await;
            }
            assert_eq!(budget.calls(), 0);
        });
    }

    // Proves the byte bound: while the bytes in flight are at the bound a
    // call waits, below it a call gets in whatever its size (so a call
    // larger than the bound runs), and nothing stays taken.
    #[test]
    fn the_bytes_are_bounded_and_a_huge_call_still_runs() {
        runtime().block_on(async {
            let budget = Budget::new(10, 100);
            let sixty = budget.admit(60).await;
            let forty = budget.admit(40).await;
            assert!(!completes(budget.admit(1)).await);
            drop(sixty);
            let huge = budget.admit(1_000).await;
            assert!(!completes(budget.room()).await);
            drop(forty);
            drop(huge);
            assert!(completes(budget.admit(1)).await);
            assert_eq!(budget.calls(), 0);
        });
    }
}
