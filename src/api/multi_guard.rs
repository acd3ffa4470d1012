//! [`MultiGuard`], what [`crate::Locker::lock_all`] hands out: one
//! [`LockGuard`] per key, held together and given back together.

use std::fmt;

use futures_util::future::select_all;
use tracing::Instrument;

use crate::api::guard::release_panicked;
use crate::util::observe::{Granted, Site};
use crate::util::unstoppable::Unstoppable;
use crate::{Key, LockGuard, LossCause, Result};

/// Proof of holding every key of one [`crate::Locker::lock_all`] call;
/// releases them all on [`MultiGuard::unlock`] or drop.
///
/// Each key keeps its own fencing token ([`MultiGuard::fencing_token`]),
/// so a fenced write per key works as with [`LockGuard`]; the guard is
/// lost ([`MultiGuard::lost`]) as soon as any of its keys is.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> fairlock::Result<()> {
/// use fairlock::{Context, Key, Locker, memory::MemoryStore};
///
/// let store = MemoryStore::new();
/// let locker = store.locker(true);
/// let (from, to) = (Key::from("accounts/17"), Key::from("accounts/42"));
/// let both = locker.lock_all(&Context::background(), &[from.clone(), to.clone()]).await?;
/// assert!(both.fencing_token(&from).is_some() && both.fencing_token(&to).is_some());
/// assert!(locker.try_lock(&to).await?.is_none());
/// both.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "if unused the locks are released at once"]
#[clippy::has_significant_drop]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// The guard of every key, in the order the call named them (each
    /// key once). For the crate's backends.
    pub(crate) fn new(guards: Vec<LockGuard>) -> Self {
        MultiGuard { guards }
    }

    /// The keys held, in the order the call named them (each once).
    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.guards.iter().map(LockGuard::key)
    }

    /// The guard of each key, e.g. for `fairlock::etcd::FencedTxn` per key.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The guard of `key`, if this guard holds it.
    #[must_use]
    pub fn guard(&self, key: &Key) -> Option<&LockGuard> {
        self.guards.iter().find(|g| g.key() == key)
    }

    /// `key`'s fencing token (see [`LockGuard::fencing_token`]): each key's
    /// tokens grow with its own holders; tokens of different keys are
    /// unrelated. `None` if this guard does not hold `key`.
    #[must_use]
    pub fn fencing_token(&self, key: &Key) -> Option<u64> {
        self.guard(key).map(LockGuard::fencing_token)
    }

    /// `true` while every key is held as far as this process can tell
    /// (see [`LockGuard::is_held`]).
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// Resolves when any of the keys is lost (see [`LockGuard::lost`]).
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lost(&self) {
        if self.guards.is_empty() {
            return;
        }
        let _ = select_all(self.guards.iter().map(|g| Box::pin(g.lost()))).await;
    }

    /// The first key found lost and why, or `None` while every key is held.
    #[must_use]
    pub fn loss_cause(&self) -> Option<(&Key, LossCause)> {
        self.guards
            .iter()
            .find_map(|g| g.loss_cause().map(|cause| (g.key(), cause)))
    }

    /// Releases every key, in one request where the backend can (one txn
    /// on etcd, one script on Redis).
    ///
    /// # Errors
    /// The first error of a key's release ([`crate::Error::LockLost`] if
    /// that key was no longer held); the other keys are released all the
    /// same.
    ///
    /// # Cancel safety
    /// If the future is dropped (within a tokio runtime) the release goes
    /// on in the background.
    pub async fn unlock(mut self) -> Result<()> {
        release_all(std::mem::take(&mut self.guards), "unlock")
            .await
            .into_iter()
            .collect()
    }
}

/// Releases `guards` together, as [`LockGuard::unlock`] releases one (or
/// as its drop does, `how`: `"unlock"` or `"drop"`): the first guard's
/// backend is handed the others' releases ([`crate::GuardRelease::release_with`]),
/// so that it can send them in one request. One result per guard.
async fn release_all(mut guards: Vec<LockGuard>, how: &'static str) -> Vec<Result<()>> {
    let mut releases = Vec::with_capacity(guards.len());
    let mut endings = Vec::with_capacity(guards.len());
    for guard in &mut guards {
        let begun = guard.begin_release(how);
        endings.push(begun.map(|(release, ending)| {
            releases.push(release);
            ending
        }));
    }
    let span = endings.iter().flatten().next().map(|e| e.span.clone());
    let mut results = match (releases.is_empty(), span) {
        (false, Some(span)) => {
            let first = releases.remove(0);
            let together = first.release_with(releases).instrument(span);
            // Runs to the end even if the caller stops waiting; a panic
            // (no result) fails every key below.
            Unstoppable::new(together, Vec::new).await
        }
        _ => Vec::new(),
    }
    .into_iter();
    guards
        .iter()
        .zip(endings)
        .map(|(guard, ending)| {
            let Some(ending) = ending else {
                return Ok(()); // released before
            };
            let result = results.next().unwrap_or_else(|| Err(release_panicked()));
            if how == "unlock" {
                guard.end_release(ending, &result);
            }
            result
        })
        .collect()
}

/// For a backend's [`crate::GuardRelease::release_with`]: `first` and `others`
/// as the backend's own type `T`, in order, when each of `others` is a
/// `T` that `same` finds one request can release with `first` (same
/// connection); otherwise all of them back, boxed, to release each on
/// its own.
#[cfg(any(feature = "etcd", feature = "redis"))]
pub(crate) fn all_of_kind<T: crate::GuardRelease>(
    first: Box<T>,
    others: Vec<Box<dyn crate::GuardRelease>>,
    same: impl Fn(&T, &T) -> bool,
) -> std::result::Result<Vec<T>, Vec<Box<dyn crate::GuardRelease>>> {
    let alike = others.iter().all(|other| {
        (other.as_ref() as &dyn std::any::Any)
            .downcast_ref::<T>()
            .is_some_and(|other| same(&first, other))
    });
    if !alike {
        return Err(std::iter::once(first as Box<dyn crate::GuardRelease>)
            .chain(others)
            .collect());
    }
    let others = others
        .into_iter()
        .filter_map(|other| (other as Box<dyn std::any::Any>).downcast::<T>().ok());
    Ok(std::iter::once(*first).chain(others.map(|o| *o)).collect())
}

impl Drop for MultiGuard {
    /// Releases the keys together in the background on the current tokio
    /// runtime; outside one, each key's guard drops as a [`LockGuard`]
    /// does (its lock is freed when its lease expires).
    fn drop(&mut self) {
        if self.guards.is_empty() {
            return;
        }
        let guards = std::mem::take(&mut self.guards);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(release_all(guards, "drop"));
        }
    }
}

impl Granted for MultiGuard {
    /// The first key's, for the grant's event.
    fn fencing_token(&self) -> u64 {
        self.guards.first().map_or(0, LockGuard::fencing_token)
    }

    fn observed(mut self, site: Site) -> Self {
        let guards = std::mem::take(&mut self.guards)
            .into_iter()
            .map(|g| g.observed(site))
            .collect();
        MultiGuard { guards }
    }
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.guards).finish()
    }
}
