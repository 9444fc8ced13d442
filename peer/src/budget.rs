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

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Debug)]
struct Inner {
    calls_max: usize,
    bytes_max: usize,
    calls: Cell<usize>,
    bytes: Cell<usize>,
    /// Callers waiting for room, by ticket (arrival order). Room that frees
    /// up wakes the first; a waiter that takes room and leaves some wakes
    /// the next, so every waiter that fits is woken in turn. A waiter woken
    /// and then cancelled passes its wake-up on.
    ///
    /// Not a channel: flume's receive future, polled again after a wake-up
    /// whose token another waiter took, queues itself once more on every
    /// poll. Two thousand vote calls waiting here at a topic's creation
    /// grew a node by gigabytes and spun its shard.
    waiters: RefCell<BTreeMap<u64, Waker>>,
    next_ticket: Cell<u64>,
}

impl Inner {
    fn has_room(&self) -> bool {
        self.calls.get() < self.calls_max && self.bytes.get() < self.bytes_max
    }

    /// Wakes the first waiter, if any (it leaves the queue).
    fn wake_next(&self) {
        let first = self.waiters.borrow_mut().pop_first();
        if let Some((_, waker)) = first {
            waker.wake();
        }
    }
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

/// Waits for room ([`Budget::room`]).
#[derive(Debug)]
pub(crate) struct Room {
    budget: Rc<Inner>,
    /// Set once queued; kept when woken (the ticket is then out of the
    /// queue), so a waiter that finds the room gone again goes back to its
    /// place.
    ticket: Option<u64>,
}

impl Future for Room {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let budget = self.budget.clone();
        if budget.has_room() {
            if let Some(ticket) = self.ticket.take() {
                budget.waiters.borrow_mut().remove(&ticket);
            }
            return Poll::Ready(());
        }
        let ticket = *self.ticket.get_or_insert_with(|| {
            let ticket = budget.next_ticket.get();
            budget.next_ticket.set(ticket + 1);
            ticket
        });
        let mut waiters = budget.waiters.borrow_mut();
        match waiters.get_mut(&ticket) {
            Some(waker) => waker.clone_from(cx.waker()),
            None => {
                waiters.insert(ticket, cx.waker().clone());
            }
        }
        Poll::Pending
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket else {
            return;
        };
        let queued = self.budget.waiters.borrow_mut().remove(&ticket).is_some();
        if !queued && self.budget.has_room() {
            // Woken, and gone without taking the room: the next may.
            self.budget.wake_next();
        }
    }
}

impl Budget {
    pub(crate) fn new(calls_max: usize, bytes_max: usize) -> Budget {
        assert!(calls_max > 0);
        Budget(Rc::new(Inner {
            calls_max,
            bytes_max,
            calls: Cell::new(0),
            bytes: Cell::new(0),
            waiters: RefCell::new(BTreeMap::new()),
            next_ticket: Cell::new(0),
        }))
    }

    /// Calls in flight now.
    #[cfg(test)]
    pub(crate) fn calls(&self) -> usize {
        self.0.calls.get()
    }

    /// Callers waiting for room now.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.0.waiters.borrow().len()
    }

    fn has_room(&self) -> bool {
        self.0.has_room()
    }

    /// Waits until there is room for one more call.
    pub(crate) fn room(&self) -> Room {
        Room {
            budget: self.0.clone(),
            ticket: None,
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
            inner.wake_next();
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
        inner.wake_next();
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

    /// A waker that counts its wake-ups.
    struct Count(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn counting() -> (std::sync::Arc<Count>, Waker) {
        let count = std::sync::Arc::new(Count(std::sync::atomic::AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    fn woken(count: &Count) -> usize {
        count.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    // The waiting list holds each waiter once however often it is polled,
    // also after a wake-up whose room another caller took first (flume's
    // receive future queued itself again on every such poll: thousands of
    // waiting vote calls grew a node by gigabytes); a woken waiter that
    // finds no room keeps its place; one woken and then cancelled passes
    // the wake-up on.
    #[test]
    fn waiters_are_queued_once_keep_their_place_and_pass_on_a_wake_up() {
        let budget = Budget::new(1, 1 << 20);
        let mut held = budget.take(1);
        let (first_count, first_waker) = counting();
        let (second_count, second_waker) = counting();
        let mut first = Box::pin(budget.room());
        let mut second = Box::pin(budget.room());
        for _ in 0..1000 {
            let mut cx = Context::from_waker(&first_waker);
            assert!(first.as_mut().poll(&mut cx).is_pending());
            let mut cx = Context::from_waker(&second_waker);
            assert!(second.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(budget.waiting(), 2);
        for round in 0..1000 {
            // Room frees up, the first waiter is woken, and a caller that
            // did not wait takes the room before it runs.
            drop(held);
            held = budget.take(1);
            assert_eq!(woken(&first_count), round + 1);
            let mut cx = Context::from_waker(&first_waker);
            assert!(first.as_mut().poll(&mut cx).is_pending());
            assert_eq!(budget.waiting(), 2, "round {round}");
        }
        assert_eq!(woken(&second_count), 0, "the first keeps its place");
        drop(held);
        assert_eq!(woken(&first_count), 1001);
        // Woken, then cancelled: the second is woken in its stead.
        drop(first);
        assert_eq!(woken(&second_count), 1);
        let mut cx = Context::from_waker(&second_waker);
        assert!(second.as_mut().poll(&mut cx).is_ready());
        assert_eq!(budget.waiting(), 0);
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
