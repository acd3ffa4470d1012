//! Trying again: [`Retrying`], the one rule by which a loop that sends a
//! request again gives up, and [`Retry`], when `lock` and `try_lock` start
//! a new attempt after a failed one.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::error::{EtcdError, EtcdResult};
use super::request::retry_backoff;
use crate::etcd::config::EtcdConfig;
use crate::util::backoff::Backoff;
use crate::util::observe::{self, Site};
use crate::{Error, Result};

/// How long a loop may keep trying.
#[derive(Clone, Copy)]
pub(crate) enum Budget<'a> {
    /// While a session lease lives here (`lost` not cancelled): a waiter
    /// keeps its place, and its keys live, as long as that.
    WhileLeased(&'a CancellationToken),
    /// Until this instant.
    Until(Instant),
}

/// Sends a request again after a failure, with pauses of 50 ms doubling
/// up to 2 s ([`retry_backoff`]), under one rule: it gives up on an error
/// that is not transient (a refusal or a bad request fails the same way
/// again) and once its [`Budget`] is spent. A pause ends early when a
/// lease budget ends.
///
/// ```text
/// let mut retrying = Retrying::new(Budget::WhileLeased(&lease.lost));
/// loop {
///     match request().await {
///         Err(e) => retrying.again(e).await?,
///         answer => return answer,
///     }
/// }
/// ```
pub(crate) struct Retrying<'a> {
    budget: Budget<'a>,
    backoff: Backoff,
}

impl<'a> Retrying<'a> {
    pub fn new(budget: Budget<'a>) -> Self {
        Retrying {
            budget,
            backoff: retry_backoff(),
        }
    }

    /// After `err`: `Ok` once it has paused, if the loop may try again;
    /// otherwise `err`.
    pub async fn again(&mut self, err: EtcdError) -> EtcdResult<()> {
        if !err.is_transient() || self.spent() {
            return Err(err);
        }
        match self.budget {
            Budget::WhileLeased(lost) => {
                tokio::select! {
                    () = self.backoff.sleep() => {}
                    () = lost.cancelled() => {}
                }
            }
            Budget::Until(_) => self.backoff.sleep().await,
        }
        Ok(())
    }

    fn spent(&self) -> bool {
        match self.budget {
            Budget::WhileLeased(lost) => lost.is_cancelled(),
            Budget::Until(deadline) => Instant::now() >= deadline,
        }
    }
}

/// Whether a failed attempt may be tried again, besides what its error
/// says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Again {
    /// Only if the error is transient.
    IfTransient,
    /// Yes (a waiter whose lease was presumed lost held nothing).
    Yes,
}

/// When to try again after a failed attempt of `lock` or `try_lock`.
///
/// A member that is down, a leader election or a lost connection fails a
/// request without saying whether it was applied. The failed attempt is
/// cleaned up (its lease retired if a write may still land) and a new one
/// starts, with backoff, while such failures last no longer than two
/// request timeouts. Failures further apart than that (an attempt that
/// waited in line in between) start a new count.
pub(crate) struct Retry {
    give_up: Duration,
    failing_since: Option<Instant>,
    last_failure: Option<Instant>,
    backoff: Backoff,
    /// The failure to report when giving up: the last one, except that an
    /// answer from a server (such as "no leader") is kept over a later
    /// connection refused by a member that is down.
    report: Option<Report>,
    site: Site,
}

/// A failure kept for reporting.
struct Report {
    error: Error,
    /// It was an answer from a server (see [`EtcdError::is_server_answer`]).
    server_answer: bool,
}

impl Retry {
    pub fn new(config: &EtcdConfig, site: Site) -> Self {
        Retry {
            site,
            give_up: config.request_timeout() * 2,
            failing_since: None,
            last_failure: None,
            backoff: retry_backoff(),
            report: None,
        }
    }

    /// The pause before the next attempt after `err`, or the error to
    /// report.
    pub fn after(&mut self, err: EtcdError, again: Again) -> Result<Duration> {
        let again = again == Again::Yes || err.is_transient();
        if !again || err.is_gave_up() {
            return Err(err.into());
        }
        let now = Instant::now();
        if self.last_failure.is_none_or(|t| now - t > self.give_up) {
            (self.failing_since, self.report) = (Some(now), None);
            self.backoff.reset();
        }
        self.last_failure = Some(now);
        let since = self.failing_since.unwrap_or(now);
        let server_answer = err.is_server_answer();
        let keep = self
            .report
            .as_ref()
            .is_none_or(|old| server_answer || !old.server_answer);
        if keep {
            self.report = Some(Report {
                error: err.into(),
                server_answer,
            });
        }
        if since.elapsed() >= self.give_up
            && let Some(report) = self.report.take()
        {
            return Err(report.error);
        }
        let pause = self.backoff.next_pause();
        if let Some(report) = &self.report {
            observe::retrying(self.site, &report.error, pause);
        }
        Ok(pause)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use tokio_util::sync::CancellationToken;

    use super::{Budget, Retrying};
    use crate::etcd::client::error::EtcdError;

    fn no_answer() -> EtcdError {
        EtcdError::NoAnswer {
            op: "test",
            after: Duration::from_secs(1),
        }
    }

    fn refused() -> EtcdError {
        EtcdError::Failed {
            op: "test",
            why: "refused".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_failure_is_tried_again_while_the_lease_lives() {
        let lost = CancellationToken::new();
        let mut retrying = Retrying::new(Budget::WhileLeased(&lost));
        for _ in 0..10 {
            assert!(retrying.again(no_answer()).await.is_ok());
        }
        lost.cancel();
        assert!(retrying.again(no_answer()).await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_ends_it_at_once() {
        let lost = CancellationToken::new();
        let mut retrying = Retrying::new(Budget::WhileLeased(&lost));
        let started = tokio::time::Instant::now();
        assert!(retrying.again(refused()).await.is_err());
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "no pause before giving up"
        );
    }

    #[tokio::test]
    async fn a_deadline_ends_it() {
        let mut retrying = Retrying::new(Budget::Until(Instant::now()));
        assert!(retrying.again(no_answer()).await.is_err());
        let later = Instant::now() + Duration::from_secs(3600);
        let mut retrying = Retrying::new(Budget::Until(later));
        assert!(retrying.again(no_answer()).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_lease_cuts_the_pause_short() {
        let lost = CancellationToken::new();
        let mut retrying = Retrying::new(Budget::WhileLeased(&lost));
        for _ in 0..10 {
            retrying.again(no_answer()).await.expect("retried"); // pauses now at 2 s
        }
        let started = tokio::time::Instant::now();
        let pause = retrying.again(no_answer());
        let cancel = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            lost.cancel();
        };
        let (result, ()) = tokio::join!(pause, cancel);
        assert!(result.is_ok(), "the pause ended; the next failure gives up");
        assert_eq!(started.elapsed(), Duration::from_millis(10));
    }
}
