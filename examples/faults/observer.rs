//! The election workload's observer: a process of its own (this binary
//! with `--observer`) that follows `observe` on the election through the
//! faults and prints an `OBS` line per change (token: the term, 0 for an
//! empty seat; detail: the leader's value or `none`). The orchestrator
//! compares its last line with `leader()` at the end (observers converge).
//! It is no worker slot: the holder faults never pick it. The Redis runs'
//! observer (`redis_election.rs`) follows the election the same way.

use std::io::BufRead;
use std::time::Duration;

use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{CancellationToken, Key, Locker};
use futures_util::StreamExt;

use crate::BoxError;
use crate::events::{Ev, Kind};
use crate::support::chain;
use crate::workload::ELECTION;

pub struct Args {
    endpoints: Vec<String>,
    prefix: String,
    ttl: Duration,
    request_timeout: Duration,
}

impl Args {
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut next = |what: &str| args.next().ok_or(format!("--observer: missing {what}"));
        let endpoints = next("endpoints")?.split(',').map(String::from).collect();
        let prefix = next("prefix")?;
        let ms = |v: String| v.parse::<u64>().map(Duration::from_millis);
        let ttl = ms(next("ttl")?).map_err(|_| "--observer: bad ttl")?;
        let request_timeout =
            ms(next("request timeout")?).map_err(|_| "--observer: bad request timeout")?;
        Ok(Args {
            endpoints,
            prefix,
            ttl,
            request_timeout,
        })
    }

    pub fn to_argv(endpoints: &[String], prefix: &str, o: &crate::Opts) -> Vec<String> {
        vec![
            "--observer".into(),
            endpoints.join(","),
            prefix.into(),
            o.ttl.as_millis().to_string(),
            o.request_timeout.as_millis().to_string(),
        ]
    }
}

/// The locker the observer and the orchestrator's final check use.
pub fn config(
    endpoints: Vec<String>,
    prefix: &str,
    ttl: Duration,
    timeout: Duration,
) -> EtcdConfig {
    EtcdConfig::new(endpoints)
        .with_prefix(prefix.to_string())
        .with_ttl(ttl)
        .with_request_timeout(timeout)
}

pub async fn run(a: Args) -> Result<(), BoxError> {
    let config = config(a.endpoints, &a.prefix, a.ttl, a.request_timeout);
    let locker = EtcdLocker::connect(config, true).await?;
    Ev::new(Kind::Start, 0, 0, std::process::id().to_string()).emit();
    follow(&locker, &stop_on_eof()).await;
    let closed = locker.close().await;
    Ev::new(Kind::Bye, 0, 0, format!("{closed:?}")).emit();
    Ok(())
}

/// Fires when the orchestrator closes our stdin (or exits).
pub fn stop_on_eof() -> CancellationToken {
    let stop = CancellationToken::new();
    let on_eof = stop.clone();
    std::thread::spawn(move || {
        for _ in std::io::stdin().lock().lines().map_while(Result::ok) {}
        on_eof.cancel();
    });
    stop
}

/// Follows the election on any backend's locker until `stop` fires: an
/// `OBS` line per change, an `ERR` line per error.
pub async fn follow<L: Locker>(locker: &L, stop: &CancellationToken) {
    let election = Key::from(ELECTION);
    // A stream that ended (an error it cannot get past) is opened again:
    // an observer that gives up cannot converge.
    'open: while !stop.is_cancelled() {
        let mut changes = locker.observe(&election);
        loop {
            let next = tokio::select! {
                next = changes.next() => next,
                () = stop.cancelled() => break 'open,
            };
            match next {
                Some(Ok(Some(leader))) => {
                    let value = leader.value_str().unwrap_or("?").to_string();
                    Ev::new(Kind::Observed, leader.fencing_token, 0, value).emit();
                }
                Some(Ok(None)) => Ev::new(Kind::Observed, 0, 0, "none").emit(),
                Some(Err(e)) => Ev::new(Kind::Err, 0, 0, format!("observe: {}", chain(&e))).emit(),
                None => {
                    Ev::new(Kind::Err, 0, 0, "observe: the stream ended").emit();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'open;
                }
            }
        }
    }
}
