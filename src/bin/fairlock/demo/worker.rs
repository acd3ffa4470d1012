//! One worker process of the demo: one locker asking for the demo's lock
//! `tasks` times in a row, each time as soon as it has released; process
//! `p` first asks `p` intervals after the start. Each grant is printed as a
//! [`Request`] line.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Context, Key, Locker};

use super::record::{AnyError, LOCK_KEY, Request};
use crate::args::DemoArgs;

/// How long one request may wait before the demo gives up.
const PATIENCE: Duration = Duration::from_secs(120);

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Runs worker process `process`; returns when all its requests were
/// granted and released.
pub async fn run(config: EtcdConfig, o: &DemoArgs, process: u64) -> Result<(), AnyError> {
    let locker = EtcdLocker::connect(config, o.mode == "fair").await?;
    // The session lease before the start, so that the first request is
    // one write like the others.
    locker.lease_id().await?;
    sleep_until(o.start_ms + process * o.interval_ms).await;
    for request in 0..o.tasks {
        ask(&locker, o, process, request).await?;
    }
    locker.close().await?;
    Ok(())
}

async fn sleep_until(unix_ms: u64) {
    tokio::time::sleep(Duration::from_millis(unix_ms.saturating_sub(now_ms()))).await;
}

/// One request: lock, hold, unlock, then print it.
async fn ask(
    locker: &EtcdLocker,
    o: &DemoArgs,
    process: u64,
    request: u64,
) -> Result<(), AnyError> {
    let since_start = |ms: u64| ms.saturating_sub(o.start_ms);
    let ctx = Context::background().with_timeout(PATIENCE);
    let asked = now_ms();
    let guard = locker.lock(&ctx, &Key::from(LOCK_KEY)).await?;
    let granted = now_ms();
    let token = guard.fencing_token();
    tokio::time::sleep(Duration::from_millis(o.hold_ms)).await;
    let released = now_ms();
    guard.unlock().await?;
    let line = Request {
        process,
        request,
        asked_ms: since_start(asked),
        granted_ms: since_start(granted),
        released_ms: since_start(released),
        token,
    }
    .line();
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}
