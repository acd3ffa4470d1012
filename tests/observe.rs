//! Tracing events and metrics against a real etcd: a grant's event carries
//! the key and the token, a lost lease gives a loss event, and the
//! `fairlock_*` metrics count exactly what happened.
//!
//! One process-wide subscriber and one recorder serve both tests: the
//! tracing test looks only at lines naming its own key, and locks in
//! unfair mode; the metrics test counts only the `backend="etcd",
//! mode="fair"` series, which nothing else in this binary records.
#![cfg(all(feature = "etcd", feature = "metrics"))]

mod support;

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Context, Error, Key, Locker};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tokio::sync::mpsc;

/// A locker on the shared etcd under `prefix`, with a 2 s TTL.
async fn locker(prefix: &str, fair: bool) -> EtcdLocker {
    let config = EtcdConfig::new([support::shared().endpoint.clone()])
        .with_prefix(prefix)
        .with_ttl(Duration::from_secs(2));
    EtcdLocker::connect(config, fair).await.expect("connect")
}

/// Revokes `locker`'s session lease from another client, as an operator
/// (or a lease expiry) would.
async fn revoke_behind_its_back(locker: &EtcdLocker) {
    let lease = locker.lease_id().await.expect("lease");
    let mut client = support::shared().client().await;
    client.lease_revoke(lease).await.expect("revoke");
}

// ---- tracing ----

/// Where the subscriber's lines go: every receiver handed out so far.
static SINKS: std::sync::Mutex<Vec<mpsc::UnboundedSender<String>>> =
    std::sync::Mutex::new(Vec::new());

/// Each line the subscriber writes, sent to every receiver as it is written.
struct Lines;

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let line = String::from_utf8_lossy(buf).into_owned();
        let mut sinks = SINKS.lock().unwrap_or_else(|e| e.into_inner());
        sinks.retain(|tx| tx.send(line.clone()).is_ok());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The subscriber's output from now on (it is installed once for this
/// test binary, and each test gets its own receiver).
fn log_lines() -> mpsc::UnboundedReceiver<String> {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    let (tx, rx) = mpsc::unbounded_channel();
    SINKS.lock().unwrap_or_else(|e| e.into_inner()).push(tx);
    INSTALLED.get_or_init(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("fairlock=debug")
            .with_ansi(false)
            .with_writer(|| Lines)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber");
    });
    rx
}

/// The next line that contains every one of `parts`.
async fn line_with(lines: &mut mpsc::UnboundedReceiver<String>, parts: &[&str]) -> String {
    let find = async {
        while let Some(line) = lines.recv().await {
            if parts.iter().all(|p| line.contains(p)) {
                return line;
            }
        }
        panic!("the subscriber closed");
    };
    tokio::time::timeout(Duration::from_secs(60), find)
        .await
        .unwrap_or_else(|_| panic!("no log line with {parts:?}"))
}

/// A grant's event names the key (in its span) and the fencing token; a
/// lease lost behind the holder's back gives a warning naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_and_losses_are_traced() {
    let mut lines = log_lines();
    let prefix = support::unique_prefix("observe-trace");
    let locker = locker(&prefix, false).await;
    let key = Key::from("traced-key");
    let guard = locker
        .lock(&Context::background(), &key)
        .await
        .expect("lock");
    let token = guard.fencing_token();
    let granted = line_with(&mut lines, &["granted", "key=traced-key"]).await;
    assert!(granted.contains(&format!("token={token}")), "{granted}");
    assert!(
        granted.contains("DEBUG") && granted.contains("backend=\"etcd\""),
        "{granted}"
    );

    revoke_behind_its_back(&locker).await;
    guard.lost().await;
    let lost = line_with(&mut lines, &["lock lost", "key=traced-key"]).await;
    assert!(lost.contains("WARN") && lost.contains("cause="), "{lost}");
    assert!(lost.contains(&format!("token={token}")), "{lost}");
    assert!(matches!(guard.unlock().await, Err(Error::LockLost { .. })));
}

/// A release that serves a queued waiter says so, under the unlock's span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoffs_are_traced() {
    let mut lines = log_lines();
    let prefix = support::unique_prefix("observe-handoff");
    let (holder, waiter) = (locker(&prefix, false).await, locker(&prefix, false).await);
    let key = Key::from("handoff-key");
    let guard = holder
        .lock(&Context::background(), &key)
        .await
        .expect("lock");
    let waiting = {
        let key = key.clone();
        tokio::spawn(async move { waiter.lock(&Context::background(), &key).await })
    };
    let mut client = support::shared().client().await;
    let queue = format!("{prefix}handoff-key/_OWNERS_/");
    support::wait_for_count(&mut client, &queue, 1, false).await;
    guard.unlock().await.expect("unlock");
    let line = line_with(&mut lines, &["handed off", "key=handoff-key"]).await;
    assert!(line.contains("to=\"unfair waiter\""), "{line}");
    waiting
        .await
        .expect("join")
        .expect("waiter")
        .unlock()
        .await
        .expect("unlock");
}

// ---- metrics ----

/// Counters, histogram counts and gauges summed over snapshots (a snapshot
/// of the debugging recorder resets them all to zero, so a gauge's
/// snapshot is its change since the last one); keyed by name, for the
/// etcd fair labels only.
#[derive(Default)]
struct Totals {
    counts: HashMap<String, u64>,
    gauges: HashMap<String, f64>,
}

impl Totals {
    fn add(&mut self, snapshotter: &Snapshotter) {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let labels: Vec<(String, String)> = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            let ours = labels.contains(&("backend".into(), "etcd".into()))
                && labels.contains(&("mode".into(), "fair".into()));
            if !ours {
                continue;
            }
            let name = key.key().name().to_owned();
            match value {
                DebugValue::Counter(n) => *self.counts.entry(name).or_default() += n,
                DebugValue::Histogram(v) => {
                    *self.counts.entry(name).or_default() += v.len() as u64;
                }
                DebugValue::Gauge(g) => *self.gauges.entry(name).or_default() += g.into_inner(),
            }
        }
    }

    fn count(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    fn gauge(&self, name: &str) -> f64 {
        self.gauges.get(name).copied().unwrap_or(0.0)
    }
}

/// N lock cycles, one wait that times out, one dropped wait and one lock
/// lost to a revoked lease: the counters, histogram counts and gauges are
/// exactly that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_happened() {
    const N: u64 = 5;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("one recorder");
    let mut totals = Totals::default();

    let prefix = support::unique_prefix("observe-metrics");
    let a = locker(&prefix, true).await;
    let b = locker(&prefix, true).await;
    let key = Key::from("counted");
    for _ in 0..N {
        let guard = a.lock(&Context::background(), &key).await.expect("lock");
        guard.unlock().await.expect("unlock");
    }
    // Held by `a`: `b` times out once, and gives up a second wait by
    // dropping its future.
    let guard = a.lock(&Context::background(), &key).await.expect("lock");
    totals.add(&snapshotter);
    assert_eq!(totals.gauge("fairlock_held"), 1.0);
    let ctx = Context::background().with_timeout(Duration::from_millis(200));
    let err = b.lock(&ctx, &key).await.expect_err("held");
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    let dropped = tokio::time::timeout(Duration::ZERO, b.lock(&Context::background(), &key)).await;
    assert!(
        dropped.is_err(),
        "the lock is held: the wait cannot have ended"
    );
    totals.add(&snapshotter);
    assert_eq!(totals.gauge("fairlock_waiting"), 0.0);
    guard.unlock().await.expect("unlock");

    // A lock lost while its guard lives: held goes down with the loss.
    let guard = a.lock(&Context::background(), &key).await.expect("lock");
    revoke_behind_its_back(&a).await;
    guard.lost().await;
    let counted = async {
        loop {
            totals.add(&snapshotter);
            if totals.count("fairlock_lost_total") > 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), counted)
        .await
        .expect("the loss was never counted");
    assert_eq!(
        totals.gauge("fairlock_held"),
        0.0,
        "a lost lock is not held"
    );
    drop(guard);
    totals.add(&snapshotter);

    let grants = N + 2;
    assert_eq!(totals.count("fairlock_acquired_total"), grants);
    assert_eq!(totals.count("fairlock_wait_seconds"), grants);
    assert_eq!(totals.count("fairlock_hold_seconds"), grants);
    assert_eq!(totals.count("fairlock_timeouts_total"), 2);
    assert_eq!(totals.count("fairlock_lost_total"), 1);
    assert_eq!(totals.count("fairlock_backend_retries_total"), 0);
    assert_eq!(totals.gauge("fairlock_held"), 0.0);
    assert_eq!(totals.gauge("fairlock_waiting"), 0.0);
}
