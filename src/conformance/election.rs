//! The checks of leader election, for backends with an [`Elector`]:
//! [`ElectionBackend`], the contract of such a backend under test, the
//! checks of who leads, and the
//! [`election_conformance_tests!`](crate::election_conformance_tests) macro.
//! Giving up and following an election: `election_watch.rs`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::deadline::patient;
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
///
/// # Examples
/// ```
/// # async fn example(backend: &impl fairlock::conformance::ElectionBackend) {
/// fairlock::conformance::election_order(backend).await;
/// # }
/// ```
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
        let elector = b.elector();
        let (key, elected) = (name.clone(), Arc::clone(&elected));
        tasks.push(tokio::spawn(async move {
            let value = format!("candidate {i}");
            let leadership = elector
                .campaign(&patient(), &key, value.as_bytes())
                .await
                .expect("campaign");
            assert!(leadership.is_held(), "a new leadership must lead");
            let leader = elector.leader(&key).await.expect("leader").expect("some");
            assert_eq!(leader.value, value.as_bytes(), "the leader read");
            assert_eq!(
                leader.fencing_token,
                leadership.fencing_token(),
                "the leader's term"
            );
            elected
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((i, leadership.fencing_token()));
            leadership.resign().await.expect("resign");
        }));
        b.wait_candidates(&name, i).await;
    }
    first.resign().await.expect("resign");
    for t in tasks {
        t.await.expect("candidate");
    }
    let elected = elected.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let order: Vec<usize> = elected.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        order,
        (0..=CANDIDATES).collect::<Vec<_>>(),
        "election order"
    );
    for pair in elected.windows(2) {
        assert!(
            pair[1].1 > pair[0].1,
            "term {} after {}",
            pair[1].1,
            pair[0].1
        );
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
///
/// # Examples
/// ```
/// # async fn example(backend: &impl fairlock::conformance::ElectionBackend) {
/// fairlock::conformance::one_leader_at_a_time(backend).await;
/// # }
/// ```
pub async fn one_leader_at_a_time(b: &impl ElectionBackend) {
    const ELECTORS: usize = 3;
    const PER_ELECTOR: usize = 2;
    const ROUNDS: u64 = 5;
    let name = Key::from("contended");
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicU32::new(0));
    let last_term = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for e in 0..ELECTORS {
        let elector = b.elector();
        for t in 0..PER_ELECTOR {
            let (elector, name) = (Arc::clone(&elector), name.clone());
            let (counter, inside, last_term) = (
                Arc::clone(&counter),
                Arc::clone(&inside),
                Arc::clone(&last_term),
            );
            tasks.push(tokio::spawn(async move {
                let value = format!("{e}/{t}");
                for _ in 0..ROUNDS {
                    let leadership = elector
                        .campaign(&patient(), &name, value.as_bytes())
                        .await
                        .expect("campaign");
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two leaders");
                    let lost = leadership.lost_token();
                    let term = leadership.fencing_token();
                    let before = last_term.swap(term, Ordering::SeqCst);
                    assert!(term > before, "term {term} after {before}");
                    let leader = elector.leader(&name).await.expect("leader").expect("some");
                    assert_eq!(
                        (leader.fencing_token, leader.value.as_slice()),
                        (term, value.as_bytes())
                    );
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await; // widen the race
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(leadership.is_held(), "lost while leading");
                    leadership.resign().await.expect("resign");
                    assert!(!lost.is_cancelled(), "a resignation reported as a loss");
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("task");
    }
    let want = (ELECTORS * PER_ELECTOR) as u64 * ROUNDS;
    assert_eq!(counter.load(Ordering::SeqCst), want, "lost updates");
    b.wait_clean().await;
    b.finish().await;
}

/// A leader that resigns hands over to the candidate waiting: it is
/// elected with a higher term and its value, and [`Elector::leader`]
/// names it; once it resigns too, nobody leads.
///
/// # Panics
/// When the handover does not happen or is not what the leader read says.
///
/// # Examples
/// ```
/// # async fn example(backend: &impl fairlock::conformance::ElectionBackend) {
/// fairlock::conformance::resign_hands_over(backend).await;
/// # }
/// ```
pub async fn resign_hands_over(b: &impl ElectionBackend) {
    let name = Key::from("handover");
    let (a, c) = (b.elector(), b.elector());
    let first = a.campaign(&patient(), &name, b"a").await.expect("campaign");
    let next = {
        let name = name.clone();
        tokio::spawn(async move { c.campaign(&patient(), &name, b"c").await })
    };
    b.wait_candidates(&name, 1).await;
    assert!(
        !next.is_finished(),
        "a candidate elected while another leads"
    );
    let term = first.fencing_token();
    first.resign().await.expect("resign");
    let second = next.await.expect("task").expect("elected");
    assert!(
        second.fencing_token() > term,
        "term {} after {term}",
        second.fencing_token()
    );
    let leader = a.leader(&name).await.expect("leader").expect("some");
    assert_eq!(
        (leader.value.as_slice(), leader.fencing_token),
        (&b"c"[..], second.fencing_token())
    );
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
///
/// # Examples
/// ```
/// # async fn example(backend: &impl fairlock::conformance::ElectionBackend) {
/// fairlock::conformance::proclaim_changes_the_value(backend).await;
/// # }
/// ```
pub async fn proclaim_changes_the_value(b: &impl ElectionBackend) {
    let name = Key::from("proclaim");
    let elector = b.elector();
    assert_eq!(elector.leader(&name).await.expect("leader"), None);
    let leadership = elector
        .campaign(&patient(), &name, b"v1")
        .await
        .expect("campaign");
    let leader = elector.leader(&name).await.expect("leader").expect("some");
    assert_eq!(leader.name, "proclaim");
    assert_eq!(
        (leader.value.as_slice(), leader.fencing_token),
        (&b"v1"[..], leadership.fencing_token())
    );
    assert_eq!(
        leader.owner.pid,
        Some(std::process::id()),
        "{:?}",
        leader.owner
    );
    assert!(leader.since.is_some(), "when it was elected");
    for value in [&b"v2"[..], b"", &[0, 10, 255]] {
        leadership.proclaim(value).await.expect("proclaim");
        let now = elector.leader(&name).await.expect("leader").expect("some");
        assert_eq!(
            (now.value.as_slice(), now.fencing_token),
            (value, leadership.fencing_token())
        );
        assert_eq!(now.since, leader.since, "elected once");
    }
    let big = vec![b'x'; MAX_VALUE_LEN + 1];
    let e = leadership.proclaim(&big).await.expect_err("too long");
    assert!(matches!(e, Error::InvalidValue { .. }), "{e}");
    assert!(e.to_string().contains("at most"), "{e}");
    let kept = elector.leader(&name).await.expect("leader").expect("some");
    assert_eq!(
        kept.value,
        [0, 10, 255],
        "the refused value replaced the old"
    );
    leadership.resign().await.expect("resign");
    assert_eq!(elector.leader(&name).await.expect("leader"), None);
    assert!(b.is_clean().await, "a resignation left something behind");
    b.finish().await;
}

/// Declares the election checks as tests: a module
/// `election_conformance_suite` with one `#[test]` per check (8 tests),
/// each calling `$make(name)` for a fresh
/// [`ElectionBackend`](crate::conformance::ElectionBackend), as
/// [`conformance_tests!`](crate::conformance_tests) does for lockers.
#[macro_export]
macro_rules! election_conformance_tests {
    ($make:path) => {
        mod election_conformance_suite {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance as suite;

            #[test]
            fn election_order() {
                suite::run(async { suite::election_order(&$make("el-order").await).await });
            }
            #[test]
            fn one_leader_at_a_time() {
                suite::run(async { suite::one_leader_at_a_time(&$make("el-one").await).await });
            }
            #[test]
            fn resign_hands_over() {
                suite::run(async { suite::resign_hands_over(&$make("el-resign").await).await });
            }
            #[test]
            fn proclaim_changes_the_value() {
                suite::run(async {
                    suite::proclaim_changes_the_value(&$make("el-proclaim").await).await
                });
            }
            #[test]
            fn observers_see_every_change() {
                suite::run(async {
                    suite::observers_see_every_change(&$make("el-observe").await).await
                });
            }
            #[test]
            fn giving_up_a_campaign_leaves_nothing() {
                suite::run(async {
                    suite::giving_up_a_campaign_leaves_nothing(&$make("el-give-up").await).await
                });
            }
            #[test]
            fn dropping_a_leadership_hands_over() {
                suite::run(async {
                    suite::dropping_a_leadership_hands_over(&$make("el-drop").await).await
                });
            }
            #[test]
            fn election_bad_input() {
                suite::run(async { suite::election_bad_input(&$make("el-bad").await).await });
            }
        }
    };
}
