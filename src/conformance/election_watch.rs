//! The election checks of following an election, of giving up and of bad
//! input (the rest: `election.rs`).

use std::time::Duration;

use super::common::{assert_err, assert_leader, patient, short, spawn};
use super::election::ElectionBackend;
use crate::{Context, Error, Key, Leader, LeaderWatch, MAX_KEY_LEN, MAX_VALUE_LEN};

/// The next state of `watch`, within the guard deadline of the checks.
async fn next_state(watch: &mut LeaderWatch) -> Option<Leader> {
    tokio::time::timeout(Duration::from_secs(120), watch.next())
        .await
        .expect("no change within two minutes")
        .expect("the watch failed")
}

/// Reads `watch` until its state is `None` after one whose value is
/// `last`; returns the values of the leaders seen, with their terms.
async fn values_until_none_after(watch: &mut LeaderWatch, last: &[u8]) -> Vec<(Vec<u8>, u64)> {
    let mut seen: Vec<(Vec<u8>, u64)> = Vec::new();
    loop {
        match next_state(watch).await {
            Some(leader) => seen.push((leader.value, leader.fencing_token)),
            None if seen.last().is_some_and(|(v, _)| v == last) => return seen,
            None => {}
        }
    }
}

/// An observer that starts before anyone leads sees, in order: nobody,
/// the first leader with its campaign value, its proclaimed value, the
/// next leader (elected when the first resigned) with its values, and
/// nobody once that one resigned; between two leaders it may see nobody
/// (the handover), never anything else. An observer that starts while
/// someone leads sees that leader first.
///
/// # Panics
/// When a change is missing, out of order or unexpected.
pub async fn observers_see_every_change(b: &impl ElectionBackend) {
    let name = Key::from("observed");
    let (a, c, follower) = (b.elector(), b.elector(), b.elector());
    let mut early = follower.observe(&name).await.expect("observe");
    assert_eq!(next_state(&mut early).await, None, "nobody leads yet");
    let first = a.campaign(&patient(), &name, b"a1").await;
    let first = first.expect("campaign");
    first.proclaim(b"a2").await.expect("proclaim");
    let mut late = follower.observe(&name).await.expect("observe");
    let now = next_state(&mut late).await.expect("a leader");
    let read = (now.value.as_slice(), now.fencing_token);
    assert_eq!(read, (&b"a2"[..], first.fencing_token()));
    let next = spawn(&c, &name, |c, name| async move {
        let second = c.campaign(&patient(), &name, b"c1").await;
        let second = second.expect("campaign");
        second.proclaim(b"c2").await.expect("proclaim");
        second.resign().await.expect("resign");
    });
    b.wait_candidates(&name, 1).await;
    let (t1, a1) = (first.fencing_token(), b"a1".to_vec());
    first.resign().await.expect("resign");
    next.await.expect("second leader");
    let seen = values_until_none_after(&mut early, b"c2").await;
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(seen[..2], [(a1, t1), (b"a2".to_vec(), t1)], "{seen:?}");
    let t2 = seen[2].1;
    assert!(t2 > t1, "term {t2} after {t1}");
    let second = [(b"c1".to_vec(), t2), (b"c2".to_vec(), t2)];
    assert_eq!(seen[2..], second, "{seen:?}");
    let rest = values_until_none_after(&mut late, b"c2").await;
    assert_eq!(rest, seen[2..], "the late observer");
    b.wait_clean().await;
    b.finish().await;
}

/// A campaign that times out, one that is cancelled while in line, and
/// one whose future is dropped all leave the line: the first two before
/// they return ([`ElectionBackend::is_clean`] holds as soon as the leader
/// resigned), the dropped one in the background; the errors are
/// [`Error::Timeout`] and [`Error::Cancelled`]. A later candidate is then
/// elected as usual.
///
/// # Panics
/// When an error is another or anything is left behind.
pub async fn giving_up_a_campaign_leaves_nothing(b: &impl ElectionBackend) {
    let name = Key::from("give-up");
    let (leader, other) = (b.elector(), b.elector());
    let held = leader.campaign(&patient(), &name, b"l").await;
    let held = held.expect("campaign");
    let e = other.campaign(&short(200), &name, b"t").await;
    assert_err!(e, Error::Timeout { .. }, "must time out");
    let (ctx, cancel) = Context::background().with_cancel();
    let cancelled = spawn(&other, &name, |other, name| async move {
        other.campaign(&ctx, &name, b"c").await
    });
    b.wait_candidates(&name, 1).await;
    cancel.cancel();
    let e = cancelled.await.expect("task");
    assert_err!(e, Error::Cancelled { .. }, "must be cancelled");
    held.resign().await.expect("resign");
    let clean = b.is_clean().await;
    assert!(clean, "a campaign that gave up left something behind");

    let held = leader.campaign(&patient(), &name, b"l").await;
    let held = held.expect("campaign");
    let dropped = spawn(&other, &name, |other, name| async move {
        other.campaign(&patient(), &name, b"d").await
    });
    b.wait_candidates(&name, 1).await;
    dropped.abort();
    assert!(dropped.await.expect_err("aborted").is_cancelled());
    held.resign().await.expect("resign");
    b.wait_clean().await;
    let later = other.campaign(&patient(), &name, b"x").await;
    later.expect("campaign").resign().await.expect("resign");
    b.wait_clean().await;
    b.finish().await;
}

/// A leadership dropped without `resign` hands over in the background:
/// the waiting candidate is elected, and observers see its value.
///
/// # Panics
/// When the candidate is never elected (the guard deadline) or anything is
/// left behind.
pub async fn dropping_a_leadership_hands_over(b: &impl ElectionBackend) {
    let name = Key::from("dropped");
    let (a, c) = (b.elector(), b.elector());
    let first = a.campaign(&patient(), &name, b"a").await.expect("campaign");
    drop(first);
    let second = c.campaign(&patient(), &name, b"c").await.expect("campaign");
    assert_leader(&*a, &name, b"c", second.fencing_token()).await;
    second.resign().await.expect("resign");
    b.wait_clean().await;
    b.finish().await;
}

/// Bad names (empty, with the reserved segment, too long) get
/// [`Error::InvalidKey`] from `campaign`, `leader` and `observe`; a value
/// over [`MAX_VALUE_LEN`] gets [`Error::InvalidValue`] saying the limit;
/// a campaign with a context already cancelled gets [`Error::Cancelled`].
/// Nothing is written.
///
/// # Panics
/// When an error is missing or another, or anything is left behind.
pub async fn election_bad_input(b: &impl ElectionBackend) {
    let elector = b.elector();
    let long = "n".repeat(MAX_KEY_LEN + 1);
    for (name, says) in [
        ("", "empty"),
        ("a/_OWNERS_", "reserved"),
        (long.as_str(), "at most"),
    ] {
        let name = Key::from(name);
        let bad = |e: Error| matches!(&e, Error::InvalidKey { .. }) && e.to_string().contains(says);
        let e = elector.campaign(&patient(), &name, b"v").await;
        assert!(bad(e.expect_err("bad")), "campaign {says}");
        assert!(bad(elector.leader(&name).await.expect_err("bad")), "leader");
        assert!(
            bad(elector.observe(&name).await.expect_err("bad")),
            "observe"
        );
    }
    let big = vec![b'x'; MAX_VALUE_LEN + 1];
    let e = elector.campaign(&patient(), &Key::from("ok"), &big).await;
    let e = e.expect_err("too long");
    assert!(matches!(e, Error::InvalidValue { .. }), "{e}");
    assert!(e.to_string().contains(&MAX_VALUE_LEN.to_string()), "{e}");
    let (ctx, cancel) = Context::background().with_cancel();
    cancel.cancel();
    let e = elector.campaign(&ctx, &Key::from("ok"), b"v").await;
    assert_err!(e, Error::Cancelled { .. }, "cancelled");
    let clean = b.is_clean().await;
    assert!(clean, "a refused campaign left something behind");
    b.finish().await;
}
