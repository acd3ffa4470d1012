//! When `lock` and `try_lock` try again after a failed attempt.

use std::time::{Duration, Instant};

use super::error::EtcdError;
use super::request::retry_backoff;
use crate::backoff::Backoff;
use crate::etcd::config::EtcdConfig;
use crate::observe::{self, Site};
use crate::{Error, Result};

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
