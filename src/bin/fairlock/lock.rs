//! `fairlock lock`: wait for the lock, run the command while holding it,
//! release it when the command ends.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use fairlock::{BackendConfig, Context, Error, Key, LockGuard, LockStatus};

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
    let key = Key::from(a.key());
    if let Err(e) = key.validate() {
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
    let guard = match acquire(&locker, &key, &a, &mut signals).await {
        Ok(guard) => guard,
        Err(code) => {
            let _ = locker.close().await;
            return code;
        }
    };
    let code = run_holding(guard, &a, &mut signals).await;
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
    if a.nonblock {
        let inner = locker.locker();
        let tried = match a.hold() {
            Hold::Lock => inner.try_lock(key).await,
            Hold::Read => inner.try_read_lock(key).await,
            Hold::Write => inner.try_write_lock(key).await,
            Hold::Permits { n, limit } => inner.try_acquire_permits(key, n, limit).await,
        };
        return match tried {
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
        };
    }
    let mut ctx = Context::background();
    if let Some(timeout) = a.run.timeout {
        ctx = ctx.with_timeout(timeout);
    }
    let (ctx, cancel) = ctx.with_cancel();
    let inner = locker.locker();
    let lock = match a.hold() {
        Hold::Lock => inner.lock(&ctx, key),
        Hold::Read => inner.read_lock(&ctx, key),
        Hold::Write => inner.write_lock(&ctx, key),
        Hold::Permits { n, limit } => inner.acquire_permits(&ctx, key, n, limit),
    };
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
