//! Redis over TLS (`--port 0 --tls-port P`, client certificates demanded)
//! with an ACL user restricted to the lock prefix: the conformance suite,
//! Redlock over TLS, and one test per TLS or auth failure.
#![cfg(feature = "redis")]

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use fairlock::conformance::patient;
use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Error, Key, Locker, TlsConfig};
use support::redis_backend::RedisBackend;
use support::redis_server::{self as rs, RedisServer};
use support::tls::{certs, client_tls};

/// The prefix the ACL user may touch, its name and password.
const PREFIX: &str = "app-locks:";
const USER: (&str, &str) = ("locks", "locks-secret-pw");

/// The minimal ACL of fairlock's user: docs/production.md (Redis ACL
/// users) shows the same line.
fn acl_setuser(prefix: &str, user: &str, password: &str) -> Vec<String> {
    let line = format!(
        "ACL SETUSER {user} reset on >{password} ~{prefix}* &{prefix}* \
         +ping +evalsha +eval +script|load +scan +subscribe +unsubscribe \
         +get +set +del +incr +pexpire +pttl +publish +zadd +zrange +zrem +zscore +time"
    );
    line.split(' ').map(str::to_owned).collect()
}

/// A TLS-only server with the ACL user, an admin for the tests' checks, and
/// the default user off (unauthenticated clients get NOAUTH).
async fn start_secure_redis() -> (RedisServer, String) {
    let c = certs();
    let (cert, key) = c.server();
    let server = RedisServer::start_tls((&cert, &key), &c.ca(), &[]);
    let mut conn = rs::conn(&server.url).await;
    let admin = "ACL SETUSER admin on >admin-pw ~* &* +@all";
    for line in [
        admin.split(' ').map(str::to_owned).collect(),
        acl_setuser(PREFIX, USER.0, USER.1),
    ] {
        let mut cmd = redis::cmd(&line[0]);
        for arg in &line[1..] {
            cmd.arg(arg);
        }
        let _: () = cmd.query_async(&mut conn).await.expect("ACL SETUSER");
    }
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("default")
        .arg("off")
        .query_async(&mut conn)
        .await
        .expect("default off");
    let admin_url = server.url.replace("rediss://", "rediss://admin:admin-pw@");
    (server, admin_url)
}

fn secure_redis() -> &'static (RedisServer, String) {
    static SERVER: OnceLock<(RedisServer, String)> = OnceLock::new();
    SERVER.get_or_init(|| {
        std::thread::spawn(|| {
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(start_secure_redis())
        })
        .join()
        .unwrap()
    })
}

fn unique_prefix(test: &str) -> String {
    format!("{PREFIX}{test}-{}:", uuid::Uuid::new_v4().simple())
}

fn app_config(prefix: &str) -> RedisConfig {
    RedisConfig::new([secure_redis().0.url.clone()])
        .with_tls(client_tls())
        .with_user(USER.0, USER.1)
        .with_prefix(prefix)
        .with_data_loss_wait(Duration::ZERO)
}

async fn secure(test: &str) -> RedisBackend {
    let config = app_config(&unique_prefix(test));
    let base = RedisLocker::connect(config, false)
        .await
        .expect("the ACL user connects over mutual TLS");
    // Read/write locks and semaphores too: their scripts need no command
    // beyond the minimal ACL.
    RedisBackend::new(base, vec![secure_redis().1.clone()]).with_shared()
}

fairlock::conformance_tests!(secure);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_tls_with_users_in_the_urls() {
    let c = certs();
    let (cert, key) = c.server();
    let servers: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_tls((&cert, &key), &c.ca(), &[]))
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
    let config = RedisConfig::new(urls.clone())
        .with_tls(client_tls())
        .with_prefix(unique_prefix("redlock"))
        .with_data_loss_wait(Duration::ZERO);
    let locker = RedisLocker::connect(config, false).await.expect("connect");
    let guard = locker
        .lock(&patient(), &Key::from("k"))
        .await
        .expect("lock");
    guard.unlock().await.expect("unlock");
    for url in &urls {
        rs::wait_clean(url, locker.config().prefix()).await;
    }
}

async fn connect_err(config: RedisConfig) -> Error {
    match RedisLocker::connect(config.with_connect_timeout(Duration::from_secs(20)), false).await {
        Ok(_) => panic!("connected, but should not have"),
        Err(e) => {
            eprintln!("{e}\n  chain: {}", support::chain(&e));
            e
        }
    }
}

fn base() -> RedisConfig {
    RedisConfig::new([secure_redis().0.url.clone()])
        .with_prefix(unique_prefix("fail"))
        .with_data_loss_wait(Duration::ZERO)
}

#[tokio::test]
async fn unknown_ca_is_a_tls_error() {
    let (cert, key) = certs().client();
    let tls = TlsConfig::new()
        .with_ca_file(certs().other_ca())
        .with_cert_file(cert)
        .with_key_file(key);
    let err = connect_err(base().with_tls(tls).with_user(USER.0, USER.1)).await;
    assert!(matches!(err, Error::Tls { .. }), "{err:?}");
    assert!(err.to_string().contains("not signed by a CA"), "{err}");
}

#[tokio::test]
async fn missing_client_certificate_is_a_tls_error() {
    let tls = TlsConfig::new().with_ca_file(certs().ca());
    let err = connect_err(base().with_tls(tls).with_user(USER.0, USER.1)).await;
    assert!(matches!(err, Error::Tls { .. }), "{err:?}");
    assert!(err.to_string().contains("client certificate"), "{err}");
}

#[tokio::test]
async fn wrong_password_is_an_auth_error() {
    let err = connect_err(base().with_tls(client_tls()).with_user(USER.0, "wrong-pw")).await;
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    assert!(!format!("{err:?} {}", support::chain(&err)).contains("wrong-pw"));
}

#[tokio::test]
async fn password_in_the_url_is_never_shown() {
    let url = secure_redis()
        .0
        .url
        .replace("rediss://", "rediss://nobody:url-secret@");
    let err = connect_err(RedisConfig::new([url]).with_tls(client_tls())).await;
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    let shown = format!("{err:?} {}", support::chain(&err));
    assert!(!shown.contains("url-secret"), "{shown}");
}

#[tokio::test]
async fn no_password_is_an_auth_error() {
    let err = connect_err(base().with_tls(client_tls())).await;
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
}

#[tokio::test]
async fn key_outside_the_acl_is_permission_denied() {
    let config = app_config(&format!("elsewhere-{}:", uuid::Uuid::new_v4().simple()));
    let locker = RedisLocker::connect(config, false).await.expect("connect");
    let err = locker
        .try_lock(&Key::from("k"))
        .await
        .map(|_| ())
        .unwrap_err();
    eprintln!("{err}\n  chain: {}", support::chain(&err));
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
}

#[tokio::test]
async fn plain_url_with_tls_options_is_invalid_config() {
    let err =
        connect_err(RedisConfig::new(["redis://127.0.0.1:6379"]).with_tls(client_tls())).await;
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
}
