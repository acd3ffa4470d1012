//! Tracing and metrics for every backend, in one place: a span per `lock`,
//! `try_lock` and `unlock` (backend, key, mode), the events of a lock's
//! life, and the `fairlock_*` metrics (feature `metrics`).
//!
//! Backends call [`lock`] and [`try_lock`] around their own operation and
//! a handful of one-line event functions at their decision points
//! ([`queued`], [`retrying`], [`renewal_failed`], [`loss_cause`]); guards
//! carry a [`Holding`] that ends on unlock, drop or loss.
//!
//! Per-operation events are at debug level; warnings are for retries,
//! failing renewals and losses. With no subscriber installed and the
//! `metrics` feature off, each costs a branch (and a span that is
//! `Span::none()`).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Level, Span, debug, warn};

use crate::semantics::fairness::Fairness;
use crate::{Error, Expiry, Key, Result};

/// Which backend and mode an operation runs on: the labels of every metric
/// and the fields of every span.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Site {
    pub backend: &'static str,
    pub mode: &'static str,
}

impl Site {
    pub fn new(backend: &'static str, fairness: Fairness) -> Self {
        Site {
            backend,
            mode: fairness.as_str(),
        }
    }
}

/// What a grant hands out (the crate's `LockGuard`), as far as the spans
/// and metrics need it.
pub(crate) trait Granted {
    /// The grant's fencing token.
    fn fencing_token(&self) -> u64;
    /// Starts counting the grant as held at `site`.
    fn observed(self, site: Site) -> Self;
}

/// Runs a backend's `lock`: in a `lock` span, counted in
/// `fairlock_waiting` while it waits (also when the future is dropped),
/// then as a grant or a failure.
pub(crate) async fn lock<G, F>(site: Site, key: &Key, op: F) -> Result<G>
where
    G: Granted,
    F: Future<Output = Result<G>>,
{
    let span = tracing::debug_span!("lock", backend = site.backend, key = %key, mode = site.mode);
    let mut waiting = WaitGauge::start(site);
    let outcome = op.instrument(span.clone()).await;
    let waited = waiting.finish();
    let _entered = span.enter();
    match outcome {
        Ok(guard) => {
            metrics::wait(site, waited);
            Ok(granted(site, guard, waited))
        }
        Err(e) => {
            if e.is_gave_up() {
                metrics::timeout(site);
            }
            debug!(error = %e, waited_ms = millis(waited), "lock failed");
            Err(e)
        }
    }
}

/// Runs a backend's `try_lock` in a `try_lock` span.
pub(crate) async fn try_lock<G, F>(site: Site, key: &Key, op: F) -> Result<Option<G>>
where
    G: Granted,
    F: Future<Output = Result<Option<G>>>,
{
    let span =
        tracing::debug_span!("try_lock", backend = site.backend, key = %key, mode = site.mode);
    let outcome = op.instrument(span.clone()).await;
    let _entered = span.enter();
    match outcome {
        Ok(Some(guard)) => Ok(Some(granted(site, guard, Duration::ZERO))),
        Ok(None) => {
            debug!("held by another");
            Ok(None)
        }
        Err(e) => {
            debug!(error = %e, "try_lock failed");
            Err(e)
        }
    }
}

fn granted<G: Granted>(site: Site, guard: G, waited: Duration) -> G {
    debug!(
        token = guard.fencing_token(),
        waited_ms = millis(waited),
        "granted"
    );
    metrics::acquired(site);
    guard.observed(site)
}

/// The waiter was queued behind others (`position`: 1 is next in line,
/// when the backend knows it).
pub(crate) fn queued(position: Option<usize>) {
    debug!(position, "queued");
}

/// A release handed the lock to the first waiter (`fair`: the lock key is
/// its now) or woke it to try (unfair).
#[cfg(feature = "etcd")]
pub(crate) fn handed_off(to: Fairness) {
    debug!(
        to = match to {
            Fairness::Fair => "fair waiter",
            Fairness::Unfair => "unfair waiter",
        },
        "handed off"
    );
}

/// A request failed and the operation goes on with another attempt after
/// `pause`.
#[cfg(any(feature = "etcd", feature = "redis"))]
pub(crate) fn retrying(site: Site, error: &Error, pause: Duration) {
    warn!(
        backend = site.backend,
        mode = site.mode,
        // `Debug` adds the cause ("caused by: ..."): which member did not
        // answer, or what it said.
        error = ?error,
        pause_ms = millis(pause),
        "request failed; retrying"
    );
    metrics::retry(site);
}

/// A lease renewal (etcd keepalive, Redis extend) of `subject` failed; the
/// lock is held until its local deadline unless a later renewal succeeds.
#[cfg(any(feature = "etcd", feature = "redis"))]
pub(crate) fn renewal_failed(
    backend: &'static str,
    subject: std::fmt::Arguments<'_>,
    why: &dyn std::fmt::Display,
) {
    warn!(backend, subject = %subject, why = %why, "lease renewal failed; retrying until the lease deadline");
}

/// A lease that lapsed here (no renewal counted for a TTL) but that etcd
/// kept was renewed again: the locker's waiters keep their places.
#[cfg(feature = "etcd")]
pub(crate) fn lease_revived(backend: &'static str, subject: std::fmt::Arguments<'_>) {
    warn!(backend, subject = %subject, "lease renewed again after it lapsed here; waiters keep their places");
}

/// A backend saw why `subject` (a lease, a lock key) was lost; each guard
/// that held a lock through it also reports its own loss.
#[cfg(any(feature = "etcd", feature = "redis"))]
pub(crate) fn loss_cause(backend: &'static str, subject: std::fmt::Arguments<'_>, cause: &str) {
    warn!(backend, subject = %subject, cause, "lock lost");
}

/// The span of an `unlock` of a guard that was observed, or none.
pub(crate) fn unlock_span(holding: Option<&Holding>, key: &Key) -> Span {
    match holding {
        Some(h) => tracing::debug_span!(
            "unlock",
            backend = h.site.backend,
            key = %key,
            mode = h.site.mode
        ),
        None => Span::none(),
    }
}

/// Counts a `lock` in `fairlock_waiting` until it finishes or is dropped;
/// a dropped wait counts as a timeout (the caller gave up).
struct WaitGauge {
    site: Site,
    started: Instant,
    done: bool,
}

impl WaitGauge {
    fn start(site: Site) -> Self {
        metrics::waiting(site, 1.0);
        WaitGauge {
            site,
            started: Instant::now(),
            done: false,
        }
    }

    fn finish(&mut self) -> Duration {
        self.done = true;
        metrics::waiting(self.site, -1.0);
        self.started.elapsed()
    }
}

impl Drop for WaitGauge {
    fn drop(&mut self) {
        if !self.done {
            metrics::waiting(self.site, -1.0);
            metrics::timeout(self.site);
            debug!(
                backend = self.site.backend,
                mode = self.site.mode,
                "lock wait dropped"
            );
        }
    }
}

const HELD: u8 = 0;
const ENDED: u8 = 1;
const LOST: u8 = 2;

/// A held lock as the metrics and events see it: counted in
/// `fairlock_held` from the grant until unlock, drop or loss, whichever
/// comes first.
pub(crate) struct Holding {
    site: Site,
    granted_at: Instant,
    state: Arc<AtomicU8>,
    watcher: Option<tokio::task::AbortHandle>,
}

impl Holding {
    /// Starts counting a held lock; with metrics on or a subscriber taking
    /// warnings, a task watches for its loss.
    pub fn start(
        site: Site,
        key: &Key,
        token: u64,
        expiry: Option<Expiry>,
        lost: CancellationToken,
    ) -> Self {
        metrics::held(site, 1.0);
        let state = Arc::new(AtomicU8::new(HELD));
        let granted_at = Instant::now();
        let watch = cfg!(feature = "metrics") || tracing::enabled!(Level::WARN);
        let watcher = watch
            .then(|| tokio::runtime::Handle::try_current().ok())
            .flatten()
            .map(|rt| {
                let loss = Loss {
                    site,
                    key: key.clone(),
                    token,
                    granted_at,
                    state: Arc::clone(&state),
                };
                rt.spawn(loss.watch(lost, expiry)).abort_handle()
            });
        Holding {
            site,
            granted_at,
            state,
            watcher,
        }
    }

    /// Ends the holding on unlock (`unlock`) or drop; `false` if it had
    /// already ended (a loss was seen first).
    pub fn end(&self, how: &'static str) -> bool {
        if self
            .state
            .compare_exchange(HELD, ENDED, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        let held = self.granted_at.elapsed();
        metrics::held(self.site, -1.0);
        metrics::hold(self.site, held);
        debug!(held_ms = millis(held), how, "released");
        true
    }

    /// An unlock found the lock already lost, before any loss was seen.
    pub fn lost_at_unlock(&self, key: &Key, error: &Error) {
        if self.state.swap(LOST, Ordering::AcqRel) != LOST {
            metrics::lost(self.site);
            warn!(backend = self.site.backend, key = %key, cause = %error, "lock lost");
        }
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        if let Some(watcher) = &self.watcher {
            watcher.abort();
        }
    }
}

/// What the loss watcher of one guard reports.
struct Loss {
    site: Site,
    key: Key,
    token: u64,
    granted_at: Instant,
    state: Arc<AtomicU8>,
}

impl Loss {
    async fn watch(self, lost: CancellationToken, expiry: Option<Expiry>) {
        tokio::select! {
            () = lost.cancelled() => {}
            () = async {
                match &expiry {
                    Some(expiry) => expiry.passed().await,
                    None => std::future::pending().await,
                }
            } => {}
        }
        if self
            .state
            .compare_exchange(HELD, LOST, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let held = self.granted_at.elapsed();
        metrics::held(self.site, -1.0);
        metrics::hold(self.site, held);
        metrics::lost(self.site);
        let cause = if expiry.as_ref().is_some_and(Expiry::has_passed) {
            "the lease's local deadline passed without an acknowledged renewal"
        } else {
            "the backend reported the lock lost (lease gone, or lock key deleted or taken over)"
        };
        warn!(
            backend = self.site.backend,
            key = %self.key,
            mode = self.site.mode,
            token = self.token,
            held_ms = millis(held),
            cause,
            "lock lost"
        );
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The `fairlock_*` metrics through the `metrics` facade; nothing without
/// the `metrics` feature.
#[cfg(feature = "metrics")]
mod metrics {
    use super::Site;
    use std::time::Duration;

    macro_rules! labels {
        ($site:expr) => {
            [("backend", $site.backend), ("mode", $site.mode)]
        };
    }

    pub fn acquired(site: Site) {
        ::metrics::counter!("fairlock_acquired_total", &labels!(site)).increment(1);
    }
    pub fn lost(site: Site) {
        ::metrics::counter!("fairlock_lost_total", &labels!(site)).increment(1);
    }
    pub fn timeout(site: Site) {
        ::metrics::counter!("fairlock_timeouts_total", &labels!(site)).increment(1);
    }
    #[cfg(any(feature = "etcd", feature = "redis"))]
    pub fn retry(site: Site) {
        ::metrics::counter!("fairlock_backend_retries_total", &labels!(site)).increment(1);
    }
    pub fn wait(site: Site, d: Duration) {
        ::metrics::histogram!("fairlock_wait_seconds", &labels!(site)).record(d.as_secs_f64());
    }
    pub fn hold(site: Site, d: Duration) {
        ::metrics::histogram!("fairlock_hold_seconds", &labels!(site)).record(d.as_secs_f64());
    }
    pub fn held(site: Site, delta: f64) {
        ::metrics::gauge!("fairlock_held", &labels!(site)).increment(delta);
    }
    pub fn waiting(site: Site, delta: f64) {
        ::metrics::gauge!("fairlock_waiting", &labels!(site)).increment(delta);
    }
}

#[cfg(not(feature = "metrics"))]
mod metrics {
    use super::Site;
    use std::time::Duration;

    pub fn acquired(_: Site) {}
    pub fn lost(_: Site) {}
    pub fn timeout(_: Site) {}
    #[cfg(any(feature = "etcd", feature = "redis"))]
    pub fn retry(_: Site) {}
    pub fn wait(_: Site, _: Duration) {}
    pub fn hold(_: Site, _: Duration) {}
    pub fn held(_: Site, _: f64) {}
    pub fn waiting(_: Site, _: f64) {}
}
