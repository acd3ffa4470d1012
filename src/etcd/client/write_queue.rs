//! What a [`Batcher`](super::batch::Batcher) keeps track of: how many of
//! its requests are on their way (its seats), and the writes waiting for
//! one, oldest first. No I/O and no clock: the batcher asks it where a
//! write goes and carries that out, so the rules are tested here alone.

use std::collections::VecDeque;
use std::time::Duration;

use etcd_client::Txn;
use tokio::sync::oneshot;

use super::error::EtcdResult;
use super::request::Answer;

/// Below this many requests on their way, a write goes out at once,
/// alone. Up to about this many at once, etcd's raft already commits them
/// together and waiting would only add latency (measured here: fewer
/// allowed on their way cost 4 tasks on 4 keys 10-20 % of their cycles).
const IN_FLIGHT: usize = 4;

/// The most requests (writes alone, or batches) on their way at once;
/// beyond it every write waits for a seat. etcd refuses proposals ("too
/// many requests") once 5,000 of them are committed but not applied, and
/// answers lease renewals only once it has applied what it committed: a
/// burst of 10,000 `lock` calls of one process on one key, each sent at
/// once, lapsed the process's session lease. Two kinds of request go
/// beyond it, bounded by what is on its way already: a second copy of a
/// write that was slow to answer, and the writes of a batch etcd refused
/// as a whole, sent again one by one.
pub(crate) const MAX_IN_FLIGHT: usize = 64;

/// The most writes sent in one txn. etcd allows 128 operations per level
/// of a txn by default (`--max-txn-ops`), less the level above's count for
/// a nested one; a batch is 2 levels deep (each write is one txn inside).
pub(crate) const MAX_BATCH: usize = 32;

/// How many of the oldest waiting writes a batch is picked from: a queue
/// of thousands of writes for one lock costs each pick a bounded look.
const PICK_WINDOW: usize = 4 * MAX_BATCH;

/// The longest lock key whose writes may share a request. A take or a
/// release names its lock key up to about 10 times (compares, ranges,
/// queue keys, passed-along waiters): at most about 320 KiB per batch.
const MAX_SHARED_KEY: usize = 1024;

/// A write waiting for a seat.
pub(crate) struct QueuedWrite {
    /// Set by [`WriteQueue::enqueue`].
    pub id: u64,
    pub op: &'static str,
    /// The lock key of the only lock whose keys the write touches.
    pub lock: Vec<u8>,
    pub txn: Txn,
    /// How long it may wait for its answer once it is sent.
    pub timeout: Duration,
    /// Told when it is sent.
    pub sent: Option<oneshot::Sender<()>>,
    pub reply: oneshot::Sender<EtcdResult<Answer>>,
}

/// The seats and the writes waiting for one (see the module docs).
pub(crate) struct WriteQueue {
    /// `false`: no two writes share a request.
    batching: bool,
    /// Requests on their way.
    in_flight: usize,
    next_id: u64,
    waiting: VecDeque<QueuedWrite>,
}

impl WriteQueue {
    pub fn new(batching: bool) -> Self {
        WriteQueue {
            batching,
            in_flight: 0,
            next_id: 0,
            waiting: VecDeque::new(),
        }
    }

    /// Whether a write for lock key `lock` goes out now, alone; if so, it
    /// has a seat. It does while fewer than [`IN_FLIGHT`] requests are on
    /// their way; and while seats are free, when it cannot share a request
    /// (batching is off, its key is long, or a write for its lock waits
    /// already: a batch holds one write per lock, and it must not wait for
    /// two).
    pub fn seat_now(&mut self, lock: &[u8]) -> bool {
        let n = self.in_flight;
        let now = n < IN_FLIGHT
            || (n < MAX_IN_FLIGHT
                && (!self.shares(lock) || self.waiting.iter().any(|w| w.lock == lock)));
        if now {
            self.in_flight += 1;
        }
        now
    }

    /// Puts `w` last in line; returns the id it waits under.
    pub fn enqueue(&mut self, mut w: QueuedWrite) -> u64 {
        self.next_id += 1;
        w.id = self.next_id;
        self.waiting.push_back(w);
        self.next_id
    }

    /// Takes write `id` out of line to go alone, with a seat, if it still
    /// waits and a seat is free.
    pub fn go_alone(&mut self, id: u64) -> Option<QueuedWrite> {
        if self.in_flight >= MAX_IN_FLIGHT {
            return None;
        }
        let w = self.take(id)?;
        self.in_flight += 1;
        Some(w)
    }

    /// Takes write `id` out of line, never to be sent; `false` if it does
    /// not wait any more (it was sent).
    pub fn withdraw(&mut self, id: u64) -> bool {
        self.take(id).is_some()
    }

    /// Counts a request that goes beyond [`MAX_IN_FLIGHT`] (see there).
    pub fn extra_seat(&mut self) {
        self.in_flight += 1;
    }

    /// A seat came free: the writes that go next, together, on it. Empty
    /// when none waits: the seat is free.
    ///
    /// The oldest waiting write goes, with the oldest write of each other
    /// lock among the first [`PICK_WINDOW`] waiting, at most [`MAX_BATCH`]
    /// in all. A write that cannot share a request goes alone. A write
    /// whose caller gave up is dropped on the way: it is never sent.
    pub fn freed(&mut self) -> Vec<QueuedWrite> {
        let mut batch: Vec<QueuedWrite> = Vec::new();
        let (mut i, mut looked) = (0, 0);
        while i < self.waiting.len() && looked < PICK_WINDOW && batch.len() < MAX_BATCH {
            looked += 1;
            let w = &self.waiting[i];
            if w.reply.is_closed() {
                self.waiting.remove(i);
                continue;
            }
            let alone = !self.shares(&w.lock);
            if (alone && !batch.is_empty()) || batch.iter().any(|b| b.lock == w.lock) {
                i += 1;
                continue;
            }
            batch.extend(self.waiting.remove(i));
            if alone {
                break;
            }
        }
        if batch.is_empty() {
            self.in_flight -= 1;
        }
        batch
    }

    /// Whether a write for lock key `lock` may share a request.
    fn shares(&self, lock: &[u8]) -> bool {
        self.batching && lock.len() <= MAX_SHARED_KEY
    }

    fn take(&mut self, id: u64) -> Option<QueuedWrite> {
        let i = self.waiting.iter().position(|w| w.id == id)?;
        self.waiting.remove(i)
    }

    #[cfg(test)]
    fn in_flight(&self) -> usize {
        self.in_flight
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// A write for lock `lock`, and its caller's end of the reply.
    fn write(lock: &str) -> (QueuedWrite, oneshot::Receiver<EtcdResult<Answer>>) {
        let (reply, answer) = oneshot::channel();
        let w = QueuedWrite {
            id: 0,
            op: "test",
            lock: lock.as_bytes().to_vec(),
            txn: Txn::new(),
            timeout: Duration::from_secs(1),
            sent: None,
            reply,
        };
        (w, answer)
    }

    /// Routes a write for each of `locks`, in order: how many went at once;
    /// the callers' ends of the queued ones are kept in `kept`.
    fn route(
        q: &mut WriteQueue,
        locks: impl IntoIterator<Item = String>,
        kept: &mut Vec<oneshot::Receiver<EtcdResult<Answer>>>,
    ) -> usize {
        let mut now = 0;
        for lock in locks {
            if q.seat_now(lock.as_bytes()) {
                now += 1;
            } else {
                let (w, answer) = write(&lock);
                q.enqueue(w);
                kept.push(answer);
            }
        }
        now
    }

    /// Frees seats one at a time until none is on its way; returns the
    /// batches sent on them, each as its writes' ids.
    fn drain(q: &mut WriteQueue) -> Vec<Vec<u64>> {
        let mut batches = Vec::new();
        while q.in_flight() > 0 {
            let batch = q.freed();
            if !batch.is_empty() {
                batches.push(batch.iter().map(|w| w.id).collect());
            }
        }
        batches
    }

    #[test]
    fn a_burst_for_one_lock_never_has_more_than_the_seats_on_their_way() {
        let mut q = WriteQueue::new(true);
        let mut kept = Vec::new();
        let now = route(&mut q, (0..10_000).map(|_| "a".to_string()), &mut kept);
        assert_eq!(now, MAX_IN_FLIGHT);
        assert_eq!(q.in_flight(), MAX_IN_FLIGHT);
        let batches = drain(&mut q);
        // One write of a lock per request, each sent once, in order.
        assert!(batches.iter().all(|b| b.len() == 1));
        let sent: Vec<u64> = batches.into_iter().flatten().collect();
        assert_eq!(
            sent,
            (1..=(10_000 - MAX_IN_FLIGHT) as u64).collect::<Vec<_>>()
        );
    }

    #[test]
    fn writes_for_different_locks_go_together_one_per_lock() {
        let mut q = WriteQueue::new(true);
        let mut kept = Vec::new();
        // Writes of one lock take every seat but leave one waiting.
        let hot = (0..=MAX_IN_FLIGHT).map(|_| "hot".to_string());
        assert_eq!(route(&mut q, hot, &mut kept), MAX_IN_FLIGHT);
        // Every other write waits now, also a second one of its lock.
        let others = (0..MAX_BATCH).chain(0..8).map(|i| format!("k{i}"));
        assert_eq!(route(&mut q, others, &mut kept), 0);
        let batch = q.freed();
        assert_eq!(batch.len(), MAX_BATCH);
        assert_eq!(batch[0].lock, b"hot", "the oldest write goes first");
        let locks: HashSet<&[u8]> = batch.iter().map(|w| w.lock.as_slice()).collect();
        assert_eq!(locks.len(), MAX_BATCH, "two writes of one lock in a batch");
        assert_eq!(q.in_flight(), MAX_IN_FLIGHT, "the seat passes to the batch");
        // The one left of the first round, and the second writes.
        assert_eq!(q.freed().len(), 1 + 8);
        assert!(q.freed().is_empty());
        assert_eq!(q.in_flight(), MAX_IN_FLIGHT - 1);
    }

    #[test]
    fn without_batching_each_write_goes_alone_within_the_seats() {
        let mut q = WriteQueue::new(false);
        let mut kept = Vec::new();
        let locks = (0..200).map(|i| format!("k{i}"));
        assert_eq!(route(&mut q, locks, &mut kept), MAX_IN_FLIGHT);
        let batches = drain(&mut q);
        assert_eq!(batches.len(), 200 - MAX_IN_FLIGHT);
        assert!(batches.iter().all(|b| b.len() == 1));
    }

    #[test]
    fn a_long_key_goes_alone() {
        let mut q = WriteQueue::new(true);
        let mut kept = Vec::new();
        let long = "x".repeat(MAX_SHARED_KEY + 1);
        route(&mut q, (0..IN_FLIGHT).map(|i| format!("k{i}")), &mut kept);
        // Seats are free: the long key goes at once.
        assert!(q.seat_now(long.as_bytes()));
        // Queued between short ones, it goes in a request of its own.
        let locks = ["a".to_string(), long.clone(), "b".to_string()];
        for lock in locks.iter().cycle().take(3 * MAX_IN_FLIGHT) {
            let (w, answer) = write(lock);
            q.enqueue(w);
            kept.push(answer);
        }
        let batches: Vec<Vec<QueuedWrite>> = std::iter::from_fn(|| {
            let b = q.freed();
            (!b.is_empty()).then_some(b)
        })
        .collect();
        for b in &batches {
            let has_long = b.iter().any(|w| w.lock.len() > MAX_SHARED_KEY);
            assert!(!has_long || b.len() == 1, "a long key shared a request");
        }
    }

    #[test]
    fn a_write_whose_caller_gave_up_is_never_sent() {
        let mut q = WriteQueue::new(true);
        let mut kept = Vec::new();
        route(&mut q, (0..IN_FLIGHT).map(|i| format!("k{i}")), &mut kept);
        let (w, answer) = write("gone");
        let gone = q.enqueue(w);
        drop(answer);
        let (w, answer) = write("stays");
        let stays = q.enqueue(w);
        let batch = q.freed();
        assert_eq!(batch.iter().map(|w| w.id).collect::<Vec<_>>(), [stays]);
        assert!(!q.withdraw(gone));
        drop(answer);
    }

    #[test]
    fn a_withdrawn_write_is_not_sent_and_a_full_house_keeps_writes_in_line() {
        let mut q = WriteQueue::new(true);
        let mut kept = Vec::new();
        let hot = (0..=MAX_IN_FLIGHT).map(|_| "hot".to_string());
        route(&mut q, hot, &mut kept);
        assert_eq!(q.in_flight(), MAX_IN_FLIGHT);
        let (w, _a) = write("late");
        let late = q.enqueue(w);
        assert!(q.go_alone(late).is_none(), "went alone beyond the seats");
        assert!(q.withdraw(late));
        assert!(!q.withdraw(late));
        assert_eq!(q.freed().len(), 1, "the waiting write of hot");
        assert!(q.freed().is_empty());
        assert_eq!(q.in_flight(), MAX_IN_FLIGHT - 1);
    }
}
