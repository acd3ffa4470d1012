//! `lock_all` and `try_lock_all` on Redis: every key of one call in one
//! script (`protocol/lock_all_lua.rs`), so in one atomic step, on one
//! instance, behind sentinels, or on a cluster when the keys share a hash
//! slot (a script runs on one node, over keys of one slot). Redlock is
//! refused: independent masters have no one step across them.
//!
//! Fair: the first round of every key runs in one script (the acquire of
//! `lock_lua.rs` for each key in turn: taken if free with nobody queued,
//! else queued), then each key is waited for as a single-key `lock` waits
//! (`LockAttempt` rounds, wake-ups, `pace.rs`), a key taken in the step
//! held meanwhile as the caller's turn. Why this cannot deadlock: Redis
//! runs one script at a time, so of two calls that share keys, the one
//! whose step ran first is ahead of the other in every queue they share;
//! the order in which Redis ran the steps is one order of all waiters, and
//! the earliest waiter is first in each of its queues
//! (`crate::semantics::all_keys`). A place must stay where the step put
//! it: a waiter whose entry is gone (its record expired, as after a
//! silence of three polls) is not queued again at the end, which would
//! break that order, but gives up every key and joins all queues again in
//! one step (`lock_args::Joined::Kept`).
//!
//! Unfair, and `try_lock_all` (`take_all.rs`): all the keys taken in one
//! script when all are free, else none; unfair `lock_all` waits meanwhile
//! with one queue entry in the queue of a key someone else holds, whose
//! release wakes it (the script moves it there).
//!
//! On an error or when the caller gives up, nothing is left behind: every
//! attempt is armed until granted, and takes back its entries and what it
//! was granted (`semantics/armed.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::sync::Notify;

use crate::redis::lock::attempt::{AttemptKind, LockAttempt, mutex_error};
use crate::redis::lock::take_all;
use crate::redis::pace::Pace;
use crate::redis::protocol::keys::{Layout, LockKeys};
use crate::redis::protocol::line::in_use_as_line;
use crate::redis::protocol::lock_all_lua::{AllAnswer, Part};
use crate::redis::protocol::slots::slot;
use crate::redis::state::Core;
use crate::semantics::all_keys::every_turn;
use crate::semantics::armed::{Armed, turn_or_done};
use crate::semantics::fairness::Fairness;
use crate::util::observe;
use crate::{Context, Error, Key, LockGuard, Result};

/// Refuses, before any request, what no one script can take: any keys on
/// Redlock, keys of different hash slots on a cluster.
///
/// # Errors
/// [`Error::Unsupported`] saying what to do instead;
/// [`Error::InvalidKey`] for a key a cluster cannot lay out.
pub(crate) fn admits_all(core: &Core, keys: &[Key]) -> Result<()> {
    if core.nodes.is_redlock() {
        return Err(Error::Unsupported(
            "lock_all on Redlock (several redis:// URLs): it takes every key in one atomic \
             step, and independent masters have no one step across them (each would order \
             the callers on its own); use one Redis instance, a Redis Cluster or Sentinel \
             deployment, or etcd, or lock one key that stands for the group"
                .into(),
        ));
    }
    let layout = core.nodes.layout;
    for key in keys {
        layout.check(key)?;
    }
    if layout != Layout::Tagged {
        return Ok(());
    }
    let slot_of = |key: &Key| slot(&LockKeys::new(layout, core.config.prefix(), key).lock);
    let first = &keys[0];
    match keys.iter().find(|k| slot_of(k) != slot_of(first)) {
        None => Ok(()),
        Some(other) => Err(Error::Unsupported(format!(
            "lock_all of keys in different hash slots of a Redis Cluster ('{first}' in slot \
             {}, '{other}' in slot {}): one script takes every key of a call, and Redis runs a \
             script only over keys of one slot. Give the keys a common hash tag: start each \
             with the same {{tag}}, e.g. '{{orders}}/17' and '{{orders}}/42' (fairlock writes \
             key k as <prefix>{{k}}, so Redis hashes a key's text up to its first '}}')",
            slot_of(first),
            slot_of(other),
        ))),
    }
}

/// `lock_all`: fair or unfair, as the locker is.
pub(crate) async fn lock_all(
    core: &Arc<Core>,
    ctx: &Context,
    keys: &[Key],
) -> Result<Vec<LockGuard>> {
    match core.fairness {
        Fairness::Fair => fair(core, ctx, keys).await,
        Fairness::Unfair => take_all::unfair(core, ctx, keys).await,
    }
}

/// Why one try of fair `lock_all` ended without the keys; nothing is left
/// of it.
enum Failed {
    /// The step failed: tried again while the pace allows.
    Step(Error),
    /// A kept place was lost: the call joins every queue again at once.
    PlaceLost,
    /// The call fails.
    Wait(Error),
}

impl From<Error> for Failed {
    fn from(e: Error) -> Self {
        Failed::Wait(e)
    }
}

/// Fair `lock_all`: tries of [`fair_once`], again after a failed step
/// (where a single key's first round would be) or a lost place.
async fn fair(core: &Arc<Core>, ctx: &Context, keys: &[Key]) -> Result<Vec<LockGuard>> {
    let mut pace = Pace::new(core, Arc::new(Notify::new()));
    loop {
        match fair_once(core, ctx, keys).await {
            Ok(guards) => return Ok(guards),
            Err(Failed::PlaceLost) => {}
            Err(Failed::Step(e)) => turn_or_done(ctx, &keys[0], pace.after_error(e)).await?,
            Err(Failed::Wait(e)) => return Err(e),
        }
    }
}

/// A key of a fair call after the step: held, or queued with the ms its
/// holder (or the epoch) has left.
enum Turn {
    Held(LockGuard),
    Queued(Armed<LockAttempt>, Option<Duration>),
}

/// One try of fair `lock_all`: the step, then each key's turn.
async fn fair_once(
    core: &Arc<Core>,
    ctx: &Context,
    keys: &[Key],
) -> Result<Vec<LockGuard>, Failed> {
    let within = core.config.node_timeout();
    let attempts: Vec<_> = keys
        .iter()
        .map(|k| LockAttempt::new(core, k, AttemptKind::Lock))
        .collect();
    let poll = core.waiter_poll(0);
    let step = async {
        core.wakeups_ready().await;
        enqueue_all(core, &attempts, poll).await
    };
    let (answer, started) = match turn_or_done(ctx, &keys[0], step).await {
        Ok(done) => done,
        Err(e) => {
            give_up(attempts, within).await;
            return Err(if ctx.is_done() {
                Failed::Wait(e)
            } else {
                Failed::Step(e)
            });
        }
    };
    let each = match answer {
        AllAnswer::Each(each) if each.len() == keys.len() => each,
        AllAnswer::InUseAsLine(i) => {
            // Refused before anything was written.
            attempts.into_iter().for_each(|mut a| a.set_armed(false));
            return Err(Failed::Wait(in_use_as_line(&keys[i])));
        }
        _ => {
            give_up(attempts, within).await;
            return Err(Failed::Wait(core.unexpected("enqueue all")));
        }
    };
    let valid = core.config.validity_left(started.elapsed()).is_some();
    let mut turns = Vec::with_capacity(keys.len());
    for (mut attempt, answer) in attempts.into_iter().zip(each) {
        attempt.keep_place();
        turns.push(match answer {
            Ok(token) if valid => Turn::Held(attempt.granted(token, started, &[(0, token)])),
            // Too late to count: the next round confirms it.
            Ok(_) => Turn::Queued(attempt, Some(Duration::ZERO)),
            Err(ms) => Turn::Queued(attempt, u64::try_from(ms).ok().map(Duration::from_millis)),
        });
    }
    if turns.iter().any(|t| matches!(t, Turn::Queued(..))) {
        observe::queued(None);
    }
    let waits = turns.into_iter().zip(keys).map(|(turn, key)| async move {
        let (mut attempt, expires_in) = match turn {
            Turn::Held(guard) => return Ok(guard),
            Turn::Queued(attempt, expires_in) => (attempt, expires_in),
        };
        let notify = Arc::clone(&attempt.notify);
        let wait = async {
            let mut pace = Pace::new(core, notify);
            pace.after_busy(expires_in, poll).await;
            attempt.until_granted(&mut pace).await
        };
        let waited = turn_or_done(ctx, key, wait).await;
        if let Ok(Some(guard)) = waited {
            return Ok(guard);
        }
        // Leave the queue (releasing a handoff) before reporting.
        attempt.abandon(within).await;
        match waited {
            Err(e) => Err(Failed::Wait(mutex_error(e, key))),
            _ => Err(Failed::PlaceLost),
        }
    });
    every_turn(ctx, waits.collect()).await
}

/// Runs the step of `attempts`: their answer and when it was sent.
/// Its queue records live three `poll`s.
async fn enqueue_all(
    core: &Core,
    attempts: &[Armed<LockAttempt>],
    poll: Duration,
) -> Result<(AllAnswer, Instant)> {
    let parts: Vec<Part<'_>> = attempts.iter().map(|a| a.part()).collect();
    take_all::run(core, &parts, true, poll).await
}

/// Gives up `attempts`, waiting (within `within`) for each to take back
/// what it wrote.
async fn give_up(attempts: Vec<Armed<LockAttempt>>, within: Duration) {
    join_all(attempts.into_iter().map(|a| a.abandon(within))).await;
}
