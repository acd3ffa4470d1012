//! Every transaction of the protocol, rendered as text (`render.rs`): a
//! change to a compare or an op shows up as a diff of these tests. The
//! keys: prefix `/p/`, lock `k`, locker `id`.

mod render;

use etcd_client::{Txn, TxnOp};

use super::keys::{LockKeys, Successor};
use super::line::{Entry, LineKeys};
use super::release::{Holder, release_round};
use super::{abandon, election, etcd_layout, fence, line_txn, queue, release, take};
use crate::Key;
use crate::semantics::admission::Share;
use crate::semantics::fairness::Fairness::{Fair, Unfair};

fn keys() -> LockKeys {
    LockKeys::new("/p/", &Key::from("k"))
}

fn line() -> LineKeys {
    LineKeys::new("/p/", &Key::from("k"))
}

const QF: &[u8] = b"/p/k/_OWNERS_/id/f0";

fn successor(name: &str, create_revision: i64) -> Successor {
    Successor {
        key: format!("/p/k/_OWNERS_/{name}").into_bytes(),
        create_revision,
        lease: 9,
        value: b"w".to_vec(),
    }
}

/// A reader's entry waiting in the line.
fn waiting(name: &str, create_revision: i64) -> Entry {
    Entry {
        key: format!("/p/k/_OWNERS_/{name}").into_bytes(),
        share: Share::Read,
        create_revision,
        version: 1,
        main: true,
    }
}

fn all() -> Vec<(&'static str, Txn)> {
    let k = keys();
    let held = (QF.to_vec(), 40);
    let holder = Holder {
        keys: &k,
        token: 50,
        queue: Some(&held),
    };
    let other = LockKeys::new("/p/", &Key::from("m"));
    let other_held = (b"/p/m/_OWNERS_/id/f0".to_vec(), 40);
    let name = etcd_layout::NameKeys::new("/p/", "k");
    let contender = name.contender(0x7a);
    let l = line();
    let reader = l.entries(Share::Read, "id", 0);
    vec![
        ("enqueue fair", take::enqueue(&k, Fair, (b"v", 7), QF)),
        (
            "enqueue unfair",
            take::enqueue(&k, Unfair, (b"v", 7), b"/p/k/_OWNERS_/id/u0"),
        ),
        (
            "take fair",
            take::take(&k, Fair, (b"v", 7), (QF, 42)).into_txn(),
        ),
        (
            "take unfair",
            take::take(&k, Unfair, (b"v", 7), (b"/p/k/_OWNERS_/id/u0", 42)).into_txn(),
        ),
        ("try_lock fair", take::try_take(&k, Fair, (b"v", 7))),
        ("try_lock unfair", take::try_take(&k, Unfair, (b"v", 7))),
        (
            "try_lock past foreign",
            take::take_past_foreign(&k, (b"v", 7), 30),
        ),
        ("place check", queue::place_check(&k, QF, 42).into_txn()),
        ("place glance", queue::place_glance(&k, QF).into_txn()),
        ("vigil head check", queue::head_check(&k, None).into_txn()),
        (
            "vigil head check, next batch",
            queue::head_check(&k, Some(60)).into_txn(),
        ),
        (
            "release to fair",
            release_round(holder, &[successor("a/f1", 60), successor("b/f2", 61)], 40).txn(),
        ),
        (
            "release to unfair",
            release_round(holder, &[successor("a/u1", 60)], 40).txn(),
        ),
        ("release to nobody", release_round(holder, &[], 40).txn()),
        (
            "release together (lock_all)",
            release::release_together(&[
                release_round(holder, &[successor("a/f1", 60)], 40),
                release_round(
                    Holder {
                        keys: &other,
                        token: 50,
                        queue: Some(&other_held),
                    },
                    &[],
                    40,
                ),
            ])
            .0,
        ),
        ("free", release::free(holder)),
        ("serve read", release::serve_read(&k)),
        ("abandon", abandon::abandon(&k, b"v", Some(QF))),
        (
            "clear a lost holding",
            abandon::clear_holding(&k.lock, 50, Some(&held)).into_txn(),
        ),
        (
            "fenced",
            fence::fenced(fence::fence(&k.lock, 50), Txn::new()),
        ),
        ("proclaim", election::proclaim(&k, 50, 7, b"R")),
        ("retract", election::retract(&k, 50)),
        ("who leads", election::read_leader(&k).into_txn()),
        (
            "join read",
            line_txn::join(&l, Share::Read, &reader, (b"v", 7)),
        ),
        (
            "try_join write",
            line_txn::try_join(
                &l,
                Share::Write,
                &l.entries(Share::Write, "id", 0),
                (b"v", 7),
            ),
        ),
        (
            "line check",
            line_txn::check(&l, Share::Read, &reader[0], 42).into_txn(),
        ),
        ("self grant", line_txn::self_grant(&reader[0], 42)),
        (
            "leave",
            line_txn::leave(
                &l,
                Share::Read,
                &reader[0],
                line_txn::held_since(&reader[0], 50),
            ),
        ),
        (
            "line check, next batch",
            line_txn::check_more(&l, Share::Read, 42, 30).into_txn(),
        ),
        (
            "departure, next batch",
            line_txn::head_more(&l, Share::Read, (30, 55)),
        ),
        (
            "admit",
            line_txn::admit(&[waiting("r/a/0", 43), waiting("r/b/0", 44)]),
        ),
        (
            "etcd layout: enqueue",
            etcd_layout::enqueue(&name, &contender, b"v", 0x7a).into_txn(),
        ),
        (
            "etcd layout: try_lock",
            etcd_layout::try_take(&name, &contender, b"v", 0x7a),
        ),
        (
            "etcd layout: release",
            etcd_layout::release(&contender, 42).into_txn(),
        ),
        (
            "etcd layout: give up unanswered",
            etcd_layout::give_up_unanswered(&contender, 0x7a).into_txn(),
        ),
        (
            "etcd layout: proclaim",
            etcd_layout::proclaim(&contender, 42, b"w", 0x7a).into_txn(),
        ),
        (
            "etcd layout: ahead",
            etcd_layout::ahead(&name, &contender, 42).into_txn(),
        ),
        (
            "etcd layout: first (a read)",
            Txn::new().and_then([TxnOp::get(
                name.dir.clone(),
                Some(etcd_layout::first(&name, None)),
            )]),
        ),
        (
            "etcd layout: all (a read)",
            Txn::new().and_then([TxnOp::get(
                name.dir.clone(),
                Some(etcd_layout::all(name.end())),
            )]),
        ),
    ]
}

/// The protocol's transactions, as `expected.txt` has them. After a
/// deliberate change to the protocol, rewrite `expected.txt` with
/// `FAIRLOCK_SPEC_WRITE=1 cargo test --all-features --lib spec_tests`
/// (and update the spec in `mod.rs`): its diff is the change.
#[test]
fn every_txn_is_as_the_spec_has_it() {
    let now: String = all()
        .into_iter()
        .map(|(name, t)| format!("=== {name}\n{}\n", render::txn(&t)))
        .collect();
    if std::env::var_os("FAIRLOCK_SPEC_WRITE").is_some() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/etcd/protocol/spec_tests/expected.txt"
        );
        std::fs::write(path, &now).expect("write expected.txt");
        return;
    }
    let expected = include_str!("expected.txt");
    for (now, expected) in now.split("=== ").zip(expected.split("=== ")) {
        assert_eq!(now, expected, "a txn changed; all of them now:\n{now}");
    }
    assert_eq!(
        now, expected,
        "txns were added or removed; all of them now:\n{now}"
    );
}
