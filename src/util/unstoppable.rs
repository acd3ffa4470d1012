//! [`Unstoppable`]: a future its caller may drop without stopping it.

use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

/// Runs `F` in the caller's task while the caller polls it; if the caller
/// drops it before it finished (a timeout, a `select!`), what is left of
/// `F` goes on in a task of its own on the current runtime (dropped
/// outside one, as when the runtime shuts down). A panic inside `F`, as
/// in a spawned task, does not reach the caller: the panicked future is
/// dropped and the caller gets `if_panicked()`.
///
/// What a spawned task awaited through its `JoinHandle` gives, without the
/// task and its cross-thread wakeups when the caller does wait.
pub(crate) struct Unstoppable<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    /// `None` once it finished (or panicked).
    rest: Option<Pin<Box<F>>>,
    if_panicked: fn() -> F::Output,
}

impl<F> Unstoppable<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    pub fn new(future: F, if_panicked: fn() -> F::Output) -> Self {
        Unstoppable {
            rest: Some(Box::pin(future)),
            if_panicked,
        }
    }
}

impl<F> Future for Unstoppable<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        // Polled again after it finished: a caller's bug; it never ends.
        let Some(rest) = this.rest.as_mut() else {
            return Poll::Pending;
        };
        match panic::catch_unwind(AssertUnwindSafe(|| rest.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(ready) => {
                this.rest = None;
                ready
            }
            // Never polled again, nor handed to a task by `drop`.
            Err(_) => {
                this.rest = None;
                Poll::Ready((this.if_panicked)())
            }
        }
    }
}

impl<F> Drop for Unstoppable<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        if let Some(rest) = self.rest.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn finishes_in_the_callers_task() {
        let (caller, ran_in) = tokio::spawn(async {
            let caller = tokio::task::try_id();
            (
                caller,
                Unstoppable::new(async { tokio::task::try_id() }, || None).await,
            )
        })
        .await
        .expect("the caller's task");
        assert!(caller.is_some());
        assert_eq!(ran_in, caller, "no task of its own when the caller waits");
    }

    #[tokio::test]
    async fn goes_on_when_dropped_half_way() {
        let (go_on, wait) = oneshot::channel::<()>();
        let (done_tx, done) = oneshot::channel();
        let finished = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&finished);
        let mut future = Unstoppable::new(
            async move {
                let _ = wait.await;
                flag.store(true, Ordering::SeqCst);
                let _ = done_tx.send(());
            },
            || (),
        );
        // Polled once (it waits on `wait`), then dropped, as by a timeout.
        let polled = futures_poll_once(&mut future).await;
        assert!(polled.is_pending());
        drop(future);
        assert!(!finished.load(Ordering::SeqCst));
        go_on.send(()).expect("the rest still waits");
        done.await.expect("the rest finished on its own");
        assert!(finished.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_panic_becomes_the_fallback_and_is_not_polled_again() {
        let mut future = Unstoppable::new(
            async {
                tokio::task::yield_now().await;
                panic!("inside the future");
            },
            || "panicked",
        );
        assert!(futures_poll_once(&mut future).await.is_pending());
        assert_eq!(
            futures_poll_once(&mut future).await,
            Poll::Ready("panicked")
        );
        assert!(future.rest.is_none(), "the panicked future is gone");
        drop(future); // nothing left to spawn
    }

    async fn futures_poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *f).poll(cx))).await
    }
}
