//! `lock_all` and `try_lock_all` on etcd: every key of one call written in
//! one txn (`protocol/take_all.rs`). Fair, each key is then waited for,
//! handed over and released as a single `lock` is (`queue.rs`); unfair,
//! all the keys are taken again in one txn each time a lock key of the
//! call is deleted. What every backend does alike (the checks, giving up
//! on an error, why this cannot deadlock) is `crate::semantics::all_keys`.

use std::sync::Arc;

use futures_util::future::{join_all, select_all};

use super::attempt::LockAttempt;
use super::etcd_locker::{EtcdLocker, Failed, uncontended};
use super::listen::{own_watch_after, own_watch_before};
use super::queue::wait_in_line;
use crate::etcd::client::error::{EtcdError, EtcdResult};
use crate::etcd::client::retry::{Again, Retry};
use crate::etcd::client::watch::{Events, Target, WatchMsg};
use crate::etcd::protocol::keys::LockKeys;
use crate::etcd::protocol::take_all::{self, AllAnswer, Part};
use crate::etcd::session::state::LockerState;
use crate::semantics::all_keys::every_turn;
use crate::semantics::armed::{Armed, pause_or_done, turn_or_done};
use crate::semantics::fairness::Fairness;
use crate::{Context, Key, LockGuard, Result};

/// What the txns of a call name, per key: its keys, owner value and
/// queue key (empty for unfair), copied out of the attempts.
type Named = Vec<(LockKeys, Vec<u8>, Vec<u8>)>;

fn parts(named: &Named) -> Vec<Part<'_>> {
    named
        .iter()
        .map(|(keys, value, queue_key)| Part {
            keys,
            value,
            queue_key,
        })
        .collect()
}

/// A key of a fair call after the enqueue: held, or queued.
enum Turn {
    Held(LockGuard),
    Queued(Armed<LockAttempt>, Vec<u8>),
}

impl EtcdLocker {
    /// `lock_all`: again on a fresh lease if the last lapsed here, and
    /// while attempts fail in ways that may pass (as `lock_in_queue`).
    pub(crate) async fn lock_all_in_queue(
        &self,
        ctx: &Context,
        keys: &[Key],
    ) -> Result<Vec<LockGuard>> {
        let state = self.state();
        let mut retry = Retry::new(&state.config, state.site());
        loop {
            let once = match state.fairness {
                Fairness::Fair => Box::pin(fair_once(state, ctx, keys)).await,
                Fairness::Unfair => Box::pin(unfair_once(state, ctx, keys)).await,
            };
            match once {
                Ok(guards) => return Ok(guards),
                Err(Failed { error, again }) => {
                    pause_or_done(ctx, &keys[0], retry.after(error, again)?).await?;
                }
            }
        }
    }

    /// `try_lock_all`, retried while it fails in ways that may pass.
    pub(crate) async fn try_lock_all_now(&self, keys: &[Key]) -> Result<Option<Vec<LockGuard>>> {
        let state = self.state();
        let mut retry = Retry::new(&state.config, state.site());
        loop {
            match Box::pin(take_once(state, keys)).await {
                Err(e) => tokio::time::sleep(retry.after(e, Again::IfTransient)?).await,
                Ok(Ok(guards)) => return Ok(Some(guards)),
                Ok(Err(_busy_since)) => return Ok(None),
            }
        }
    }
}

/// One attempt of fair `lock_all`: every key's enqueue in one txn, then
/// each key's turn; on failure, nothing left behind.
async fn fair_once(
    state: &Arc<LockerState>,
    ctx: &Context,
    keys: &[Key],
) -> Result<Vec<LockGuard>, Failed> {
    let (mut attempts, queue_keys): (Vec<_>, Vec<_>) =
        keys.iter().map(|k| LockAttempt::queued(state, k)).unzip();
    let named: Named = attempts
        .iter()
        .zip(&queue_keys)
        .map(|(a, q)| (a.keys.clone(), a.value.clone(), q.clone()))
        .collect();
    let mut own = Vec::with_capacity(keys.len());
    for (attempt, queue_key) in attempts.iter().zip(&queue_keys) {
        own.push(own_watch_before(state, &attempt.keys, queue_key).await);
    }
    let enqueue = |lease| take_all::enqueue_all(&parts(&named), lease);
    let write = LockAttempt::write_together(&mut attempts, "enqueue all", enqueue);
    let written = turn_or_done(ctx, &keys[0], write).await;
    let (answer, lease) = match written {
        Ok(written) => written,
        Err(error) => return Err(give_up(state, attempts, error).await),
    };
    let granted = match take_all::read_enqueue_all(&answer, keys.len()) {
        AllAnswer::Each(granted) => granted,
        AllAnswer::InUseAsLine(i) => return Err(give_up(state, attempts, in_use(&keys[i])).await),
        AllAnswer::Busy => {
            let error = EtcdError::Failed {
                op: "enqueue all",
                why: "etcd refused the enqueue, yet no key is in use as a line".into(),
            };
            return Err(give_up(state, attempts, error).await);
        }
    };
    let mut turns = Vec::with_capacity(keys.len());
    for ((attempt, queue_key), held) in attempts.into_iter().zip(queue_keys).zip(granted) {
        turns.push(match held {
            true => Turn::Held(attempt.granted(uncontended(&answer, Arc::clone(&lease)))),
            false => Turn::Queued(attempt, queue_key),
        });
    }
    let within = state.config.request_timeout();
    let waits = turns
        .into_iter()
        .zip(own)
        .zip(keys)
        .map(|((turn, own), key)| {
            let lease = Arc::clone(&lease);
            let my_rev = answer.revision;
            async move {
                let (mut attempt, queue_key) = match turn {
                    Turn::Held(guard) => return Ok(guard),
                    Turn::Queued(attempt, queue_key) => (attempt, queue_key),
                };
                let wait = async {
                    let mine = (&attempt.keys, queue_key.as_slice());
                    let in_line = own_watch_after(state, mine, own, my_rev, lease).await?;
                    wait_in_line(&mut attempt, &queue_key, in_line).await
                };
                match turn_or_done(ctx, key, wait).await {
                    Ok(grant) => Ok(attempt.granted(grant)),
                    Err(error) => {
                        let again = match attempt.lease_presumed_lost() {
                            true => Again::Yes,
                            false => Again::IfTransient,
                        };
                        attempt.abandon(within).await;
                        Err(Failed { error, again })
                    }
                }
            }
        });
    every_turn(ctx, waits.collect()).await
}

/// One attempt of unfair `lock_all`: every key in one txn once all are
/// free, holding none while it waits for a lock key of the call to go.
async fn unfair_once(
    state: &Arc<LockerState>,
    ctx: &Context,
    keys: &[Key],
) -> Result<Vec<LockGuard>, Failed> {
    loop {
        let taken = turn_or_done(ctx, &keys[0], take_once(state, keys)).await;
        let since = match taken {
            Ok(Ok(guards)) => return Ok(guards),
            Ok(Err(since)) => since,
            Err(error) => {
                return Err(Failed {
                    error,
                    again: Again::IfTransient,
                });
            }
        };
        let freed = one_deleted(state, keys, since);
        if let Err(error) = turn_or_done(ctx, &keys[0], freed).await {
            return Err(Failed {
                error,
                again: Again::IfTransient,
            });
        }
    }
}

/// `take all` once: the guards, or the revision at which a key was busy.
async fn take_once(
    state: &Arc<LockerState>,
    keys: &[Key],
) -> EtcdResult<Result<Vec<LockGuard>, i64>> {
    let mut attempts: Vec<_> = keys.iter().map(|k| LockAttempt::direct(state, k)).collect();
    let named: Named = attempts
        .iter()
        .map(|a| (a.keys.clone(), a.value.clone(), Vec::new()))
        .collect();
    let fairness = state.fairness;
    let take = |lease| take_all::take_all(&parts(&named), fairness, lease);
    let (answer, lease) = LockAttempt::write_together(&mut attempts, "take all", take).await?;
    match take_all::read_take_all(&answer, keys.len()) {
        AllAnswer::Each(_) => {
            let grant = |a: Armed<LockAttempt>| a.granted(uncontended(&answer, Arc::clone(&lease)));
            Ok(Ok(attempts.into_iter().map(grant).collect()))
        }
        found => {
            // Nothing was written.
            attempts.into_iter().for_each(Armed::disarm);
            match found {
                AllAnswer::InUseAsLine(i) => Err(in_use(&keys[i])),
                _ => Ok(Err(answer.revision)),
            }
        }
    }
}

/// Returns once a lock key of `keys` changed after revision `since` (or
/// its watch ended: the caller tries again either way).
async fn one_deleted(state: &LockerState, keys: &[Key], since: i64) -> EtcdResult<()> {
    let mut subs = Vec::with_capacity(keys.len());
    for key in keys {
        let target = Target {
            key: state.keys(key).lock,
            range_end: None,
            start_revision: Some(since + 1),
            events: Events::All,
        };
        subs.push(state.hub.subscribe(target).await?);
    }
    let changed = subs
        .iter_mut()
        .map(|sub| Box::pin(async move { while let WatchMsg::Created = sub.recv().await {} }));
    select_all(changed).await;
    Ok(())
}

/// Gives up a call's attempts after `error`, waiting (within the request
/// timeout) for each to take back what it wrote.
async fn give_up(
    state: &LockerState,
    attempts: Vec<Armed<LockAttempt>>,
    error: EtcdError,
) -> Failed {
    let presumed_lost = attempts.iter().any(|a| a.lease_presumed_lost());
    let within = state.config.request_timeout();
    join_all(attempts.into_iter().map(|a| a.abandon(within))).await;
    let again = match presumed_lost {
        true => Again::Yes,
        false => Again::IfTransient,
    };
    Failed { error, again }
}

fn in_use(key: &Key) -> EtcdError {
    EtcdError::Public(crate::semantics::mixed_use::in_use_as_line(key.as_str()))
}
