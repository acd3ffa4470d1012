//! The foreign data of tests/redis_hostile.rs: a seeded generator and what
//! it writes under a Redis lock's keys, with what the API must make of it.

use fairlock::Error;

use crate::support::chain;

/// A small seeded generator (xorshift), so a failure can be replayed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn bytes(&mut self, max: u64) -> Vec<u8> {
        (0..self.below(max + 1))
            .map(|_| self.next() as u8)
            .collect()
    }
    pub fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64) as usize]
    }
}

/// A command writing `key` as a Redis value of type `kind`.
pub fn write_as(kind: &str, key: &str, rng: &mut Rng) -> redis::Cmd {
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
pub struct Hostile {
    pub cmds: Vec<redis::Cmd>,
    /// Every key written (deleted at the end of the case).
    pub keys: Vec<String>,
    /// The lock key holds a string: someone else's lock.
    pub holder: bool,
    /// The queue holds a record that looks like a live fairlock waiter,
    /// with a score a newcomer queues behind.
    pub waiter: bool,
    /// Keys `status` must list as foreign.
    pub flagged: Vec<String>,
    /// Keys whose names are not UTF-8 (deleted at the end of the case).
    pub stray: Vec<Vec<u8>>,
}

impl Hostile {
    fn add(&mut self, key: &str, cmd: redis::Cmd) {
        self.cmds.push(cmd);
        if !self.keys.iter().any(|k| k == key) {
            self.keys.push(key.to_owned());
        }
    }

    /// At least one kind of foreign data for the lock `lock` under `prefix`.
    pub fn generate(rng: &mut Rng, prefix: &str, lock: &str) -> Hostile {
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
        if rng.below(3) == 0 {
            // A key whose name is not UTF-8: no fairlock key, and no key
            // an error could name; `status` passes it over.
            let mut stray = lock.as_bytes().to_vec();
            stray.extend(rng.bytes(8));
            stray.push(0xff);
            h.cmds
                .push(redis::cmd("SET").arg(&stray).arg("x").to_owned());
            h.stray.push(stray);
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
    pub fn check_named(&self, e: &Error, name: &str, ctx: &str) {
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
