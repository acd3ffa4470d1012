//! The checks of leader election, for backends with an [`Elector`]:
//! [`ElectionBackend`], the contract of such a backend under test, and the
//! checks of who leads. Giving up and following an election:
//! `election_watch.rs`.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::common::{Turns, assert_leader, join, patient, spawn};
use crate::{Elector, Error, Key, MAX_VALUE_LEN};

/// A backend with elections under test: a source of electors on one store
/// and the views of that store the checks need. The same rules as
/// [`Backend`](super::Backend): a fresh one per check (its own key prefix
/// or store), views that read the store directly, waits on the store's
/// change events, never fixed sleeps.
#[async_trait]
pub trait ElectionBackend: Send + Sync + 'static {
    /// A new elector on the store. Two electors must behave like two
    /// processes (sessions of their own); they may share a connection.
    fn elector(&self) -> Arc<dyn Elector>;

    /// Returns once at least `n` candidates wait in election `name`'s
    /// line, its leader not counted. Must not return early (the checks
    /// order arrivals with it); panic after a long guard deadline.
    async fn wait_candidates(&self, name: &Key, n: usize);

    /// Returns once nothing is held, queued or recorded in the store, for
    /// cleanup done in the background.
    async fn wait_clean(&self);

    /// `true` if nothing is held, queued or recorded in the store right
    /// now: one read, no waiting.
    async fn is_clean(&self) -> bool;

    /// Ends a check: closes the electors handed out and panics if anything
    /// is left behind.
    async fn finish(&self);

    /// `false` for a store whose leader shows its value alone, not who
    /// leads or since when (etcd's own layout, where the leader's key
    /// holds just the proposal): the checks then skip
    /// [`Leader::owner`](crate::Leader::owner) and
    /// [`Leader::since`](crate::Leader::since).
    fn records_owner(&self) -> bool {
        true
    }
}

/// Candidates campaigning one after another behind a leader (each one in
/// line, as [`ElectionBackend::wait_candidates`] sees it, before the next
/// starts) are elected in that order as each leader resigns, with
/// strictly growing terms; while each leads, [`Elector::leader`] names it
/// with its value and term. Nothing is left behind.
///
/// # Panics
/// When a candidate is elected out of order, a term does not grow, or the
/// leader read is not the one elected.
pub async fn election_order(b: &impl ElectionBackend) {
    const CANDIDATES: usize = 5;
    let name = Key::from("order");
    let first = b
        .elector()
        .campaign(&patient(), &name, b"first")
        .await
        .expect("campaign");
    let elected = Arc::new(Mutex::new(vec![(0, first.fencing_token())]));
    let mut tasks = Vec::new();
    for i in 1..=CANDIDATES {
        let elected = Arc::clone(&elected);
        tasks.push(spawn(&b.elector(), &name, move |elector, key| async move {
            let value = format!("candidate {i}");
            let leadership = elector.campaign(&patient(), &key, value.as_bytes()).await;
            let leadership = leadership.expect("campaign");
            assert!(leadership.is_held(), "a new leadership must lead");
            let term = leadership.fencing_token();
            assert_leader(&*elector, &key, value.as_bytes(), term).await;
            elected
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((i, term));
            leadership.resign().await.expect("resign");
        }));
        b.wait_candidates(&name, i).await;
    }
    first.resign().await.expect("resign");
    join(tasks).await;
    let elected = elected.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let order: Vec<usize> = elected.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        order,
        (0..=CANDIDATES).collect::<Vec<_>>(),
        "election order"
    );
    for pair in elected.windows(2) {
        let ((_, before), (_, term)) = (pair[0], pair[1]);
        assert!(term > before, "term {term} after {before}");
    }
    let last = b.elector().leader(&name).await.expect("leader");
    assert_eq!(last, None, "a leader after the last one resigned");
    b.wait_clean().await;
    b.finish().await;
}

/// Many candidates on several electors campaign for one election at once,
/// round after round: never two leaders at a time, no update of a counter
/// kept under the leadership lost, terms grow strictly, each leader is the
/// one [`Elector::leader`] names, and a resignation is not reported as a
/// loss.
///
/// # Panics
/// When two lead at once, an update is lost, a term does not grow or a
/// leader is not the one read.
pub async fn one_leader_at_a_time(b: &impl ElectionBackend) {
    const ELECTORS: usize = 3;
    const PER_ELECTOR: usize = 2;
    const ROUNDS: u64 = 5;
    let name = Key::from("contended");
    let turns = Arc::new(Turns::default());
    let mut tasks = Vec::new();
    for e in 0..ELECTORS {
        let elector = b.elector();
        for t in 0..PER_ELECTOR {
            let turns = Arc::clone(&turns);
            tasks.push(spawn(&elector, &name, move |elector, name| async move {
                let value = format!("{e}/{t}");
                for _ in 0..ROUNDS {
                    let leadership = elector.campaign(&patient(), &name, value.as_bytes()).await;
                    let leadership = leadership.expect("campaign");
                    let lost = leadership.lost_token();
                    let term = leadership.fencing_token();
                    // The leader read, while counted as the one inside.
                    let read = assert_leader(&*elector, &name, value.as_bytes(), term);
                    turns
                        .turn(term, "two leaders", async { drop(read.await) })
                        .await;
                    assert!(leadership.is_held(), "lost while leading");
                    leadership.resign().await.expect("resign");
                    assert!(!lost.is_cancelled(), "a resignation reported as a loss");
                }
            }));
        }
    }
    join(tasks).await;
    turns.assert_count((ELECTORS * PER_ELECTOR) as u64 * ROUNDS);
    b.wait_clean().await;
    b.finish().await;
}

/// A leader that resigns hands over to the candidate waiting: it is
/// elected with a higher term and its value, and [`Elector::leader`]
/// names it; once it resigns too, nobody leads.
///
/// # Panics
/// When the handover does not happen or is not what the leader read says.
pub async fn resign_hands_over(b: &impl ElectionBackend) {
    let name = Key::from("handover");
    let (a, c) = (b.elector(), b.elector());
    let first = a.campaign(&patient(), &name, b"a").await.expect("campaign");
    let next = spawn(&c, &name, |c, name| async move {
        c.campaign(&patient(), &name, b"c").await
    });
    b.wait_candidates(&name, 1).await;
    assert!(!next.is_finished(), "elected while another leads");
    let term = first.fencing_token();
    first.resign().await.expect("resign");
    let second = next.await.expect("task").expect("elected");
    let t2 = second.fencing_token();
    assert!(t2 > term, "term {t2} after {term}");
    assert_leader(&*a, &name, b"c", t2).await;
    second.resign().await.expect("resign");
    assert_eq!(a.leader(&name).await.expect("leader"), None);
    assert!(b.is_clean().await, "a resignation left something behind");
    b.finish().await;
}

/// What observers read of a leader: nobody before the first campaign; the
/// campaign's value, its term and this process as owner while it leads;
/// each proclaimed value after; an oversized value refused with
/// [`Error::InvalidValue`] and the value kept; nobody after it resigned.
///
/// # Panics
/// When a read or an error is not as described.
pub async fn proclaim_changes_the_value(b: &impl ElectionBackend) {
    let name = Key::from("proclaim");
    let elector = b.elector();
    assert_eq!(elector.leader(&name).await.expect("leader"), None);
    let leadership = elector.campaign(&patient(), &name, b"v1").await;
    let leadership = leadership.expect("campaign");
    let term = leadership.fencing_token();
    let leader = assert_leader(&*elector, &name, b"v1", term).await;
    assert_eq!(leader.name, "proclaim");
    if b.records_owner() {
        let pid = leader.owner.pid;
        assert_eq!(pid, Some(std::process::id()), "{:?}", leader.owner);
        assert!(leader.since.is_some(), "when it was elected");
    }
    for value in [&b"v2"[..], b"", &[0, 10, 255]] {
        leadership.proclaim(value).await.expect("proclaim");
        let now = assert_leader(&*elector, &name, value, term).await;
        assert_eq!(now.since, leader.since, "elected once");
    }
    let big = vec![b'x'; MAX_VALUE_LEN + 1];
    let e = leadership.proclaim(&big).await.expect_err("too long");
    assert!(matches!(e, Error::InvalidValue { .. }), "{e}");
    assert!(e.to_string().contains("at most"), "{e}");
    // The refused value did not replace the old.
    assert_leader(&*elector, &name, &[0, 10, 255], term).await;
    leadership.resign().await.expect("resign");
    assert_eq!(elector.leader(&name).await.expect("leader"), None);
    assert!(b.is_clean().await, "a resignation left something behind");
    b.finish().await;
}
