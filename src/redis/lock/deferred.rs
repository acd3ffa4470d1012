//! Watchdogs that start when their first extend is due. Most locks are
//! released long before TTL/3 has passed; a task spawned at every grant
//! and aborted at its unlock cost the uncontended cycle two task wake-ups,
//! often on another thread: the largest client-side cost of the cycle on
//! the bench machine. Instead a locker keeps one timer task that spawns
//! each watchdog when its first extend comes due; a lock released before
//! then never has a task.
//!
//! Before its first extend a watchdog has nothing to do: the extend is not
//! due, and the lock's local deadline (TTL less drift and margin) is later
//! still. A watchdog started late, after a pause of the whole process,
//! finds both due at once, as a task of its own would have.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::runtime::{self, Handle};
use tokio::sync::Notify;
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;

/// A watchdog's whole life, not yet polled.
pub(crate) type Watch = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The watchdogs of one locker waiting for their first extend, and the
/// timer task that starts them.
pub(crate) struct Starter {
    shared: Arc<Shared>,
    /// The timer task and the runtime it runs on.
    timer: Mutex<Option<(JoinHandle<()>, runtime::Id)>>,
    /// How long the timer task, finding nothing queued, waits before it
    /// sleeps until woken: new watchdogs due after that wake nobody.
    idle: Duration,
}

struct Shared {
    state: Mutex<State>,
    wake: Notify,
}

#[derive(Default)]
struct State {
    /// Watchdogs not started yet, by when they are due and their number.
    queued: BTreeMap<(Instant, u64), Watch>,
    /// Started watchdogs, by number.
    running: HashMap<u64, AbortHandle>,
    next: u64,
    /// When the timer task looks next; `None` while it waits to be woken.
    wakes_at: Option<Instant>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One lock's watchdog.
pub(crate) struct Watchdog(Kind);

enum Kind {
    /// Queued in a starter (or started by it).
    Deferred {
        shared: Arc<Shared>,
        due: Instant,
        n: u64,
    },
    /// A task of its own: the grant came on another runtime than the
    /// starter's timer task runs on.
    Task(AbortHandle),
}

impl Watchdog {
    /// Stops it: it never starts if it has not, or its task is aborted.
    pub fn stop(&self) {
        match &self.0 {
            Kind::Task(task) => task.abort(),
            Kind::Deferred { shared, due, n } => {
                let mut state = shared.state();
                // Dropped after the lock: the future owns the locker's state.
                let queued = state.queued.remove(&(*due, *n));
                if queued.is_none()
                    && let Some(task) = state.running.remove(n)
                {
                    task.abort();
                }
                drop(state);
                drop(queued);
            }
        }
    }
}

impl Starter {
    /// A starter whose timer task, when idle, looks again after `idle`
    /// before it waits to be woken (the period of first extends: a grant
    /// made meanwhile is due after that look, and wakes nobody).
    pub fn new(idle: Duration) -> Self {
        Starter {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                wake: Notify::new(),
            }),
            timer: Mutex::new(None),
            idle,
        }
    }

    /// Runs `watch` from `due` on, on the current runtime (the timer
    /// task's, or a task of its own when the caller is on another one).
    ///
    /// # Panics
    /// Outside a tokio runtime, as `tokio::spawn` does.
    pub fn start(&self, due: std::time::Instant, watch: Watch) -> Watchdog {
        let due = Instant::from_std(due);
        let rt = Handle::current();
        if !self.timer_on(&rt) {
            return Watchdog(Kind::Task(rt.spawn(watch).abort_handle()));
        }
        let mut state = self.shared.state();
        let n = state.next;
        state.next += 1;
        state.queued.insert((due, n), watch);
        if state.wakes_at.is_none_or(|at| due < at) {
            self.shared.wake.notify_one();
        }
        Watchdog(Kind::Deferred {
            shared: Arc::clone(&self.shared),
            due,
            n,
        })
    }

    /// Whether the timer task runs on `rt`; starts it there when there is
    /// none (or its runtime has shut down).
    fn timer_on(&self, rt: &Handle) -> bool {
        let mut timer = self.timer.lock().unwrap_or_else(|e| e.into_inner());
        match &*timer {
            Some((task, id)) if !task.is_finished() => *id == rt.id(),
            _ => {
                let task = rt.spawn(run(Arc::clone(&self.shared), self.idle));
                *timer = Some((task, rt.id()));
                true
            }
        }
    }
}

impl Drop for Starter {
    fn drop(&mut self) {
        let timer = self.timer.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some((task, _)) = timer.take() {
            task.abort();
        }
    }
}

/// The timer task: starts the watchdogs that are due, then sleeps until
/// the next one is, or is woken by an earlier one.
async fn run(shared: Arc<Shared>, idle: Duration) {
    let mut was_idle = false;
    loop {
        let wakes_at = {
            let mut state = shared.state();
            let now = Instant::now();
            while let Some(entry) = state.queued.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let ((_, n), watch) = entry.remove_entry();
                let task = tokio::spawn(watch);
                state.running.insert(n, task.abort_handle());
            }
            let next = state.queued.keys().next().map(|(due, _)| *due);
            state.wakes_at = match next {
                Some(due) => Some(due),
                // Nothing queued: look once more after `idle`, then wait.
                None if was_idle => None,
                None => Some(now + idle),
            };
            was_idle = next.is_none();
            state.wakes_at
        };
        match wakes_at {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = shared.wake.notified() => {}
                }
            }
            None => shared.wake.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use tokio::sync::oneshot;

    use super::*;

    fn watch(started: &Arc<AtomicBool>, done: oneshot::Sender<()>) -> Watch {
        watch_holding(started, done, None)
    }

    /// A watch that, once started, holds `held` until it is dropped.
    fn watch_holding(
        started: &Arc<AtomicBool>,
        done: oneshot::Sender<()>,
        held: Option<oneshot::Sender<()>>,
    ) -> Watch {
        let started = Arc::clone(started);
        Box::pin(async move {
            started.store(true, Ordering::SeqCst);
            let _ = done.send(());
            let _held = held;
            std::future::pending::<()>().await;
        })
    }

    #[tokio::test(start_paused = true)]
    async fn starts_when_due() {
        let starter = Starter::new(Duration::from_secs(3));
        let started = Arc::new(AtomicBool::new(false));
        let (tx, rx) = oneshot::channel();
        let due = Instant::now() + Duration::from_secs(1);
        let dog = starter.start(due.into_std(), watch(&started, tx));
        tokio::task::yield_now().await;
        assert!(!started.load(Ordering::SeqCst), "not before it is due");
        rx.await.expect("started");
        assert!(Instant::now() >= due);
        dog.stop();
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_watchdog_never_starts() {
        let starter = Starter::new(Duration::from_secs(3));
        let started = Arc::new(AtomicBool::new(false));
        let (tx, rx) = oneshot::channel();
        let due = Instant::now() + Duration::from_secs(1);
        let dog = starter.start(due.into_std(), watch(&started, tx));
        dog.stop();
        // The queued future is dropped: its sender with it.
        assert!(rx.await.is_err(), "never started");
        assert!(!started.load(Ordering::SeqCst));
        assert!(starter.shared.state().queued.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_a_started_watchdog_aborts_it() {
        let starter = Starter::new(Duration::from_secs(3));
        let started = Arc::new(AtomicBool::new(false));
        let (tx, rx) = oneshot::channel();
        let (held, dropped) = oneshot::channel();
        let dog = starter.start(
            Instant::now().into_std(),
            watch_holding(&started, tx, Some(held)),
        );
        rx.await.expect("started");
        assert_eq!(starter.shared.state().running.len(), 1);
        dog.stop();
        assert!(starter.shared.state().running.is_empty());
        assert!(dropped.await.is_err(), "the task was aborted");
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_watchdog_wakes_a_sleeping_timer() {
        let starter = Starter::new(Duration::from_secs(3));
        let (late, early) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (tx_late, _rx_late) = oneshot::channel();
        let (tx_early, rx_early) = oneshot::channel();
        let t0 = Instant::now();
        let a = starter.start(
            (t0 + Duration::from_secs(60)).into_std(),
            watch(&late, tx_late),
        );
        // Let the timer go to sleep until the late one is due.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let b = starter.start(
            (t0 + Duration::from_secs(1)).into_std(),
            watch(&early, tx_early),
        );
        rx_early.await.expect("the early one started");
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "not only when the late one was due"
        );
        assert!(!late.load(Ordering::SeqCst));
        a.stop();
        b.stop();
    }

    #[test]
    fn a_timer_on_a_runtime_that_shut_down_is_replaced() {
        let starter = Starter::new(Duration::from_secs(3));
        let first = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        first.block_on(async {
            let started = Arc::new(AtomicBool::new(false));
            let (tx, rx) = oneshot::channel();
            let dog = starter.start(Instant::now().into_std(), watch(&started, tx));
            rx.await.expect("started on the first runtime");
            dog.stop();
        });
        drop(first);
        let second = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        second.block_on(async {
            let started = Arc::new(AtomicBool::new(false));
            let (tx, rx) = oneshot::channel();
            let dog = starter.start(Instant::now().into_std(), watch(&started, tx));
            assert!(matches!(dog.0, Kind::Deferred { .. }));
            rx.await.expect("started on the second runtime");
            dog.stop();
        });
    }
}
