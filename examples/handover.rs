//! Measures leader handovers on etcd: how long from the leader's
//! `resign()` (or from its lease being revoked, as when it crashed) until
//! the next candidate's `campaign()` returns, and until a follower sees the
//! new leader; with a put and a linearizable read as the floor, in the same
//! run against the same etcd.
//!
//! ```text
//! cargo run --release --example handover -- [ROUNDS]   # FAIRLOCK_ENDPOINTS, default 127.0.0.1:2379
//! ```
//!
//! Each round: A leads, B waits in line (and has waited past its patience,
//! a tenth of the TTL, in the revoke rounds), a follower observes; then A
//! resigns, or A's lease is revoked behind its back. Sleeps only separate
//! the rounds; every figure is measured between events.

use std::time::{Duration, Instant};

use fairlock::etcd::{EtcdConfig, EtcdElector};
use fairlock::{Context, Elector, Key};

/// The median, 90th percentile and largest of `samples`, in ms.
fn summary(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{what:<44} p50 {:>7.2} ms   p90 {:>7.2} ms   max {:>7.2} ms   (n={})",
        ms(at(0.5)),
        ms(at(0.9)),
        ms(at(1.0)),
        samples.len()
    );
}

/// Waits until `n` candidates are in `name`'s line (polls: a benchmark).
async fn queued(elector: &EtcdElector, name: &Key, n: usize) -> fairlock::Result<()> {
    loop {
        let status = elector.locker().status(Some(name)).await?;
        if status.first().is_some_and(|l| l.waiters.len() >= n) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

struct Round {
    /// From the resign (or revoke) until the next leader's campaign returned.
    elected: Duration,
    /// From the resign (or revoke) until the follower saw the next leader.
    seen: Duration,
    /// How long `resign()` took, or how long the old leader took to learn
    /// of its loss.
    old: Duration,
}

async fn round(config: &EtcdConfig, name: &Key, revoke: bool) -> fairlock::Result<Round> {
    let ctx = Context::background().with_timeout(Duration::from_secs(60));
    let (a, b) = (
        EtcdElector::connect(config.clone()).await?,
        EtcdElector::connect(config.clone()).await?,
    );
    let follower = EtcdElector::connect(config.clone()).await?;
    let leadership = a.campaign(&ctx, name, b"a").await?;
    let mut changes = follower.observe(name).await?;
    let candidate = {
        let (b, name, ctx) = (b.clone(), name.clone(), ctx.clone());
        tokio::spawn(async move {
            let won = b.campaign(&ctx, &name, b"b").await;
            (won, Instant::now())
        })
    };
    queued(&a, name, 1).await?;
    if revoke {
        // Past B's patience: it watches the lock key by now.
        tokio::time::sleep(config.ttl() / 10 + Duration::from_millis(200)).await;
    }
    let seen = tokio::spawn(async move {
        loop {
            if let Ok(Some(l)) = changes.next().await
                && l.value == b"b"
            {
                return Instant::now();
            }
        }
    });
    let t0 = Instant::now();
    let old = if revoke {
        let lease = a.locker().lease_id().await?;
        let mut raw = a.locker().client().clone();
        let _ = raw.lease_revoke(lease).await;
        leadership.lost().await;
        drop(leadership);
        t0.elapsed()
    } else {
        leadership.resign().await?;
        t0.elapsed()
    };
    let (won, at) = candidate.await.expect("candidate");
    let second = won?;
    let seen_at = seen.await.expect("follower");
    second.resign().await?;
    for e in [a, b, follower] {
        let _ = e.close().await;
    }
    Ok(Round {
        elected: at - t0,
        seen: seen_at - t0,
        old,
    })
}

async fn floor(config: &EtcdConfig, n: usize) -> fairlock::Result<(Vec<Duration>, Vec<Duration>)> {
    let elector = EtcdElector::connect(config.clone()).await?;
    let mut kv = elector.locker().client().kv_client();
    let key = format!("{}floor", config.prefix());
    let (mut puts, mut gets) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        kv.put(key.clone(), "x", None).await.map_err(boxed)?;
        puts.push(t.elapsed());
        let t = Instant::now();
        kv.get(key.clone(), None).await.map_err(boxed)?;
        gets.push(t.elapsed());
    }
    kv.delete(key, None).await.map_err(boxed)?;
    Ok((puts, gets))
}

fn boxed(e: etcd_client::Error) -> fairlock::Error {
    fairlock::Error::Backend {
        backend: "etcd",
        op: "floor",
        source: e.into(),
    }
}

#[tokio::main]
async fn main() -> fairlock::Result<()> {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(30);
    let config = EtcdConfig::from_env()?;
    let name = Key::from(format!("handover-{}", std::process::id()));
    let (puts, gets) = floor(&config, 200).await?;
    summary("floor: put (C)", puts);
    summary("floor: linearizable get (R)", gets);
    for revoke in [false, true] {
        let mut rs = Vec::new();
        for _ in 0..rounds {
            rs.push(round(&config, &name, revoke).await?);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (how, old) = if revoke {
            ("lease revoked", "old leader learns of its loss")
        } else {
            ("resign", "resign() returns")
        };
        summary(
            &format!("{how}: next campaign returns"),
            rs.iter().map(|r| r.elected).collect(),
        );
        summary(
            &format!("{how}: follower sees the new leader"),
            rs.iter().map(|r| r.seen).collect(),
        );
        summary(&format!("{how}: {old}"), rs.iter().map(|r| r.old).collect());
    }
    Ok(())
}
