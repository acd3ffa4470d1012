//! Writes that share one etcd request.
//!
//! In etcd every request that writes costs a raft proposal, and in etcd
//! 3.4 every txn also opens a read view, which copies the writes not yet
//! committed to disk. Many lockers on one connection, each locking its own
//! key, would pay that per take and per release. So the lockers that share
//! a [`Batcher`] (see `EtcdLocker::another`) send their takes and releases
//! through it: while few are on their way, a write goes out at once,
//! alone, in the caller's task; beyond that, it waits for one of them to be
//! answered, and the writes waiting then go together, each as one branch
//! of a single txn (`Txn::and_then([TxnOp::txn(..), ..])`), at most one
//! per lock. etcd evaluates every branch's compares against the state
//! before the txn: since no two branches touch the same lock's keys (a
//! lock's keys are its lock key and the keys under its reserved `_OWNERS_`
//! segment), that is the same as running them one after another. How many
//! go at once, and which go together, is `write_queue.rs`.
//!
//! At most a fixed number of requests are on their way at once (the
//! seats): a burst of writes, such as thousands of `lock` calls on one key,
//! waits in line instead of overrunning etcd. While seats are free, a write
//! waits at most [`HOLD`] to go together: then it goes alone, so that
//! writes stuck on a member that stopped answering do not hold up the
//! others. A write's request timeout counts from when it is sent: the time
//! it waits for a seat is spent behind this process's own writes, not on
//! etcd's answer.
//!
//! When etcd refuses a batch before applying any of it (one branch's lease
//! has expired, the user lacks a permission), each write is sent again
//! alone and gets its own answer. Any other failure (no answer, transport)
//! is every write's failure: like any unanswered request, it may still
//! have been applied.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use etcd_client::{Client, Txn, TxnOp, TxnOpResponse};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::error::{EtcdError, EtcdResult};
use super::request::{Answer, hedge, request};
use super::write_queue::{QueuedWrite, WriteQueue};

/// How long a write waits to go together with others at most, while seats
/// are free; then it goes alone (the writes on their way may be stuck on a
/// member that stopped answering).
const HOLD: Duration = Duration::from_millis(20);

/// The writes of the lockers that share it (see the module docs).
pub(crate) struct Batcher {
    client: Client,
    inner: Mutex<Inner>,
}

struct Inner {
    queue: WriteQueue,
    /// When etcd last answered a request of this batcher (or it was made).
    last_answer: Instant,
}

/// What a write does next.
enum Route {
    /// Goes out now, with a seat of its own.
    Now(Txn, Seat),
    /// Waits in line.
    Wait(Waiting),
}

/// A write in line, as its caller sees it.
struct Waiting {
    id: u64,
    since: Instant,
    sent: oneshot::Receiver<()>,
    answer: oneshot::Receiver<EtcdResult<Answer>>,
}

impl Batcher {
    pub fn new(client: Client, batching: bool) -> Arc<Self> {
        Arc::new(Batcher {
            client,
            inner: Mutex::new(Inner {
                queue: WriteQueue::new(batching),
                last_answer: Instant::now(),
            }),
        })
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // The state stays consistent whatever panicked while holding it.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends `txn`, a write that touches only the keys of the lock whose
    /// lock key is `lock`, alone or together with other writes. Once it is
    /// sent it gets `timeout` to be answered, and a `repeatable` one a
    /// second copy, alone, when the first has not answered within a third
    /// of it (see [`hedge`]). The time it waits for a seat is not counted:
    /// it fails unsent, with [`EtcdError::NoAnswer`], only if etcd answered
    /// none of this batcher's requests for `timeout` while it waited.
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
        repeatable: bool,
    ) -> EtcdResult<Answer> {
        let copy = repeatable.then(|| txn.clone());
        let mut waiting = match self.route(op, lock, txn, timeout) {
            Route::Now(txn, seat) => return self.send_alone(op, txn, timeout, seat, copy).await,
            Route::Wait(waiting) => waiting,
        };
        if let Some((txn, seat)) = self.until_sent(op, timeout, &mut waiting).await? {
            return self.send_alone(op, txn, timeout, seat, copy).await;
        }
        let answer = async move {
            waiting.answer.await.unwrap_or_else(|_| {
                Err(EtcdError::Failed {
                    op,
                    why: "the batch this write went in ended without answering it".into(),
                })
            })
        };
        match copy {
            Some(copy) => hedge(answer, timeout / 3, || self.send(op, copy, timeout, None)).await,
            None => answer.await,
        }
    }

    fn route(
        self: &Arc<Self>,
        op: &'static str,
        lock: &[u8],
        txn: Txn,
        timeout: Duration,
    ) -> Route {
        let mut inner = self.inner();
        if inner.queue.seat_now(lock) {
            return Route::Now(txn, Seat(Arc::clone(self)));
        }
        let (sent, sent_rx) = oneshot::channel();
        let (reply, answer) = oneshot::channel();
        let id = inner.queue.enqueue(QueuedWrite {
            id: 0,
            op,
            lock: lock.to_vec(),
            txn,
            timeout,
            sent: Some(sent),
            reply,
        });
        Route::Wait(Waiting {
            id,
            since: Instant::now(),
            sent: sent_rx,
            answer,
        })
    }

    /// Waits until write `w` is sent in a batch (`None`), or goes alone
    /// with a seat of its own after [`HOLD`] if one is free. Fails it,
    /// taken out of line unsent, once etcd has answered none of this
    /// batcher's requests for `timeout` while it waited.
    async fn until_sent(
        self: &Arc<Self>,
        op: &'static str,
        timeout: Duration,
        w: &mut Waiting,
    ) -> EtcdResult<Option<(Txn, Seat)>> {
        let hold = tokio::time::sleep(HOLD);
        tokio::pin!(hold);
        let mut held = false;
        loop {
            let silent_since = self.inner().last_answer.max(w.since);
            tokio::select! {
                biased;
                sent = &mut w.sent => {
                    return sent.map(|()| None).map_err(|_| EtcdError::Failed {
                        op,
                        why: "the batcher ended before this write went out".into(),
                    });
                }
                () = &mut hold, if !held => {
                    held = true;
                    let alone = self.inner().queue.go_alone(w.id);
                    if let Some(alone) = alone {
                        return Ok(Some((alone.txn, Seat(Arc::clone(self)))));
                    }
                }
                () = tokio::time::sleep_until(silent_since + timeout) => {
                    let mut inner = self.inner();
                    if inner.last_answer <= silent_since && inner.queue.withdraw(w.id) {
                        return Err(EtcdError::NoAnswer { op, after: timeout });
                    }
                }
            }
        }
    }

    /// Sends `txn` alone on `seat`, and a second copy without one if
    /// `copy` is given and the first is slow (see [`Batcher::write`]).
    async fn send_alone(
        &self,
        op: &'static str,
        txn: Txn,
        timeout: Duration,
        seat: Seat,
        copy: Option<Txn>,
    ) -> EtcdResult<Answer> {
        let first = self.send(op, txn, timeout, Some(seat));
        match copy {
            Some(copy) => hedge(first, timeout / 3, || self.send(op, copy, timeout, None)).await,
            None => first.await,
        }
    }

    /// Sends `txn` as it is, for at most `timeout`; `seat` (if any) comes
    /// free when it is answered (or this future is dropped).
    async fn send(
        &self,
        op: &'static str,
        txn: Txn,
        timeout: Duration,
        seat: Option<Seat>,
    ) -> EtcdResult<Answer> {
        let mut kv = self.client.kv_client();
        let answer = request(op, timeout, kv.txn(txn)).await;
        if answer
            .as_ref()
            .map_or_else(EtcdError::is_server_answer, |_| true)
        {
            self.inner().last_answer = Instant::now();
        }
        drop(seat);
        answer.map(Answer::new)
    }

    /// A seat came free: the writes that go next go together in a task of
    /// their own, which takes the seat over; with none waiting, the seat is
    /// free.
    fn seat_freed(self: &Arc<Self>) {
        let batch = self.inner().queue.freed();
        if batch.is_empty() {
            return;
        }
        let seat = Seat(Arc::clone(self));
        // Outside a runtime (it is shutting down), the batch and its seat
        // are dropped: its callers get "ended without answering".
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(Arc::clone(self).send_batch(batch, seat));
        }
    }

    async fn send_batch(self: Arc<Self>, mut batch: Vec<QueuedWrite>, seat: Seat) {
        for w in &mut batch {
            if let Some(sent) = w.sent.take() {
                let _ = sent.send(());
            }
        }
        if batch.len() == 1 {
            let w = batch.remove(0);
            let _ = w
                .reply
                .send(self.send(w.op, w.txn, w.timeout, Some(seat)).await);
            return;
        }
        let timeout = batch.iter().map(|w| w.timeout).max().unwrap_or_default();
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
        match self.send("batched writes", txn, timeout, Some(seat)).await {
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
                    self.inner().queue.extra_seat();
                    let (this, seat) = (Arc::clone(&self), Seat(Arc::clone(&self)));
                    tokio::spawn(async move {
                        let answer = this.send(w.op, w.txn, w.timeout, Some(seat)).await;
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

/// One of the seats of [`WriteQueue`], held by a write (or a batch) on its
/// way until it is answered; dropping it frees it.
struct Seat(Arc<Batcher>);

impl Drop for Seat {
    fn drop(&mut self) {
        self.0.seat_freed();
    }
}
