//! The protocol: what fairlock writes to etcd and reads from it. Every key,
//! every txn and every read whose answer decides something is built and
//! read here, by functions that send nothing; `lock/` decides when to send
//! them, `client/` sends them. This comment is the specification.
//!
//! # Keys
//! For prefix `P` and lock `k` (`keys.rs`, which has the formats and
//! their round-trip tests):
//! - the **lock key** `P k`: exists exactly while someone holds the lock.
//!   Value: the holder's owner value; lease: the holder's session lease.
//!   Its mod revision is the holder's **fencing token**: every grant
//!   writes it, so the token grows with every new holder.
//! - a **queue entry** `P k/_OWNERS_/<locker id>/<f|u><slot>` per waiting
//!   `lock` call, on its session lease, in line by create revision; `f` is
//!   fair (is handed the lock), `u` unfair (is woken to try). Value: its
//!   owner value; a fair grant appends the waiters behind it ("passed
//!   along", one line each). `<slot>` is a number its locker reuses.
//! - anything else under `P k/_OWNERS_/` (no lease, another name) was not
//!   written by fairlock: never handed the lock, never blocking it.
//!
//! An owner value, `<f|u><uuid> pid=.. host=.. at=..`, is unique per
//! attempt. Touching an entry (a put that keeps its value and lease)
//! changes only its mod revision: it is how a release signals a waiter,
//! whose locker watches its own entries (puts only).
//!
//! # Transactions
//! `L` the lock key, `Q` the queue prefix, `q` the caller's entry (created
//! at `my_rev`), `v` its owner value, `l` its lease, `T` a holder's token.
//! "Q empty" compares `create_revision == 0` over the prefix, which an
//! empty range passes; "no line" compares so over the range of the
//! read/write lock and semaphore entries of the same name (`r/` to the
//! end of `w/` under Q, see below): a key in use as one is never a free
//! mutex, and its joins compare L absent, so the two never hold at once.
//! Those entries are under Q, so "Q empty" implies "no line": a fair
//! newcomer compares only L absent and Q empty.
//!
//! ```text
//! enqueue (lock)          if L absent and [fair: Q empty | unfair: no line]
//!   take.rs                 then put L=v@l                 granted, T = revision
//!                           else put q=v@l                 queued, my_rev = revision
//! take (queued waiter)    if L absent and q.create == my_rev and no line
//!   take.rs                 then put L=v@l [unfair: delete q]
//!                           else count the line (> 0: InvalidKey, leave)
//! try_lock                if L absent and [fair: Q empty | unfair: no line]
//!   take.rs                 then put L=v@l
//!                           else [fair] count L; read Q's first 16
//!   then, if L was free and Q held no waiter, newest at rev N:
//!                         if L absent, no line, every Q entry created <= N
//!                           then put L=v@l
//! release round           if L.mod == T and (successor s known: s.create == known
//!   release.rs                               | none known: every Q entry created <= after)
//!                           then delete q;  fair s:   put L=s.value@s.lease, touch s
//!                                                      (its value gains the waiters behind)
//!                                           unfair s: delete L, touch s
//!                                           none:     delete L
//!                           else read L (keys only), Q's first 4 after `after`; delete q
//! free (out of space)     if L.mod == T then delete L, q  else delete q
//! serve a free lock       read: count L, Q's first 4;  if L absent and waiter s first:
//!   release.rs              if L absent and s.create == known and no line
//!                           then touch s [fair: put L=s.value@s.lease]
//! abandon (gave up)       if L.value == v then read L, q  else delete q
//!   abandon.rs              (granted meanwhile: release it as a holder would)
//! clear a lost holding    { if L.mod == T then delete L }; { if q.create == rev then delete q }
//!   abandon.rs
//! fenced (user's txn)     if L.mod == T then <the user's txn>
//!   fence.rs
//! ```
//!
//! # Reads
//! - **place check** (`queue.rs`), a waiter's view of the line, one
//!   read-only txn: q, L, and the 8 entries created before `my_rev`,
//!   nearest first (more batches while none is a waiter). L holding `v`:
//!   granted (a handoff). q gone: its lease ended. With no waiter ahead
//!   and L absent (or unfair and L absent) the waiter sends a take; else
//!   it waits. etcd reads all of Q to answer it (a create-revision sort
//!   or filter makes it read the whole range before the limit), so only
//!   a waiter told something changed sends it.
//! - **place glance**: q and L only; what a waiter whose locker's watch
//!   opened after its enqueue reads (granted, gone, or L held: wait). L
//!   absent: a place check follows.
//! - **successors** (`queue.rs`): Q's first entries after the holder's
//!   own, by create revision, waiters only; a release serves the first.
//!   Read serializable at grant (a stale read fails the release's
//!   compare), up to 256 (the locker keeps them for its next holders,
//!   `session/queue_heads.rs`), or passed along by the grant (3).
//! - **vigil head check** (`session/vigil.rs`): L (keys only) and Q's
//!   first 4; with L absent, the locker tells its waiter first in line.
//! - entries are read whole wherever a lease decides: etcd 3.7 answers
//!   keys-only reads from its index with lease 0 for every key (etcd issue
//!   22209), which would make every waiter look like someone else's entry.
//!
//! # Why it is safe
//! - **One holder.** L is created only when absent, and otherwise written
//!   only by a txn that compares `L.mod == T` of the current holder (a
//!   release, a clear, a fenced txn): no one else's write can replace a
//!   holder. A holder whose lease ends loses L with it; its late release,
//!   clear or fenced txn then fails its compare.
//! - **Arrival order** (fair). A fair newcomer takes L only with Q empty;
//!   a release hands L to the first waiter in line, checked by that
//!   waiter's create revision; a waiter takes a free L only after a read
//!   found no waiter ahead of it, and no waiter queues ahead later
//!   (create revisions grow). Entries someone else wrote are skipped.
//! - **No lost wake-up.** Each release touches the waiter it serves in
//!   the txn that frees or hands the lock; a waiter listens for touches
//!   of its own entry from before its enqueue (or reads its place once
//!   after). A lock freed with nobody to serve (a holder's lease ended, a
//!   woken waiter gave up) is found by the locker's vigil, which its
//!   waiters join after their patience (a tenth of the TTL, at most 1 s):
//!   it watches L for deletion and, while L is free, Q, and on either
//!   reads L and Q's head and tells the first waiter if it is the
//!   locker's; and a waiter that gives up serves a free lock to the first
//!   in line.
//! - **Nothing left behind.** Every entry is on a lease; an attempt that
//!   gives up deletes its entry, or releases a lock granted to it
//!   meanwhile; a release deletes the holder's entry on both branches.
//! - **Retries.** Every write compares what it expects, so a second copy,
//!   or a late one after no answer, fails harmlessly; a write whose answer
//!   never came is covered by retiring its lease (`session/`).

//! # Sending
//! Every txn goes out through one sender, `LockerState::send`, by one of
//! two paths: **alone**, or **batched** with other lockers' writes on the
//! same connection (`client/batch.rs`: while 4 writes are on their way,
//! later ones wait up to 20 ms and go together, one branch each, at most
//! one per lock, so no two branches touch the same keys). The writes of a
//! lock call (enqueue, take, `try_lock`, release) are batched; the others
//! go alone. How many copies may go is told by type: a [`ops::Repeatable`]
//! txn (the reads above, the take, clearing a lost holding, each saying
//! why a second copy is harmless) is sent **hedged**, a second copy going
//! out when the first has not answered within a third of the request
//! timeout; any other txn once. A loop that sends a request again gives
//! up by one rule (`client/retry.rs`, `Retrying`): on an error that is not
//! transient, or when its budget (while its lease lives, or a deadline)
//! is spent; the removals of a caller's own keys (a release, an abandoned
//! attempt, a departure from a line) retry every failure while the lease
//! lives, since a key left behind blocks the others.
//!
//! # Read/write locks and semaphores
//! A separate protocol on the same key names (`line.rs`, `line_txn.rs`):
//! each `read_lock`, `write_lock` or `acquire_permits` call puts an
//! **entry** `P k/_OWNERS_/<r|w|s<L>>/<locker id>/<slot>` on its session
//! lease (a call of `m > 1` of `L` permits puts `m` keys
//! `<slot>-<i>-<m>` in the same txn: a key per permit, so every count of
//! the line is a count of permits; `i = 0` is the call's main key, told,
//! watched and fenced; departures walk main keys only, each weighing
//! `m`), and the key's line is its entries by create revision. Who holds
//! is a function of the line (`crate::semantics::admission`): a writer once nobody is
//! ahead, a reader once no writer is, `m` permits once the permits ahead
//! and its own are at most `L`.
//! An entry's mod revision is its **token**: its create revision when it
//! held at once, else the revision of the touch that told it.
//!
//! ```text
//! join                    if L absent and no entry of another family (or limit)
//!   line_txn.rs             then put e=v@l (each key); count what is in the way (e included)
//!                           else read L's count and the first r, w, s entry (to say why)
//!   held at once: no writer (reader) | nobody else (writer) | count <= L (permits)
//! try_join                the same, but puts only when it holds at once
//!                           (a permit puts, and leaves again when it does not)
//! leave (release,         if e.mod == T (holder) | e.create == C (waiter giving up)
//!   give up)                then delete e (every key of the call); read the line's head (16, whole entries)
//!   then touch each entry the departure admits (line.rs: holds after it, not before):
//! admit                   { if a.create == C_a and a.version == 1 then touch a } per entry
//! check (a patient        read e; the first 16 in the way created before e
//!   waiter)                 (more batches while fewer than stop it are fairlock's:
//!                           1 for a reader or writer, L - m + 1 for m of L permits)
//! self grant              if e.create == C and e.version == 1 then touch e else read e
//! ```
//!
//! Why it is safe and live:
//! - **Who holds** depends only on the line, and an entry's place only
//!   improves: newcomers join behind it. An entry that held at its join
//!   holds until it leaves, so no departure ever touches it (its token
//!   stays its create revision): a departure computes whom it admits
//!   from the line read in its own txn, right after its delete, with
//!   itself put back for "before", so two departures never admit the
//!   same waiter, and none admits one that held already. Only entries
//!   created before the departure count: a newcomer learned at its join.
//! - **No lost wake-up**: a waiter that holds is touched by the departure
//!   that admitted it; when that never comes (the departure's holder
//!   died, its lease ended), the waiter's patience (a tenth of the TTL)
//!   checks its place, watches what is in its way, and touches itself
//!   when it holds (`version == 1` keeps a departure's touch and its own
//!   from both counting).
//! - **Nothing left behind**: entries are on leases; a join whose caller
//!   gave up before the answer is left again once it lands.
//! - A mutex (`lock`) on the same key is refused at join (`L` present);
//!   the mutex skips these entries as someone else's. Counts in a txn use
//!   `count_only` without filters only: etcd counts every key of a range
//!   even when a create revision filter narrows what it returns.
//!
//! # Files
//! From the bottom up: each file uses only files listed before it.
//! - `keys.rs`: key layout, entry names, owner values, the passed-along
//!   waiters;
//! - `ops.rs`: the parts of every txn ("still held", "lock absent",
//!   "no line"), reading an op's answer, and `Repeatable`, a txn safe to
//!   send twice;
//! - `queue.rs`: reading the queue: successors and a waiter's place;
//! - `take.rs`: enqueue, take and `try_lock`;
//! - `take_all.rs`: `lock_all` and `try_lock_all`: every key of a call in
//!   one txn, one revision (its own spec, and why that cannot deadlock);
//! - `release.rs`: the release round, freeing, serving a free lock;
//! - `abandon.rs`: cleaning up after an attempt, clearing a lost holding;
//! - `fence.rs`: the fence of a holder's own txns;
//! - `line.rs`: a read/write lock's or semaphore's line: entry names and
//!   whom a departure admits;
//! - `line_txn.rs`: their txns and reads.
//! - `spec_tests/` (tests only): every txn above rendered as text and
//!   compared with `spec_tests/expected.txt`, so that a change to any
//!   compare or op shows up as a diff of that file.
//!
//! # Leader election
//! An election `e` is the fair lock `P e`: a candidate's campaign is a fair
//! `lock`, its leader the holder, and the term the holder's token `T` (so
//! candidates are elected in arrival order, one write per handoff). It adds
//! one key (`election.rs`, which uses the files up to `fence.rs`):
//! - the **value key** `V` = `P e/_OWNERS_/leader`: the leader's record,
//!   `<T, 20 digits> <owner value> since=<unix ms>\n<value>`, on the
//!   leader's session lease. Its name is not a waiter's, so the lock never
//!   hands it the lock nor waits for it (see "Keys" above); `status` knows
//!   it and does not list it as foreign.
//!
//! ```text
//! proclaim (leader)       if L.mod == T then put V=<T ...>@l
//!   election.rs             (a campaign's first write, and every new value)
//! retract (after release) if V.value > "<T>" and V.value < "<T+1>" then delete V
//!   election.rs             (only a record of term T: never the successor's)
//! who leads (read)        read L, V; a leader iff V's term == L.mod
//! ```
//!
//! - **One leader's value.** V is written only under the fence of the
//!   term it names, so a record's term was the holder's when it was
//!   written; a deposed leader's proclaim fails its fence.
//! - **Observers** follow V alone, in order: a put is a (new) leader or
//!   value, a delete that nobody leads. V goes with the leader's lease
//!   (in the same revision as L when the lease ends), at `resign` (after
//!   the release: a proclaim still on its way fails its fence instead of
//!   landing after the delete), and when the leader sees its lock lost.
//!   A record left by a leader that lost L but could not reach etcd (its
//!   lease lives on only if it was revived) is overwritten by the next
//!   leader; the read above never reports it.
//! - **Nothing left behind.** V is on the leader's lease, and removed by
//!   every way a leadership ends that reaches etcd.
//! - **The lock beside V.** V is in Q but no waiter: a handoff to a known
//!   successor never looks at it; a release with no successor known
//!   ("every Q entry created <= after") fails once on a V created after
//!   its `after` and frees the lock in its next round, past V; a fair
//!   newcomer meeting a V left without L ("Q empty" fails) queues, finds
//!   nobody ahead and takes L. A plain lock on an election's name is a
//!   candidate without a value: while it holds, nobody leads.

pub(crate) mod abandon;
pub(crate) mod election;
pub(crate) mod etcd_layout;
pub(crate) mod fence;
pub(crate) mod keys;
pub(crate) mod line;
pub(crate) mod line_txn;
pub(crate) mod ops;
pub(crate) mod queue;
pub(crate) mod release;
#[cfg(test)]
mod spec_tests;
pub(crate) mod take;
pub(crate) mod take_all;
