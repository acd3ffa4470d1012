//! etcd failing under the lockers: a 3-member cluster losing its
//! leader or a follower, and a single etcd that stalls while a write is in
//! flight. Tests start their own servers (see tests/support).

mod support;

use std::sync::Arc;
use std::time::Duration;

use fairlock::conformance::patient;
use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Error, Key, Locker};
use support::chain;
use support::cluster::Cluster;

/// Two lockers of one mode take turns on one key, `rounds` times each;
/// every `lock` must succeed and tokens must grow.
async fn take_turns(lockers: &[Arc<EtcdLocker>], key: &Key, rounds: usize) {
    let mut tasks = Vec::new();
    for locker in lockers {
        let (locker, key) = (Arc::clone(locker), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut last = 0;
            for _ in 0..rounds {
                let guard = locker.lock(&patient(), &key).await.expect("lock");
                assert!(guard.fencing_token() > last, "tokens must grow");
                last = guard.fencing_token();
                // Released by drop if etcd fails it; a lost lock is no error
                // of `lock`, which is what this test is about.
                let _ = guard.unlock().await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
}

/// `lock` rides out a member that is killed (a follower, then the leader
/// during its election): requests that fail on the dead member or during
/// the election are retried instead of surfacing as errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_rides_out_the_loss_of_a_member() {
    let mut cluster = Cluster::start(3).expect("start a 3-member cluster");
    for fair in [true, false] {
        let config = EtcdConfig::new(cluster.endpoints())
            .with_prefix(support::unique_prefix("members"))
            .with_ttl(Duration::from_secs(2));
        let mut lockers = Vec::new();
        for _ in 0..2 {
            let locker = EtcdLocker::connect(config.clone(), fair)
                .await
                .expect("connect");
            lockers.push(Arc::new(locker));
        }
        let key = Key::from("k");
        take_turns(&lockers, &key, 3).await;

        let leader = cluster
            .wait_leader(Duration::from_secs(30))
            .await
            .expect("leader");
        for victim in [(leader + 1) % 3, leader] {
            cluster.kill(victim).expect("kill");
            take_turns(&lockers, &key, 5).await;
            cluster.restart(victim).expect("restart");
            cluster
                .wait_leader(Duration::from_secs(30))
                .await
                .expect("leader after restart");
        }

        for locker in lockers {
            let locker = Arc::try_unwrap(locker).ok().expect("no other owner");
            locker.close().await.expect("close");
        }
        let mut client = etcd_client::Client::connect(cluster.endpoints(), None)
            .await
            .expect("connect");
        support::wait_for_count(&mut client, config.prefix(), 0, true).await;
    }
}

/// A write that gets no answer in time may still be applied later: with
/// both followers stopped, the leader takes the txn into its log but cannot
/// commit it; the client gives up after its request timeout (shorter than
/// the election timeout, so the leader stays leader), and the txn is
/// applied when the followers wake. Whatever it wrote must not keep the
/// lock from others (the attempt's cleanup and its retired lease see to
/// that), and nothing may be left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_stalled_without_quorum_leaves_the_lock_free() {
    let cluster = Cluster::start(3).expect("start a 3-member cluster");
    let leader = cluster
        .wait_leader(Duration::from_secs(30))
        .await
        .expect("leader");
    let followers = [(leader + 1) % 3, (leader + 2) % 3];
    let prefix = support::unique_prefix("late");
    let config = EtcdConfig::new([cluster.endpoint(leader)])
        .with_prefix(prefix.clone())
        .with_ttl(Duration::from_secs(2));
    let stalled = EtcdLocker::connect(
        config
            .clone()
            .with_request_timeout(Duration::from_millis(200)),
        false,
    )
    .await
    .expect("connect");
    let other = EtcdLocker::connect(config.clone(), false)
        .await
        .expect("connect");
    let key = Key::from("k");
    // `stalled` has its session lease before the followers stop.
    stalled.lease_id().await.expect("lease");

    for &f in &followers {
        cluster.signal(f, libc::SIGSTOP).expect("SIGSTOP follower");
    }
    let err = stalled.try_lock(&key).await;
    for &f in &followers {
        cluster.signal(f, libc::SIGCONT).expect("SIGCONT follower");
    }
    // The first txn gets no answer; the retries (on a fresh lease, as the
    // old one was retired) get none either.
    let err = err.expect_err("no quorum, so the txn cannot be answered");
    assert!(
        chain(&err).contains("no answer within the request timeout"),
        "{}",
        chain(&err)
    );

    let mut client = etcd_client::Client::connect([cluster.endpoint(leader)], None)
        .await
        .expect("connect");
    // `stalled` lives on while others take the lock.
    let guard = other.lock(&patient(), &key).await.expect("lock");
    guard.unlock().await.expect("unlock");
    stalled.close().await.expect("close");
    other.close().await.expect("close");
    support::wait_for_count(&mut client, &prefix, 0, true).await;
}

/// A cluster without a leader (two of three members down): connecting,
/// `lock` and `try_lock` fail with an error that says so (`lock` after
/// retrying for two request timeouts) instead of hanging; once the members
/// are back the same locker works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_a_leader_is_an_error_until_it_has_one() {
    let mut cluster = Cluster::start(3).expect("start a 3-member cluster");
    let prefix = support::unique_prefix("leaderless");
    let config = EtcdConfig::new(cluster.endpoints())
        .with_prefix(prefix.clone())
        .with_ttl(Duration::from_secs(2))
        .with_connect_timeout(Duration::from_secs(2))
        .with_request_timeout(Duration::from_millis(500));
    let locker = EtcdLocker::connect(config.clone(), true)
        .await
        .expect("connect");
    cluster.kill(1).expect("kill");
    cluster.kill(2).expect("kill");
    cluster
        .wait_no_leader(0, Duration::from_secs(30))
        .await
        .expect("member 0 alone has no leader");

    let err = EtcdLocker::connect(config.clone(), true)
        .await
        .err()
        .expect("no leader");
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(chain(&err).contains("no leader"), "{}", chain(&err));
    let key = Key::from("k");
    let err = locker.try_lock(&key).await.expect_err("no leader");
    assert!(chain(&err).contains("no leader"), "{}", chain(&err));
    let err = locker.lock(&patient(), &key).await.expect_err("no leader");
    assert!(!err.is_gave_up(), "{err}");
    assert!(chain(&err).contains("no leader"), "{}", chain(&err));

    cluster.restart(1).expect("restart");
    cluster.restart(2).expect("restart");
    cluster
        .wait_leader(Duration::from_secs(30))
        .await
        .expect("leader");
    let guard = locker.lock(&patient(), &key).await.expect("lock");
    guard.unlock().await.expect("unlock");
    locker.close().await.expect("close");
    let mut client = etcd_client::Client::connect(cluster.endpoints(), None)
        .await
        .expect("connect");
    support::wait_for_count(&mut client, &prefix, 0, true).await;
}

/// A waiter whose session lease cannot be renewed for a TTL (the only
/// member it talks to is stopped) held nothing: `lock` queues again on a
/// fresh lease once the member is back, instead of failing with
/// `SessionLost`. (A lease that etcd itself removes still fails the
/// waiter: `waiter_whose_queue_entry_vanishes_fails` in tests/etcd.rs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_lease_lapses_queues_again() {
    let cluster = Cluster::start(3).expect("start a 3-member cluster");
    let leader = cluster
        .wait_leader(Duration::from_secs(30))
        .await
        .expect("leader");
    let (follower, other) = ((leader + 1) % 3, (leader + 2) % 3);
    for fair in [true, false] {
        let prefix = support::unique_prefix("lapse");
        let config = |member: usize| {
            EtcdConfig::new([cluster.endpoint(member)])
                .with_prefix(prefix.clone())
                .with_ttl(Duration::from_secs(2))
        };
        let holder = EtcdLocker::connect(config(other), fair)
            .await
            .expect("connect");
        let waiter = Arc::new(
            EtcdLocker::connect(config(follower), fair)
                .await
                .expect("connect"),
        );
        let key = Key::from("k");
        let held = holder
            .try_lock(&key)
            .await
            .expect("try_lock")
            .expect("free");
        // A lock of the waiter's own, to learn when its lease lapses.
        let canary = waiter
            .try_lock(&Key::from("canary"))
            .await
            .expect("try_lock")
            .expect("free");
        let wait = {
            let (waiter, key) = (Arc::clone(&waiter), key.clone());
            tokio::spawn(async move { waiter.lock(&patient(), &key).await })
        };
        let mut client = etcd_client::Client::connect([cluster.endpoint(other)], None)
            .await
            .expect("connect");
        support::wait_for_count(&mut client, &format!("{prefix}k/_OWNERS_/"), 1, false).await;

        cluster.signal(follower, libc::SIGSTOP).expect("SIGSTOP");
        canary.lost().await;
        cluster.signal(follower, libc::SIGCONT).expect("SIGCONT");
        held.unlock().await.expect("unlock");

        let guard = wait.await.expect("task").expect("granted on a fresh lease");
        guard.unlock().await.expect("unlock");
        drop(canary);
        holder.close().await.expect("close");
        Arc::try_unwrap(waiter)
            .ok()
            .expect("no other owner")
            .close()
            .await
            .expect("close");
        support::wait_for_count(&mut client, &prefix, 0, true).await;
    }
}
