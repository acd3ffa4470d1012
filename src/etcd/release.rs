//! Unlock: hand the lock key to the first waiter, or delete it when nobody
//! waits, in one txn guarded by the holder's fencing token.
//!
//! ```text
//! if lock.mod_revision == token            (still ours: never touch a newer holder's key)
//!   if successor known:  if successor.create_revision == known
//!                          then delete my queue key;
//!                               fair successor:   put lock = successor (its lease)
//!                               unfair successor: delete lock (anyone may take it)
//!                               touch successor's queue key (its grant / wake signal)
//!                          else read the queue head again
//!   else:                if no queue key is newer than mine
//!                          then delete my queue key; delete lock
//!                          else read the queue head again
//! else delete my queue key; report the lock lost
//! ```
//!
//! A holder learns its successor without a read on the handoff path: a
//! lookup reads up to [`LOOKAHEAD`] waiters at once, and a fair grant
//! passes the ones behind its grantee along in the touch (as extra lines of
//! the grantee's queue key value), so only about one holder in
//! `LOOKAHEAD - 1` reads the queue. A passed list can only have lost
//! entries (newcomers queue behind it); the successor compare catches that.
use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse,
};
use tokio::task::{AbortHandle, JoinHandle};
use tokio_util::sync::CancellationToken;

use super::keys::{Layout, is_waiter};
use super::locker::{Attempt, Inner, put_leased, range_at};
use super::session::{FIRST_BACKOFF, Lease};
use super::slots::Slot;
use super::watch::{Target, WatchMsg};
use crate::{Error, GuardRelease, Key, Result, observe};

/// How often one release attempt re-reads when the queue changes under it.
const MAX_ROUNDS: usize = 16;

/// How many waiters one lookup reads (the successor and the ones a grant
/// passes along to it).
pub(crate) const LOOKAHEAD: usize = 4;

/// A waiter behind the holder, as last read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Successor {
    key: Vec<u8>,
    create_revision: i64,
    lease: i64,
    value: Vec<u8>,
}

/// What a new holder knows of the waiters behind it.
pub(crate) enum Next {
    /// Nobody waited when it got the lock: look only at release.
    Nobody,
    /// Others waited: look them up now, while the holder works.
    LookUp,
    /// Its grant passed them along, first in line first.
    Known(Vec<Successor>),
}

/// The waiters behind a held lock, as far as known.
enum Ahead {
    Unknown,
    Pending(JoinHandle<Vec<Successor>>),
    Known(Vec<Successor>),
}

/// A held etcd lock: what a guard releases.
pub(crate) struct Held {
    pub(crate) inner: Arc<Inner>,
    key: Key,
    pub(crate) layout: Layout,
    pub(crate) token: i64,
    /// Our queue key and its create revision (fair `lock` only).
    queue: Option<(Vec<u8>, i64)>,
    /// Keeps the session alive as long as the guard; its loss ends retries.
    lease: Arc<Lease>,
    /// The waiters behind us: passed with the grant, or read at grant
    /// when others were waiting.
    next: Ahead,
    /// The watch on the lock key, once the owner asked for loss signals.
    watcher: std::sync::Mutex<Option<AbortHandle>>,
    /// The slot naming our queue key, freed once the release deleted it.
    slot: Option<Slot>,
}

impl Held {
    pub fn new(
        attempt: &Attempt,
        token: i64,
        queue_rev: Option<i64>,
        lease: Arc<Lease>,
        next: Next,
        slot: Option<Slot>,
    ) -> Self {
        let queue = attempt.queue_key.clone().zip(queue_rev);
        Held::from_parts(
            Arc::clone(&attempt.inner),
            attempt.key.clone(),
            attempt.layout.clone(),
            token,
            queue,
            lease,
            next,
            slot,
        )
    }

    /// A held lock; with [`Next::LookUp`] the successors are looked up now,
    /// while the caller works, so the release needs no read.
    #[allow(clippy::too_many_arguments)]
    pub fn from_parts(
        inner: Arc<Inner>,
        key: Key,
        layout: Layout,
        token: i64,
        queue: Option<(Vec<u8>, i64)>,
        lease: Arc<Lease>,
        next: Next,
        slot: Option<Slot>,
    ) -> Self {
        let after = queue.as_ref().map_or(0, |q| q.1);
        let next = match next {
            Next::Nobody => Ahead::Unknown,
            Next::Known(list) if !list.is_empty() => Ahead::Known(list),
            Next::LookUp | Next::Known(_) => {
                let (inner, queue_prefix) = (Arc::clone(&inner), layout.queue.clone());
                Ahead::Pending(tokio::spawn(async move {
                    lookup(&inner, &queue_prefix, after).await
                }))
            }
        };
        Held {
            inner,
            key,
            layout,
            token,
            queue,
            lease,
            next,
            watcher: std::sync::Mutex::new(None),
            slot,
        }
    }

    /// Stops the lock-key watch: our own release changes that key.
    fn stop_watching(&self) {
        let watcher = self.watcher.lock().map(|mut w| w.take());
        if let Ok(Some(watcher)) = watcher {
            watcher.abort();
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Ahead::Pending(next) = &self.next {
            next.abort();
        }
        self.stop_watching();
    }
}

#[async_trait]
impl GuardRelease for Held {
    async fn release(self: Box<Self>) -> Result<()> {
        self.stop_watching();
        release(*self).await
    }

    fn watch_for_loss(&self, lost: CancellationToken) {
        // Outside a runtime only the lease deadline and session signal loss.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let task = rt.spawn(watch_lock_key(
            Arc::clone(&self.inner),
            self.layout.lock.clone(),
            self.token,
            lost,
        ));
        if let Ok(mut watcher) = self.watcher.lock() {
            *watcher = Some(task.abort_handle());
        }
    }
}

/// Cancels `lost` when the lock key changes after our grant at `token`:
/// deleted (lease expired, someone deleted it) or overwritten. Only our own
/// release may change it while we hold it, and that stops this watch first.
async fn watch_lock_key(inner: Arc<Inner>, lock: Vec<u8>, token: i64, lost: CancellationToken) {
    let mut backoff = FIRST_BACKOFF;
    // Replays every change since the grant: none can slip by.
    let mut from = token + 1;
    while !lost.is_cancelled() {
        let target = Target {
            key: lock.clone(),
            range_end: None,
            start_revision: Some(from),
        };
        if let Ok(mut sub) = inner.hub.subscribe(target).await {
            loop {
                match sub.recv().await {
                    WatchMsg::Events { events } if events.iter().any(|e| e.key == lock) => {
                        observe::loss_cause(
                            "etcd",
                            format_args!("token {token}"),
                            "lock key changed",
                        );
                        lost.cancel();
                        return;
                    }
                    WatchMsg::Ended(_) => break,
                    _ => {}
                }
            }
        }
        // Compacted past our grant, or etcd unreachable (the lease deadline
        // covers that): read the key itself before watching again.
        if let Ok(resp) = inner
            .get("lock key check", lock.clone(), Default::default())
            .await
        {
            if resp.kvs().first().map(|kv| kv.mod_revision()) != Some(token) {
                observe::loss_cause("etcd", format_args!("token {token}"), "lock key changed");
                lost.cancel();
                return;
            }
            if let Some(header) = resp.header() {
                from = header.revision() + 1;
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(super::session::MAX_BACKOFF);
    }
}

/// The waiters among the first [`LOOKAHEAD`] queue entries after revision
/// `after` (serializable: a stale answer is caught by the release txn's
/// compares).
async fn lookup(inner: &Inner, queue_prefix: &[u8], after: i64) -> Vec<Successor> {
    let opts = successor_query()
        .with_min_create_revision(after + 1)
        .with_serializable();
    match inner
        .get("successor lookup", queue_prefix.to_vec(), opts)
        .await
    {
        Ok(resp) => successors(queue_prefix, &resp).0,
        Err(_) => Vec::new(),
    }
}

fn successor_query() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(LOOKAHEAD as i64)
}

/// The waiters in a queue read, in order, and the create revision of the
/// last entry read, waiter or not (see `keys::is_waiter`: entries someone
/// else wrote are skipped, never served).
fn successors(queue_prefix: &[u8], resp: &GetResponse) -> (Vec<Successor>, Option<i64>) {
    let waiters = resp
        .kvs()
        .iter()
        .filter(|kv| is_waiter(queue_prefix, kv.key(), kv.lease()))
        .map(|kv| Successor {
            key: kv.key().to_vec(),
            create_revision: kv.create_revision(),
            lease: kv.lease(),
            value: kv.value().to_vec(),
        })
        .collect();
    let last = resp.kvs().last().map(|kv| kv.create_revision());
    (waiters, last)
}

/// The touch that grants the lock to fair successor `s`: its value gains
/// the waiters behind it (`rest`, see [`grant_value`]) so that it needs no
/// lookup.
fn grant_touch(layout: &Layout, s: &Successor, rest: &[Successor]) -> TxnOp {
    match grant_value(layout, s, rest) {
        Some(value) => TxnOp::put(
            s.key.clone(),
            value,
            Some(PutOptions::new().with_ignore_lease()),
        ),
        None => touch(&s.key),
    }
}

/// `s`'s value plus one line per waiter in `rest`:
/// `<create revision> <lease> <key after the queue prefix> <value>`.
/// `None` if there is nothing to pass or an entry would not parse back.
fn grant_value(layout: &Layout, s: &Successor, rest: &[Successor]) -> Option<Vec<u8>> {
    if rest.is_empty() || s.value.contains(&b'\n') {
        return None;
    }
    let mut value = s.value.clone();
    for w in rest {
        let suffix = w.key.strip_prefix(layout.queue.as_slice())?;
        if suffix.is_empty()
            || suffix.iter().any(|b| matches!(b, b' ' | b'\n'))
            || w.value.contains(&b'\n')
        {
            return None;
        }
        value.extend_from_slice(format!("\n{} {} ", w.create_revision, w.lease).as_bytes());
        value.extend_from_slice(suffix);
        value.push(b' ');
        value.extend_from_slice(&w.value);
    }
    Some(value)
}

/// The waiters a grant passed along in the grantee's queue key value
/// `value`, whose first line must be the grantee's own `owner` value.
/// Empty if there are none or they do not parse (the holder then looks).
pub(crate) fn passed_along(layout: &Layout, owner: &[u8], value: &[u8]) -> Vec<Successor> {
    let mut lines = value.split(|&b| b == b'\n');
    if lines.next() != Some(owner) {
        return Vec::new();
    }
    let mut list = Vec::new();
    for line in lines {
        let mut fields = line.splitn(4, |&b| b == b' ');
        let num = |f: Option<&[u8]>| std::str::from_utf8(f?).ok()?.parse::<i64>().ok();
        let (Some(create_revision), Some(lease), Some(suffix), Some(value)) = (
            num(fields.next()),
            num(fields.next()),
            fields.next(),
            fields.next(),
        ) else {
            return Vec::new();
        };
        let mut key = layout.queue.clone();
        key.extend_from_slice(suffix);
        list.push(Successor {
            key,
            create_revision,
            lease,
            value: value.to_vec(),
        });
    }
    list
}

/// Releases `held`, handing the lock to the first waiter if there is one.
///
/// Durable: a failed request is retried with backoff until the release is
/// done, the lock turns out lost, or the session lease is lost (its keys then
/// expire with it). A transient etcd error must not leave the key blocked
/// for as long as the locker keeps its lease alive.
pub(crate) async fn release(mut held: Held) -> Result<()> {
    let after = held.queue.as_ref().map_or(0, |q| q.1);
    let mut next = match std::mem::replace(&mut held.next, Ahead::Unknown) {
        // Others were waiting when we got the lock. If none had queued yet
        // when we looked, look again: a read is cheaper than the wasted
        // write of a release txn whose "nobody waits" compare fails.
        Ahead::Pending(early) => match early.await.unwrap_or_default() {
            none if none.is_empty() => lookup(&held.inner, &held.layout.queue, after).await,
            found => found,
        },
        Ahead::Known(list) => list,
        Ahead::Unknown => Vec::new(),
    };
    let mut backoff = FIRST_BACKOFF;
    // Set once an attempt ended without an answer: it may still be applied.
    let mut uncertain = false;
    // Entries up to this create revision are ours or not waiters.
    let mut skip = after;
    loop {
        let outcome = release_once(&held, &mut next, &mut skip).await;
        if !uncertain && matches!(outcome, Ok(()) | Err(Error::LockLost { .. })) {
            // Both branches of the release txn deleted our queue key, and no
            // earlier attempt can still write: its name may be reused.
            // Otherwise the slot is retired when `held` drops.
            if let Some(slot) = held.slot.take() {
                slot.free();
            }
        }
        match outcome {
            Ok(()) => return Ok(()),
            // Our lease is alive, so the key cannot have expired: the token
            // compare failed because an earlier, unanswered attempt of this
            // very release was applied.
            Err(Error::LockLost { .. }) if uncertain && !held.lease.lost.is_cancelled() => {
                return Ok(());
            }
            Err(e @ Error::LockLost { .. }) => return Err(e),
            Err(_) if held.lease.lost.is_cancelled() => {
                return Err(Error::LockLost {
                    key: held.key.to_string(),
                    reason: "the session lease was lost before the release could reach etcd; \
                             the lock expires with it"
                        .into(),
                });
            }
            Err(_) => {
                uncertain = true;
                held.lease.pause(&mut backoff).await;
            }
        }
    }
}

/// One release attempt: up to [`MAX_ROUNDS`] txns while the queue changes.
/// `skip`: the queue entries up to this create revision are ours or not
/// waiters; it moves past entries a re-read finds that are not waiters, so
/// that they cannot keep the "nobody waits" compare failing.
async fn release_once(held: &Held, next: &mut Vec<Successor>, skip: &mut i64) -> Result<()> {
    let Held {
        inner,
        key,
        layout,
        token,
        queue,
        ..
    } = held;
    let delete_mine: Vec<TxnOp> = queue
        .iter()
        .map(|(q, _)| TxnOp::delete(q.clone(), None))
        .collect();
    for _ in 0..MAX_ROUNDS {
        let after = *skip;
        let reread = TxnOp::get(
            layout.queue.clone(),
            Some(successor_query().with_min_create_revision(after + 1)),
        );
        let mut then = delete_mine.clone();
        // Whom the step hands the lock to: a fair waiter or an unfair one.
        let handoff = next.first().map(|s| !is_unfair_waiter(&s.key));
        let step = match next.split_first() {
            Some((s, rest)) => {
                if is_unfair_waiter(&s.key) {
                    then.push(TxnOp::delete(layout.lock.clone(), None));
                    then.push(touch(&s.key));
                } else {
                    then.push(put_leased(&layout.lock, &s.value, s.lease));
                    then.push(grant_touch(layout, s, rest));
                }
                Txn::new().when([Compare::create_revision(
                    s.key.clone(),
                    CompareOp::Equal,
                    s.create_revision,
                )])
            }
            None => {
                then.push(TxnOp::delete(layout.lock.clone(), None));
                Txn::new().when([Compare::create_revision(
                    layout.queue.clone(),
                    CompareOp::Less,
                    after + 1,
                )
                .with_prefix()])
            }
        };
        let step = step.and_then(then).or_else([reread]);
        let txn = Txn::new()
            .when([Compare::mod_revision(
                layout.lock.clone(),
                CompareOp::Equal,
                *token,
            )])
            .and_then([TxnOp::txn(step)])
            .or_else(delete_mine.clone());
        // Others wait for this txn: one stuck on a leader that stopped
        // answering is retried after a third of the TTL rather than after
        // the full request timeout (the token compare makes retries safe).
        let attempt_timeout = inner.config.request_timeout().min(inner.config.ttl() / 3);
        let resp = inner.txn_within("unlock", txn, attempt_timeout).await?;
        if !resp.succeeded() {
            return Err(Error::LockLost {
                key: key.to_string(),
                reason: "the lock key was deleted or taken over before unlock \
                         (did the session lease expire?)"
                    .into(),
            });
        }
        let Some(TxnOpResponse::Txn(step)) = resp.op_responses().into_iter().next() else {
            return Err(unexpected());
        };
        if step.succeeded() {
            if let Some(fair) = handoff {
                observe::handed_off(fair);
            }
            return Ok(());
        }
        let (waiters, last) = range_at(&step, 0)
            .map(|g| successors(&layout.queue, &g))
            .unwrap_or_default();
        if waiters.is_empty()
            && let Some(last) = last
        {
            *skip = last; // only entries that are not waiters
        }
        *next = waiters;
    }
    Err(Error::Backend {
        backend: "etcd",
        op: "unlock",
        source: format!("the queue changed during {MAX_ROUNDS} release attempts in a row").into(),
    })
}

/// Serves the first waiter of a lock key that is free, as a release would
/// (fair: hands it the key; unfair: wakes it). Called when a waiter gives
/// up: it may have been the one that a lock freed without a handoff was
/// waiting for (a woken unfair waiter; or the first in line when the
/// holder's lease ended), and those behind it would otherwise notice only
/// once patient (see `queue.rs`). One read; a write only if the key is free
/// and someone waits. Best effort: errors are ignored for that reason.
pub(crate) async fn serve_if_free(inner: &Inner, layout: &Layout) {
    let read = Txn::new().and_then([
        TxnOp::get(
            layout.lock.clone(),
            Some(GetOptions::new().with_count_only()),
        ),
        TxnOp::get(layout.queue.clone(), Some(successor_query())),
    ]);
    let Ok(resp) = inner.txn("serve a free lock", read).await else {
        return;
    };
    if range_at(&resp, 0).is_none_or(|g| g.count() > 0) {
        return;
    }
    let Some(first) =
        range_at(&resp, 1).and_then(|g| successors(&layout.queue, &g).0.into_iter().next())
    else {
        return;
    };
    let mut then = vec![touch(&first.key)];
    if !is_unfair_waiter(&first.key) {
        then.push(put_leased(&layout.lock, &first.value, first.lease));
    }
    let serve = Txn::new()
        .when([
            Compare::create_revision(layout.lock.clone(), CompareOp::Equal, 0),
            Compare::create_revision(first.key.clone(), CompareOp::Equal, first.create_revision),
        ])
        .and_then(then);
    let _ = inner.txn("serve a free lock", serve).await;
}

/// Marks a waiter's queue key modified (its value and lease unchanged): the
/// grant or wake signal its locker watches for.
fn touch(queue_key: &[u8]) -> TxnOp {
    TxnOp::put(
        queue_key.to_vec(),
        Vec::new(),
        Some(PutOptions::new().with_ignore_value().with_ignore_lease()),
    )
}

/// Unfair waiters' queue keys end in `u<attempt>` (see `keys.rs`).
fn is_unfair_waiter(queue_key: &[u8]) -> bool {
    queue_key
        .rsplit(|&b| b == b'/')
        .next()
        .and_then(|s| s.first())
        == Some(&b'u')
}

fn unexpected() -> Error {
    Error::Backend {
        backend: "etcd",
        op: "unlock",
        source: "etcd answered the release txn in an unexpected shape".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(layout: &Layout, attempt: &str, rev: i64) -> Successor {
        Successor {
            key: layout.waiter(
                "0123456789abcdef0123456789abcdef",
                true,
                u32::try_from(rev).unwrap_or_default(),
            ),
            create_revision: rev,
            lease: 0x7f00 + rev,
            value: format!("{attempt} pid=7 host=h-1 at=1700000000000").into_bytes(),
        }
    }

    #[test]
    fn a_grant_passes_the_waiters_behind_along() {
        let layout = Layout::new("/p/", &Key::from("a b/c"));
        let list: Vec<_> = (0..4)
            .map(|i| waiter(&layout, &format!("f{i}"), 10 + i))
            .collect();
        let value = grant_value(&layout, &list[0], &list[1..]).expect("passes");
        let value = value.as_slice();
        assert!(value.starts_with(&list[0].value));
        assert_eq!(passed_along(&layout, &list[0].value, value), list[1..]);
        // Not our value, or nothing behind: nothing passed.
        assert!(passed_along(&layout, b"other", value).is_empty());
        assert!(passed_along(&layout, &list[0].value, &list[0].value).is_empty());
        // A value that would not parse back is not passed.
        let mut odd = list[1].clone();
        odd.value.extend_from_slice(b"\nx");
        assert_eq!(grant_value(&layout, &list[0], &[odd]), None);
        assert_eq!(grant_value(&layout, &list[0], &[]), None);
    }
}
