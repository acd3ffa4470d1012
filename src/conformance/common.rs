//! [`patient`], the context of a `lock` that must succeed, and the helpers
//! the checks share.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::{Context, Elector, Key, Leader, LockGuard, Locker, Result};

/// A context whose deadline only guards against a hang: two minutes, never
/// reached when the backend is correct. The checks pass it to every `lock`
/// that must succeed.
///
/// # Examples
/// ```
/// # async fn example(locker: &dyn fairlock::Locker) -> fairlock::Result<()> {
/// let guard = locker.lock(&fairlock::conformance::patient(), &"k".into()).await?;
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
pub fn patient() -> Context {
    Context::background().with_timeout(Duration::from_secs(120))
}

/// A context that times out after `ms` milliseconds.
pub(super) fn short(ms: u64) -> Context {
    Context::background().with_timeout(Duration::from_millis(ms))
}

/// Asserts that `$call` fails with an error matching `$pat`.
macro_rules! assert_err {
    ($call:expr, $pat:pat, $what:expr) => {
        match $call {
            Err(e) => assert!(matches!(e, $pat), "{}: {e}", $what),
            Ok(_) => panic!("{}: no error", $what),
        }
    };
}
pub(super) use assert_err;

/// Runs `call(who, key)` in a task of its own, on clones of both.
pub(super) fn spawn<T: ?Sized + Send + Sync + 'static, F>(
    who: &Arc<T>,
    key: &Key,
    call: impl FnOnce(Arc<T>, Key) -> F,
) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(call(Arc::clone(who), key.clone()))
}

/// Awaits every task, panicking if one did; their outputs in order.
pub(super) async fn join<T>(tasks: Vec<JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}

/// `try_lock` of a key that must be free.
pub(super) async fn take(locker: &dyn Locker, key: &Key) -> LockGuard {
    locker.try_lock(key).await.expect("try_lock").expect("free")
}

/// `true` when a `try_*` call answers `None` (held); panics on an error.
pub(super) async fn refused<T>(call: impl Future<Output = Result<Option<T>>>) -> bool {
    call.await.expect("try call").is_none()
}

/// What tasks taking turns on one lock (or election) share: a counter they
/// update non-atomically, how many are inside, the last token granted.
#[derive(Default)]
pub(super) struct Turns {
    counter: AtomicU64,
    inside: AtomicU32,
    last: AtomicU64,
}

impl Turns {
    /// One turn of a holder with `token`: it must be alone inside (`who`
    /// names two at once) and its token greater than the last; it then runs
    /// `inside` (more checks of the holder, counted as inside) and does a
    /// read-sleep-write of the counter.
    pub(super) async fn turn(&self, token: u64, who: &str, inside: impl Future<Output = ()>) {
        assert_eq!(self.inside.fetch_add(1, Ordering::SeqCst), 0, "{who}");
        let previous = self.last.swap(token, Ordering::SeqCst);
        assert!(token > previous, "token {token} after {previous}");
        inside.await;
        let seen = self.counter.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1)).await; // widen the race
        self.counter.store(seen + 1, Ordering::SeqCst);
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    /// Asserts that `want` turns were taken: no update lost.
    pub(super) fn assert_count(&self, want: u64) {
        assert_eq!(self.counter.load(Ordering::SeqCst), want, "lost updates");
    }
}

/// Asserts that `elector` reads `name`'s leader with `value` and `term`;
/// returns the leader read.
pub(super) async fn assert_leader(e: &dyn Elector, name: &Key, value: &[u8], term: u64) -> Leader {
    let leader = e.leader(name).await.expect("leader").expect("a leader");
    let read = (leader.value.as_slice(), leader.fencing_token);
    assert_eq!(read, (value, term), "the leader read");
    leader
}
