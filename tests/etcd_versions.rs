//! The etcd versions users run that this machine has no binary of:
//! etcd 3.7's keys-only answers, emulated by the relay in
//! `support/emulate.rs` in front of a real etcd. First that the relay
//! answers as etcd 3.7 does (so the rounds run through it test what they
//! claim), then the conformance suite and fair order through it.

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use etcd_client::{Client, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp};
use fairlock::conformance::patient;
use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Context, Key, Locker};
use support::emulate::{Relay, Version};
use support::etcd_backend::EtcdBackend;

/// One relay answering as etcd 3.7 in front of the shared etcd.
fn relay() -> &'static Relay {
    static RELAY: OnceLock<Relay> = OnceLock::new();
    RELAY.get_or_init(|| Relay::start(&support::shared().direct, Version::V3_7))
}

async fn client(endpoint: &str) -> Client {
    Client::connect([endpoint], None).await.expect("connect")
}

/// The lease and value a read of `key` answered with.
fn first(kvs: &[etcd_client::KeyValue]) -> (i64, Vec<u8>) {
    let kv = kvs.first().expect("the key exists");
    (kv.lease(), kv.value().to_vec())
}

#[tokio::test]
async fn relay_answers_keys_only_ranges_as_etcd_3_7() {
    let prefix = support::unique_prefix("relay");
    let key = format!("{prefix}k");
    let mut direct = client(&support::shared().direct).await;
    let mut relayed = client(&relay().endpoint).await;
    let lease = direct.lease_grant(30, None).await.expect("grant").id();
    direct
        .put(key.as_str(), "v", Some(PutOptions::new().with_lease(lease)))
        .await
        .expect("put");
    let keys_only = || GetOptions::new().with_keys_only();

    // The real etcd (3.4 or 3.5) tells a keys-only read the lease.
    let resp = direct
        .get(key.as_str(), Some(keys_only()))
        .await
        .expect("get");
    assert_eq!(
        first(resp.kvs()).0,
        lease,
        "etcd before 3.7 keeps the lease"
    );

    // Through the relay: no lease, as etcd 3.7 answers.
    let before = relay().stripped();
    let resp = relayed
        .get(key.as_str(), Some(keys_only()))
        .await
        .expect("get");
    assert_eq!(
        first(resp.kvs()),
        (0, Vec::new()),
        "keys-only through the relay"
    );
    assert_eq!(resp.kvs()[0].key(), key.as_bytes(), "the key is kept");
    assert!(relay().stripped() > before);

    // A full read, and a keys-only read sorted by value, keep both.
    let resp = relayed.get(key.as_str(), None).await.expect("get");
    assert_eq!(first(resp.kvs()), (lease, b"v".to_vec()));
    let by_value = keys_only().with_sort(SortTarget::Value, SortOrder::Ascend);
    let resp = relayed
        .get(key.as_str(), Some(by_value))
        .await
        .expect("get");
    assert_eq!(
        first(resp.kvs()).0,
        lease,
        "sorted by value: not the fast path"
    );

    // In a txn: the keys-only range of the branch that ran, nested too.
    let ops = || {
        [
            TxnOp::get(key.as_str(), Some(keys_only())),
            TxnOp::get(key.as_str(), None),
            TxnOp::txn(Txn::new().and_then([TxnOp::get(key.as_str(), Some(keys_only()))])),
        ]
    };
    for txn in [
        Txn::new().and_then(ops()),
        Txn::new()
            .when([etcd_client::Compare::version(
                key.as_str(),
                etcd_client::CompareOp::Equal,
                0,
            )])
            .or_else(ops()),
    ] {
        let resp = relayed.txn(txn).await.expect("txn");
        let ranges: Vec<_> = resp
            .op_responses()
            .into_iter()
            .map(|op| match op {
                etcd_client::TxnOpResponse::Get(g) => first(g.kvs()).0,
                etcd_client::TxnOpResponse::Txn(t) => match t.op_responses().into_iter().next() {
                    Some(etcd_client::TxnOpResponse::Get(g)) => first(g.kvs()).0,
                    _ => panic!("the nested range"),
                },
                _ => panic!("a range"),
            })
            .collect();
        assert_eq!(ranges, [0, lease, 0], "keys-only, full, nested keys-only");
    }
    direct.lease_revoke(lease).await.expect("revoke");
}

/// A round of the tests with `FAIRLOCK_ETCD_EMULATE` set (scripts/test.sh
/// runs one) reaches every etcd through a relay that answers as the named
/// version: here, the shared one.
#[tokio::test]
async fn an_emulating_round_reaches_etcd_through_the_relay() {
    let Some(version) = Version::from_env() else {
        return; // an ordinary round: etcd answers as itself
    };
    assert_eq!(version, Version::V3_7);
    let server = support::shared();
    let relay = server
        .relay()
        .expect("the shared etcd answers through a relay");
    assert_eq!(server.endpoint, relay.endpoint);
    let prefix = support::unique_prefix("round");
    let mut c = client(&server.endpoint).await;
    let lease = c.lease_grant(30, None).await.expect("grant").id();
    let key = format!("{prefix}k");
    c.put(key.as_str(), "v", Some(PutOptions::new().with_lease(lease)))
        .await
        .expect("put");
    let resp = c
        .get(key.as_str(), Some(GetOptions::new().with_keys_only()))
        .await
        .expect("get");
    assert_eq!(first(resp.kvs()).0, 0, "a keys-only read tells no lease");
    c.lease_revoke(lease).await.expect("revoke");
}

/// A waiter of another process, as fairlock writes one: named
/// `<locker id>/f<slot>` under the lock's queue, bound to a live lease.
/// Written by hand so that it stays first in line, not acting, until the
/// test revokes its lease (the returned id), as when its process ends.
async fn queued_elsewhere(prefix: &str, key: &str) -> (Client, i64) {
    let mut direct = client(&support::shared().direct).await;
    let lease = direct.lease_grant(60, None).await.expect("grant").id();
    let entry = format!(
        "{prefix}{key}/_OWNERS_/{}/f0",
        uuid::Uuid::new_v4().simple()
    );
    let value = "f00000000000000000000000000000000 pid=1 host=elsewhere at=0";
    direct
        .put(
            entry.as_str(),
            value,
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put");
    (direct, lease)
}

/// On etcd 3.7 a keys-only read tells no lease: a fair `try_lock` must
/// still see the waiter queued ahead (a lease-bound, fairlock-named entry)
/// and leave a free lock to it.
#[tokio::test]
async fn fair_try_lock_leaves_a_free_lock_to_the_first_in_line_on_3_7() {
    let prefix = support::unique_prefix("try-3-7");
    let (mut direct, elsewhere) = queued_elsewhere(&prefix, "k").await;
    let config = EtcdConfig::new([relay().endpoint.clone()]).with_prefix(prefix.as_str());
    let locker = EtcdLocker::connect(config, true).await.expect("connect");
    let key = Key::from("k");
    assert!(
        locker.try_lock(&key).await.expect("try_lock").is_none(),
        "a fair try_lock took a free lock with a waiter in line"
    );
    direct.lease_revoke(elsewhere).await.expect("revoke");
    let guard = locker
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("free now");
    guard.unlock().await.expect("unlock");
}

/// On etcd 3.7 a keys-only read tells no lease: a fair waiter queued behind
/// another must not take a free lock ahead of it. Its `lock` times out
/// while the first in line stays, and on its way out hands the free lock
/// to that one (`serve_if_free`); once that one's lease ends, the lock is
/// free for the next.
#[tokio::test]
async fn a_fair_waiter_does_not_overtake_the_first_in_line_on_3_7() {
    let prefix = support::unique_prefix("wait-3-7");
    let (mut direct, elsewhere) = queued_elsewhere(&prefix, "k").await;
    // A short TTL: the waiter re-reads its place after a tenth of it.
    let config = EtcdConfig::new([relay().endpoint.clone()])
        .with_prefix(prefix.as_str())
        .with_ttl(Duration::from_secs(2));
    let locker = EtcdLocker::connect(config, true).await.expect("connect");
    let key = Key::from("k");
    // A correct waiter is never granted while the entry ahead stays, so the
    // deadline only bounds how long the test looks for a wrong grant.
    let ctx = Context::background().with_timeout(Duration::from_secs(2));
    match locker.lock(&ctx, &key).await {
        Err(e) if e.is_gave_up() => {}
        Ok(guard) => panic!(
            "granted (token {}) ahead of the first in line",
            guard.fencing_token()
        ),
        Err(e) => panic!("{e}"),
    }
    let lock_key = format!("{prefix}k");
    let held = direct.get(lock_key.as_str(), None).await.expect("get");
    assert_eq!(
        held.kvs().first().map(|kv| kv.lease()),
        Some(elsewhere),
        "the waiter that gave up served the free lock to the first in line"
    );
    direct.lease_revoke(elsewhere).await.expect("revoke");
    let guard = locker.lock(&patient(), &key).await.expect("lock");
    guard.unlock().await.expect("unlock");
}

/// The conformance suite through the relay: fairlock's lockers read and
/// write as they would on etcd 3.7.
async fn etcd37(test: &str) -> EtcdBackend {
    let client = client(&relay().endpoint).await;
    let config =
        EtcdConfig::new([relay().endpoint.clone()]).with_prefix(support::unique_prefix(test));
    EtcdBackend::new(client.clone(), client, config)
}

fairlock::conformance_tests!(etcd37);
