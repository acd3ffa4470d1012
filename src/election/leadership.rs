//! [`Leadership`]: proof of leading an election, built on the [`LockGuard`]
//! of the election's lock; and [`LeaderRecord`], what a backend does with
//! the leader's value.

use std::fmt;
use std::future::Future;
use std::time::{Instant, SystemTime};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::election::leader::check_value;
use crate::{Context, Error, Key, LockGuard, LossCause, Result};

/// What a backend does with the value of one leadership: the inside of a
/// [`Leadership`], beside the guard of the election's lock.
///
/// For backend authors (see [`crate::Elector`]): the elector builds a
/// [`Leadership`] from the guard it was granted and one of these, with
/// [`Leadership::new`].
#[async_trait]
pub trait LeaderRecord: Send + Sync + 'static {
    /// Makes `value` the leader's value, only while this leadership holds
    /// (fenced with its term): otherwise [`Error::LockLost`], and nothing
    /// is written.
    async fn proclaim(&self, value: &[u8]) -> Result<()>;

    /// Removes the value this leadership proclaimed, if it is still there
    /// (another leader's is left alone). Runs once, after the election's
    /// lock was released or lost, so that no proclaim of this leadership
    /// can land after it.
    async fn retract(self: Box<Self>) -> Result<()>;
}

/// Proof of leading an election: the leader's side of
/// [`crate::Elector::campaign`].
///
/// It holds the election's lock (a fair lock on the election's name)
/// through a [`LockGuard`], and so tells the same things: whether it still
/// leads ([`Leadership::is_held`], from a local deadline, no request),
/// the moment it stops ([`Leadership::lost`]), and a term that grows with
/// every new leader, to fence writes with ([`Leadership::fencing_token`]).
/// [`Leadership::resign`] hands the lock to the next candidate in line;
/// dropping the leadership does the same in the background.
///
/// # Examples
/// ```no_run
/// # async fn demo(elector: &dyn fairlock::Elector) -> fairlock::Result<()> {
/// # async fn lead(_term: u64) {}
/// use fairlock::{Context, Key};
///
/// let leadership = elector
///     .campaign(&Context::background(), &Key::from("scheduler"), b"10.0.0.7:8080")
///     .await?;
/// tokio::select! {
///     () = lead(leadership.fencing_token()) => leadership.resign().await?,
///     () = leadership.lost() => eprintln!("no longer the leader: stopped"),
/// }
/// # Ok(()) }
/// ```
#[must_use = "if unused the leadership is resigned at once"]
#[clippy::has_significant_drop]
pub struct Leadership {
    name: Key,
    guard: Option<LockGuard>,
    record: Option<Box<dyn LeaderRecord>>,
}

/// How a backend's campaign writes a new leader's first value
/// ([`Leadership::campaign`]).
pub(crate) struct Office {
    /// How long backend errors are retried.
    pub patience: std::time::Duration,
    /// The pauses between tries.
    pub backoff: crate::util::backoff::Backoff,
    /// How long the resignation after a failure may take before it goes
    /// on in the background.
    pub resign_within: std::time::Duration,
}

impl Leadership {
    /// A campaign, for every backend's elector: checks `value` and `name`,
    /// takes the election's lock (`lock`, not yet started, of a fair
    /// locker: candidates are elected in arrival order), makes the leader's `record` of the
    /// guard and the owner value, and writes the first value.
    pub(crate) async fn campaign(
        (ctx, name, value): (&Context, &Key, &[u8]),
        lock: impl Future<Output = Result<LockGuard>> + Send,
        office: Office,
        record: impl FnOnce(&LockGuard, (String, SystemTime)) -> Result<Box<dyn LeaderRecord>> + Send,
    ) -> Result<Leadership> {
        check_value(value)?;
        name.validate()?;
        let attempt = format!("e{}", uuid::Uuid::new_v4().simple());
        let owner = crate::api::owner::owner_value(&attempt, "");
        let guard = lock.await?;
        let record = record(&guard, (owner, SystemTime::now()))?;
        Leadership::new(name.clone(), guard, record)
            .take_office(ctx, value, office)
            .await
    }

    /// Writes the first value of a leadership just won, retrying backend
    /// errors for `office.patience` while the leadership holds, until
    /// `ctx` ends; on failure resigns first (leaving nothing behind, as a
    /// `lock` that gives up) and returns the error.
    async fn take_office(
        self,
        ctx: &Context,
        value: &[u8],
        mut office: Office,
    ) -> Result<Leadership> {
        let give_up = Instant::now() + office.patience;
        let written = async {
            loop {
                match self.proclaim(value).await {
                    Err(Error::Backend { .. }) if Instant::now() < give_up => {
                        office.backoff.sleep().await;
                    }
                    done => return done,
                }
            }
        };
        let elected = tokio::select! {
            written = written => written,
            err = ctx.done(self.name.as_str()) => Err(err),
        };
        match elected {
            Ok(()) => {
                tracing::debug!(name = %self.name, term = self.fencing_token(), "elected");
                Ok(self)
            }
            Err(e) => {
                let _ = tokio::time::timeout(office.resign_within, self.resign()).await;
                Err(e)
            }
        }
    }

    /// A leadership of election `name`, held through `guard` (the
    /// election's lock), whose value `record` keeps. For backend authors;
    /// applications get leaderships from [`crate::Elector::campaign`].
    /// It starts watching for the loss of the lock at once.
    pub fn new(name: Key, guard: LockGuard, record: Box<dyn LeaderRecord>) -> Self {
        drop(guard.lost_token()); // starts the backend's loss watch
        Leadership {
            name,
            guard: Some(guard),
            record: Some(record),
        }
    }

    fn held(&self) -> &LockGuard {
        self.guard
            .as_ref()
            .expect("a leadership holds its guard until resign or drop")
    }

    /// The election's name.
    #[must_use]
    pub fn name(&self) -> &Key {
        &self.name
    }

    /// This leader's fencing token (its term): the fencing token of the election's lock, which
    /// grows strictly with every new leader of this election. Pass it with
    /// every write the leader makes, and have the resource refuse terms
    /// lower than the highest it has seen: a leader that was paused past
    /// its lease then cannot overwrite its successor's work.
    #[must_use]
    pub fn fencing_token(&self) -> u64 {
        self.held().fencing_token()
    }

    /// `true` while this process still leads, as far as it can tell:
    /// cheap and local, no request ([`LockGuard::is_held`]). `false` for
    /// good once the lease's local deadline passed or a loss was seen.
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.held().is_held()
    }

    /// Until when this process is known to lead, on its monotonic clock
    /// ([`LockGuard::valid_until`]); `None` once the leadership is known
    /// lost, or from a backend without leases (the in-memory one).
    #[must_use]
    pub fn valid_until(&self) -> Option<Instant> {
        self.held().valid_until()
    }

    /// Resolves when the leadership is lost: the lease's local deadline
    /// passed, the lease ended, or the election's lock key was deleted or
    /// taken over. Never while it still leads; not on [`Leadership::resign`].
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(leadership: fairlock::Leadership) {
    /// leadership.lost().await;
    /// eprintln!("no longer the leader: {:?}", leadership.loss_cause());
    /// # }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lost(&self) {
        self.held().lost().await;
    }

    /// A token cancelled when the leadership is lost (see
    /// [`Leadership::lost`]), to pass to the leader's tasks.
    #[must_use]
    pub fn lost_token(&self) -> CancellationToken {
        self.held().lost_token()
    }

    /// Why the leadership was lost; `None` while it leads
    /// ([`LockGuard::loss_cause`]).
    #[must_use]
    pub fn loss_cause(&self) -> Option<LossCause> {
        self.held().loss_cause()
    }

    /// The guard of the election's lock, for what a backend offers on
    /// guards: on etcd, [`FencedTxn`](crate::etcd::FencedTxn) runs a txn
    /// only while this leadership holds.
    pub fn guard(&self) -> &LockGuard {
        self.held()
    }

    /// Changes the value observers see of this leader, only while it
    /// still leads: the write is fenced with its term, so a leader that
    /// lost its leadership (even one that does not know it yet) cannot
    /// overwrite its successor's value.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(leadership: fairlock::Leadership) -> fairlock::Result<()> {
    /// leadership.proclaim(b"10.0.0.7:9090").await?; // moved to another port
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::LockLost`] when it no longer leads (refused without a
    /// request once [`Leadership::is_held`] is `false`): nothing was
    /// written. [`Error::InvalidValue`] for a value over
    /// [`crate::MAX_VALUE_LEN`]. Backend errors; after one that got no
    /// answer the value may or may not have been written.
    ///
    /// # Cancel safety
    /// Once sent, the write may be applied even if the future is dropped
    /// (only while this leadership holds, then).
    pub async fn proclaim(&self, value: impl AsRef<[u8]> + Send) -> Result<()> {
        let value = value.as_ref();
        check_value(value)?;
        if !self.is_held() {
            let cause = self.loss_cause().unwrap_or(LossCause::Unspecified);
            return Err(self.not_leader(&format!("{cause}; nothing was written")));
        }
        let record = self
            .record
            .as_ref()
            .expect("a leadership holds its record until resign or drop");
        record.proclaim(value).await
    }

    /// Gives the leadership up: hands the election's lock to the next
    /// candidate in line (or frees it), then removes this leader's value.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(leadership: fairlock::Leadership) -> fairlock::Result<()> {
    /// leadership.resign().await?; // the next candidate is elected
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::LockLost`] when the leadership had been lost before
    /// (the value is removed all the same); backend errors.
    ///
    /// # Cancel safety
    /// If the future is dropped (within a tokio runtime), the resignation
    /// goes on in the background.
    pub async fn resign(mut self) -> Result<()> {
        let (Some(guard), Some(record)) = (self.guard.take(), self.record.take()) else {
            return Ok(());
        };
        let work = async move {
            let unlocked = guard.unlock().await;
            let retracted = record.retract().await;
            match unlocked {
                Err(e) => Err(e),
                Ok(()) => retracted,
            }
        };
        match tokio::runtime::Handle::try_current() {
            // Its own task: dropping this future does not stop it half way.
            Ok(rt) => rt.spawn(work).await.unwrap_or_else(|e| {
                Err(Error::Backend {
                    backend: "fairlock",
                    op: "resign",
                    source: e.into(),
                })
            }),
            Err(_) => work.await,
        }
    }

    fn not_leader(&self, reason: &str) -> Error {
        Error::LockLost {
            key: self.name.to_string(),
            reason: format!("not the leader any more: {reason}"),
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        let (Some(guard), Some(record)) = (self.guard.take(), self.record.take()) else {
            return;
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            // The value goes only after the lock: a proclaim still on its
            // way then fails its fence rather than land after the removal.
            rt.spawn(async move {
                let _ = guard.unlock().await;
                let _ = record.retract().await;
            });
        }
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.name)
            .field("term", &self.guard.as_ref().map(LockGuard::fencing_token))
            .finish_non_exhaustive()
    }
}
