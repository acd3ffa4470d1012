//! `fairlock lock`: wait for the lock, run the command while holding it,
//! release it when the command ends.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use fairlock::{BackendConfig, Context, Error, Key, LockGuard, LockStatus, MultiGuard};

use crate::args::lock_args::{Hold, LockArgs};
use crate::backend::Conn;
use crate::child::{Child, Signals, run_while_held};
use crate::exit::{self, report};

pub async fn run(config: BackendConfig, a: LockArgs) -> u8 {
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fairlock: cannot install signal handlers: {e}");
            return exit::UNAVAILABLE;
        }
    };
    let keys: Vec<Key> = a.keys().into_iter().map(Key::from).collect();
    if let Some(e) = keys.iter().find_map(|k| k.validate().err()) {
        report(&e);
        return exit::USAGE;
    }
    let locker = match Conn::connect(&config, a.is_fair()).await {
        Ok(l) => l,
        Err(e @ (Error::Unsupported(_) | Error::InvalidConfig(_))) => {
            report(&e);
            return exit::USAGE;
        }
        Err(e) => {
            report(&e);
            return exit::of(&e);
        }
    };
    let code = match &keys[..] {
        [key] => match acquire(&locker, key, &a, &mut signals).await {
            Ok(guard) => run_holding(guard, &a, &mut signals).await,
            Err(code) => code,
        },
        keys => match acquire_all(&locker, keys, &a, &mut signals).await {
            Ok(guard) => run_holding_all(guard, &a, &mut signals).await,
            Err(code) => code,
        },
    };
    let _ = locker.close().await;
    code
}

/// Takes the lock, or says why not and returns the exit code.
async fn acquire(
    locker: &Conn,
    key: &Key,
    a: &LockArgs,
    signals: &mut Signals,
) -> Result<LockGuard, u8> {
    let inner = locker.locker();
    if a.nonblock {
        let tried = match a.hold() {
            Hold::Lock => inner.try_lock(key).await,
            Hold::Read => inner.try_read_lock(key).await,
            Hold::Write => inner.try_write_lock(key).await,
            Hold::Permits { n, limit } => inner.try_acquire_permits(key, n, limit).await,
        };
        return tried_or_busy(locker, key, a, tried).await;
    }
    let (ctx, cancel) = context(a);
    let lock = match a.hold() {
        Hold::Lock => inner.lock(&ctx, key),
        Hold::Read => inner.read_lock(&ctx, key),
        Hold::Write => inner.write_lock(&ctx, key),
        Hold::Permits { n, limit } => inner.acquire_permits(&ctx, key, n, limit),
    };
    wait(locker, key, a, signals, (lock, cancel)).await
}

/// Takes every key at once (`lock_all`), or says why not.
async fn acquire_all(
    locker: &Conn,
    keys: &[Key],
    a: &LockArgs,
    signals: &mut Signals,
) -> Result<MultiGuard, u8> {
    let inner = locker.locker();
    if a.nonblock {
        let tried = inner.try_lock_all(keys).await;
        let busy = busy_key(locker, keys).await;
        return tried_or_busy(locker, &busy, a, tried).await;
    }
    let (ctx, cancel) = context(a);
    let lock = inner.lock_all(&ctx, keys);
    let shown = busy_key(locker, keys).await;
    wait(locker, &shown, a, signals, (lock, cancel)).await
}

/// The first of `keys` that is held or waited for (else the first): the
/// one the messages name.
async fn busy_key(locker: &Conn, keys: &[Key]) -> Key {
    for key in keys {
        let status = locker.status(Some(key)).await;
        if status.is_ok_and(|s| {
            s.first()
                .is_some_and(|l| l.holder.is_some() || !l.waiters.is_empty())
        }) {
            return key.clone();
        }
    }
    keys[0].clone()
}

/// The context of the wait: `--timeout`, and a cancel for signals.
fn context(a: &LockArgs) -> (Context, fairlock::CancellationToken) {
    let mut ctx = Context::background();
    if let Some(timeout) = a.run.timeout {
        ctx = ctx.with_timeout(timeout);
    }
    ctx.with_cancel()
}

/// A `--nonblock` answer: held, or the conflict code.
async fn tried_or_busy<G>(
    locker: &Conn,
    key: &Key,
    a: &LockArgs,
    tried: fairlock::Result<Option<G>>,
) -> Result<G, u8> {
    match tried {
        Ok(Some(guard)) => Ok(guard),
        Ok(None) => {
            let holder = describe_holder(locker, key).await;
            eprintln!(
                "fairlock: lock {key} is {holder}; not running {} (--nonblock)",
                a.cmd[0]
            );
            Err(a.run.conflict_code)
        }
        Err(e) => {
            report(&e);
            Err(exit::of(&e))
        }
    }
}

/// Waits for `lock`, showing progress on `key` every second and leaving
/// the queue on a signal (through `cancel`).
async fn wait<G>(
    locker: &Conn,
    key: &Key,
    a: &LockArgs,
    signals: &mut Signals,
    (lock, cancel): (
        impl Future<Output = fairlock::Result<G>>,
        fairlock::CancellationToken,
    ),
) -> Result<G, u8> {
    tokio::pin!(lock);
    let started = Instant::now();
    let mut progress = Progress::new();
    let mut interrupted = None;
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    let outcome = loop {
        tokio::select! {
            res = &mut lock => break res,
            sig = signals.recv(), if interrupted.is_none() => {
                // Leave the queue: the cancelled lock removes our entry
                // before it returns.
                interrupted = Some(sig);
                cancel.cancel();
            }
            _ = tick.tick(), if interrupted.is_none() => {
                let status = locker.status(Some(key)).await.ok();
                progress.show(key, locker.id(), status.as_ref(), started.elapsed());
            }
        }
    };
    progress.clear();
    match outcome {
        Ok(guard) => Ok(guard),
        Err(Error::Cancelled { .. }) if interrupted.is_some() => {
            let sig = interrupted.unwrap_or(libc::SIGINT);
            eprintln!("fairlock: interrupted while waiting for lock {key}; left the queue");
            Err(128 + u8::try_from(sig).unwrap_or(0))
        }
        Err(Error::Timeout { .. }) => {
            let holder = describe_holder(locker, key).await;
            eprintln!(
                "fairlock: timed out after {:?} waiting for lock {key} ({holder}); not running {}",
                a.run.timeout.unwrap_or_default(),
                a.cmd[0]
            );
            Err(a.run.conflict_code)
        }
        Err(e) => {
            report(&e);
            Err(exit::of(&e))
        }
    }
}

/// Runs the command while holding the lock; returns the exit code.
async fn run_holding(guard: LockGuard, a: &LockArgs, signals: &mut Signals) -> u8 {
    let key = guard.key().clone();
    let child = Child {
        cmd: &a.cmd,
        env: vec![
            ("FAIRLOCK_KEY", key.as_str().to_owned()),
            ("FAIRLOCK_TOKEN", guard.fencing_token().to_string()),
        ],
        kill_after: a.run.kill_after,
        what: format!("lock {key}"),
    };
    run_while_held(guard, child, signals).await
}

/// Runs the command while holding every key: `FAIRLOCK_KEY` and
/// `FAIRLOCK_TOKEN` name the first, `FAIRLOCK_KEYS` and `FAIRLOCK_TOKENS`
/// all of them, one per line, in the same order.
async fn run_holding_all(guard: MultiGuard, a: &LockArgs, signals: &mut Signals) -> u8 {
    let first = guard.guards()[0].key().clone();
    let lines = |f: &dyn Fn(&LockGuard) -> String| {
        guard.guards().iter().map(f).collect::<Vec<_>>().join("\n")
    };
    let keys = lines(&|g| g.key().to_string());
    let child = Child {
        cmd: &a.cmd,
        env: vec![
            ("FAIRLOCK_KEY", first.as_str().to_owned()),
            (
                "FAIRLOCK_TOKEN",
                guard.guards()[0].fencing_token().to_string(),
            ),
            ("FAIRLOCK_TOKENS", lines(&|g| g.fencing_token().to_string())),
            ("FAIRLOCK_KEYS", keys.clone()),
        ],
        kill_after: a.run.kill_after,
        what: format!("locks {}", keys.replace('\n', ", ")),
    };
    run_while_held(guard, child, signals).await
}

async fn describe_holder(locker: &Conn, key: &Key) -> String {
    match locker.status(Some(key)).await {
        Ok(locks) => match locks.first().and_then(|l| l.holder.as_ref()) {
            Some(h) => format!(
                "held by {} (fencing token {})",
                h.owner.describe(),
                h.fencing_token
            ),
            None if locks.first().is_some_and(|l| !l.waiters.is_empty()) => {
                "free but others queue for it (fair mode lets them go first)".into()
            }
            None => "held".into(),
        },
        Err(_) => "held".into(),
    }
}

/// The "still waiting" report: a live line on a terminal, plain lines
/// (on change, or every 30 s) otherwise.
struct Progress {
    live: bool,
    shown: bool,
    last: String,
    last_at: Option<Instant>,
}

impl Progress {
    fn new() -> Self {
        Progress {
            live: std::io::stderr().is_terminal(),
            shown: false,
            last: String::new(),
            last_at: None,
        }
    }

    fn show(&mut self, key: &Key, me: &str, status: Option<&Vec<LockStatus>>, waited: Duration) {
        let lock = status.and_then(|s| s.first());
        let holder = lock
            .and_then(|l| l.holder.as_ref())
            .map_or("no holder".into(), |h| {
                format!("held by {} (token {})", h.owner.describe(), h.fencing_token)
            });
        let place = lock
            .and_then(|l| {
                let at = l.waiters.iter().position(|w| w.locker == me)?;
                Some(format!(
                    "position {} of {} in the queue",
                    at + 1,
                    l.waiters.len()
                ))
            })
            .unwrap_or_else(|| "queued".into());
        let what = format!("waiting for lock {key}: {place}, {holder}");
        let mut err = std::io::stderr().lock();
        if self.live {
            let _ = write!(
                err,
                "\r\x1b[Kfairlock: {what}, waited {}s",
                waited.as_secs()
            );
            let _ = err.flush();
            self.shown = true;
        } else if what != self.last
            || self
                .last_at
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(30))
        {
            let _ = writeln!(err, "fairlock: {what}, waited {}s", waited.as_secs());
            self.last = what;
            self.last_at = Some(Instant::now());
        }
    }

    fn clear(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
            self.shown = false;
        }
    }
}
