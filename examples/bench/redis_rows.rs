//! The Redis rows: the round-trip floor, fairlock on one redis-server
//! (uncontended against the lock floor and rslock in turns, see
//! `redis_cycle.rs`; contended handoffs fair and unfair), Redlock on five,
//! and the `rslock` crate (Redlock, as in redsync) as the peer, all in the
//! same run on servers started here.

use std::sync::Arc;
use std::time::Duration;

use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Context, Key, Locker};

use crate::redis_cycle;
use crate::report::Row;
use crate::support::redis_server::{self, RedisServer};
use crate::workloads::{Fut2, Res, Run, sequential, spread};

fn prefix(name: &str) -> String {
    format!("bench:{name}-{}:", uuid::Uuid::new_v4().simple())
}

/// Starts `n` servers without the keyspace events the tests wait on.
pub async fn servers(n: usize) -> Res<Vec<RedisServer>> {
    let servers = redis_server::start_many(n);
    for s in &servers {
        let mut c = s.client().get_multiplexed_async_connection().await?;
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("notify-keyspace-events")
            .arg("")
            .query_async(&mut c)
            .await?;
    }
    Ok(servers)
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(|s| s.url.clone()).collect()
}

async fn locker(urls: &[String], prefix: &str, fair: bool) -> Res<RedisLocker> {
    // A new prefix: no data loss wait before its first grant.
    let config = RedisConfig::new(urls.to_vec())
        .with_prefix(prefix)
        .with_data_loss_wait(std::time::Duration::ZERO);
    Ok(RedisLocker::connect(config, fair).await?)
}

/// lock+unlock `n` times in sequence.
async fn cycle(l: &RedisLocker, key: &Key, n: usize) -> Res<Run> {
    sequential(n, |_| {
        let (l, key) = (l.clone(), key.clone());
        async move {
            l.lock(&Context::background(), &key).await?.unlock().await?;
            Ok(())
        }
    })
    .await
}

/// `clients` lockers (each its own connections) cycling one key.
async fn contended(urls: &[String], fair: bool, clients: usize, dur: Duration) -> Res<Run> {
    let p = prefix(if fair { "fair" } else { "unfair" });
    let mut workers = Vec::new();
    for _ in 0..clients {
        let l = locker(urls, &p, fair).await?;
        workers.push(move || {
            let l = l.clone();
            Box::pin(async move {
                let g = l.lock(&Context::background(), &Key::from("shared")).await?;
                g.unlock().await?;
                Ok(())
            }) as Fut2<()>
        });
    }
    spread(dur, workers).await
}

/// rslock: `clients` lock managers cycling one key with `acquire` (its
/// retry loop) and `unlock`.
async fn rslock_clients(urls: &[String], clients: usize, dur: Duration) -> Res<Run> {
    let resource = prefix("rslock").into_bytes();
    let mut workers = Vec::new();
    for _ in 0..clients {
        let rl = Arc::new(rslock::LockManager::new(urls.to_vec()));
        let resource = resource.clone();
        workers.push(move || {
            let (rl, resource) = (Arc::clone(&rl), resource.clone());
            Box::pin(async move {
                let lock = rl
                    .acquire_no_guard(resource.as_slice(), Duration::from_secs(10))
                    .await
                    .map_err(|e| format!("rslock: {e:?}"))?;
                rl.unlock(&lock).await;
                Ok(())
            }) as Fut2<()>
        });
    }
    spread(dur, workers).await
}

/// Rounds and cycles per batch of the interleaved uncontended rows.
fn cycle_rounds(quick: bool) -> (usize, usize) {
    if quick { (10, 100) } else { (20, 200) }
}

/// Only the interleaved uncontended rows (`--redis-cycle`), on a server of
/// their own.
pub async fn cycle_rows(quick: bool) -> Res<Vec<Row>> {
    let one = servers(1).await?;
    eprintln!("bench: redis {}", one[0].url);
    let (rounds, batch) = cycle_rounds(quick);
    redis_cycle::rows(&one[0].url, &prefix("unc"), rounds, batch).await
}

pub async fn rows(quick: bool, dur: Duration) -> Res<Vec<Row>> {
    let (seq_n, counts): (usize, &[usize]) = if quick { (300, &[4]) } else { (2000, &[4, 16]) };
    let mut rows = Vec::new();
    let one = servers(1).await?;
    let five = servers(5).await?;
    let (one, five) = (urls(&one), urls(&five));
    eprintln!("bench: redis {} and 5 more for Redlock", one[0]);

    // Floors: one round trip (RT), and SET NX PX + DEL (the cycle floor).
    let mut c = redis::Client::open(one[0].as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let key = prefix("floor");
    let rt = sequential(seq_n, |_| {
        let mut c = c.clone();
        async move {
            let _: String = redis::cmd("PING").query_async(&mut c).await?;
            Ok(())
        }
    })
    .await?;
    let set_del = sequential(seq_n, |_| {
        let (mut c, key) = (c.clone(), key.clone());
        async move {
            let _: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg("v")
                .arg("NX")
                .arg("PX")
                .arg(10_000)
                .query_async(&mut c)
                .await?;
            let _: i64 = redis::cmd("DEL").arg(&key).query_async(&mut c).await?;
            Ok(())
        }
    })
    .await?;
    let _: i64 = redis::cmd("DEL").arg(&key).query_async(&mut c).await?;
    let rt_s = rt.mean().as_secs_f64();
    rows.push(Row::of("redis floor: PING round trip (RT)", "-", 1, 1, &rt));
    rows.push(
        Row::of("redis floor: SET NX PX + DEL", "-", 1, 1, &set_del)
            .ratio(set_del.mean().as_secs_f64() / (2.0 * rt_s), "x 2 RT"),
    );

    // Uncontended, one instance: the floor, fairlock and rslock in turns.
    let (rounds, batch) = cycle_rounds(quick);
    rows.extend(redis_cycle::rows(&one[0], &prefix("unc"), rounds, batch).await?);

    // One contended key, one instance: handoffs per second.
    for &n in counts {
        for fair in [true, false] {
            let run = contended(&one, fair, n, dur).await?;
            rows.push(
                Row::of(
                    "redis: fairlock contended, 1 key",
                    if fair { "fair" } else { "unfair" },
                    n,
                    1,
                    &run,
                )
                .ratio(run.per_s() * 2.0 * rt_s, "x 1/(2 RT)"),
            );
        }
        let run = rslock_clients(&one, n, dur).await?;
        rows.push(
            Row::of("peer: rslock contended, 1 key", "unfair", n, 1, &run)
                .ratio(run.per_s() * 2.0 * rt_s, "x 1/(2 RT)"),
        );
    }
    // Redlock on five masters.
    let p = prefix("redlock");
    let l = locker(&five, &p, false).await?;
    let k = Key::from("unc");
    cycle(&l, &k, 20).await?;
    let run = cycle(&l, &k, seq_n / 2).await?;
    rows.push(
        Row::of("redlock(5): fairlock uncontended", "unfair", 1, 1, &run)
            .ratio(run.mean().as_secs_f64() / (2.0 * rt_s), "x 2 RT"),
    );
    let run = rslock_clients(&five, 1, dur).await?;
    rows.push(
        Row::of("peer: rslock redlock(5) uncontended", "unfair", 1, 1, &run)
            .ratio(run.mean().as_secs_f64() / (2.0 * rt_s), "x 2 RT"),
    );
    for &n in counts {
        let run = contended(&five, false, n, dur).await?;
        rows.push(Row::of(
            "redlock(5): fairlock contended, 1 key",
            "unfair",
            n,
            1,
            &run,
        ));
        let run = rslock_clients(&five, n, dur).await?;
        rows.push(Row::of(
            "peer: rslock redlock(5) contended, 1 key",
            "unfair",
            n,
            1,
            &run,
        ));
    }
    Ok(rows)
}
