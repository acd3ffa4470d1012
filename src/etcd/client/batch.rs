//! Writes that share one etcd request.
//!
//! In etcd every request that writes costs a raft proposal, and in etcd
//! 3.4 every txn also opens a read view, which copies the writes not yet
//! committed to disk. Many lockers on one connection, each locking its own
//! key, would pay that per take and per release. So the lockers that share
//! a [`Batcher`] (see `EtcdLocker::another`) send their takes and releases
//! through it: while fewer than [`IN_FLIGHT`] are on their way, a write goes
//! out at once, alone, in the caller's task; beyond that, it waits for one
//! of them to be answered, and the writes waiting then go together, each as
//! one branch of a single txn (`Txn::and_then([TxnOp::txn(..), ..])`), at
//! most [`MAX_BATCH`] of them and at most one per lock. etcd evaluates
//! every branch's compares against the state before the txn: since no two
//! branches touch the same lock's keys (a lock's keys are its lock key and
//! the keys under its reserved `_OWNERS_` segment), that is the same as
//! running them one after another.
//!
//! A write waits at most [`HOLD`]: then it goes alone, so that writes stuck
//! on a member that stopped answering do not hold up the others. A write
//! for a lock with a long key ([`MAX_SHARED_KEY`]) always goes alone, which
//! keeps a batch far below etcd's request size limit (1.5 MiB).
//!
//! When etcd refuses a batch before applying any of it (one branch's lease
//! has expired, the user lacks a permission), each write is sent again
//! alone and gets its own answer. Any other failure (no answer, transport)
//! is every write's failure: like any unanswered request, it may still
//! have been applied.

use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use etcd_client::{Client, Txn, TxnOp, TxnOpResponse, TxnResponse};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::error::{EtcdError, EtcdResult};
use super::request::request;

/// How many writes may be on their way before later ones wait to go
/// together. Up to about this many at once, etcd's raft already commits
/// them together and waiting would only add latency (measured here: fewer
/// allowed on their way cost 4 tasks on 4 keys 10-20 % of their cycles).
const IN_FLIGHT: usize = 4;

/// The most writes sent in one txn. etcd allows 128 operations per level
/// of a txn by default (`--max-txn-ops`), less the level above's count for
/// a nested one; a batch is 2 levels deep (each write is one txn inside).
const MAX_BATCH: usize = 32;

/// How long a write waits to go together with others at most; then it goes
/// alone (the writes on their way may be stuck on a member that stopped
/// answering).
const HOLD: Duration = Duration::from_millis(20);

/// The longest lock key whose writes may share a request. A take or a
/// release names its lock key up to about 10 times (compares, ranges,
/// queue keys, passed-along waiters): at most about 320 KiB per batch.
const MAX_SHARED_KEY: usize = 1024;

/// A txn's answer: its response, and the revision etcd was at after it. A
/// txn sent as a branch of a batch has no header of its own, so its
/// revision is the batch's.
pub(crate) struct Answer {
    pub resp: TxnResponse,
    pub revision: i64,
}

impl Answer {
    pub fn new(resp: TxnResponse) -> Self {
        let revision = resp.header().map_or(0, |h| h.revision());
        Answer { resp, revision }
    }
}

impl Deref for Answer {
    type Target = TxnResponse;

    fn deref(&self) -> &TxnResponse {
        &self.resp
    }
}

/// The writes of the lockers that share it (see the module docs).
pub(crate) struct Batcher {
    client: Client,
    /// `false`: every write goes out on its own at once.
    enabled: bool,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Writes (or batches) on their way.
    in_flight: usize,
    next_id: u64,
    /// Writes waiting to go together, oldest first; never two for one lock.
    waiting: Vec<QueuedWrite>,
}

struct QueuedWrite {
    id: u64,
    op: &'static str,
    lock: Vec<u8>,
    txn: Txn,
    deadline: Instant,
    reply: oneshot::Sender<EtcdResult<Answer>>,
}

/// What a write does next.
enum Route {
    /// Goes out now, with a seat of its own.
    Now(Txn, Seat),
    /// Waits under this id for its answer.
    Wait(u64, oneshot::Receiver<EtcdResult<Answer>>),
}

impl Batcher {
    pub fn new(client: Client, enabled: bool) -> Arc<Self> {
        Arc::new(Batcher {
            client,
            enabled,
            inner: Mutex::default(),
        })
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // The state stays consistent whatever panicked while holding it.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends `txn`, a write that touches only the keys of the lock whose
    /// lock key is `lock`, alone or together with other writes; fails with
    /// [`EtcdError::NoAnswer`] after `timeout`, waiting included.
    ///
    /// # Cancel safety
    /// Dropped before it went out, the write is never sent; after, it may
    /// still be applied, as any request.
    pub async fn write(
        self: &Arc<Self>,
        op: &'static str,
        lock: &[u8],
        txn: Txn,
        timeout: Duration,
    ) -> EtcdResult<Answer> {
        let deadline = Instant::now() + timeout;
        let (id, answer) = match self.route(op, lock, txn, deadline) {
            Route::Now(txn, seat) => return self.send(op, txn, deadline, seat).await,
            Route::Wait(id, answer) => (id, answer),
        };
        tokio::pin!(answer);
        let answer = match tokio::time::timeout(HOLD, &mut answer).await {
            Ok(answer) => answer,
            // The writes on their way are slow to answer: it goes alone.
            Err(_) => match self.go_alone(id) {
                Some((txn, seat)) => return self.send(op, txn, deadline, seat).await,
                // Already in a batch.
                None => match tokio::time::timeout_at(deadline, answer).await {
                    Ok(answer) => answer,
                    Err(_) => return Err(EtcdError::NoAnswer { op, after: timeout }),
                },
            },
        };
        answer.unwrap_or_else(|_| {
            Err(EtcdError::Failed {
                op,
                why: "the batch this write went in ended without answering it".into(),
            })
        })
    }

    fn route(
        self: &Arc<Self>,
        op: &'static str,
        lock: &[u8],
        txn: Txn,
        deadline: Instant,
    ) -> Route {
        let mut inner = self.inner();
        // A second write for a lock already waiting goes alone: one batch
        // cannot hold both, and it must not wait for two.
        if !self.enabled
            || inner.in_flight < IN_FLIGHT
            || lock.len() > MAX_SHARED_KEY
            || inner.waiting.iter().any(|w| w.lock == lock)
        {
            return Route::Now(txn, self.take_seat(&mut inner));
        }
        let (reply, answer) = oneshot::channel();
        inner.next_id += 1;
        let id = inner.next_id;
        inner.waiting.push(QueuedWrite {
            id,
            op,
            lock: lock.to_vec(),
            txn,
            deadline,
            reply,
        });
        Route::Wait(id, answer)
    }

    /// Takes write `id` back if it is still waiting, with a seat of its own.
    fn go_alone(self: &Arc<Self>, id: u64) -> Option<(Txn, Seat)> {
        let mut inner = self.inner();
        let i = inner.waiting.iter().position(|w| w.id == id)?;
        let seat = self.take_seat(&mut inner);
        Some((inner.waiting.remove(i).txn, seat))
    }

    /// Counts one more write (or batch) on its way; the seat returned
    /// uncounts it when dropped.
    fn take_seat(self: &Arc<Self>, inner: &mut Inner) -> Seat {
        inner.in_flight += 1;
        Seat(Arc::clone(self))
    }

    /// Sends `txn` as it is, until `deadline`; `seat` comes free when it
    /// is answered (or this future is dropped).
    async fn send(
        &self,
        op: &'static str,
        txn: Txn,
        deadline: Instant,
        seat: Seat,
    ) -> EtcdResult<Answer> {
        let mut kv = self.client.kv_client();
        let left = deadline.saturating_duration_since(Instant::now());
        let answer = request(op, left, kv.txn(txn)).await;
        drop(seat);
        answer.map(Answer::new)
    }

    /// A seat came free: the writes waiting go together in a task of their
    /// own, which takes the seat over; with none waiting, the seat is free.
    fn seat_freed(self: &Arc<Self>) {
        let batch = {
            let mut inner = self.inner();
            // A write whose caller gave up before it went out is dropped.
            inner.waiting.retain(|w| !w.reply.is_closed());
            if inner.waiting.is_empty() {
                inner.in_flight -= 1;
                return;
            }
            let n = inner.waiting.len().min(MAX_BATCH);
            inner.waiting.drain(..n).collect::<Vec<_>>()
        };
        let seat = Seat(Arc::clone(self));
        // Outside a runtime (it is shutting down), the batch and its seat
        // are dropped: its callers get "ended without answering".
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(Arc::clone(self).send_batch(batch, seat));
        }
    }

    async fn send_batch(self: Arc<Self>, mut batch: Vec<QueuedWrite>, seat: Seat) {
        if batch.len() == 1 {
            let w = batch.remove(0);
            let _ = w.reply.send(self.send(w.op, w.txn, w.deadline, seat).await);
            return;
        }
        let deadline = batch
            .iter()
            .map(|w| w.deadline)
            .max()
            .unwrap_or_else(Instant::now);
        // etcd prices a txn for its space quota by the puts at its top
        // level only, the larger branch's: the writes inside would pass an
        // etcd out of space that refuses each of them alone. A put in the
        // else branch, which never runs (no compares: the txn succeeds),
        // gives the batch a price, so that etcd refuses it then; its writes
        // then go alone (below) and get their own answers.
        let price = TxnOp::put(batch[0].lock.clone(), Vec::new(), None);
        let txn = Txn::new()
            .and_then(
                batch
                    .iter()
                    .map(|w| TxnOp::txn(w.txn.clone()))
                    .collect::<Vec<_>>(),
            )
            .or_else([price]);
        match self.send("batched writes", txn, deadline, seat).await {
            Ok(answer) => {
                let revision = answer.revision;
                let mut parts = answer.resp.op_responses().into_iter();
                for w in batch {
                    let part = match parts.next() {
                        Some(TxnOpResponse::Txn(resp)) => Ok(Answer { resp, revision }),
                        _ => Err(EtcdError::Failed {
                            op: w.op,
                            why: "etcd answered a batch of writes in an unexpected shape".into(),
                        }),
                    };
                    let _ = w.reply.send(part);
                }
            }
            Err(e) if e.is_refused_before_applying() => {
                tracing::debug!(
                    error = %crate::Error::from(e),
                    "etcd refused a batch of writes; sending them one by one"
                );
                for w in batch {
                    let this = Arc::clone(&self);
                    let seat = this.take_seat(&mut this.inner());
                    tokio::spawn(async move {
                        let answer = this.send(w.op, w.txn, w.deadline, seat).await;
                        let _ = w.reply.send(answer);
                    });
                }
            }
            Err(e) => {
                for w in batch {
                    let _ = w.reply.send(Err(shared(&e, w.op)));
                }
            }
        }
    }
}

/// The failure of a batch as one of its writes (`op`) sees it.
fn shared(e: &EtcdError, op: &'static str) -> EtcdError {
    match e {
        EtcdError::NoAnswer { after, .. } => EtcdError::NoAnswer { op, after: *after },
        EtcdError::Request {
            source: etcd_client::Error::GRpcStatus(status),
            ..
        } => EtcdError::Request {
            op,
            source: etcd_client::Error::GRpcStatus(status.clone()),
        },
        // A failure to reach etcd: the batch may still have been applied.
        other if other.is_transient() => EtcdError::Request {
            op,
            source: etcd_client::Error::IoError(std::io::Error::other(format!(
                "the batch of writes this one went in failed: {}",
                describe(other)
            ))),
        },
        other => EtcdError::Failed {
            op,
            why: format!(
                "the batch of writes this one went in failed: {}",
                describe(other)
            )
            .into(),
        },
    }
}

fn describe(e: &EtcdError) -> String {
    match e {
        EtcdError::Request { source, .. } => source.to_string(),
        _ => "no answer".into(),
    }
}

/// One of the [`IN_FLIGHT`] seats, held by a write (or a batch) on its way
/// until it is answered; dropping it frees it.
struct Seat(Arc<Batcher>);

impl Drop for Seat {
    fn drop(&mut self) {
        self.0.seat_freed();
    }
}
