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

use std::future::Future;
use std::time::Duration;

use fairlock::conformance::patient;
use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Context, Error, Key, LockGuard, Locker};
use support::chain;
use support::redis_server::{self as rs, conn};

/// A small seeded generator (xorshift), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, max: u64) -> Vec<u8> {
        (0..self.below(max + 1))
            .map(|_| self.next() as u8)
            .collect()
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64) as usize]
    }
}

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

/// A command writing `key` as a Redis value of type `kind`.
fn write_as(kind: &str, key: &str, rng: &mut Rng) -> redis::Cmd {
    let v = rng.bytes(16);
    match kind {
        "hash" => redis::cmd("HSET").arg(key).arg("f").arg(v).to_owned(),
        "list" => redis::cmd("RPUSH").arg(key).arg(v).to_owned(),
        "set" => redis::cmd("SADD").arg(key).arg(v).to_owned(),
        "zset" => redis::cmd("ZADD").arg(key).arg(1).arg(v).to_owned(),
        _ => redis::cmd("SET").arg(key).arg(v).to_owned(),
    }
}

/// The hostile data of one case.
#[derive(Default)]
struct Hostile {
    cmds: Vec<redis::Cmd>,
    /// Every key written (deleted at the end of the case).
    keys: Vec<String>,
    /// The lock key holds a string: someone else's lock.
    holder: bool,
    /// The queue holds a record that looks like a live fairlock waiter,
    /// with a score a newcomer queues behind.
    waiter: bool,
    /// Keys `status` must list as foreign.
    flagged: Vec<String>,
}

impl Hostile {
    fn add(&mut self, key: &str, cmd: redis::Cmd) {
        self.cmds.push(cmd);
        if !self.keys.iter().any(|k| k == key) {
            self.keys.push(key.to_owned());
        }
    }

    /// At least one kind of foreign data for the lock `lock` under `prefix`.
    fn generate(rng: &mut Rng, prefix: &str, lock: &str) -> Hostile {
        let queue = format!("{lock}/_OWNERS_/queue");
        let waiters = format!("{lock}/_OWNERS_/w/");
        let fence = format!("{prefix}_OWNERS_/fence");
        let mut h = Hostile::default();
        // Each kind half the time (the fence, shared by the prefix's locks,
        // a quarter), and at least one.
        let mut kinds = rng.below(8) & (if rng.below(2) == 0 { 7 } else { 3 });
        if kinds == 0 {
            kinds = 1 << rng.below(3);
        }
        if kinds & 1 != 0 {
            match rng.below(3) {
                0 => {
                    let value = rng.bytes(40);
                    // "<token> <owner>" is a holder; anything else is flagged.
                    let text = String::from_utf8_lossy(&value);
                    let parses = text
                        .split_once(' ')
                        .is_some_and(|(token, _)| token.parse::<u64>().is_ok());
                    if !parses {
                        h.flagged.push(lock.to_owned());
                    }
                    h.add(lock, redis::cmd("SET").arg(lock).arg(value).to_owned());
                    h.holder = true;
                }
                1 => {
                    let mut value = format!("{} ", rng.next()).into_bytes();
                    value.extend(rng.bytes(20));
                    let cmd = redis::cmd("SET")
                        .arg(lock)
                        .arg(value)
                        .arg("PX")
                        .arg(60_000)
                        .to_owned();
                    h.add(lock, cmd);
                    h.holder = true;
                }
                _ => {
                    let kind = rng.pick(&["hash", "list", "set", "zset"]);
                    h.add(lock, write_as(kind, lock, rng));
                    h.flagged.push(lock.to_owned());
                }
            }
        }
        if kinds & 2 != 0 {
            if rng.below(3) == 0 {
                let kind = rng.pick(&["string", "hash", "list", "set"]);
                h.add(&queue, write_as(kind, &queue, rng));
                h.flagged.push(queue.clone());
            } else {
                for _ in 0..=rng.below(4) {
                    h.member(rng, &queue, &waiters);
                }
            }
        }
        if kinds & 4 != 0 {
            let cmd = match rng.below(4) {
                0 => write_as(rng.pick(&["hash", "list", "set", "zset"]), &fence, rng),
                1 => {
                    let mut value = b"x".to_vec();
                    value.extend(rng.bytes(12));
                    redis::cmd("SET").arg(&fence).arg(value).to_owned()
                }
                2 => redis::cmd("SET").arg(&fence).arg(i64::MAX).to_owned(),
                _ => redis::cmd("SET").arg(&fence).arg(-7).to_owned(),
            };
            h.add(&fence, cmd);
            h.flagged.push(fence);
        }
        h
    }

    /// One garbage member of `queue`, with a score fairlock would not
    /// write, and perhaps a waiter record of its own.
    fn member(&mut self, rng: &mut Rng, queue: &str, waiters: &str) {
        let member: Vec<u8> = match rng.below(3) {
            0 => rng.bytes(24),
            1 => format!("f{:x}", rng.next()).into_bytes(),
            _ => format!("u{:x}", rng.next()).into_bytes(),
        };
        let score = match rng.below(5) {
            0 => "inf".to_owned(),
            1 => "-inf".to_owned(),
            2 => "1e300".to_owned(),
            3 => "-0.5".to_owned(),
            _ => (rng.next() as i64).to_string(),
        };
        // Arrivals count from 1: a newcomer drops members scored above 2^52
        // (it could not be ordered after them), so only members below can
        // stay ahead of it.
        let ahead = score
            .parse::<f64>()
            .is_ok_and(|s| s <= 4_503_599_627_370_496.0);
        let cmd = redis::cmd("ZADD")
            .arg(queue)
            .arg(score)
            .arg(&member)
            .to_owned();
        self.add(queue, cmd);
        let mut record = waiters.as_bytes().to_vec();
        record.extend(&member);
        let record = String::from_utf8_lossy(&record).into_owned();
        // A record key that is not valid UTF-8 cannot be named back: only
        // members whose record key round-trips get records.
        if record.as_bytes()[waiters.len()..] != member[..] {
            return;
        }
        // Every record but a live-looking one ahead of newcomers is flagged.
        let mut flagged = true;
        let cmd = match rng.below(5) {
            0 => return,
            1 => redis::cmd("SET").arg(&record).arg(rng.bytes(30)).to_owned(),
            2 => redis::cmd("SET")
                .arg(&record)
                .arg("hub f 2000 x")
                .to_owned(),
            3 => write_as(rng.pick(&["hash", "list"]), &record, rng),
            _ => {
                self.waiter |= ahead;
                flagged = !ahead;
                let mode = rng.pick(&["f", "u"]);
                let value = format!("hub {mode} 2000 foreign pid=1 host=elsewhere");
                redis::cmd("SET")
                    .arg(&record)
                    .arg(value)
                    .arg("PX")
                    .arg(60_000)
                    .to_owned()
            }
        };
        if flagged {
            self.flagged.push(record.clone());
        }
        self.add(&record, cmd);
    }

    /// `e` names one of the keys written, or (a lost lock) the lock's name.
    fn check_named(&self, e: &Error, name: &str, ctx: &str) {
        let text = format!("{} / {e:?}", chain(e));
        let named = self.keys.iter().any(|k| text.contains(k.as_str()))
            || matches!(e, Error::LockLost { key, .. } if key == name);
        assert!(
            named,
            "{ctx}: the error names no key of {:?}: {text}",
            self.keys
        );
    }
}

async fn run_on(urls: &[String], nodes: &[usize], cmds: &[redis::Cmd]) {
    for &i in nodes {
        let mut c = conn(&urls[i]).await;
        for cmd in cmds {
            let _: redis::Value = cmd.query_async(&mut c).await.expect("write");
        }
    }
}

async fn delete(urls: &[String], keys: &[String]) {
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
