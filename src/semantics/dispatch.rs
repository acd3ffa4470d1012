//! The one [`crate::Locker`] every backend is: what each call means above
//! the server, written once over the [`LockServer`] a backend implements.
//!
//! A call goes down in this order: metrics and tracing (`util/observe.rs`);
//! the checks that need no request (the key, a semaphore's arguments, the
//! context, what the deployment cannot serve); the mixed use of a key (`mixed_use.rs`:
//! `lock` of a read/write-locked key is its write lock, a read or write
//! lock waits while the key is a mutex); then the backend's mutex or line.
//! `lock_all` checks its list of keys (`all_keys.rs`, with why it cannot
//! deadlock) and refuses a key in use as a line.
//! A new primitive is written here once and once per backend below.

use crate::election::elector::Elector;
use crate::semantics::admission::Share;
use crate::semantics::all_keys::{self, KeyLimit};
use crate::semantics::fairness::Fairness;
use crate::semantics::mixed_use::{self, after_the_mutex, none_while_the_mutex, or_write_lock};
use crate::util::observe::{self, Site};
use crate::{Context, Key, LockGuard, MultiGuard, Result};

/// What one call asks to hold, as a backend's checks see it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Want {
    /// `lock`, `try_lock`.
    Mutex,
    /// A read or write lock, or permits of a semaphore.
    Line(
        #[cfg_attr(
            not(feature = "redis"),
            allow(dead_code, reason = "only Redis refuses by share")
        )]
        Share,
    ),
}

/// How a backend's server is asked: the mutex and the line, each waited
/// for or tried once, and the electors. The key is valid, and the context
/// not ended, when these are called; the backend owns its waiters' cleanup
/// on cancel and drop.
pub(crate) trait LockServer: Clone + Send + Sync + 'static {
    /// The elector type of this backend.
    type Elector: Elector;

    /// Fair or unfair.
    fn fairness(&self) -> Fairness;

    /// The backend and mode, as logs and metrics label them.
    fn site(&self) -> Site;

    /// Refuses, before any request, what this deployment cannot serve
    /// (Redis: lines on Redlock, a key across cluster slots).
    ///
    /// # Errors
    /// The refusal, saying what to use instead.
    fn admits(&self, _key: &Key, _want: Want) -> Result<()> {
        Ok(())
    }

    /// Waits until `key` is held as a mutex.
    fn lock_mutex(
        &self,
        ctx: &Context,
        key: &Key,
    ) -> impl Future<Output = Result<LockGuard>> + Send;

    /// Takes `key` as a mutex if that needs no wait.
    fn try_lock_mutex(&self, key: &Key) -> impl Future<Output = Result<Option<LockGuard>>> + Send;

    /// The most keys one `lock_all` call may name here.
    fn key_limit(&self) -> KeyLimit;

    /// Refuses, before any request, keys this deployment cannot take in
    /// one step (Redis: Redlock, keys across cluster slots).
    ///
    /// # Errors
    /// The refusal, saying what to do instead.
    fn admits_all(&self, _keys: &[Key]) -> Result<()> {
        Ok(())
    }

    /// Waits until every key of `keys` (valid, distinct, within
    /// [`LockServer::key_limit`]) is held as a mutex: fair, by joining
    /// every key's queue in one step (see `all_keys.rs`); unfair, by
    /// taking all in one step once all are free. On an error or when the
    /// context ends, nothing is left behind.
    fn lock_mutexes(
        &self,
        ctx: &Context,
        keys: &[Key],
    ) -> impl Future<Output = Result<Vec<LockGuard>>> + Send;

    /// Takes every key's mutex in one step if that needs no wait.
    fn try_lock_mutexes(
        &self,
        keys: &[Key],
    ) -> impl Future<Output = Result<Option<Vec<LockGuard>>>> + Send;

    /// Waits until `key` is held as `share` in its line.
    fn join_line(
        &self,
        ctx: &Context,
        key: &Key,
        share: Share,
    ) -> impl Future<Output = Result<LockGuard>> + Send;

    /// Takes `key` as `share` if that needs no wait.
    fn try_join_line(
        &self,
        key: &Key,
        share: Share,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send;

    /// The elector a campaign runs on: fair, whatever this locker's mode.
    fn candidate(&self) -> Self::Elector;

    /// The elector that reads an election (`leader`, `observe`).
    fn reader(&self) -> Self::Elector {
        self.candidate()
    }
}

/// `lock`: the mutex, or the key's write lock while it is a line.
pub(crate) async fn lock<S: LockServer>(s: &S, ctx: &Context, key: &Key) -> Result<LockGuard> {
    observe::lock(s.site(), key, async {
        let locked = async {
            key.validate()?;
            ctx.check(key.as_str())?;
            s.admits(key, Want::Mutex)?;
            s.lock_mutex(ctx, key).await
        };
        let write = after_the_mutex(ctx, key, || line(s, ctx, key, Ok(Share::Write)));
        or_write_lock(locked.await, write).await
    })
    .await
}

/// `try_lock`: the mutex, or the key's write lock while it is a line.
pub(crate) async fn try_lock<S: LockServer>(s: &S, key: &Key) -> Result<Option<LockGuard>> {
    observe::try_lock(s.site(), key, async {
        let taken = async {
            key.validate()?;
            s.admits(key, Want::Mutex)?;
            s.try_lock_mutex(key).await
        };
        let write = async { none_while_the_mutex(try_line(s, key, Ok(Share::Write)).await) };
        or_write_lock(taken.await, write).await
    })
    .await
}

/// `lock_all`: every key's mutex, all or none.
pub(crate) async fn lock_all<S: LockServer>(
    s: &S,
    ctx: &Context,
    keys: &[Key],
) -> Result<MultiGuard> {
    let first = keys.first().cloned().unwrap_or_else(|| Key::from(""));
    observe::lock(s.site(), &first, async {
        let keys = all_keys::checked(keys, s.key_limit())?;
        ctx.check(first.as_str())?;
        s.admits_all(&keys)?;
        let guards = s.lock_mutexes(ctx, &keys).await;
        Ok(MultiGuard::new(guards.map_err(mixed_use::mutexes_only)?))
    })
    .await
}

/// `try_lock_all`: every key's mutex if all are free now, else none.
pub(crate) async fn try_lock_all<S: LockServer>(s: &S, keys: &[Key]) -> Result<Option<MultiGuard>> {
    let first = keys.first().cloned().unwrap_or_else(|| Key::from(""));
    observe::try_lock(s.site(), &first, async {
        let keys = all_keys::checked(keys, s.key_limit())?;
        s.admits_all(&keys)?;
        let guards = s.try_lock_mutexes(&keys).await;
        Ok(guards
            .map_err(mixed_use::mutexes_only)?
            .map(MultiGuard::new))
    })
    .await
}

/// `read_lock`, `write_lock` (after the mutex, if the key is one) and
/// `acquire_permits` (`share` is the check of its arguments).
pub(crate) async fn lock_line<S: LockServer>(
    s: &S,
    ctx: &Context,
    key: &Key,
    share: Result<Share>,
) -> Result<LockGuard> {
    let wait = async {
        match share {
            Ok(share @ (Share::Read | Share::Write)) => {
                after_the_mutex(ctx, key, || line(s, ctx, key, Ok(share))).await
            }
            permits => line(s, ctx, key, permits).await,
        }
    };
    // Boxed: the waiting future nests deep enough to overflow the
    // compiler's layout query depth inside the trait's boxed futures.
    observe::lock(s.site(), key, Box::pin(wait)).await
}

/// The `try_` forms of [`lock_line`]: `None` while the key is a mutex.
pub(crate) async fn try_lock_line<S: LockServer>(
    s: &S,
    key: &Key,
    share: Result<Share>,
) -> Result<Option<LockGuard>> {
    let take = async {
        match share {
            Ok(share @ (Share::Read | Share::Write)) => {
                none_while_the_mutex(try_line(s, key, Ok(share)).await)
            }
            permits => try_line(s, key, permits).await,
        }
    };
    observe::try_lock(s.site(), key, take).await
}

async fn line<S: LockServer>(
    s: &S,
    ctx: &Context,
    key: &Key,
    share: Result<Share>,
) -> Result<LockGuard> {
    key.validate()?;
    let share = share?;
    ctx.check(key.as_str())?;
    s.admits(key, Want::Line(share))?;
    s.join_line(ctx, key, share).await
}

async fn try_line<S: LockServer>(
    s: &S,
    key: &Key,
    share: Result<Share>,
) -> Result<Option<LockGuard>> {
    key.validate()?;
    let share = share?;
    s.admits(key, Want::Line(share))?;
    s.try_join_line(key, share).await
}

/// `impl Locker for $t` over its [`LockServer`]: every method is one call
/// of this file (or of the elector).
macro_rules! impl_locker {
    ($t:ty) => {
        #[async_trait::async_trait]
        impl $crate::Locker for $t {
            async fn try_lock(
                &self,
                key: &$crate::Key,
            ) -> $crate::Result<Option<$crate::LockGuard>> {
                $crate::semantics::dispatch::try_lock(self, key).await
            }

            async fn lock(
                &self,
                ctx: &$crate::Context,
                key: &$crate::Key,
            ) -> $crate::Result<$crate::LockGuard> {
                $crate::semantics::dispatch::lock(self, ctx, key).await
            }

            async fn lock_all(
                &self,
                ctx: &$crate::Context,
                keys: &[$crate::Key],
            ) -> $crate::Result<$crate::MultiGuard> {
                $crate::semantics::dispatch::lock_all(self, ctx, keys).await
            }

            async fn try_lock_all(
                &self,
                keys: &[$crate::Key],
            ) -> $crate::Result<Option<$crate::MultiGuard>> {
                $crate::semantics::dispatch::try_lock_all(self, keys).await
            }

            async fn read_lock(
                &self,
                ctx: &$crate::Context,
                key: &$crate::Key,
            ) -> $crate::Result<$crate::LockGuard> {
                let read = Ok($crate::semantics::admission::Share::Read);
                $crate::semantics::dispatch::lock_line(self, ctx, key, read).await
            }

            async fn try_read_lock(
                &self,
                key: &$crate::Key,
            ) -> $crate::Result<Option<$crate::LockGuard>> {
                let read = Ok($crate::semantics::admission::Share::Read);
                $crate::semantics::dispatch::try_lock_line(self, key, read).await
            }

            async fn write_lock(
                &self,
                ctx: &$crate::Context,
                key: &$crate::Key,
            ) -> $crate::Result<$crate::LockGuard> {
                let write = Ok($crate::semantics::admission::Share::Write);
                $crate::semantics::dispatch::lock_line(self, ctx, key, write).await
            }

            async fn try_write_lock(
                &self,
                key: &$crate::Key,
            ) -> $crate::Result<Option<$crate::LockGuard>> {
                let write = Ok($crate::semantics::admission::Share::Write);
                $crate::semantics::dispatch::try_lock_line(self, key, write).await
            }

            async fn acquire_permits(
                &self,
                ctx: &$crate::Context,
                key: &$crate::Key,
                n: u32,
                limit: u32,
            ) -> $crate::Result<$crate::LockGuard> {
                let permits = $crate::semantics::admission::Share::permits(n, limit);
                $crate::semantics::dispatch::lock_line(self, ctx, key, permits).await
            }

            async fn try_acquire_permits(
                &self,
                key: &$crate::Key,
                n: u32,
                limit: u32,
            ) -> $crate::Result<Option<$crate::LockGuard>> {
                let permits = $crate::semantics::admission::Share::permits(n, limit);
                $crate::semantics::dispatch::try_lock_line(self, key, permits).await
            }

            async fn campaign(
                &self,
                ctx: &$crate::Context,
                election: &$crate::Key,
                value: Vec<u8>,
            ) -> $crate::Result<$crate::Leadership> {
                use $crate::semantics::dispatch::LockServer;
                $crate::Elector::campaign(&self.candidate(), ctx, election, &value).await
            }

            async fn leader(
                &self,
                election: &$crate::Key,
            ) -> $crate::Result<Option<$crate::Leader>> {
                use $crate::semantics::dispatch::LockServer;
                $crate::Elector::leader(&self.reader(), election).await
            }

            fn observe(&self, election: &$crate::Key) -> $crate::LeaderStream {
                use $crate::semantics::dispatch::LockServer;
                let (elector, election) = (self.reader(), election.clone());
                $crate::leader_stream(
                    async move { $crate::Elector::observe(&elector, &election).await },
                )
            }

            fn is_fair(&self) -> bool {
                $crate::semantics::dispatch::LockServer::fairness(self).is_fair()
            }
        }
    };
}
pub(crate) use impl_locker;
