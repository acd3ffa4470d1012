//! Connecting to Redis as a newcomer does it: a URL without a port, a
//! mistyped scheme, and a server that is not running.
#![cfg(feature = "redis")]

mod support;

use std::error::Error as _;
use std::net::TcpListener;
use std::time::Duration;

use fairlock::Error;
use fairlock::redis::{RedisConfig, RedisLocker};

/// The error and every cause, as one line.
fn chain(err: &Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

/// `redis://host` dials port 6379: a listener on 6379 of a spare loopback
/// address sees the connection (it never answers; the test only watches
/// where the client dials).
#[tokio::test]
async fn url_without_port_dials_6379() {
    let (listener, host) = (2..=254)
        .find_map(|n| {
            let host = format!("127.0.0.{n}");
            TcpListener::bind((host.as_str(), 6379))
                .ok()
                .map(|l| (l, host))
        })
        .expect("a loopback address with port 6379 free");
    listener.set_nonblocking(true).expect("nonblocking");
    let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
    let config =
        RedisConfig::new([format!("redis://{host}")]).with_connect_timeout(Duration::from_secs(60));
    let connecting = RedisLocker::connect(config, false);
    tokio::select! {
        accepted = listener.accept() => {
            accepted.expect("the client dials 6379");
        }
        ended = connecting => panic!("connect ended without dialling 6379: {:?}", ended.err()),
    }
}

/// A mistyped scheme is refused before anything is dialled, naming the
/// URL that was likely meant (without its password).
#[tokio::test]
async fn malformed_scheme_names_the_likely_intent() {
    for (url, meant) in [
        ("redis:/127.0.0.1:6379", "redis://127.0.0.1:6379"),
        ("rediss:host", "rediss://host:6379"),
        (
            "redis:/app:s3cret@h:7000/1",
            "redis://app:<redacted>@h:7000/1",
        ),
    ] {
        let err = RedisLocker::connect(RedisConfig::new([url]), false)
            .await
            .err()
            .expect("refused");
        let text = err.to_string();
        assert!(matches!(err, Error::InvalidConfig(_)), "{text}");
        assert!(text.contains(&format!("did you mean {meant:?}?")), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
    }
}

/// Every node refusing connections fails with "connection refused", the
/// endpoints (passwords redacted) and what to do, not the client's debug
/// output.
#[tokio::test]
async fn refused_connection_says_so_and_names_the_endpoints() {
    let ports: Vec<u16> = (0..3).map(|_| support::free_port()).collect();
    let single = vec![format!("redis://app:s3cret@127.0.0.1:{}", ports[0])];
    let redlock: Vec<String> = ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    for urls in [single, redlock] {
        let err = RedisLocker::connect(RedisConfig::new(urls.clone()), false)
            .await
            .err()
            .expect("refused");
        let text = chain(&err);
        assert!(matches!(err, Error::Connect { .. }), "{text}");
        assert!(
            text.contains("connection refused: nothing listens"),
            "{text}"
        );
        assert!(text.contains("start redis-server"), "{text}");
        for port in &ports[..urls.len()] {
            assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
        }
        assert!(
            !text.contains("s3cret") && !text.contains("os error"),
            "{text}"
        );
    }
}
