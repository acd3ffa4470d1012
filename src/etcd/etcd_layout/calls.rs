//! `lock` and `try_lock` in etcd's layout, retried while etcd fails in
//! ways that may pass.

use std::sync::Arc;

use super::contender::Contender;
use super::wait;
use crate::etcd::client::error::{ENTRY_GONE, EtcdError, EtcdResult};
use crate::etcd::client::retry::{Again, Retry};
use crate::etcd::protocol::keys::owner_value;
use crate::etcd::session::state::LockerState;
use crate::semantics::armed::{Armed, pause_or_done, turn_or_done};
use crate::{Context, Key, LockGuard, Result};

/// `lock`: queue behind every contender on the name and wait until none
/// created before ours is left; again on a fresh lease if the last one
/// lapsed here, and while attempts fail in ways that may pass.
pub(crate) async fn lock(state: &Arc<LockerState>, ctx: &Context, key: &Key) -> Result<LockGuard> {
    lock_with(state, ctx, key, None).await
}

/// [`lock`] with our key's value: fairlock's owner value (a fresh one per
/// attempt) when `None`, else `value` (a campaign's proposal).
pub(crate) async fn lock_with(
    state: &Arc<LockerState>,
    ctx: &Context,
    key: &Key,
    value: Option<&[u8]>,
) -> Result<LockGuard> {
    let mut retry = Retry::new(&state.config, state.site());
    loop {
        let value = value.map_or_else(|| owner_value(state.fairness), <[u8]>::to_vec);
        match Box::pin(lock_once(state, ctx, key, &value)).await {
            Ok(guard) => return Ok(guard),
            Err((error, again)) => pause_or_done(ctx, key, retry.after(error, again)?).await?,
        }
    }
}

/// One attempt of `lock`: on failure, what it wrote is removed before the
/// error returns (within the request timeout; the cleanup goes on after).
async fn lock_once(
    state: &Arc<LockerState>,
    ctx: &Context,
    key: &Key,
    value: &[u8],
) -> Result<LockGuard, (EtcdError, Again)> {
    // The lease may take a while (a fresh one waits for a confirmed
    // renewal): the caller's context bounds it too.
    let mut c = turn_or_done(ctx, key, Contender::new(state, key))
        .await
        .map_err(|e| (e, Again::IfTransient))?;
    match turn_or_done(ctx, key, queue_and_wait(&mut c, value)).await {
        Ok(rev) => Ok(c.granted(rev)),
        Err(error) => {
            // A waiter whose lease lapsed here held nothing: it queues
            // again on a fresh lease.
            let again = match c.lease_presumed_lost() {
                true => Again::Yes,
                false => Again::IfTransient,
            };
            c.abandon(state.config.request_timeout()).await;
            Err((error, again))
        }
    }
}

/// Enqueues and waits: our key's create revision once it is first.
async fn queue_and_wait(c: &mut Armed<Contender>, value: &[u8]) -> EtcdResult<i64> {
    let (rev, ahead) = c.enqueue(value).await?;
    if ahead != Some(0) {
        wait::until_first(c, rev).await?;
    }
    // Never report a lock held on a lease known or presumed gone (etcd
    // issue 11456): this process may have been paused past its TTL.
    if c.lease.lost.is_cancelled() || c.lease.expiry.has_passed() {
        return Err(EtcdError::session_lost(&c.key, ENTRY_GONE));
    }
    Ok(rev)
}

/// `try_lock`: takes the name if nobody contends, retried while attempts
/// fail in ways that may pass.
pub(crate) async fn try_lock(state: &Arc<LockerState>, key: &Key) -> Result<Option<LockGuard>> {
    let mut retry = Retry::new(&state.config, state.site());
    loop {
        match Box::pin(try_once(state, key)).await {
            Ok(outcome) => return Ok(outcome),
            Err(e) => tokio::time::sleep(retry.after(e, Again::IfTransient)?).await,
        }
    }
}

/// One attempt of `try_lock`; a failed one is cleaned up when dropped.
async fn try_once(state: &Arc<LockerState>, key: &Key) -> EtcdResult<Option<LockGuard>> {
    let mut c = Contender::new(state, key).await?;
    match c.try_take().await {
        Ok(Some(rev)) => Ok(Some(c.granted(rev))),
        Ok(None) => {
            c.wrote_nothing();
            Ok(None)
        }
        Err(e) if !e.is_transient() => {
            c.wrote_nothing();
            Err(e)
        }
        Err(e) => Err(e),
    }
}
