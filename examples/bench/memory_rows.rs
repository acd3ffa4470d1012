//! Memory per held and per waiting lock, each measured in a fresh process
//! (the bench run again with `--rss-child`).

use std::process::Command;
use std::time::Duration;

use fairlock::{Context, Key, Locker};

use crate::report::Row;
use crate::scale_child;
use crate::workloads::{self, Res, Run};

/// One row per kind of lock: the client's RSS growth per lock, with
/// `n` locks (2,000 `quick`, else 10,000) in one process on etcd `ep`.
pub fn rows(quick: bool, ep: &str) -> Res<Vec<Row>> {
    let mut rows = Vec::new();
    // 7. memory per held / waiting lock, each in a fresh process
    eprintln!("bench: 7. memory per held / waiting lock, each in a fresh process");
    for what in ["held", "waiting"] {
        let n = if quick { 2000 } else { 10_000 };
        let out = Command::new(std::env::current_exe()?)
            .args(["--rss-child", what, &n.to_string(), "--endpoints", ep])
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let bytes = text
            .lines()
            .find_map(|l| l.strip_prefix("RSS_PER_LOCK "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|_| out.status.success());
        let Some(bytes) = bytes else {
            let why = String::from_utf8_lossy(&out.stderr);
            eprintln!("bench: RSS per {what} lock not measured: {}", why.trim());
            continue;
        };
        let mut row = Row::of(
            &format!("RSS per {what} lock, {n} locks in one process"),
            "fair",
            1,
            n,
            &Run {
                lat: Vec::new(),
                elapsed: Duration::from_secs(1),
            },
        );
        row.ops = n;
        row.ops_per_s = 0.0;
        rows.push(row.ratio(bytes / 1024.0, "KiB per lock"));
    }
    Ok(rows)
}

fn rss_bytes() -> f64 {
    scale_child::rss_bytes(std::process::id())
}

/// In a fresh process: RSS growth per held or per waiting lock.
pub async fn rss_child(ep: &str, what: &str, n: usize) -> Res<()> {
    let prefix = format!("/bench/rss-{}/", uuid::Uuid::new_v4().simple());
    // Queueing thousands of waiters keeps etcd busy for seconds; a longer
    // TTL keeps the session's renewals from timing out meanwhile.
    let config = fairlock::etcd::EtcdConfig::new([ep])
        .with_prefix(prefix.clone())
        .with_ttl(Duration::from_secs(60));
    let l = fairlock::etcd::EtcdLocker::connect(config.clone(), true).await?;
    let other = fairlock::etcd::EtcdLocker::connect(config, true).await?;
    workloads::cycle(&l, &Key::from("warm"), 20).await?;
    let key = Key::from("contended");
    let held = other.try_lock(&key).await?.ok_or("busy")?;
    let before = rss_bytes();
    let mut guards = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    if what == "held" {
        for chunk in (0..n).collect::<Vec<_>>().chunks(256) {
            let mut set = tokio::task::JoinSet::new();
            for &i in chunk {
                let l = l.clone();
                set.spawn(async move { l.try_lock(&Key::from(format!("k{i}"))).await });
            }
            while let Some(g) = set.join_next().await {
                guards.push(g??.ok_or("key busy")?);
            }
        }
    } else {
        // Queue in batches, so that no enqueue waits behind thousands of
        // others past the request timeout.
        let c = workloads::connect(ep).await?;
        let queue = format!("{prefix}contended/_OWNERS_/");
        let mut queued = 0;
        while queued < n {
            let batch = 200.min(n - queued);
            for _ in 0..batch {
                let (l, key) = (l.clone(), key.clone());
                tasks.spawn(async move { l.lock(&Context::background(), &key).await });
            }
            queued += batch;
            loop {
                if workloads::count(&c, &queue).await? >= queued {
                    break;
                }
                if let Some(done) = tasks.try_join_next() {
                    return Err(format!("a waiter ended early: {:?}", done?.err()).into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    if what == "waiting" {
        // A waiter that has waited a while (a tenth of the TTL, at most a
        // second) also watches its predecessor: measure that steady state.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let after = rss_bytes();
    println!("RSS_PER_LOCK {:.0}", (after - before) / n as f64);
    tasks.abort_all();
    std::mem::forget(guards); // the lease revoke below frees them all at once
    // Revoking a lease with thousands of keys can outlast the request
    // timeout; the measurement is done, and the leases expire regardless.
    let _ = l.close().await;
    drop(held);
    let _ = other.close().await;
    Ok(())
}
