//! One `read_lock`, `write_lock` or `acquire` call (and their `try_`
//! forms): join the line, wait to be told it holds, and leave again,
//! admitting whom that lets in, when it gives up.
//!
//! A waiter learns that it holds from its locker's long-lived watch of its
//! own entries, where the departure that admitted it touches its entry;
//! the touch's revision is its token. A departure that never touches (a
//! holder whose lease ended) is found by the waiter's patience: after a
//! tenth of the TTL (at most a second) it checks its place with one read,
//! tells itself it holds if it does (`protocol/line_txn.rs`, `self_grant`),
//! and otherwise watches what is in its way and checks again when that
//! changes.

use std::sync::Arc;

use super::depart::LineEntry;
use super::in_line::{LineAttempt, wait};
use super::sent::Sent;
use crate::etcd::client::error::EtcdError;
use crate::etcd::client::own_watch::KeyListener;
use crate::etcd::client::retry::{Again, Retry};
use crate::etcd::protocol::line::{LineKeys, owner_value};
use crate::etcd::protocol::line_txn::{holds_at_join, join, read_conflict, try_join, try_refused};
use crate::etcd::session::handout::LeaseEnd;
use crate::etcd::session::state::LockerState;
use crate::semantics::admission::Share;
use crate::semantics::armed::{Armed, pause_or_done, turn_or_done};
use crate::{Context, Key, LockGuard, Result};

/// Waits until `key` is held as `share` (see `crate::semantics::admission`), retrying
/// attempts that fail in ways that may pass, as `lock` does.
pub(crate) async fn acquire(
    state: &Arc<LockerState>,
    ctx: &Context,
    key: &Key,
    share: Share,
) -> Result<LockGuard> {
    let mut retry = Retry::new(&state.config, state.site());
    loop {
        let (error, again) = match Box::pin(join_line(state, key, share, Mode::Wait)).await {
            Ok(Joined::Holds(guard)) => return Ok(guard),
            Ok(Joined::Waits(waiting, own)) => {
                match Box::pin(wait_in_line(ctx, waiting, own)).await {
                    Ok(guard) => return Ok(guard),
                    Err(failed) => failed,
                }
            }
            Ok(Joined::Busy) => (busy_while_waiting(), Again::IfTransient),
            Err(failed) => failed,
        };
        pause_or_done(ctx, key, retry.after(error, again)?).await?;
    }
}

/// Takes `key` as `share` if that needs no wait.
pub(crate) async fn try_acquire(
    state: &Arc<LockerState>,
    key: &Key,
    share: Share,
) -> Result<Option<LockGuard>> {
    let mut retry = Retry::new(&state.config, state.site());
    loop {
        match Box::pin(join_line(state, key, share, Mode::Try)).await {
            Ok(Joined::Holds(guard)) => return Ok(Some(guard)),
            Ok(Joined::Busy) => return Ok(None),
            Ok(Joined::Waits(waiting, _)) => {
                // A permit that would wait leaves at once.
                waiting.abandon(state.config.request_timeout()).await;
                return Ok(None);
            }
            Err((error, again)) => tokio::time::sleep(retry.after(error, again)?).await,
        }
    }
}

/// A join that may wait is never answered "busy"; should etcd answer so
/// anyway, the attempt is tried again.
fn busy_while_waiting() -> EtcdError {
    EtcdError::Failed {
        op: "join",
        why: "etcd answered a join that may wait as busy".into(),
    }
}

/// Whether a join may wait.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Wait,
    Try,
}

/// An attempt's failure, cleaned up, and whether to try again.
type Failed = (EtcdError, Again);

/// How joining the line went.
enum Joined {
    /// It holds at once.
    Holds(LockGuard),
    /// It waits in line; with its locker's watch of its own entries when
    /// that was open before the join (no touch can have been missed).
    Waits(Armed<LineAttempt>, Option<KeyListener>),
    /// It would have to wait and may not (`Mode::Try`).
    Busy,
}

/// Joins `key`'s line as `share` (see `protocol/line_txn.rs`).
async fn join_line(
    state: &Arc<LockerState>,
    key: &Key,
    share: Share,
    mode: Mode,
) -> std::result::Result<Joined, Failed> {
    let keys = LineKeys::new(state.config.prefix(), key);
    let lease = state
        .session
        .lease()
        .await
        .map_err(|e| (e, Again::IfTransient))?;
    let slot = state.slots.take(&keys.kind(share).0);
    let entries = keys.entries(share, &state.id, slot.number());
    let entry = entries[0].clone();
    let value = owner_value(share);
    let (own_start, own_end) = keys.own(share, &state.id);
    let open_own = state
        .watches
        .existing(&own_start, Some(&own_end), &entry)
        .await;
    let txn = match mode {
        Mode::Wait => join(&keys, share, &entries, (&value, lease.id)),
        Mode::Try => try_join(&keys, share, &entries, (&value, lease.id)),
    };
    let sent = Sent::new(state, (&keys, share, &entry), &lease, txn);
    let resp = match sent.await {
        Ok(resp) => resp,
        Err(e) => {
            if e.is_transient() {
                // It may still land: stop renewing its lease, so that the
                // entry expires within the TTL (the slot is retired).
                state.session.forget(lease.id, LeaseEnd::Distrusted).await;
            } else {
                slot.free();
            }
            let e = state.lease_error(key, &lease, e).await;
            return Err((e, Again::IfTransient));
        }
    };
    if !resp.succeeded() {
        slot.free();
        let refused = match mode {
            Mode::Wait => read_conflict(&keys, share, &resp),
            Mode::Try => try_refused(&keys, share, &resp),
        };
        return match refused {
            Some(present) => Err((refusal(key, share, present), Again::IfTransient)),
            None => Ok(Joined::Busy),
        };
    }
    let waiting = Armed::new(LineAttempt {
        line: Arc::new(LineEntry {
            state: Arc::clone(state),
            key: key.clone(),
            keys,
            share,
            entry,
            created: resp.revision,
            lease,
        }),
        slot: Some(slot),
    });
    if holds_at_join(share, &resp) {
        return Ok(Joined::Holds(waiting.granted(resp.revision)));
    }
    let own = match open_own {
        Some(listener) => {
            state.watches.touch(&own_start, Some(&own_end)).await;
            Some(listener)
        }
        None => None,
    };
    Ok(Joined::Waits(waiting, own))
}

/// Waits in line until told it holds, or the context ends; a waiter that
/// gives up leaves the line before it returns (or, if etcd does not
/// answer in time, in the background).
async fn wait_in_line(
    ctx: &Context,
    waiting: Armed<LineAttempt>,
    own: Option<KeyListener>,
) -> std::result::Result<LockGuard, Failed> {
    crate::util::observe::queued(None);
    let key = waiting.line.key.clone();
    match turn_or_done(ctx, &key, wait(&waiting.line, own)).await {
        Ok(token) => Ok(waiting.granted(token)),
        Err(e) => {
            let again = if waiting.line.lease.lost.is_cancelled() {
                Again::Yes
            } else {
                Again::IfTransient
            };
            let within = waiting.line.state.config.request_timeout();
            waiting.abandon(within).await;
            Err((e, again))
        }
    }
}

/// The error for a key in use as something else than `want`: `present`
/// (a write stands for the mutex of the same name when nothing in the
/// line conflicts).
fn refusal(key: &Key, want: Share, present: Share) -> EtcdError {
    let error = crate::semantics::admission::conflict(key, want, present)
        .unwrap_or_else(|| crate::semantics::mixed_use::in_use_as_mutex(key.as_str(), want));
    EtcdError::Public(error)
}
