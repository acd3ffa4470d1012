//! The checks of the entry points themselves: `try_lock`'s answers and the
//! errors for bad keys and a context that is already cancelled.

use super::backend::Backend;
use super::deadline::patient;
use crate::{Context, Error, Key, MAX_KEY_LEN};

/// `try_lock`, in each supported mode, takes a free key, answers `None` for
/// a held one (also to the holder's own locker: the lock is not
/// re-entrant), and takes it again after `unlock`; a guard names its key;
/// [`Backend::is_clean`] holds at once at the end.
///
/// # Panics
/// When an answer is wrong or anything is left behind.
///
/// # Cancel safety
/// As for [`mutual_exclusion`](super::mutual_exclusion).
///
/// # Examples
/// ```
/// # async fn example(backend: &impl fairlock::conformance::Backend) {
/// fairlock::conformance::try_lock(backend).await;
/// # }
/// ```
pub async fn try_lock(b: &impl Backend) {
    for fair in [true, false] {
        if fair && !b.supports_fair() {
            continue;
        }
        let key = Key::from(format!("try-{fair}"));
        let (a, c) = (b.locker(fair), b.locker(fair));
        let guard = a
            .try_lock(&key)
            .await
            .expect("try_lock")
            .expect("free lock");
        assert_eq!(guard.key(), &key);
        assert!(c.try_lock(&key).await.expect("try_lock").is_none());
        assert!(a.try_lock(&key).await.expect("try_lock").is_none());
        guard.unlock().await.expect("unlock");
        let again = c
            .try_lock(&key)
            .await
            .expect("try_lock")
            .expect("free again");
        again.unlock().await.expect("unlock");
    }
    assert!(b.is_clean().await, "keys left after try_lock and unlock");
    b.finish().await;
}

/// Bad keys (empty, containing the reserved segment, longer than
/// [`MAX_KEY_LEN`]) get [`Error::InvalidKey`] saying what is wrong from
/// `try_lock` and `lock`, and a `lock` with a context that is already
/// cancelled gets [`Error::Cancelled`], in both modes (a backend that
/// refuses fair mode must still check keys first); nothing is written.
///
/// # Panics
/// When an error is missing or another, or anything is left behind.
///
/// # Cancel safety
/// As for [`mutual_exclusion`](super::mutual_exclusion).
///
/// # Examples
/// ```
/// # async fn example(backend: &impl fairlock::conformance::Backend) {
/// fairlock::conformance::bad_input(backend).await;
/// # }
/// ```
pub async fn bad_input(b: &impl Backend) {
    let long = "k".repeat(MAX_KEY_LEN + 1);
    for fair in [true, false] {
        let l = b.locker(fair);
        for (key, says) in [
            ("", "empty"),
            ("_OWNERS_", "reserved"),
            ("x/_OWNERS_/y", "reserved"),
            (long.as_str(), "at most"),
        ] {
            let key = Key::from(key);
            let e = l.try_lock(&key).await.expect_err("bad key");
            assert!(
                matches!(&e, Error::InvalidKey { .. }) && e.to_string().contains(says),
                "{e}"
            );
            let e = l.lock(&patient(), &key).await.expect_err("bad key");
            assert!(
                matches!(&e, Error::InvalidKey { .. }) && e.to_string().contains(says),
                "{e}"
            );
        }
        let (ctx, cancel) = Context::background().with_cancel();
        cancel.cancel();
        let e = l
            .lock(&ctx, &Key::from("ok"))
            .await
            .expect_err("cancelled ctx");
        assert!(matches!(e, Error::Cancelled { .. }), "{e}");
    }
    assert!(b.is_clean().await, "a rejected call left keys behind");
    b.finish().await;
}
