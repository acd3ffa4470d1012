//! [`LockGuard`], what every lock call hands out, and [`GuardRelease`], what
//! a backend puts inside it.

use std::any::Any;
use std::fmt;
use std::sync::Once;

use async_trait::async_trait;
use futures_util::future::{join, join_all};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::api::loss::LossCell;
use crate::util::observe::{self, Granted, Holding, Site};
use crate::util::unstoppable::Unstoppable;
use crate::{Expiry, Key, LossCause, Result};

/// What a backend does to release one held lock; the inside of a [`LockGuard`].
///
/// For backend authors: a backend implements it to build guards with
/// [`LockGuard::new`] (see [`crate::provider`]).
#[async_trait]
pub trait GuardRelease: Any + Send + Sync {
    /// Releases the lock. Runs at most once per guard.
    async fn release(self: Box<Self>) -> Result<()>;

    /// Starts watching for a loss the lease deadline cannot see (the lock
    /// key deleted or taken over by someone else), cancelling `lost` when it
    /// happens. Called at most once, when the guard's owner first asks for
    /// [`LockGuard::lost`] or [`LockGuard::lost_token`]; the watch must end
    /// when the guard is released. The default watches nothing.
    fn watch_for_loss(&self, lost: CancellationToken) {
        let _ = lost;
    }

    /// Why the lock was lost, once the backend knows (see
    /// [`LockGuard::loss_cause`]). The default knows nothing.
    fn loss_cause(&self) -> Option<LossCause> {
        None
    }

    /// Releases this lock and `others` together: the other keys of one
    /// [`crate::Locker::lock_all`] call, each built by this backend. One
    /// result per lock, this one's first, then those of `others` in order.
    /// A backend that can release several locks in one request overrides
    /// it (the crate's etcd backend sends one txn, its Redis backend runs
    /// one script); the default releases each on its own, all at once.
    async fn release_with(self: Box<Self>, others: Vec<Box<dyn GuardRelease>>) -> Vec<Result<()>> {
        let (first, rest) = join(self.release(), release_each(others)).await;
        std::iter::once(first).chain(rest).collect()
    }
}

/// Releases each of `all` on its own, all at once; one result per lock,
/// in order. For backends' [`GuardRelease::release_with`] when the locks
/// cannot go in one request.
pub(crate) async fn release_each(all: Vec<Box<dyn GuardRelease>>) -> Vec<Result<()>> {
    join_all(all.into_iter().map(|r| r.release())).await
}

/// What [`LockGuard::begin_release`] started: the unlock's span, and
/// whether this release ended a holding counted as held.
pub(crate) struct Ending {
    pub span: tracing::Span,
    released: bool,
}

impl Granted for LockGuard {
    fn fencing_token(&self) -> u64 {
        self.token
    }

    /// Counts the guard as held from now on, for the metrics and events
    /// of `site` (see `util/observe.rs`).
    fn observed(mut self, site: Site) -> Self {
        self.holding = Some(Holding::start(
            site,
            &self.key,
            self.token,
            self.expiry.clone(),
            self.lost.clone(),
        ));
        self
    }
}

/// Proof of holding a lock; releases it on [`LockGuard::unlock`] or drop.
///
/// `unlock().await` is the documented path: it reports errors (such as a
/// lock lost to lease expiry). Dropping the guard releases the lock in the
/// background on the current tokio runtime and never blocks; outside a
/// runtime the lock is freed when its lease expires.
///
/// # Knowing the lock is still held
/// A lease-based lock can be lost while held: the holder pauses past its
/// lease, or cannot reach the servers for that long. [`LockGuard::is_held`]
/// answers from a local monotonic deadline (the last renewal the server
/// acknowledged, plus the TTL, minus a margin), so a holder waking from a
/// long pause learns it at once, before it touches the resource.
/// [`LockGuard::lost`] and [`LockGuard::lost_token`] signal the loss as it
/// happens, including the lock key being deleted or taken over by someone
/// else. None of this makes a paused holder safe by itself: pass
/// [`LockGuard::fencing_token`] to the resource (or, on etcd, use
/// `fairlock::etcd::FencedTxn`).
#[must_use = "if unused the lock is released at once"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    key: Key,
    token: u64,
    lost: CancellationToken,
    expiry: Option<Expiry>,
    watch: Once,
    release: Option<Box<dyn GuardRelease>>,
    /// The cause given by [`LockGuard::mark_lost`].
    marked: LossCell,
    /// Metrics and events of a guard from this crate's backends.
    holding: Option<Holding>,
}

impl LockGuard {
    /// Builds a guard; for backend authors (see [`crate::provider`]), not
    /// for applications, which get guards from [`crate::Locker::lock`] and
    /// [`crate::Locker::try_lock`]. Without [`LockGuard::with_loss_signal`] the
    /// guard is never reported lost.
    pub fn new(key: Key, fencing_token: u64, release: Box<dyn GuardRelease>) -> Self {
        LockGuard {
            key,
            token: fencing_token,
            lost: CancellationToken::new(),
            expiry: None,
            watch: Once::new(),
            release: Some(release),
            marked: LossCell::default(),
            holding: None,
        }
    }

    /// Ties the guard to its backend's loss signals: `lost` is cancelled by
    /// the backend when the lock is known lost (its session ended, or the
    /// lease `expiry` passed); the guard also checks `expiry` itself. For
    /// backend authors (see [`crate::provider`]).
    pub fn with_loss_signal(mut self, lost: CancellationToken, expiry: Option<Expiry>) -> Self {
        self.lost = lost;
        self.expiry = expiry;
        self
    }

    /// `true` while the lock is held as far as this process can tell.
    ///
    /// Cheap and local: no request is sent. `false` once the lease's local
    /// deadline has passed or a loss was observed; never `true` again after
    /// that. `true` is not a promise that the lock will still be held a
    /// moment later: fence writes to the resource with
    /// [`LockGuard::fencing_token`].
    #[must_use]
    pub fn is_held(&self) -> bool {
        if self.lost.is_cancelled() {
            return false;
        }
        if self.expiry.as_ref().is_some_and(Expiry::has_passed) {
            self.lost.cancel();
            return false;
        }
        true
    }

    /// Until when the lock is known held, on this process's monotonic
    /// clock: the lease's local deadline, which each acknowledged renewal
    /// moves to when that renewal was sent plus the TTL less a safety
    /// margin, so never past the server's own expiry. `None` once the lock
    /// is known lost, or if the backend keeps no deadline (the in-memory
    /// one). Like [`LockGuard::is_held`] it promises nothing about the next
    /// moment; it tells how much work may still fit before a renewal must
    /// have been acknowledged.
    ///
    /// # Examples
    /// ```no_run
    /// # fn demo(guard: &fairlock::LockGuard) {
    /// use std::time::{Duration, Instant};
    ///
    /// let left = guard.valid_until().map(|t| t.saturating_duration_since(Instant::now()));
    /// if left.is_some_and(|left| left > Duration::from_secs(1)) {
    ///     // ... start another batch ...
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn valid_until(&self) -> Option<std::time::Instant> {
        if !self.is_held() {
            return None;
        }
        self.expiry.as_ref().map(Expiry::deadline)
    }

    /// Resolves when the lock is lost: the lease's local deadline passed,
    /// the session ended, or the lock key was deleted or taken over by
    /// someone else. Never resolves while the lock stays held.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(locker: &dyn fairlock::Locker) -> fairlock::Result<()> {
    /// # async fn do_work() {}
    /// use fairlock::{Context, Key};
    ///
    /// let guard = locker.lock(&Context::background(), &Key::from("jobs/export")).await?;
    /// tokio::select! {
    ///     () = do_work() => guard.unlock().await?,
    ///     () = guard.lost() => eprintln!("lost the lock; stopped the work"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lost(&self) {
        self.watch_for_loss();
        tokio::select! {
            () = self.lost.cancelled() => {}
            () = async {
                match &self.expiry {
                    Some(expiry) => expiry.passed().await,
                    None => std::future::pending().await,
                }
            } => self.lost.cancel(),
        }
    }

    /// A token cancelled when the lock is lost (see [`LockGuard::lost`]),
    /// for a critical section to select on or to pass to its own tasks.
    #[must_use]
    pub fn lost_token(&self) -> CancellationToken {
        self.watch_for_loss();
        self.lost.clone()
    }

    /// Why the lock was lost: `None` while it is held (as
    /// [`LockGuard::is_held`] sees it); once lost, the cause the backend
    /// recorded (the lock key deleted or taken over, the lease ended on the
    /// server), else [`LossCause::Expired`] when the lease's local deadline
    /// passed, else [`LossCause::Unspecified`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(guard: fairlock::LockGuard) {
    /// guard.lost().await;
    /// eprintln!("lost: {}", guard.loss_cause().expect("lost"));
    /// # }
    /// ```
    #[must_use]
    pub fn loss_cause(&self) -> Option<LossCause> {
        if self.is_held() {
            return None;
        }
        let expired = self.expiry.as_ref().is_some_and(Expiry::has_passed);
        Some(
            self.release
                .as_ref()
                .and_then(|r| r.loss_cause())
                .or_else(|| self.marked.get())
                .unwrap_or(if expired {
                    LossCause::Expired
                } else {
                    LossCause::Unspecified
                }),
        )
    }

    /// Marks the lock lost (a backend saw a fenced write rejected because
    /// the lock key changed), with `cause` unless the backend knows better.
    #[cfg(feature = "etcd")]
    pub(crate) fn mark_lost(&self, cause: LossCause) {
        self.marked.record(cause);
        self.lost.cancel();
    }

    /// The backend's part of the guard, for backend-specific operations.
    #[cfg(feature = "etcd")]
    pub(crate) fn backend(&self) -> Option<&dyn Any> {
        self.release.as_deref().map(|r| r as &dyn Any)
    }

    fn watch_for_loss(&self) {
        if let Some(release) = &self.release {
            self.watch
                .call_once(|| release.watch_for_loss(self.lost.clone()));
        }
    }

    /// The lock's key.
    #[must_use]
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// A number that grows strictly with every new holder of this key.
    ///
    /// Pass it to the resource you protect and have the resource reject
    /// tokens lower than the highest it has seen: that keeps a holder that
    /// was paused past its lease from doing harm. On etcd it is the revision
    /// at which this holder was granted the lock key. Tokens of different
    /// keys are unrelated: two keys may have the same one.
    #[must_use]
    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// Releases the lock.
    ///
    /// # Errors
    /// [`crate::Error::LockLost`] if the lock was no longer held (for example
    /// its lease expired); backend errors.
    ///
    /// # Cancel safety
    /// If the future is dropped (within a tokio runtime) the release goes
    /// on in the background.
    pub async fn unlock(mut self) -> Result<()> {
        let Some((release, ending)) = self.begin_release("unlock") else {
            return Ok(());
        };
        let result = Self::run_release(release)
            .instrument(ending.span.clone())
            .await;
        self.end_release(ending, &result);
        result
    }

    /// Takes the backend's release out of the guard (`None` if already
    /// taken) and ends its holding, `how`: `"unlock"` or `"drop"`. For
    /// [`LockGuard::unlock`] and the release of a `MultiGuard`'s keys.
    pub(crate) fn begin_release(
        &mut self,
        how: &'static str,
    ) -> Option<(Box<dyn GuardRelease>, Ending)> {
        let release = self.release.take()?;
        let span = observe::unlock_span(self.holding.as_ref(), &self.key);
        let released = {
            let _entered = span.enter();
            self.holding.as_ref().is_some_and(|h| h.end(how))
        };
        Some((release, Ending { span, released }))
    }

    /// Records the result of the release [`LockGuard::begin_release`]
    /// took: a lock the release found lost counts as lost at unlock.
    pub(crate) fn end_release(&self, ending: Ending, result: &Result<()>) {
        if let (true, Err(e @ crate::Error::LockLost { .. }), Some(h)) =
            (ending.released, result, &self.holding)
        {
            let _entered = ending.span.enter();
            h.lost_at_unlock(&self.key, e);
        }
    }

    /// Runs a backend's release in the caller's task; if the caller drops
    /// this future (a timeout, a `select!`), the release goes on in a task
    /// of its own rather than stopping half way.
    async fn run_release(release: Box<dyn GuardRelease>) -> Result<()> {
        let release = release.release().instrument(tracing::Span::current());
        Unstoppable::new(release, || Err(release_panicked())).await
    }
}

/// What an unlock returns when the backend's release panicked.
pub(crate) fn release_panicked() -> crate::Error {
    crate::Error::Backend {
        backend: "fairlock",
        op: "unlock",
        source: "the release panicked (a bug in fairlock or its backend)".into(),
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(holding) = &self.holding {
            holding.end("drop");
        }
        if let Some(release) = self.release.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                let _ = release.release().await;
            });
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key)
            .field("fencing_token", &self.token)
            .finish_non_exhaustive()
    }
}
