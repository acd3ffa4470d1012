//! One key used both as a mutex and as a line (a read/write lock): what
//! every backend does alike. `lock` and `try_lock` of a key with readers
//! take its write lock ([`or_write_lock`]); a read or write lock of a key
//! held or awaited as a mutex waits until the mutex is free and nobody
//! awaits it ([`after_the_mutex`]), its `try_` form answers `None`
//! ([`none_while_the_mutex`]). A semaphore's key is never a mutex.
//!
//! A backend reports the other use as an [`InUse`] error ([`in_use_as_line`],
//! [`in_use_as_mutex`]), told apart by its type, never by its text; what
//! reaches the caller is [`Error::InvalidKey`].

use std::fmt;

use crate::semantics::admission::Share;
use crate::semantics::armed::pause_or_done;
use crate::util::backoff::Backoff;
use crate::{Context, Error, Key, Result};

/// How `key` is in use, as a backend's call found it.
#[derive(Debug)]
pub(crate) struct InUse {
    key: String,
    how: How,
}

#[derive(Debug, Clone, Copy)]
enum How {
    /// A mutex call on a key in use as a read/write lock or semaphore.
    AsLine,
    /// A read or write lock of a key held or awaited as a mutex.
    AsMutex(Share),
}

impl fmt::Display for InUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.how {
            How::AsLine => f.write_str(
                "it is in use as a read/write lock or semaphore, so it cannot be used as a mutex; \
                 take its write lock (write_lock) to exclude its readers, or give the mutex a \
                 key of its own",
            ),
            How::AsMutex(want) => write!(
                f,
                "it is held or awaited as a mutex (lock); {} waits until nobody holds or awaits it",
                want.describe()
            ),
        }
    }
}

impl std::error::Error for InUse {}

impl InUse {
    /// `e`'s [`InUse`], if it is one.
    fn of(e: &Error) -> Option<&InUse> {
        match e {
            Error::Backend { source, .. } => source.downcast_ref::<InUse>(),
            _ => None,
        }
    }

    /// Carried to the rules below as a backend's error.
    fn into_error(self) -> Error {
        Error::Backend {
            backend: "fairlock",
            op: "lock",
            source: Box::new(self),
        }
    }
}

/// The error a backend's mutex gives for `key` in use as a read/write lock
/// or semaphore. [`crate::Locker::lock`] and [`crate::Locker::try_lock`]
/// take the key's write lock instead ([`or_write_lock`]).
pub(crate) fn in_use_as_line(key: &str) -> Error {
    InUse {
        key: key.to_owned(),
        how: How::AsLine,
    }
    .into_error()
}

/// The error a backend's line gives for `want` of `key` while the key is
/// held or awaited as a mutex: a read or write lock waits until the mutex
/// is free ([`after_the_mutex`], [`none_while_the_mutex`]); a semaphore is
/// refused at once, since a semaphore's key is never a mutex.
pub(crate) fn in_use_as_mutex(key: &str, want: Share) -> Error {
    match want {
        Share::Permit { .. } => Error::InvalidKey {
            key: key.to_owned(),
            reason: format!(
                "it is in use as a mutex (lock), so it cannot be used as {}; give each lock a \
                 key of its own",
                want.describe()
            ),
        },
        _ => InUse {
            key: key.to_owned(),
            how: How::AsMutex(want),
        }
        .into_error(),
    }
}

/// `e` as the caller sees it: an [`InUse`] left over (a backend of the
/// crate's own always hands it to a rule below) as [`Error::InvalidKey`].
fn public(e: Error) -> Error {
    match InUse::of(&e) {
        Some(in_use) => Error::InvalidKey {
            key: in_use.key.clone(),
            reason: in_use.to_string(),
        },
        None => e,
    }
}

fn is_in_use_as_line(e: &Error) -> bool {
    InUse::of(e).is_some_and(|u| matches!(u.how, How::AsLine))
}

fn is_mutex_busy(e: &Error) -> bool {
    InUse::of(e).is_some_and(|u| matches!(u.how, How::AsMutex(_)))
}

/// What a mutex call answered (`locked`), or, for a key in use as a
/// read/write lock or semaphore, what `write` (the same call on the key's
/// write lock, which excludes its readers) answers: `lock` and `try_lock`
/// are the write lock of a key that has readers. The mutex left nothing
/// behind before refusing.
pub(crate) async fn or_write_lock<T>(
    locked: Result<T>,
    write: impl Future<Output = Result<T>>,
) -> Result<T> {
    match locked {
        Err(e) if is_in_use_as_line(&e) => write.await.map_err(public),
        done => done.map_err(public),
    }
}

/// A `lock_all` or `try_lock_all` error as the caller sees it: a key in
/// use as a read/write lock or semaphore is refused (several keys are
/// taken as mutexes only, in one step; there is no write lock to fall
/// back to).
pub(crate) fn mutexes_only(e: Error) -> Error {
    match InUse::of(&e) {
        Some(in_use) if matches!(in_use.how, How::AsLine) => Error::InvalidKey {
            key: in_use.key.clone(),
            reason: "it is in use as a read/write lock or semaphore, and lock_all takes \
                     mutexes only; lock it with write_lock on its own, or give the mutex a \
                     key of its own"
                .into(),
        },
        _ => public(e),
    }
}

/// A `try_read_lock` or `try_write_lock` answer: `None` (it would wait)
/// while the key is held or awaited as a mutex.
pub(crate) fn none_while_the_mutex<T>(tried: Result<Option<T>>) -> Result<Option<T>> {
    match tried {
        Err(e) if is_mutex_busy(&e) => Ok(None),
        done => done.map_err(public),
    }
}

/// Runs `join` (a read or write lock of `key`) again, after a pause of
/// 10 ms doubling to 500 ms, while the key is held or awaited as a mutex,
/// until the context ends. Not in arrival order with the mutex's later
/// waiters: a mutex that is never free keeps the reader out (once it is
/// in the line, every `lock` of the key joins the line behind it).
pub(crate) async fn after_the_mutex<T, F, Fut>(ctx: &Context, key: &Key, mut join: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut backoff = Backoff::new(
        std::time::Duration::from_millis(10),
        std::time::Duration::from_millis(500),
    );
    loop {
        match join().await {
            Err(e) if is_mutex_busy(&e) => pause_or_done(ctx, key, backoff.next_pause()).await?,
            done => return done.map_err(public),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_other_use_is_told_by_its_type_and_reaches_the_caller_as_invalid_key() {
        let line = in_use_as_line("k");
        assert!(is_in_use_as_line(&line) && !is_mutex_busy(&line));
        let busy = in_use_as_mutex("k", Share::Read);
        assert!(is_mutex_busy(&busy) && !is_in_use_as_line(&busy));
        // The same text from elsewhere is not the other use.
        let lookalike = Error::InvalidKey {
            key: "k".into(),
            reason: public(in_use_as_line("k")).to_string(),
        };
        assert!(!is_in_use_as_line(&lookalike) && !is_mutex_busy(&lookalike));
        let Error::InvalidKey { key, reason } = public(line) else {
            panic!("not InvalidKey");
        };
        assert_eq!(key, "k");
        assert!(reason.starts_with("it is in use as a read/write lock or semaphore"));
        let permit = Share::Permit { limit: 2, n: 1 };
        assert!(matches!(
            in_use_as_mutex("k", permit),
            Error::InvalidKey { .. }
        ));
    }
}
