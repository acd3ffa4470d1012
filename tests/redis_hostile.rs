//! Data fairlock did not write, under the key prefix of Redis locks, on one
//! instance and on Redlock: random bytes as the lock value, garbage members
//! and scores in the queue, waiter records that do not parse, and keys of
//! the wrong type (a hash where the lock string should be, a string where
//! the queue's sorted set should be, a list as the fencing counter).
//!
//! `try_lock`, `lock`, `unlock`, `status` and the guard's loss signal never
//! panic or hang (each call runs under a generous hang guard, not a timing
//! assertion): they treat the data as held by someone else, or fail with an
//! error naming the key. Once the data is deleted the same key locks and
//! unlocks normally. The cases come from a seeded generator: a failure
//! prints its seed, and `FAIRLOCK_SEED=<seed>` replays it.
#![cfg(feature = "redis")]

mod support;

#[path = "redis_hostile/data.rs"]
mod data;

use std::future::Future;
use std::time::Duration;

use data::{Hostile, Rng, write_as};
use fairlock::conformance::patient;
use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Context, Error, Key, LockGuard, Locker};
use support::redis_server::{self as rs, conn};

/// The generator's seed: `FAIRLOCK_SEED`, or a fixed one; printed.
fn seed() -> u64 {
    let seed = std::env::var("FAIRLOCK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_4ed1_u64);
    println!("FAIRLOCK_SEED={seed}");
    seed
}

/// Runs `f` under a hang guard (a safety net, not a timing assertion).
async fn guarded<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 60 s (a hang)"))
}

async fn run_on(urls: &[String], nodes: &[usize], cmds: &[redis::Cmd]) {
    for &i in nodes {
        let mut c = conn(&urls[i]).await;
        for cmd in cmds {
            let _: redis::Value = cmd.query_async(&mut c).await.expect("write");
        }
    }
}

async fn delete<K: redis::ToRedisArgs + Sync>(urls: &[String], keys: &[K]) {
    if keys.is_empty() {
        return;
    }
    for url in urls {
        let _: i64 = redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut conn(url).await)
            .await
            .expect("del");
    }
}

/// After the foreign data is gone, `key` locks and unlocks normally and
/// nothing is left behind.
async fn works_again(locker: &RedisLocker, urls: &[String], prefix: &str, key: &Key, ctx: &str) {
    let guard = guarded(ctx, locker.lock(&patient(), key))
        .await
        .unwrap_or_else(|e| panic!("{ctx}: lock after cleaning up: {e:?}"));
    assert!(guard.fencing_token() > 0, "{ctx}");
    guarded(ctx, guard.unlock())
        .await
        .unwrap_or_else(|e| panic!("{ctx}: unlock after cleaning up: {e:?}"));
    for url in urls {
        guarded(ctx, rs::wait_clean(url, prefix)).await;
    }
}

/// Releases `guard`: fine, or an error naming a key.
async fn release(guard: LockGuard, h: &Hostile, name: &str, ctx: &str) {
    if let Err(e) = guarded(ctx, guard.unlock()).await {
        h.check_named(&e, name, ctx);
    }
}

/// One case: foreign data on `nodes`, then every call of the API on it.
async fn case(rng: &mut Rng, urls: &[String], ctx: &str) {
    let prefix = rs::unique_prefix("hostile");
    let name = format!("k{:x}", rng.next() % 0xffff);
    let key = Key::from(name.as_str());
    let lock_key = format!("{prefix}{name}");
    let redlock = urls.len() > 1;
    let quorum = urls.len() / 2 + 1;
    let nodes: Vec<usize> = if !redlock || rng.below(2) == 0 {
        (0..urls.len()).collect()
    } else {
        let mask = 1 + rng.below((1 << urls.len()) - 1);
        (0..urls.len()).filter(|i| mask & (1 << i) != 0).collect()
    };
    let h = Hostile::generate(rng, &prefix, &lock_key);
    run_on(urls, &nodes, &h.cmds).await;
    let fair = !redlock && rng.below(2) == 0;
    let ctx = format!("{ctx} (fair {fair}, nodes {nodes:?}, keys {:?})", h.keys);
    let ctx = ctx.as_str();
    let config = RedisConfig::new(urls.to_vec())
        .with_prefix(prefix.clone())
        .with_data_loss_wait(Duration::ZERO)
        .with_ttl(Duration::from_secs(2));
    let locker = RedisLocker::connect(config, fair).await.expect("connect");
    // Someone else holds the lock on a quorum: it must never be granted,
    // and waiting for it can only end by the caller's deadline.
    // A foreign record that looks like a live waiter heads a fair queue
    // until it expires; an unfair attempt takes a free lock over it (and
    // its release hands the lock to it if it says "fair", for the two
    // seconds its record asks for).
    let blocked = (h.holder && nodes.len() >= quorum) || (fair && h.waiter);
    // Before any acquire drops foreign members from the queue.
    let status = guarded(ctx, locker.status(Some(&key)))
        .await
        .unwrap_or_else(|e| panic!("{ctx}: status: {e:?}"));
    let listed = status
        .first()
        .map(|s| s.foreign.clone())
        .unwrap_or_default();
    for k in &h.flagged {
        assert!(
            listed.contains(k),
            "{ctx}: status does not flag {k}: {status:?}"
        );
    }
    let tried = guarded(ctx, locker.try_lock(&key)).await;
    println!("{ctx}: try_lock {:?}", tried.as_ref().map(Option::is_some));
    match tried {
        Ok(Some(guard)) => {
            assert!(!blocked, "{ctx}: try_lock granted over a foreign holder");
            assert!(guard.fencing_token() > 0, "{ctx}: token 0");
            release(guard, &h, &name, ctx).await;
        }
        Ok(None) => assert!(blocked, "{ctx}: try_lock found a free lock busy"),
        Err(e) => h.check_named(&e, &name, ctx),
    }
    let wait = if blocked { 300 } else { 30_000 };
    let deadline = Context::background().with_timeout(Duration::from_millis(wait));
    let locked = guarded(ctx, locker.lock(&deadline, &key)).await;
    println!(
        "{ctx}: lock {:?}",
        locked.as_ref().map(LockGuard::fencing_token)
    );
    match locked {
        Ok(guard) => {
            assert!(!blocked, "{ctx}: lock granted over a foreign holder");
            assert!(guard.fencing_token() > 0, "{ctx}: token 0");
            release(guard, &h, &name, ctx).await;
        }
        Err(Error::Timeout { .. }) => assert!(blocked, "{ctx}: lock timed out"),
        Err(e) => h.check_named(&e, &name, ctx),
    }
    for k in [Some(&key), None] {
        match guarded(ctx, locker.status(k)).await {
            Ok(locks) => println!("{ctx}: status {locks:?}"),
            Err(e) => h.check_named(&e, &name, ctx),
        }
    }
    delete(urls, &h.keys).await;
    delete(urls, &h.stray).await;
    works_again(&locker, urls, &prefix, &key, ctx).await;
    held_then_overwritten(rng, &locker, urls, &prefix, &key, ctx).await;
}

/// A held lock whose keys someone overwrites: a lost lock key fires the
/// loss signal and unlock says the lock was lost; a queue or fencing
/// counter overwritten under a holder does not keep it from unlocking.
async fn held_then_overwritten(
    rng: &mut Rng,
    locker: &RedisLocker,
    urls: &[String],
    prefix: &str,
    key: &Key,
    ctx: &str,
) {
    let lock_key = format!("{prefix}{key}");
    let target = match rng.below(3) {
        0 => lock_key.clone(),
        1 => format!("{lock_key}/_OWNERS_/queue"),
        _ => format!("{prefix}_OWNERS_/fence"),
    };
    let kind = rng.pick(&["string", "hash", "list", "set", "zset"]);
    let guard = guarded(ctx, locker.lock(&patient(), key))
        .await
        .expect("lock");
    let overwrite = [
        redis::cmd("DEL").arg(&target).to_owned(),
        write_as(kind, &target, rng),
    ];
    let all: Vec<usize> = (0..urls.len()).collect();
    run_on(urls, &all, &overwrite).await;
    let ctx = format!("{ctx}: held, then {target} overwritten with a {kind}");
    let ctx = ctx.as_str();
    let h = Hostile {
        keys: vec![target.clone()],
        ..Hostile::default()
    };
    if target == lock_key {
        guarded(ctx, guard.lost()).await;
        match guarded(ctx, guard.unlock()).await {
            Err(Error::LockLost { .. }) => {}
            other => panic!("{ctx}: unlock of a lost lock: {other:?}"),
        }
    } else {
        guarded(ctx, guard.unlock())
            .await
            .unwrap_or_else(|e| panic!("{ctx}: unlock: {e:?}"));
    }
    delete(urls, &h.keys).await;
    works_again(locker, urls, prefix, key, ctx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_on_one_instance_is_someone_elses_or_a_named_error() {
    let seed = seed();
    let mut rng = Rng(seed);
    let urls = vec![rs::shared().url.clone()];
    for n in 0..24 {
        case(&mut rng, &urls, &format!("FAIRLOCK_SEED={seed} case {n}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_on_redlock_is_someone_elses_or_a_named_error() {
    let seed = seed();
    let mut rng = Rng(seed ^ 0x00ed_10c4);
    let urls: Vec<String> = rs::shared_five().iter().map(|s| s.url.clone()).collect();
    for n in 0..12 {
        case(&mut rng, &urls, &format!("FAIRLOCK_SEED={seed} case {n}")).await;
    }
}
