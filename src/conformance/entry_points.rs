//! The checks of the entry points themselves: `try_lock`'s answers and the
//! errors for bad keys and a context that is already cancelled.

use super::backend::{Backend, mode_unsupported};
use super::common::{assert_err, patient, refused, take};
use crate::{Context, Error, Key, MAX_KEY_LEN};

/// `try_lock`, in each supported mode, takes a free key, answers `None` for
/// a held one (also to the holder's own locker: the lock is not
/// re-entrant), and takes it again after `unlock`; a guard names its key;
/// [`Backend::is_clean`] holds at once at the end.
///
/// # Panics
/// When an answer is wrong or anything is left behind.
pub async fn try_lock(b: &impl Backend) {
    for fair in [true, false] {
        if mode_unsupported(b, fair) {
            continue;
        }
        let key = Key::from(format!("try-{fair}"));
        let (a, c) = (b.locker(fair), b.locker(fair));
        let guard = take(&*a, &key).await;
        assert_eq!(guard.key(), &key);
        assert!(refused(c.try_lock(&key)).await, "held, to another locker");
        assert!(refused(a.try_lock(&key)).await, "held, to its own locker");
        guard.unlock().await.expect("unlock");
        take(&*c, &key).await.unlock().await.expect("unlock");
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
            let bad =
                |e: &Error| matches!(e, Error::InvalidKey { .. }) && e.to_string().contains(says);
            let e = l.try_lock(&key).await.expect_err("bad key");
            assert!(bad(&e), "{e}");
            let e = l.lock(&patient(), &key).await.expect_err("bad key");
            assert!(bad(&e), "{e}");
        }
        let (ctx, cancel) = Context::background().with_cancel();
        cancel.cancel();
        let e = l.lock(&ctx, &Key::from("ok")).await;
        assert_err!(e, Error::Cancelled { .. }, "cancelled ctx");
    }
    assert!(b.is_clean().await, "a rejected call left keys behind");
    b.finish().await;
}
