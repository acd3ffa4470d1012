//! The deadlock that `lock_all` avoids, counted (`--multi-deadlock`): two
//! clients, each with its own locker, start together on two fresh keys,
//! one naming them `[a, b]` and the other `[b, a]`, under one short
//! context timeout per try.
//!
//! - **one-by-one, in the caller's order**: `lock` the first key, then,
//!   still holding it, `lock` the second; on a timeout the first is
//!   released. If each took its first key before the other's second
//!   request, both wait for each other until both time out: a deadlock.
//! - **`lock_all`**: both keys in one call, in the same opposite orders.
//!
//! Each try ends in one of: both held both keys (one after the other),
//! one timed out, or both timed out (the deadlock). Every try uses new
//! keys, so no try waits on what an earlier one left.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Context, Key, Locker};

use crate::report::Row;
use crate::workloads::{Res, Run};

/// How long one client waits for both keys in one try.
const TIMEOUT: Duration = Duration::from_millis(300);

/// Whether the client held both keys (`true`) or timed out.
async fn one_try(l: &EtcdLocker, all: bool, first: Key, second: Key) -> Res<bool> {
    let ctx = Context::background().with_timeout(TIMEOUT);
    if all {
        return match l.lock_all(&ctx, &[first, second]).await {
            Ok(g) => g.unlock().await.map(|()| true).map_err(Into::into),
            Err(e) if e.is_gave_up() => Ok(false),
            Err(e) => Err(e.into()),
        };
    }
    let one = match l.lock(&ctx, &first).await {
        Ok(g) => g,
        Err(e) if e.is_gave_up() => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    let held = match l.lock(&ctx, &second).await {
        Ok(two) => {
            two.unlock().await?;
            true
        }
        Err(e) if e.is_gave_up() => false,
        Err(e) => return Err(e.into()),
    };
    one.unlock().await?;
    Ok(held)
}

/// How `tries` tries ended: both held, one timed out, both timed out;
/// and the time each try took.
struct Tally {
    both_held: usize,
    one_out: usize,
    both_out: usize,
    run: Run,
}

async fn tally(ep: &str, fair: bool, all: bool, tries: usize) -> Res<Tally> {
    let prefix = format!("/bench/deadlock-{}/", uuid::Uuid::new_v4().simple());
    let config = EtcdConfig::new([ep]).with_prefix(prefix);
    let lockers = [
        EtcdLocker::connect(config.clone(), fair).await?,
        EtcdLocker::connect(config, fair).await?,
    ];
    // Session leases and watches, before the first try.
    for l in &lockers {
        one_try(l, all, Key::from("warm-a"), Key::from("warm-b")).await?;
    }
    let mut t = Tally {
        both_held: 0,
        one_out: 0,
        both_out: 0,
        run: Run {
            lat: Vec::new(),
            elapsed: Duration::ZERO,
        },
    };
    let t0 = Instant::now();
    for i in 0..tries {
        let (a, b) = (Key::from(format!("a{i}")), Key::from(format!("b{i}")));
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let mut tasks = Vec::new();
        for (c, (first, second)) in [(a.clone(), b.clone()), (b, a)].into_iter().enumerate() {
            let (l, start) = (lockers[c].clone(), Arc::clone(&start));
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                one_try(&l, all, first, second).await
            }));
        }
        let began = Instant::now();
        let mut held = 0;
        for task in tasks {
            held += usize::from(task.await??);
        }
        t.run.lat.push(began.elapsed());
        match held {
            2 => t.both_held += 1,
            1 => t.one_out += 1,
            _ => t.both_out += 1,
        }
    }
    t.run.elapsed = t0.elapsed();
    for l in lockers {
        l.close().await?;
    }
    Ok(t)
}

/// The rows (ratio: the tries that deadlocked) and their summary lines.
pub async fn rows(ep: &str, quick: bool, summary: &mut Vec<String>) -> Res<Vec<Row>> {
    let tries = if quick { 20 } else { 100 };
    summary.push(format!(
        "deadlock demonstration: 2 clients, keys [a, b] and [b, a], started together, {} ms \
         timeout per try, {tries} tries per row, new keys each try; p50/p99 are per try",
        TIMEOUT.as_millis()
    ));
    let mut rows = Vec::new();
    for (name, all) in [
        ("deadlock demo: one-by-one, caller's order", false),
        ("deadlock demo: lock_all, caller's order", true),
    ] {
        for fair in [true, false] {
            let mode = if fair { "fair" } else { "unfair" };
            eprintln!("bench: {name}, {mode}");
            let t = tally(ep, fair, all, tries).await?;
            let mut row = Row::of(name, mode, 2, 2, &t.run);
            row.ops_per_s = 0.0;
            rows.push(row.ratio(t.both_out as f64, "tries deadlocked (both timed out)"));
            summary.push(format!(
                "{name} ({mode}): of {tries} tries, {} deadlocked (both timed out), {} had one \
                 time out, {} had both hold both keys",
                t.both_out, t.one_out, t.both_held
            ));
        }
    }
    Ok(rows)
}
