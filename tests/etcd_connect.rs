//! Connecting to etcd: endpoints without a port, endpoints where nothing
//! listens or that are not etcd, and configuration refused before any
//! connection. Only the shared test etcd is started, for the configuration
//! checks.

mod support;

use std::io::Write;
use std::time::Duration;

use fairlock::Error;
use fairlock::etcd::{EtcdConfig, EtcdLocker};
use support::chain;

/// An endpoint on a local port where nothing listens.
fn refusing_endpoint() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port(); // the listener is dropped: nothing listens there
    format!("127.0.0.1:{port}")
}

async fn connect_err(config: EtcdConfig) -> Error {
    let connect = EtcdLocker::connect(config, true);
    tokio::time::timeout(Duration::from_secs(120), connect)
        .await
        .expect("connect hung")
        .err()
        .expect("nothing listens there: connect must fail")
}

/// An endpoint without a port means etcd's port 2379, not HTTP's 80.
#[tokio::test]
async fn an_endpoint_without_a_port_takes_2379() {
    let config = EtcdConfig::new(["127.0.0.1", "http://localhost"]);
    assert_eq!(
        config.endpoints(),
        ["127.0.0.1:2379", "http://localhost:2379"]
    );
    let config = EtcdConfig::new(["127.0.0.1"]);
    // An etcd may listen on 2379 on this machine; if none does, the error
    // names the port that was dialled.
    match EtcdLocker::connect(config, true).await {
        Ok(locker) => locker.close().await.expect("close"),
        Err(err) => assert!(chain(&err).contains("127.0.0.1:2379"), "{}", chain(&err)),
    }
}

/// When every endpoint refuses connections, connect gives up before its
/// connect timeout, with one line for the cause and what to do, and no
/// client debug dump.
#[tokio::test]
async fn refused_connections_fail_fast_with_a_readable_error() {
    let (a, b) = (refusing_endpoint(), refusing_endpoint());
    let config = EtcdConfig::new([a.clone(), b.clone()]);
    let err = connect_err(config.clone()).await;
    let Error::Connect { timeout, .. } = &err else {
        panic!("not a connect error: {err:?}");
    };
    // The refused path ended it, not the connect timeout.
    assert!(*timeout < config.connect_timeout(), "{err}");
    let text = chain(&err);
    assert!(text.contains(&a) && text.contains(&b), "{text}");
    assert!(text.contains("connection refused"), "{text}");
    assert!(text.contains("start etcd there"), "{text}");
    for dump in ["grpc", "tonic", "Os {", "source:", "ConnectError"] {
        assert!(!text.contains(dump), "{dump:?} in {text}");
    }
    assert!(!text.contains('\n'), "one line: {text}");
}

/// With a connect timeout set, refused connections are retried for all of
/// it (to wait for a server that is starting), and still read as such.
#[tokio::test]
async fn a_set_connect_timeout_waits_out_refusals() {
    let endpoint = refusing_endpoint();
    let wait = Duration::from_secs(2);
    let config = EtcdConfig::new([endpoint.clone()]).with_connect_timeout(wait);
    let err = connect_err(config).await;
    let Error::Connect { timeout, .. } = &err else {
        panic!("not a connect error: {err:?}");
    };
    assert_eq!(*timeout, wait, "{err}");
    let text = chain(&err);
    assert!(text.contains("connection refused"), "{text}");
    assert!(text.contains(&endpoint), "{text}");
    assert!(!text.contains("tonic"), "{text}");
}

/// Unreachable endpoints fail within the connect timeout, naming them.
#[tokio::test]
async fn unreachable_endpoints_are_named_in_the_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port(); // the listener is dropped: nothing listens there
    let endpoint = format!("127.0.0.1:{port}");
    let config =
        EtcdConfig::new([endpoint.clone()]).with_connect_timeout(Duration::from_millis(500));
    let err = EtcdLocker::connect(config.clone(), true)
        .await
        .err()
        .expect("must fail");
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    assert!(err.to_string().contains(&endpoint), "{err}");
    let err = fairlock::etcd::register(config)
        .await
        .expect_err("must fail");
    assert!(err.to_string().contains(&endpoint), "{err}");
}

/// Configuration mistakes are refused before any connection is made.
#[tokio::test]
async fn bad_configuration_is_refused() {
    let endpoint = support::shared().endpoint.clone();
    for (config, says) in [
        (
            EtcdConfig::new([endpoint.clone()]).with_ttl(Duration::from_secs(1)),
            "minimum",
        ),
        (EtcdConfig::new(Vec::<String>::new()), "no etcd endpoints"),
        (EtcdConfig::new([""]), "empty"),
        (
            EtcdConfig::new([endpoint.clone()]).with_prefix(""),
            "prefix",
        ),
    ] {
        let err = EtcdLocker::connect(config, true)
            .await
            .err()
            .expect("must fail");
        assert!(
            matches!(err, Error::InvalidConfig(_)) && err.to_string().contains(says),
            "{err}"
        );
    }
}

/// An endpoint that answers, but is not etcd, fails within the connect
/// timeout, naming it.
#[tokio::test]
async fn endpoints_that_are_not_etcd_are_refused() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = listener.local_addr().expect("addr").to_string();
    // A plain HTTP/1 server: answers every connection with a web page.
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { break };
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi");
        }
    });
    let config =
        EtcdConfig::new([endpoint.clone()]).with_connect_timeout(Duration::from_millis(800));
    let err = tokio::time::timeout(Duration::from_secs(120), EtcdLocker::connect(config, true))
        .await
        .expect("connect hung")
        .err()
        .expect("must fail");
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    assert!(err.to_string().contains(&endpoint), "{err}");
}
