//! The simulation's runtime: a deterministic single-threaded executor on
//! virtual time, implementing openraft's `AsyncRuntime` ([`SimRuntime`]).
//!
//! - Tasks run in the order they were woken (one FIFO queue); the future
//!   given to `block_on` is a task like the others.
//! - Time is a counter: when no task can run, the clock jumps to the
//!   earliest timer and wakes every timer due; nothing reads a wall clock.
//! - Every task belongs to a group (a spawned task joins its spawner's);
//!   [`cancel_group`] drops all of a group's tasks at once, wherever they
//!   wait: a node's crash.
//! - Randomness (`thread_rng`, which openraft draws election timeouts
//!   from) comes from the run's seed.
//!
//! So a run is a function of its seed. (Tokio's current-thread runtime
//! with a paused clock is not: its timer wheel rounds deadlines to ticks
//! counted from an instant read from the real clock, so the order of
//! events within a millisecond, and from there the whole run, changes from
//! one process to the next. openraft 0.10's `DeterministicRng` wrapper
//! fixes only the randomness.) Channels and the mutex are the production
//! runtime's (`openraft-rt-monoio` wraps `tokio::sync` and `local-sync`,
//! which need no runtime), named through its `AsyncRuntime` impl, except
//! the watch channel (`watch.rs`: tokio's wakes its receivers in an order
//! drawn from a per-process random generator).
//!
//! Must not: read a wall clock or OS randomness, poll a task that was not
//! woken, or keep a task of a cancelled group (a crashed node's task
//! running on would write to its disk after the crash).

use iggyd_storage::sim::SimRng;
use openraft::rt::{AsyncRuntime, OptionalSend};
use openraft_rt_monoio::MonoioRuntime;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// The id of the future given to `block_on` (tasks count from 1).
const MAIN: u64 = 0;
/// The group of the `block_on` future and of what it spawns.
pub const MAIN_GROUP: u64 = 0;
/// Polls one run may take: a run past it is spinning, not simulating.
const POLLS_MAX: u64 = 200_000_000;
/// Virtual time one run may take: a run past it waits for something that
/// never comes (while heartbeats keep the clock going).
const VIRTUAL_TIME_MAX: Duration = Duration::from_secs(30 * 60);

/// Distinguishes the executors of one thread, so a waker outliving its
/// run wakes nothing in the next.
static EPOCHS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static CURRENT: RefCell<Option<Rc<Executor>>> = const { RefCell::new(None) };
}

fn with_executor<R>(f: impl FnOnce(&Executor) -> R) -> R {
    CURRENT.with(|current| {
        let current = current.borrow();
        f(current
            .as_ref()
            .expect("outside the simulation runtime's block_on"))
    })
}

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

struct Task {
    group: u64,
    /// Taken out while the task is polled.
    future: Option<LocalFuture>,
    queued: bool,
    waker: Waker,
}

struct Executor {
    epoch: u64,
    /// Virtual time since the run began.
    now: Cell<Duration>,
    tasks: RefCell<BTreeMap<u64, Task>>,
    ready: RefCell<VecDeque<u64>>,
    main_queued: Cell<bool>,
    /// `(deadline, registration)` → the sleeper's waker.
    timers: RefCell<BTreeMap<(Duration, u64), Waker>>,
    next_task: Cell<u64>,
    next_timer: Cell<u64>,
    next_group: Cell<u64>,
    /// The group of the task being polled.
    group: Cell<u64>,
    rng: RefCell<SimRng>,
    polls: Cell<u64>,
}

struct TaskWaker {
    epoch: u64,
    task: u64,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let _ = CURRENT.try_with(|current| {
            if let Ok(current) = current.try_borrow()
                && let Some(executor) = current.as_ref()
                && executor.epoch == self.epoch
            {
                executor.schedule(self.task);
            }
        });
    }
}

impl Executor {
    fn schedule(&self, task: u64) {
        if task == MAIN {
            if !self.main_queued.replace(true) {
                self.ready.borrow_mut().push_back(MAIN);
            }
            return;
        }
        if let Some(slot) = self.tasks.borrow_mut().get_mut(&task)
            && !slot.queued
        {
            slot.queued = true;
            self.ready.borrow_mut().push_back(task);
        }
    }

    fn waker(&self, task: u64) -> Waker {
        Waker::from(Arc::new(TaskWaker {
            epoch: self.epoch,
            task,
        }))
    }

    fn spawn(&self, group: u64, future: LocalFuture) {
        let id = self.next_task.get();
        self.next_task.set(id + 1);
        let waker = self.waker(id);
        self.tasks.borrow_mut().insert(
            id,
            Task {
                group,
                future: Some(future),
                queued: true,
                waker,
            },
        );
        self.ready.borrow_mut().push_back(id);
    }

    /// Polls task `id` once, if it still exists.
    fn poll_task(&self, id: u64) {
        let taken = {
            let mut tasks = self.tasks.borrow_mut();
            tasks.get_mut(&id).and_then(|slot| {
                slot.queued = false;
                Some((slot.future.take()?, slot.group, slot.waker.clone()))
            })
        };
        let Some((mut future, group, waker)) = taken else {
            return;
        };
        self.group.set(group);
        let poll = future.as_mut().poll(&mut Context::from_waker(&waker));
        self.group.set(MAIN_GROUP);
        let finished = match poll {
            Poll::Ready(()) => self.tasks.borrow_mut().remove(&id),
            Poll::Pending => match self.tasks.borrow_mut().get_mut(&id) {
                Some(slot) => {
                    slot.future = Some(future);
                    return;
                }
                // Its group was cancelled while it ran.
                None => None,
            },
        };
        drop(finished);
    }

    /// Moves the clock to the earliest timer and wakes every timer due;
    /// false when there is none.
    fn advance(&self) -> bool {
        let due = {
            let mut timers = self.timers.borrow_mut();
            let Some((&(deadline, _), _)) = timers.first_key_value() else {
                return false;
            };
            if deadline > self.now.get() {
                assert!(
                    deadline <= VIRTUAL_TIME_MAX,
                    "the run passed {VIRTUAL_TIME_MAX:?} of virtual time: something waits for ever"
                );
                self.now.set(deadline);
            }
            let now = self.now.get();
            let mut due = Vec::new();
            while let Some(entry) = timers.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                due.push(entry.remove());
            }
            due
        };
        for waker in due {
            waker.wake();
        }
        true
    }
}

/// Runs `future` to completion on a fresh executor seeded by `seed`;
/// every task still alive when it completes is dropped.
pub fn block_on<F: Future>(seed: u64, future: F) -> F::Output {
    let executor = Rc::new(Executor {
        epoch: EPOCHS.fetch_add(1, Ordering::Relaxed),
        now: Cell::new(Duration::ZERO),
        tasks: RefCell::new(BTreeMap::new()),
        ready: RefCell::new(VecDeque::new()),
        main_queued: Cell::new(true),
        timers: RefCell::new(BTreeMap::new()),
        next_task: Cell::new(MAIN + 1),
        next_timer: Cell::new(0),
        next_group: Cell::new(MAIN_GROUP + 1),
        group: Cell::new(MAIN_GROUP),
        // Not the seed itself: the caller may seed its own `SimRng` with it.
        rng: RefCell::new(SimRng::new(seed ^ 0x5EED_0F7E_0A11_0000)),
        polls: Cell::new(0),
    });
    executor.ready.borrow_mut().push_back(MAIN);
    let previous = CURRENT.with(|current| current.replace(Some(executor.clone())));
    assert!(previous.is_none(), "block_on inside block_on");
    let main_waker = executor.waker(MAIN);
    let mut future = std::pin::pin!(future);
    let output = loop {
        let next = executor.ready.borrow_mut().pop_front();
        let Some(id) = next else {
            assert!(
                executor.advance(),
                "deadlock: no task can run and no timer is set"
            );
            continue;
        };
        let polls = executor.polls.get() + 1;
        executor.polls.set(polls);
        assert!(polls < POLLS_MAX, "the run spins: {polls} polls");
        if id != MAIN {
            executor.poll_task(id);
            continue;
        }
        executor.main_queued.set(false);
        if let Poll::Ready(output) = future.as_mut().poll(&mut Context::from_waker(&main_waker)) {
            break output;
        }
    };
    // Drop what is left while the executor is still current (a drop may
    // wake or spawn), then the executor.
    loop {
        let tasks = std::mem::take(&mut *executor.tasks.borrow_mut());
        if tasks.is_empty() {
            break;
        }
        drop(tasks);
    }
    executor.timers.borrow_mut().clear();
    CURRENT.with(|current| current.replace(None));
    output
}

/// A new group for tasks (a node's incarnation).
pub fn new_group() -> u64 {
    with_executor(|executor| {
        let group = executor.next_group.get();
        executor.next_group.set(group + 1);
        group
    })
}

/// Spawns `future` into `group`.
pub fn spawn_in<F>(group: u64, future: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    let state = Rc::new(RefCell::new(JoinState {
        output: None,
        done: false,
        waker: None,
    }));
    let guard = Finished(state.clone());
    let task = async move {
        let guard = guard;
        let output = future.await;
        guard.0.borrow_mut().output = Some(output);
    };
    with_executor(|executor| executor.spawn(group, Box::pin(task)));
    JoinHandle { state }
}

/// Spawns `future` into the group of the task spawning it.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + 'static,
    F::Output: 'static,
{
    let group = with_executor(|executor| executor.group.get());
    spawn_in(group, future)
}

/// Drops every task of `group`, wherever it waits.
pub fn cancel_group(group: u64) {
    assert!(group != MAIN_GROUP, "the main group is never cancelled");
    let cancelled: Vec<Task> = with_executor(|executor| {
        let mut tasks = executor.tasks.borrow_mut();
        let ids: Vec<u64> = tasks
            .iter()
            .filter(|(_, task)| task.group == group)
            .map(|(id, _)| *id)
            .collect();
        ids.iter().filter_map(|id| tasks.remove(id)).collect()
    });
    drop(cancelled);
}

/// Virtual time since the run began.
pub fn now() -> Duration {
    CURRENT.with(|current| {
        current
            .borrow()
            .as_ref()
            .map_or(Duration::ZERO, |executor| executor.now.get())
    })
}

/// What a task's handle sees.
struct JoinState<T> {
    output: Option<T>,
    /// The task finished or was dropped.
    done: bool,
    waker: Option<Waker>,
}

/// Marks the task done when its future is dropped, finished or not.
struct Finished<T>(Rc<RefCell<JoinState<T>>>);

impl<T> Drop for Finished<T> {
    fn drop(&mut self) {
        let waker = {
            let mut state = self.0.borrow_mut();
            state.done = true;
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The handle of a spawned task: its output, or [`Cancelled`] when the task
/// was dropped first. Dropping the handle detaches the task.
pub struct JoinHandle<T> {
    state: Rc<RefCell<JoinState<T>>>,
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, Cancelled>;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.state.borrow_mut();
        if let Some(output) = state.output.take() {
            return Poll::Ready(Ok(output));
        }
        if state.done {
            return Poll::Ready(Err(Cancelled));
        }
        state.waker = Some(context.waker().clone());
        Poll::Pending
    }
}

/// A task was dropped before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancelled;

impl std::fmt::Display for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the task was cancelled")
    }
}

/// A point in virtual time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimInstant(Duration);

impl std::ops::Add<Duration> for SimInstant {
    type Output = SimInstant;
    fn add(self, other: Duration) -> SimInstant {
        SimInstant(self.0 + other)
    }
}

impl std::ops::AddAssign<Duration> for SimInstant {
    fn add_assign(&mut self, other: Duration) {
        self.0 += other;
    }
}

impl std::ops::Sub<Duration> for SimInstant {
    type Output = SimInstant;
    fn sub(self, other: Duration) -> SimInstant {
        SimInstant(self.0.saturating_sub(other))
    }
}

impl std::ops::SubAssign<Duration> for SimInstant {
    fn sub_assign(&mut self, other: Duration) {
        self.0 = self.0.saturating_sub(other);
    }
}

impl std::ops::Sub<SimInstant> for SimInstant {
    type Output = Duration;
    fn sub(self, other: SimInstant) -> Duration {
        self.0.saturating_sub(other.0)
    }
}

impl openraft::rt::Instant for SimInstant {
    fn now() -> SimInstant {
        SimInstant(now())
    }
}

/// Waits until a point in virtual time.
pub struct Sleep {
    deadline: Duration,
    registration: Option<(Duration, u64)>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        with_executor(|executor| {
            if executor.now.get() >= self.deadline {
                if let Some(key) = self.registration.take() {
                    executor.timers.borrow_mut().remove(&key);
                }
                return Poll::Ready(());
            }
            let key = match self.registration {
                Some(key) => key,
                None => {
                    let registration = executor.next_timer.get();
                    executor.next_timer.set(registration + 1);
                    (self.deadline, registration)
                }
            };
            self.registration = Some(key);
            executor
                .timers
                .borrow_mut()
                .insert(key, context.waker().clone());
            Poll::Pending
        })
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(key) = self.registration.take() {
            let _ = CURRENT.try_with(|current| {
                if let Ok(current) = current.try_borrow()
                    && let Some(executor) = current.as_ref()
                    && let Ok(mut timers) = executor.timers.try_borrow_mut()
                {
                    timers.remove(&key);
                }
            });
        }
    }
}

pub fn sleep_until(deadline: SimInstant) -> Sleep {
    Sleep {
        deadline: deadline.0,
        registration: None,
    }
}

pub fn sleep(duration: Duration) -> Sleep {
    sleep_until(SimInstant(now() + duration))
}

/// A future given a deadline.
pub struct Timeout<F> {
    future: Pin<Box<F>>,
    sleep: Sleep,
}

/// A [`Timeout`]'s deadline passed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline elapsed")
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(output) = self.future.as_mut().poll(context) {
            return Poll::Ready(Ok(output));
        }
        match Pin::new(&mut self.sleep).poll(context) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}

pub fn timeout_at<F: Future>(deadline: SimInstant, future: F) -> Timeout<F> {
    Timeout {
        future: Box::pin(future),
        sleep: sleep_until(deadline),
    }
}

pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    timeout_at(SimInstant(now() + duration), future)
}

/// openraft's runtime for the simulation (see the module doc).
#[derive(Debug, Default)]
pub struct SimRuntime {
    seed: u64,
}

impl AsyncRuntime for SimRuntime {
    type JoinError = Cancelled;
    type JoinHandle<T: OptionalSend + 'static> = JoinHandle<T>;
    type Sleep = Sleep;
    type Instant = SimInstant;
    type TimeoutError = Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = Timeout<T>;
    type ThreadLocalRng = SmallRng;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        timeout_at(deadline, future)
    }

    fn is_panic(_: &Self::JoinError) -> bool {
        // A panic unwinds out of `block_on` and fails the run.
        false
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        SmallRng::seed_from_u64(with_executor(|executor| {
            executor.rng.borrow_mut().next_u64()
        }))
    }

    type Mpsc = <MonoioRuntime as AsyncRuntime>::Mpsc;
    type Watch = super::watch::SimWatch;
    type Oneshot = <MonoioRuntime as AsyncRuntime>::Oneshot;
    type Mutex<T: OptionalSend + 'static> = <MonoioRuntime as AsyncRuntime>::Mutex<T>;

    fn new(_threads: usize) -> Self {
        SimRuntime::default()
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        block_on(self.seed, future)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the runtime keeps openraft's contract for runtimes: its own
    // conformance suite (spawn and join, sleeps, instants, timeouts,
    // selects, channels, mutexes, task locals) passes on it.
    #[test]
    fn openraft_runtime_suite_passes() {
        openraft::rt::testing::Suite::<SimRuntime>::test_all();
    }

    // Proves time is virtual and a cancelled group's tasks never run
    // again: a sleeper of a cancelled group is dropped (its handle says
    // so), the other finishes at its virtual deadline.
    #[test]
    fn groups_cancel_and_time_jumps() {
        let (elapsed, first, second) = block_on(1, async {
            let group = new_group();
            let doomed = spawn_in(group, async {
                sleep(Duration::from_secs(5)).await;
                1
            });
            let kept = spawn(async {
                sleep(Duration::from_secs(10)).await;
                2
            });
            sleep(Duration::from_secs(1)).await;
            cancel_group(group);
            (now(), doomed.await, kept.await)
        });
        assert_eq!(elapsed, Duration::from_secs(1));
        assert_eq!(first, Err(Cancelled));
        assert_eq!(second, Ok(2));
    }
}
