//! etcd over mutual TLS with auth enabled: the conformance suite as a user
//! whose role covers the lock prefix only, a lock held across auth token
//! expiries, and one test per TLS or auth failure (see tests/support/tls.rs
//! for the certificates and the server's users).

mod support;

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Certificate, Client, ConnectOptions, GetOptions, Identity, Permission, TlsOptions,
};
use fairlock::conformance::{Backend, patient};
use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Elector, Error, Key, Locker, TlsConfig};
use support::etcd_backend::EtcdBackend;
use support::tls::{self, ETCD_PREFIX, ETCD_USER, certs, client_tls, secure_etcd};

/// A root client over mutual TLS, for the tests' own checks.
async fn root_client() -> Client {
    root_client_of(secure_etcd()).await
}

/// A root client of `etcd` (a secured one) over mutual TLS.
async fn root_client_of(etcd: &support::Etcd) -> Client {
    let c = certs();
    let (cert, key) = c.client();
    let tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(c.ca()).unwrap()))
        .identity(Identity::from_pem(
            std::fs::read(cert).unwrap(),
            std::fs::read(key).unwrap(),
        ));
    let (user, password) = tls::ETCD_ROOT.split_once(':').unwrap();
    let options = ConnectOptions::new()
        .with_tls(tls)
        .with_user(user, password)
        .with_auto_token_refresh(true);
    Client::connect([&etcd.endpoint], Some(options))
        .await
        .expect("root connects")
}

/// fairlock's configuration as the restricted user, under `prefix`.
fn app_config(prefix: &str) -> EtcdConfig {
    let (user, password) = ETCD_USER;
    EtcdConfig::new([secure_etcd().endpoint.clone()])
        .with_tls(client_tls())
        .with_user(user, password)
        .with_prefix(prefix)
}

fn unique_prefix(test: &str) -> String {
    format!("{ETCD_PREFIX}{test}-{}/", uuid::Uuid::new_v4().simple())
}

async fn secure(test: &str) -> EtcdBackend {
    let config = app_config(&unique_prefix(test));
    let app = EtcdLocker::connect(config.clone(), false)
        .await
        .expect("the restricted user connects over mutual TLS");
    EtcdBackend::new(app.client().clone(), root_client().await, config)
}

fairlock::conformance_tests!(secure);

/// Waits until etcd has let `n` auth tokens expire (it logs each); panics
/// when that takes over two minutes (tokens live for seconds here).
async fn tokens_expired(log: std::sync::mpsc::Receiver<String>, n: usize) {
    tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let mut seen = 0;
        while seen < n {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = log.recv_timeout(left).unwrap_or_else(|_| {
                panic!("etcd logged {seen} of {n} token expiries (\"deleted a simple token\") in 2 minutes")
            });
            if line.contains("deleted a simple token") {
                seen += 1;
            }
        }
    })
    .await
    .unwrap();
}

/// A fair lock held while etcd expires the holder's and the waiter's auth
/// tokens (keepalives running, nothing else sent) is still held, is
/// released, and is handed to the waiter that queued before the expiries;
/// the lockers keep working afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_held_across_token_expiries() {
    let b = secure("token-expiry").await;
    let (holder, waiter) = (b.locker(true), b.locker(true));
    let key = Key::from("long");
    let guard = holder.lock(&patient(), &key).await.expect("lock");
    let w = tokio::spawn({
        let (waiter, key) = (Arc::clone(&waiter), key.clone());
        async move { waiter.lock(&patient(), &key).await }
    });
    b.wait_queued(&key, 1).await;
    // The tokens of the root client and fairlock's each expire: two at
    // least, and a third round to be sure fairlock's token expired while
    // the lock was held.
    let log = secure_etcd().log_lines();
    tokens_expired(log, 3).await;
    assert!(guard.is_held(), "the lease lapsed while the token expired");
    guard.unlock().await.expect("unlock after token expiry");
    let next = w.await.unwrap().expect("the waiter is granted");
    next.unlock().await.expect("unlock");
    let again = holder
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("free");
    again.unlock().await.expect("unlock");
    b.finish().await;
}

/// etcd with JWT auth tokens refuses every request made with a token
/// issued before the last change to its users or roles ("revision of auth
/// store is old") until the client authenticates again. A lock held across
/// such a change (here: a role nobody uses is added) stays held: its
/// renewals, their confirming reads and the unlock go on with a new token.
/// Before, the holder lost the lock a TTL after the change.
#[tokio::test]
async fn lock_held_across_an_auth_change_with_jwt_tokens() {
    let jwt = certs().jwt_auth_token();
    let etcd = tls::start_secure_etcd_with(&["--auth-token", jwt.as_str()]);
    let config = EtcdConfig::new([etcd.endpoint.clone()])
        .with_tls(client_tls())
        .with_user(ETCD_USER.0, ETCD_USER.1)
        .with_prefix(unique_prefix("jwt"))
        .with_ttl(Duration::from_secs(2));
    let ttl = config.ttl();
    let locker = EtcdLocker::connect(config, true).await.expect("connect");
    let key = Key::from("k");
    let guard = locker.lock(&patient(), &key).await.expect("lock");
    root_client_of(&etcd)
        .await
        .role_add("unrelated")
        .await
        .expect("add a role");
    let changed = tokio::time::Instant::now();
    // Held until a renewal sent after the change counted: its deadline
    // lies a TTL (less a margin under a tenth of it) after the change.
    let renewed_after_change = async {
        loop {
            let until = guard.valid_until().map(tokio::time::Instant::from_std);
            if until.is_some_and(|u| u > changed + ttl * 9 / 10) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        () = renewed_after_change => {}
        () = guard.lost() => panic!("lost after the auth change: {:?}", guard.loss_cause()),
    }
    guard.unlock().await.expect("unlock with a new token");
    let again = locker
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("free");
    again.unlock().await.expect("unlock");
}

/// The error of connecting with `config`.
async fn connect_err(config: EtcdConfig) -> Error {
    match EtcdLocker::connect(config, false).await {
        Ok(_) => panic!("connected, but should not have"),
        Err(e) => {
            eprintln!("{e}\n  chain: {}", support::chain(&e));
            e
        }
    }
}

fn base() -> EtcdConfig {
    EtcdConfig::new([secure_etcd().endpoint.clone()])
        .with_prefix(unique_prefix("fail"))
        .with_connect_timeout(Duration::from_secs(20))
}

#[tokio::test]
async fn unknown_ca_is_a_tls_error() {
    let (cert, key) = certs().client();
    let tls = TlsConfig::new()
        .with_ca_file(certs().other_ca())
        .with_cert_file(cert)
        .with_key_file(key);
    let err = connect_err(base().with_tls(tls)).await;
    assert!(matches!(err, Error::Tls { .. }), "{err:?}");
    assert!(err.to_string().contains("not signed by a CA"), "{err}");
}

#[tokio::test]
async fn wrong_server_name_is_a_tls_error() {
    let err = connect_err(base().with_tls(client_tls().with_server_name("db.example.com"))).await;
    assert!(matches!(err, Error::Tls { .. }), "{err:?}");
    assert!(
        err.to_string().contains("not valid for the host name"),
        "{err}"
    );
}

#[tokio::test]
async fn missing_client_certificate_is_a_tls_error() {
    let tls = TlsConfig::new().with_ca_file(certs().ca());
    let (user, password) = ETCD_USER;
    let err = connect_err(base().with_tls(tls).with_user(user, password)).await;
    assert!(matches!(err, Error::Tls { .. }), "{err:?}");
    assert!(err.to_string().contains("client certificate"), "{err}");
}

#[tokio::test]
async fn expired_server_certificate_is_a_tls_error() {
    let c = certs();
    let (cert, key) = c.expired();
    let expired = support::Etcd::start_tls((&cert, &key), &c.ca(), &[]);
    let config = EtcdConfig::new([expired.endpoint.clone()])
        .with_tls(TlsConfig::new().with_ca_file(c.ca()))
        .with_connect_timeout(Duration::from_secs(20));
    let err = connect_err(config).await;
    assert!(matches!(err, Error::Tls { .. }), "{err:?}");
    assert!(err.to_string().contains("expired"), "{err}");
}

#[tokio::test]
async fn wrong_password_is_an_auth_error() {
    let err = connect_err(
        base()
            .with_tls(client_tls())
            .with_user(ETCD_USER.0, "wrong"),
    )
    .await;
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    assert!(err.to_string().contains("password is wrong"), "{err}");
    assert!(
        !format!("{err:?}{}", support::chain(&err)).contains("wrong\""),
        "{err:?}"
    );
}

#[tokio::test]
async fn unknown_user_is_an_auth_error() {
    let err = connect_err(base().with_tls(client_tls()).with_user("nobody", "pw")).await;
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    assert!(err.to_string().contains("does not exist"), "{err}");
}

/// A prefix outside the user's role: connecting says so, with the grant
/// that fixes it (connecting reads the prefix key, which every etcd lets
/// such a user do; `Maintenance.Status` is for root alone on etcd 3.5.28
/// to 3.5.31 and 3.6.0 to 3.6.11).
#[tokio::test]
async fn prefix_outside_the_role_is_permission_denied_at_connect() {
    let (user, password) = ETCD_USER;
    let config = EtcdConfig::new([secure_etcd().endpoint.clone()])
        .with_tls(client_tls())
        .with_user(user, password)
        .with_prefix(format!("/elsewhere-{}/", uuid::Uuid::new_v4().simple()));
    let err = connect_err(config).await;
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
    assert!(err.to_string().contains("grant-permission"), "{err}");
}

/// A role that may write a lock's keys but not read the locker's prefix
/// key, whose read confirms each lease renewal: no renewal could count, so
/// connecting refuses at once, and nothing is written.
#[tokio::test]
async fn a_role_without_the_prefix_key_is_refused_at_connect() {
    // Outside the role's own prefix.
    let prefix = format!("/unconfirmed-{}/", uuid::Uuid::new_v4().simple());
    let mut root = root_client().await;
    root.role_grant_permission(
        "locks",
        Permission::read_write(format!("{prefix}k")).with_prefix(),
    )
    .await
    .expect("grant the lock's keys only");
    let err = connect_err(app_config(&prefix)).await;
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
    let written = root
        .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .expect("read the prefix as root");
    assert_eq!(written.kvs().len(), 0, "{:?}", written.kvs());
}

/// The same role losing the prefix key after connecting: no renewal of a
/// new session lease can count, so the lease is never handed out and
/// nothing is written, however long one waits (the refusal ends the wait).
#[tokio::test]
async fn lease_whose_renewals_cannot_be_confirmed_is_not_used() {
    let prefix = format!("/unconfirmed-{}/", uuid::Uuid::new_v4().simple());
    let mut root = root_client().await;
    for grant in [
        Permission::read(prefix.as_str()),
        Permission::read_write(format!("{prefix}k")).with_prefix(),
    ] {
        root.role_grant_permission("locks", grant)
            .await
            .expect("grant the prefix key and the lock's keys");
    }
    let locker = EtcdLocker::connect(app_config(&prefix), true)
        .await
        .expect("connect");
    root.role_revoke_permission("locks", prefix.as_str(), None)
        .await
        .expect("revoke the prefix key");
    let err = locker
        .try_lock(&Key::from("k"))
        .await
        .map(|_| ())
        .unwrap_err();
    eprintln!("{err}\n  chain: {}", support::chain(&err));
    assert!(
        matches!(
            err,
            Error::PermissionDenied {
                op: "renewal check",
                ..
            }
        ),
        "{err:?}"
    );
    let written = root
        .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .expect("read the prefix as root");
    assert_eq!(written.kvs().len(), 0, "{:?}", written.kvs());
}

/// A campaign whose first write, the leader's record, etcd refuses (the
/// role covers the election's lock and queue but not its value key)
/// resigns before it reports the refusal: the election's lock is free the
/// moment `campaign` returns, not once a dropped leadership's release
/// lands. (On one thread, so that a release left to a task of its own
/// could not run before the test's read is sent.)
#[tokio::test]
async fn a_campaign_whose_record_is_refused_resigns_before_it_fails() {
    // Outside the role's own prefix.
    let prefix = format!("/el-refused-{}/", uuid::Uuid::new_v4().simple());
    let name = "web";
    let value_key = format!("{prefix}{name}/_OWNERS_/leader");
    let end = format!("{}0", prefix.trim_end_matches('/'));
    let mut root = root_client().await;
    // Reading everything under the prefix (the queue's compares range over
    // the value key), writing all but the value key and the names after it
    // up to "m" (no key of fairlock's lies there: queue entries are hex
    // locker ids, lines are r/, s<limit>/ and w/).
    for grant in [
        Permission::read(prefix.as_str()).with_range_end(end.as_str()),
        Permission::write(prefix.as_str()).with_range_end(value_key.as_str()),
        Permission::write(format!("{prefix}{name}/_OWNERS_/m")).with_range_end(end.as_str()),
    ] {
        root.role_grant_permission("locks", grant)
            .await
            .expect("grant all but the value key");
    }
    let locker = EtcdLocker::connect(app_config(&prefix), true)
        .await
        .expect("connect");
    let elector = locker.elector();
    for round in 0..3 {
        let err = elector
            .campaign(&patient(), &Key::from(name), b"v")
            .await
            .map(|_| ())
            .expect_err("the record is refused");
        assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
        let lock = root
            .get(format!("{prefix}{name}"), None)
            .await
            .expect("read the lock key as root");
        assert!(
            lock.kvs().is_empty(),
            "round {round}: campaign failed with the election's lock still held"
        );
    }
    drop((elector, locker));
    root.delete(
        prefix.as_str(),
        Some(etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await
    .expect("clean up");
}

#[tokio::test]
async fn plain_endpoint_with_tls_options_is_invalid_config() {
    let config = EtcdConfig::new(["http://127.0.0.1:2379"]).with_tls(client_tls());
    let err = connect_err(config).await;
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
}
