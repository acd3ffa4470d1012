//! [`Unstoppable`]: a future its caller may drop without stopping it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Runs `F` in the caller's task while the caller polls it; if the caller
/// drops it before it finished (a timeout, a `select!`), what is left of
/// `F` goes on in a task of its own on the current runtime. Outside a
/// runtime (it is shutting down) the rest is dropped.
///
/// This is what a spawned task awaited through its `JoinHandle` gives,
/// without the task and its two cross-thread wakeups per call when the
/// caller does wait.
pub(crate) struct Unstoppable<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    /// `None` once it finished.
    rest: Option<Pin<Box<F>>>,
}

impl<F> Unstoppable<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    pub fn new(future: F) -> Self {
        Unstoppable {
            rest: Some(Box::pin(future)),
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
        let output = rest.as_mut().poll(cx);
        if output.is_ready() {
            this.rest = None;
        }
        output
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
                Unstoppable::new(async { tokio::task::try_id() }).await,
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
        let mut future = Unstoppable::new(async move {
            let _ = wait.await;
            flag.store(true, Ordering::SeqCst);
            let _ = done_tx.send(());
        });
        // Polled once (it waits on `wait`), then dropped, as by a timeout.
        let polled = futures_poll_once(&mut future).await;
        assert!(polled.is_pending());
        drop(future);
        assert!(!finished.load(Ordering::SeqCst));
        go_on.send(()).expect("the rest still waits");
        done.await.expect("the rest finished on its own");
        assert!(finished.load(Ordering::SeqCst));
    }

    async fn futures_poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *f).poll(cx))).await
    }
}
