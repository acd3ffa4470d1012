//! Elections in etcd's layout, those of Go's `concurrency.Election`,
//! `etcdctl elect` and etcd's election service: a candidate is a
//! contender whose key holds its proposal; the first contender leads, and
//! its proclaims rewrite its key, fenced by the key's create revision.
//! Followers follow the first key under the name, and see an empty seat
//! too, which Go's `Observe` never reports (etcd issue 18163).

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use etcd_client::KeyValue;

use super::calls;
use super::held::HeldContender;
use crate::election::leadership::{Leadership, Office};
use crate::etcd::client::error::EtcdResult;
use crate::etcd::client::request::retry_backoff;
use crate::etcd::client::watch::{Events, Target, WatchMsg};
use crate::etcd::protocol::etcd_layout::{self, NameKeys};
use crate::etcd::session::handout::Lease;
use crate::etcd::session::state::LockerState;
use crate::{
    ChangeSender, Context, Error, Key, Leader, LeaderRecord, LeaderWatch, LeaseId, Owner, Result,
};

/// Campaigns for `name` with `value` on `state`'s fair locker: a lock in
/// etcd's layout whose key holds the proposal.
pub(crate) async fn campaign(
    state: &Arc<LockerState>,
    (ctx, name, value): (&Context, &Key, &[u8]),
    office: Office,
) -> Result<Leadership> {
    let lock = calls::lock_with(state, ctx, name, Some(value));
    Leadership::campaign((ctx, name, value), lock, office, |guard, _owner| {
        let Some(held) = guard
            .backend()
            .and_then(|b| b.downcast_ref::<HeldContender>())
        else {
            return Err(Error::Unsupported(
                "an election in etcd's layout needs a guard of that layout".into(),
            ));
        };
        Ok(Box::new(ContenderRecord {
            name: name.clone(),
            state: Arc::clone(&held.state),
            own: held.own.clone(),
            rev: held.rev,
            lease: Arc::clone(&held.lease),
            written: Mutex::new(Some(value.to_vec())),
        }))
    })
    .await
}

/// A leader's value in etcd's layout: its own key's.
struct ContenderRecord {
    name: Key,
    state: Arc<LockerState>,
    own: Vec<u8>,
    rev: i64,
    lease: Arc<Lease>,
    /// What the campaign wrote to the key, until the first proclaim: a
    /// proclaim of that same value writes nothing (a second put would show
    /// Go's observers the same leader twice).
    written: Mutex<Option<Vec<u8>>>,
}

#[async_trait]
impl LeaderRecord for ContenderRecord {
    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        let first = self
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if first.as_deref() == Some(value) {
            return Ok(());
        }
        let txn = etcd_layout::proclaim(&self.own, self.rev, value, self.lease.id);
        if self.state.txn("proclaim", txn).await?.succeeded() {
            return Ok(());
        }
        Err(Error::LockLost {
            key: self.name.to_string(),
            reason: "its key was gone: the session lease ended or someone deleted it; \
                     nothing was written"
                .into(),
        })
    }

    /// The value is the key, which goes with the release: nothing to do.
    async fn retract(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// The leader a contender key `kv` of `names` shows: its value, its term
/// (create revision) and its lease.
fn leader_of(name: &Key, names: &NameKeys, key: &[u8], value: &[u8], created: i64) -> Leader {
    let owner = match names.lease_of(key) {
        Some(lease) => Owner::parse(&format!("lease={}", LeaseId(lease))),
        None => Owner::parse(&String::from_utf8_lossy(key)),
    };
    Leader {
        name: name.to_string(),
        value: value.to_vec(),
        fencing_token: u64::try_from(created).unwrap_or_default(),
        owner,
        since: None,
    }
}

/// The seat: the first contender's key and the leader it shows.
type Seat = Option<(Vec<u8>, Leader)>;

/// Who leads `name` (at revision `at`, or the latest), and the revision
/// read at.
async fn read_seat(
    state: &LockerState,
    name: &Key,
    names: &NameKeys,
    at: Option<i64>,
) -> EtcdResult<(Seat, i64)> {
    let opts = etcd_layout::first(names, at);
    let resp = state.get("leader", names.dir.clone(), opts).await?;
    let read_at = resp.header().map_or(0, |h| h.revision());
    let seat = resp.kvs().first().map(|kv: &KeyValue| {
        let leader = leader_of(name, names, kv.key(), kv.value(), kv.create_revision());
        (kv.key().to_vec(), leader)
    });
    Ok((seat, read_at))
}

/// Who leads `name` now.
pub(crate) async fn leader(state: &LockerState, name: &Key) -> Result<Option<Leader>> {
    let names = NameKeys::new(state.config.prefix(), name.as_str());
    Ok(read_seat(state, name, &names, None).await?.0.map(|s| s.1))
}

/// Follows `name`: its leader now, then every change, an empty seat
/// included.
pub(crate) async fn observe(state: Arc<LockerState>, name: &Key) -> Result<LeaderWatch> {
    let names = NameKeys::new(state.config.prefix(), name.as_str());
    let (seat, at) = read_seat(&state, name, &names, None).await?;
    let (tx, rx) = LeaderWatch::channel();
    let _ = tx.send(Ok(seat.as_ref().map(|s| s.1.clone())));
    let task = tokio::spawn(follow(state, (name.clone(), names), (seat, at), tx));
    Ok(LeaderWatch::new(rx, Some(task.abort_handle())))
}

/// Sends every change of the seat after revision `at` to `tx`: a put on
/// the seat's key is a proclaim; its deletion seats the next contender as
/// of that revision, or nobody; with the seat empty, the next key created
/// leads. One watch on the name; when it ends (compacted, connection
/// lost), the seat is read again and watched from there.
async fn follow(
    state: Arc<LockerState>,
    (name, names): (Key, NameKeys),
    (mut seat, mut at): (Seat, i64),
    tx: ChangeSender,
) {
    let mut backoff = retry_backoff();
    let mut shown = seat.as_ref().map(|s| s.1.clone());
    let mut show = |seat: &Seat| {
        let next = seat.as_ref().map(|s| s.1.clone());
        if next == shown {
            return true;
        }
        shown.clone_from(&next);
        tx.send(Ok(next)).is_ok()
    };
    loop {
        let target = Target {
            key: names.dir.clone(),
            range_end: Some(names.end()),
            start_revision: Some(at + 1),
            events: Events::All,
        };
        if let Ok(mut sub) = state.hub.subscribe(target).await {
            'watch: loop {
                let events = match sub.recv().await {
                    WatchMsg::Created => {
                        backoff.reset();
                        continue;
                    }
                    WatchMsg::Events { events } => events,
                    WatchMsg::Ended(_) => break,
                };
                for e in events.iter() {
                    at = at.max(e.mod_revision);
                    let on_seat = seat.as_ref().is_some_and(|s| s.0 == e.key);
                    seat = match (on_seat, e.put, seat.is_some()) {
                        // A proclaim, or the first key created after an
                        // empty seat.
                        (true, true, _) | (false, true, false) => {
                            let leader =
                                leader_of(&name, &names, &e.key, &e.value, e.create_revision);
                            Some((e.key.clone(), leader))
                        }
                        // The leader went: the next, as of that revision.
                        (true, false, _) => {
                            match read_seat(&state, &name, &names, Some(e.mod_revision)).await {
                                Ok((next, _)) => next,
                                Err(_) => break 'watch,
                            }
                        }
                        _ => continue,
                    };
                    if !show(&seat) {
                        return;
                    }
                }
            }
        }
        // Read again, then watch from what was read.
        loop {
            backoff.sleep().await;
            match read_seat(&state, &name, &names, None).await {
                Ok((now, read_at)) => {
                    seat = now;
                    if !show(&seat) {
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
