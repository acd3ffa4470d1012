//! What `lock_all` and `try_lock_all` (in `dispatch.rs`) do alike on
//! every backend: the checks of a key list (each key valid, each once,
//! not too many for the backend) and the wait for every key's turn that
//! leaves nothing held on an error. A backend says only how its server
//! takes several mutexes in one step (`LockServer::lock_mutexes`).
//!
//! Why fair `lock_all` cannot deadlock, on every backend: one step puts
//! the caller's entry into every key's queue, so all its entries share
//! one place in one global order (etcd's revision, Redis' and memory's
//! counter). A key is held only by the first of its queue, so a holder
//! that waits for another key waits only for callers that came before it
//! in that order: no cycle can form, and the earliest waiter of all is
//! first in all its queues.

use std::collections::HashSet;

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;

use crate::{Context, Error, Key, LockGuard, Result};

/// How many keys one call may name on a backend, and why.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyLimit {
    /// The most keys.
    pub keys: usize,
    /// The most bytes of all the keys together.
    pub bytes: usize,
    /// What sets the limit, as the error says it.
    pub why: &'static str,
}

/// `keys` as a backend is asked for them: each valid and named once, in
/// the order given, within `limit`.
///
/// # Errors
/// [`Error::InvalidKey`] for no key, a bad key, or too many.
pub(crate) fn checked(keys: &[Key], limit: KeyLimit) -> Result<Vec<Key>> {
    let Some(first) = keys.first() else {
        return Err(Error::InvalidKey {
            key: String::new(),
            reason: "lock_all was given no key; name at least one".into(),
        });
    };
    let mut seen = HashSet::new();
    let mut once = Vec::with_capacity(keys.len());
    for key in keys {
        key.validate()?;
        if seen.insert(key) {
            once.push(key.clone());
        }
    }
    let bytes: usize = once.iter().map(|k| k.as_str().len()).sum();
    if once.len() > limit.keys || bytes > limit.bytes {
        return Err(Error::InvalidKey {
            key: first.to_string(),
            reason: format!(
                "{} distinct keys of {bytes} bytes in one call; this backend takes at most {} \
                 keys of {} bytes together ({}); lock fewer keys at once, or one key that \
                 stands for the group",
                once.len(),
                limit.keys,
                limit.bytes,
                limit.why
            ),
        });
    }
    Ok(once)
}

/// Waits for every key's turn (each a future that yields the key's guard
/// and cleans up after itself when it fails or is dropped): the guards,
/// in the order of `turns`. On an error nothing stays held: the turns
/// still waiting end too (with the context, each removing its entry
/// before it returns; or dropped, cleaning up in the background), and
/// the keys held already are released before the error returns.
pub(crate) async fn every_turn<F, E>(ctx: &Context, turns: Vec<F>) -> Result<Vec<LockGuard>, E>
where
    F: Future<Output = Result<LockGuard, E>>,
{
    let count = turns.len();
    let mut waiting: FuturesUnordered<_> = turns
        .into_iter()
        .enumerate()
        .map(|(i, turn)| async move { (i, turn.await) })
        .collect();
    let mut held: Vec<Option<LockGuard>> = (0..count).map(|_| None).collect();
    let mut failed = None;
    while let Some((i, turn)) = waiting.next().await {
        match turn {
            Ok(guard) => held[i] = Some(guard),
            Err(e) => {
                failed.get_or_insert(e);
                // The others end with the context, each cleaning up
                // before it returns; otherwise they are dropped.
                if !ctx.is_done() {
                    break;
                }
            }
        }
    }
    drop(waiting);
    match failed {
        None => Ok(held.into_iter().flatten().collect()),
        Some(e) => {
            join_all(held.into_iter().flatten().map(LockGuard::unlock)).await;
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: KeyLimit = KeyLimit {
        keys: 3,
        bytes: 8,
        why: "the test's",
    };

    fn keys(names: &[&str]) -> Vec<Key> {
        names.iter().map(|n| Key::from(*n)).collect()
    }

    #[test]
    fn keys_are_checked_once_each_in_order_within_the_limit() {
        assert_eq!(
            checked(&keys(&["b", "a", "b"]), LIMIT).expect("ok"),
            keys(&["b", "a"])
        );
        let err = |names: &[&str]| match checked(&keys(names), LIMIT) {
            Err(Error::InvalidKey { reason, .. }) => reason,
            other => panic!("{names:?}: {other:?}"),
        };
        assert!(err(&[]).contains("no key"));
        assert!(err(&["a", ""]).contains("empty"));
        assert!(err(&["a", "b", "c", "d"]).starts_with("4 distinct keys"));
        assert!(err(&["aaaaa", "bbbbb"]).contains("10 bytes"));
        assert!(checked(&keys(&["a", "b", "c", "a"]), LIMIT).is_ok());
    }
}
