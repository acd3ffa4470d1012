//! Connecting to etcd: endpoints without a port, and endpoints where
//! nothing listens. No etcd server is started.

mod support;

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
