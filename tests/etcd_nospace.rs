//! An etcd out of space (its NOSPACE alarm raised: the database reached
//! `--quota-backend-bytes`) refuses every write but deletes until an
//! operator frees space. Locking then fails at once with an error that says
//! so, instead of retrying for ever; an unlock still frees the lock.
//!
//! The alarm is raised through etcd's own maintenance API, on an etcd of
//! this test's own (the alarm stops every writer of the cluster).

mod support;

use std::time::Duration;

use etcd_client::{AlarmAction, AlarmOptions, AlarmType, Client};
use fairlock::conformance::patient;
use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Key, Locker};

/// Raises (`on`) or clears etcd's NOSPACE alarm, as etcd itself raises it
/// when its database is full and `etcdctl alarm disarm` clears it.
async fn no_space(client: &mut Client, on: bool) {
    let member = client
        .status()
        .await
        .expect("status")
        .header()
        .expect("header")
        .member_id();
    let mut options = AlarmOptions::new();
    options.with_member(member);
    let action = if on {
        AlarmAction::Activate
    } else {
        AlarmAction::Deactivate
    };
    client
        .alarm(action, AlarmType::Nospace, Some(options))
        .await
        .expect("alarm");
}

/// Every failure `lock` or `try_lock` reports for the out-of-space etcd
/// names the cause and the way out.
fn assert_says_no_space(err: &fairlock::Error) {
    let text = format!("{err:?}");
    assert!(text.contains("out of space"), "{text}");
    assert!(text.contains("etcdctl alarm disarm"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_space_fails_fast_and_unlock_still_frees() {
    for fair in [true, false] {
        let server = support::Etcd::start();
        let mut client = server.client().await;
        let config = EtcdConfig::new([server.endpoint.clone()])
            .with_prefix(support::unique_prefix("nospace"))
            .with_ttl(Duration::from_secs(2));
        let holder = EtcdLocker::connect(config.clone(), fair)
            .await
            .expect("connect");
        let waiter = EtcdLocker::connect(config.clone(), fair)
            .await
            .expect("connect");
        let (key, other) = (Key::from("k"), Key::from("other"));
        let held = holder
            .try_lock(&key)
            .await
            .expect("try_lock")
            .expect("free");
        let wait = {
            let key = key.clone();
            tokio::spawn(async move { waiter.lock(&patient(), &key).await })
        };
        support::wait_for_count(
            &mut client,
            &format!("{}k/_OWNERS_/", config.prefix()),
            1,
            false,
        )
        .await;

        no_space(&mut client, true).await;
        // A locker with no lease yet (its grant is refused) and one with
        // a lease (its take is refused) both fail, and do not hang.
        let newcomer = EtcdLocker::connect(config.clone(), fair)
            .await
            .expect("connect");
        let limit = Duration::from_secs(60);
        for locker in [&newcomer, &holder] {
            let err = tokio::time::timeout(limit, locker.try_lock(&other))
                .await
                .expect("try_lock hung on an etcd out of space")
                .expect_err("etcd refuses writes");
            assert_says_no_space(&err);
        }
        // The handoff (a put) is refused, but the lock is freed; the
        // waiter then meets the refusal itself.
        tokio::time::timeout(limit, held.unlock())
            .await
            .expect("unlock hung on an etcd out of space")
            .expect("unlock frees the lock");
        let err = tokio::time::timeout(limit, wait)
            .await
            .expect("the waiter hung on an etcd out of space")
            .expect("task")
            .expect_err("etcd refuses writes");
        assert_says_no_space(&err);
        support::wait_for_count(&mut client, config.prefix(), 0, true).await;

        no_space(&mut client, false).await;
        let guard = newcomer
            .try_lock(&key)
            .await
            .expect("try_lock")
            .expect("free again once space is back");
        guard.unlock().await.expect("unlock");
        for locker in [holder, newcomer] {
            locker.close().await.expect("close");
        }
        support::wait_for_count(&mut client, config.prefix(), 0, true).await;
    }
}

/// Lockers on one connection send their writes together (see `batch.rs`),
/// but etcd prices a txn for its space quota by its top-level puts only: a
/// batch of takes, txns inside a txn, would pass an etcd out of space. The
/// batch carries a price, so etcd refuses it; its writes then go alone,
/// the takes are refused and the releases pass (they only delete).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_space_holds_for_writes_that_could_go_together() {
    const N: usize = 16;
    let server = support::Etcd::start();
    let mut client = server.client().await;
    let config =
        EtcdConfig::new([server.endpoint.clone()]).with_prefix(support::unique_prefix("nospace-b"));
    let first = EtcdLocker::connect(config.clone(), true)
        .await
        .expect("connect");
    let lockers: Vec<EtcdLocker> = (0..N).map(|_| first.another(true)).collect();
    let mut guards = Vec::new();
    for (i, locker) in lockers.iter().enumerate() {
        let key = Key::from(format!("held{i}"));
        guards.push(
            locker
                .try_lock(&key)
                .await
                .expect("try_lock")
                .expect("free"),
        );
    }
    no_space(&mut client, true).await;
    // Takes of other keys and releases, on their way at once.
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (locker, guard)) in lockers.iter().cloned().zip(guards).enumerate() {
        tasks.spawn(async move {
            let key = Key::from(format!("new{i}"));
            let (taken, released) = tokio::join!(locker.try_lock(&key), guard.unlock());
            (taken.map(|g| g.is_some()), released)
        });
    }
    let limit = Duration::from_secs(60);
    while let Some(done) = tokio::time::timeout(limit, tasks.join_next())
        .await
        .expect("hung on an etcd out of space")
    {
        let (taken, released) = done.expect("task");
        assert_says_no_space(&taken.expect_err("etcd refuses puts"));
        released.expect("an unlock only deletes: etcd still applies it");
    }
    support::wait_for_count(&mut client, config.prefix(), 0, true).await;
    no_space(&mut client, false).await;
    for locker in lockers {
        locker.close().await.expect("close");
    }
    first.close().await.expect("close");
}
