//! Deadlines and cancellation for waits: Go's `context.Context` in Rust form.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::Error;

/// How long a [`crate::Locker::lock`] may wait, and a way to cancel it.
///
/// A context has an optional deadline and a [`CancellationToken`]. Derived
/// contexts keep the earlier deadline and a child token, so cancelling a
/// parent cancels every context derived from it.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use fairlock::Context;
///
/// let ctx = Context::background().with_timeout(Duration::from_secs(10));
/// let (ctx, cancel) = ctx.with_cancel();
/// assert!(!ctx.is_done());
/// cancel.cancel();
/// assert!(ctx.is_done());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Context {
    deadline: Option<Instant>,
    token: CancellationToken,
    /// Tokens linked with [`Context::with_cancel_token`]: any of them
    /// cancels this context too.
    linked: Vec<CancellationToken>,
}

impl Context {
    /// A context that never times out and is cancelled only through
    /// [`Context::cancel_token`].
    #[must_use]
    pub fn background() -> Self {
        Self::default()
    }

    /// A derived context that also times out `timeout` from now.
    #[must_use]
    pub fn with_timeout(&self, timeout: Duration) -> Self {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.with_deadline(deadline),
            None => self.derived(self.token.child_token()), // too far to matter
        }
    }

    fn derived(&self, token: CancellationToken) -> Self {
        Context {
            deadline: self.deadline,
            token,
            linked: self.linked.clone(),
        }
    }

    /// A derived context that also times out at `deadline`.
    #[must_use]
    pub fn with_deadline(&self, deadline: Instant) -> Self {
        Context {
            deadline: Some(self.deadline.map_or(deadline, |d| d.min(deadline))),
            ..self.derived(self.token.child_token())
        }
    }

    /// A derived context and the token that cancels it (and only it).
    #[must_use]
    pub fn with_cancel(&self) -> (Self, CancellationToken) {
        let token = self.token.child_token();
        (self.derived(token.clone()), token)
    }

    /// A derived context that is also cancelled when `token` is.
    #[must_use]
    pub fn with_cancel_token(&self, token: &CancellationToken) -> Self {
        let mut ctx = self.derived(self.token.child_token());
        ctx.linked.push(token.clone());
        ctx
    }

    /// The token that cancels this context (and those derived from it).
    #[must_use]
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.token
    }

    /// The deadline, if any.
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// `true` once the context is cancelled or past its deadline.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.is_cancelled() || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    fn is_cancelled(&self) -> bool {
        self.token.is_cancelled() || self.linked.iter().any(CancellationToken::is_cancelled)
    }

    /// The error a wait on `key` ends with if this context is done now.
    pub(crate) fn check(&self, key: &str) -> Result<(), Error> {
        if self.is_cancelled() {
            Err(Error::Cancelled {
                key: key.to_string(),
            })
        } else if self.deadline.is_some_and(|d| Instant::now() >= d) {
            Err(Error::Timeout {
                key: key.to_string(),
            })
        } else {
            Ok(())
        }
    }

    /// Resolves when the context is done, with the error a wait on `key`
    /// ends with ([`Error::Cancelled`] or [`Error::Timeout`]).
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes the context.
    pub async fn done(&self, key: &str) -> Error {
        let timeout = async {
            match self.deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let mut cancelled: Vec<_> = std::iter::once(&self.token)
            .chain(&self.linked)
            .map(|t| Box::pin(t.cancelled()))
            .collect();
        let any_cancelled = std::future::poll_fn(|cx| {
            if cancelled.iter_mut().any(|f| f.as_mut().poll(cx).is_ready()) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        });
        tokio::select! {
            biased;
            () = any_cancelled => Error::Cancelled { key: key.to_string() },
            () = timeout => Error::Timeout { key: key.to_string() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn child_keeps_earlier_deadline_and_parent_cancel() {
        let parent = Context::background().with_timeout(Duration::from_secs(1));
        let child = parent.with_timeout(Duration::from_secs(60));
        assert_eq!(child.deadline(), parent.deadline());
        assert!(matches!(child.done("k").await, Error::Timeout { .. }));

        let (parent, cancel) = Context::background().with_cancel();
        let child = parent.with_timeout(Duration::from_secs(60));
        cancel.cancel();
        assert!(matches!(child.done("k").await, Error::Cancelled { .. }));
    }

    #[tokio::test]
    async fn linked_token_cancels() {
        let outside = CancellationToken::new();
        let ctx = Context::background().with_cancel_token(&outside);
        let child = ctx.with_timeout(Duration::from_secs(60));
        assert!(!child.is_done());
        outside.cancel();
        assert!(child.is_done());
        assert!(matches!(child.done("k").await, Error::Cancelled { .. }));
    }

    #[test]
    fn huge_timeout_means_no_deadline() {
        let ctx = Context::background().with_timeout(Duration::MAX);
        assert!(!ctx.is_done());
    }
}
