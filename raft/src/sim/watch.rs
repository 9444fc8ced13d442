//! The simulation's watch channel ([`SimWatch`], openraft's `Watch` on one
//! thread): a change wakes the receivers waiting for it in the order they
//! began to wait.
//!
//! Why not the production runtime's: `openraft-rt-monoio` wraps
//! `tokio::sync::watch`, which parks each waiting receiver on one of eight
//! `Notify`s picked by tokio's per-process random generator whenever tokio
//! is built with its `rt` or `macros` feature, as feature unification does
//! in this workspace (the SDK tests enable both). A change then woke
//! openraft's tasks in an order that differed from one process to the
//! next, and one seed ran two ways (`runs_are_deterministic`).
//!
//! Semantics are tokio's: a receiver has seen the version current when it
//! was made (or cloned from); `changed` returns at once for a version it
//! has not seen and fails once every sender is gone; `send` fails, leaving
//! the value as it was, while no receiver exists; `send_if_modified`
//! always applies. openraft's runtime suite checks them
//! (`openraft_runtime_suite_passes`).
//!
//! Must not: wake in any order but the order of waiting, or keep the
//! waker of a receiver's `changed` once that future is gone.

use openraft::rt::watch::{self, RecvError, SendError};
use openraft::rt::{OptionalSend, OptionalSync};
use std::cell::{Cell, Ref, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// openraft's `Watch` for the simulation (see the module doc).
pub struct SimWatch;

struct Shared<T> {
    value: RefCell<T>,
    /// Bumped by every change.
    version: Cell<u64>,
    senders: Cell<usize>,
    receivers: Cell<usize>,
    /// Waiting receivers by the order they first waited.
    waiters: RefCell<BTreeMap<u64, Waker>>,
    next_waiter: Cell<u64>,
}

impl<T> Shared<T> {
    fn wake_all(&self) {
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for waker in waiters.into_values() {
            waker.wake();
        }
    }

    fn changed(&self) {
        self.version.set(self.version.get() + 1);
        self.wake_all();
    }
}

/// The sending half; clones share the value.
pub struct SimWatchSender<T> {
    shared: Rc<Shared<T>>,
}

/// A receiving half with its own seen version.
pub struct SimWatchReceiver<T> {
    shared: Rc<Shared<T>>,
    seen: u64,
}

impl watch::Watch for SimWatch {
    type Sender<T: OptionalSend + OptionalSync> = SimWatchSender<T>;
    type Receiver<T: OptionalSend + OptionalSync> = SimWatchReceiver<T>;
    type Ref<'a, T: OptionalSend + 'a> = Ref<'a, T>;

    fn channel<T: OptionalSend + OptionalSync>(
        init: T,
    ) -> (SimWatchSender<T>, SimWatchReceiver<T>) {
        let shared = Rc::new(Shared {
            value: RefCell::new(init),
            version: Cell::new(0),
            senders: Cell::new(1),
            receivers: Cell::new(1),
            waiters: RefCell::new(BTreeMap::new()),
            next_waiter: Cell::new(0),
        });
        (
            SimWatchSender {
                shared: shared.clone(),
            },
            SimWatchReceiver { shared, seen: 0 },
        )
    }
}

impl<T> Clone for SimWatchSender<T> {
    fn clone(&self) -> Self {
        self.shared.senders.set(self.shared.senders.get() + 1);
        SimWatchSender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for SimWatchSender<T> {
    fn drop(&mut self) {
        let left = self.shared.senders.get() - 1;
        self.shared.senders.set(left);
        if left == 0 {
            // Every waiter learns the channel closed.
            self.shared.wake_all();
        }
    }
}

impl<T: OptionalSend + OptionalSync> watch::WatchSender<SimWatch, T> for SimWatchSender<T> {
    fn send(&self, value: T) -> Result<(), SendError<T>> {
        if self.shared.receivers.get() == 0 {
            return Err(SendError(value));
        }
        *self.shared.value.borrow_mut() = value;
        self.shared.changed();
        Ok(())
    }

    fn send_if_modified<F>(&self, modify: F) -> bool
    where
        F: FnOnce(&mut T) -> bool,
    {
        let modified = modify(&mut self.shared.value.borrow_mut());
        if modified {
            self.shared.changed();
        }
        modified
    }

    fn borrow_watched(&self) -> Ref<'_, T> {
        self.shared.value.borrow()
    }

    fn subscribe(&self) -> SimWatchReceiver<T> {
        self.shared.receivers.set(self.shared.receivers.get() + 1);
        SimWatchReceiver {
            shared: self.shared.clone(),
            seen: self.shared.version.get(),
        }
    }
}

impl<T> Clone for SimWatchReceiver<T> {
    fn clone(&self) -> Self {
        self.shared.receivers.set(self.shared.receivers.get() + 1);
        SimWatchReceiver {
            shared: self.shared.clone(),
            seen: self.seen,
        }
    }
}

impl<T> Drop for SimWatchReceiver<T> {
    fn drop(&mut self) {
        self.shared.receivers.set(self.shared.receivers.get() - 1);
    }
}

impl<T: OptionalSend + OptionalSync> watch::WatchReceiver<SimWatch, T> for SimWatchReceiver<T> {
    async fn changed(&mut self) -> Result<(), RecvError> {
        Changed {
            receiver: self,
            waiter: None,
        }
        .await
    }

    fn borrow_watched(&self) -> Ref<'_, T> {
        self.shared.value.borrow()
    }

    fn borrow_and_update(&mut self) -> Ref<'_, T> {
        self.seen = self.shared.version.get();
        self.shared.value.borrow()
    }
}

/// A receiver waiting for a version it has not seen.
struct Changed<'a, T> {
    receiver: &'a mut SimWatchReceiver<T>,
    /// Its place among the waiters, once it waited.
    waiter: Option<u64>,
}

impl<T> Future for Changed<'_, T> {
    type Output = Result<(), RecvError>;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let shared = &this.receiver.shared;
        let version = shared.version.get();
        if version != this.receiver.seen {
            this.receiver.seen = version;
            return Poll::Ready(Ok(()));
        }
        if shared.senders.get() == 0 {
            return Poll::Ready(Err(RecvError(())));
        }
        let id = *this.waiter.get_or_insert_with(|| {
            let id = shared.next_waiter.get();
            shared.next_waiter.set(id + 1);
            id
        });
        shared
            .waiters
            .borrow_mut()
            .insert(id, context.waker().clone());
        Poll::Pending
    }
}

impl<T> Drop for Changed<'_, T> {
    fn drop(&mut self) {
        if let Some(id) = self.waiter {
            self.receiver.shared.waiters.borrow_mut().remove(&id);
        }
    }
}
