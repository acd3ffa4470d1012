//! A fenced write: data in etcd that only the lock's current holder can
//! change, even a holder that lost the lock without knowing it.
//!
//! ```text
//! cargo run --example fenced          # etcd from FAIRLOCK_ENDPOINTS, default 127.0.0.1:2379
//! ```
//!
//! Holder A takes the lock and writes the report through
//! [`FencedTxn::fenced_txn`]. Then A loses the lock while it still has its
//! guard: here the lock key is deleted, as an operator's `etcdctl del`
//! would; a holder paused past its lease loses it the same way. B takes
//! the lock and writes. A's late write is refused by etcd itself
//! (`Error::LockLost`), because the lock key is no longer the one written
//! at A's grant.

use std::process::ExitCode;
use std::time::Duration;

use etcd_client::{Txn, TxnOp};
use fairlock::etcd::{EtcdConfig, EtcdLocker, FencedTxn};
use fairlock::{Context, Error, Key, LockGuard, Locker};

/// Where the protected data lives (outside the locks' prefix).
const REPORT: &str = "/fairlock-examples/report";

/// Writes the report if `guard` still holds the lock.
async fn write_report(guard: &LockGuard, by: &str) -> fairlock::Result<()> {
    let value = format!(
        "written by {by} with fencing token {}",
        guard.fencing_token()
    );
    let txn = Txn::new().and_then([TxnOp::put(REPORT, value.as_str(), None)]);
    guard.fenced_txn(txn).await?;
    println!("{by}: wrote {value:?}");
    Ok(())
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let config = EtcdConfig::from_env()?;
    let a = EtcdLocker::connect(config.clone(), true).await?;
    let b = EtcdLocker::connect(config.clone(), true).await?;
    let key = Key::from(format!("fenced-example-{}", std::process::id()));
    let ctx = Context::background().with_timeout(Duration::from_secs(30));

    let guard_a = a.lock(&ctx, &key).await?;
    println!(
        "A: holding {key} with fencing token {}",
        guard_a.fencing_token()
    );
    write_report(&guard_a, "A").await?;

    // A loses the lock without being told: someone deletes the lock key.
    let mut etcd = a.client().clone();
    etcd.delete(format!("{}{key}", config.prefix()), None)
        .await?;
    println!("(the lock key was deleted: A no longer holds the lock)");

    let guard_b = b.lock(&ctx, &key).await?;
    println!(
        "B: holding {key} with fencing token {}",
        guard_b.fencing_token()
    );
    write_report(&guard_b, "B").await?;

    match write_report(&guard_a, "A").await {
        Err(Error::LockLost { reason, .. }) => println!("A: refused, nothing written: {reason}"),
        Ok(()) => return Err("A's stale write was applied".into()),
        Err(e) => return Err(e.into()),
    }

    let report = etcd.get(REPORT, None).await?;
    let value = report.kvs().first().map(|kv| kv.value_str()).transpose()?;
    println!("the report says: {:?}", value.unwrap_or("(nothing)"));

    guard_b.unlock().await?;
    drop(guard_a); // its lock is gone; dropping it releases nothing of B's
    etcd.delete(REPORT, None).await?;
    a.close().await?;
    b.close().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            if let Some(Error::Connect { endpoints, .. }) = err.downcast_ref::<Error>() {
                eprintln!(
                    "No etcd answered at {endpoints}. Start one (`etcd`), or point \
                     FAIRLOCK_ENDPOINTS at yours."
                );
            }
            ExitCode::FAILURE
        }
    }
}
