//! Who leads an election: the read of the lock key and the value key, and
//! the watch that follows the value key's changes in order (see the spec's
//! "Leader election" section in `protocol/mod.rs`).

use crate::etcd::client::error::EtcdResult;
use crate::etcd::client::request::retry_backoff;
use crate::etcd::client::watch::{Events, Target, WatchMsg};
use crate::etcd::lock::etcd_locker::EtcdLocker;
use crate::etcd::protocol::election::{decode, read_leader, read_leader_answer, value_key};
use crate::etcd::protocol::keys::LockKeys;
use crate::etcd::session::state::LockerState;
use crate::{ChangeSender, Error, Key, Leader, LeaderWatch, Result};

/// The leader a value key's value `raw` names, if fairlock wrote it.
fn leader_of(name: &Key, raw: &[u8]) -> Option<Leader> {
    decode(raw)?.leader(name.as_str())
}

/// Who leads election `name` (etcd keys `keys`), and the revision read at.
pub(crate) async fn read(
    state: &LockerState,
    name: &Key,
    keys: &LockKeys,
) -> EtcdResult<(Option<Leader>, i64)> {
    let resp = state.txn("leader", read_leader(keys)).await?;
    let leader = read_leader_answer(&resp).and_then(|kv| leader_of(name, kv.value()));
    Ok((leader, resp.revision))
}

/// Follows election `name` through `locker`'s connection: its leader now,
/// then every change of its value key, in order.
pub(crate) async fn observe(locker: EtcdLocker, name: &Key) -> Result<LeaderWatch> {
    let keys = locker.inner().keys(name);
    let (now, at) = read(locker.inner(), name, &keys).await?;
    let (tx, rx) = LeaderWatch::channel();
    let _ = tx.send(Ok(now.clone()));
    let task = tokio::spawn(follow(locker, name.clone(), keys, (now, at), tx));
    Ok(LeaderWatch::new(rx, Some(task.abort_handle())))
}

/// Sends every change of the value key after revision `at` (where the
/// state `shown` was read) to `tx`, skipping none: one watch, replaying
/// from the last revision seen. A put is a leader (a proclaim, fenced by
/// its term: it led at that revision), a delete that nobody leads. When
/// the watch ends (compacted, connection lost), the state is read again
/// and watched from there. Ends when the receiver is gone, or with an
/// error that retrying cannot cure.
async fn follow(
    locker: EtcdLocker,
    name: Key,
    keys: LockKeys,
    (mut shown, mut at): (Option<Leader>, i64),
    tx: ChangeSender,
) {
    let state = locker.inner();
    let value_key = value_key(&keys);
    let mut backoff = retry_backoff();
    let show = |next: Option<Leader>, shown: &mut Option<Leader>| {
        if next == *shown {
            return true;
        }
        shown.clone_from(&next);
        tx.send(Ok(next)).is_ok()
    };
    loop {
        let target = Target {
            key: value_key.clone(),
            range_end: None,
            start_revision: Some(at + 1),
            events: Events::All,
        };
        if let Ok(mut sub) = state.hub.subscribe(target).await {
            loop {
                match sub.recv().await {
                    WatchMsg::Created => backoff.reset(),
                    WatchMsg::Events { events } => {
                        for e in events.iter().filter(|e| e.key == value_key) {
                            at = at.max(e.mod_revision);
                            let next = e.put.then(|| leader_of(&name, &e.value)).flatten();
                            if !show(next, &mut shown) {
                                return;
                            }
                        }
                    }
                    WatchMsg::Ended(_) => break,
                }
            }
        }
        // Read again, then watch from what was read.
        loop {
            backoff.sleep().await;
            match read(state, &name, &keys).await {
                Ok((now, read_at)) => {
                    if !show(now, &mut shown) {
                        return;
                    }
                    at = read_at;
                    break;
                }
                Err(e) => {
                    let e = Error::from(e);
                    if e.needs_config_fix() {
                        let _ = tx.send(Err(e));
                        return;
                    }
                }
            }
        }
    }
}
