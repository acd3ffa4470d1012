//! Connecting to etcd: the client options, waiting until some member
//! answers, and an error a person can read when none does.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, GetOptions};

use super::error::{is_connection_refused, is_server_answer, is_transient};
use super::members::Routing;
use super::request::retry_backoff;
use super::secure::{refused, tls_failure, tls_options};
use crate::etcd::config::EtcdConfig;
use crate::{Error, Result};

/// How long connections refused by every endpoint are retried when no
/// connect timeout was set: nothing listens there, and waiting the whole
/// default timeout would not change that.
pub(crate) const REFUSED_GRACE: Duration = Duration::from_secs(1);

/// Why connecting failed without an error from etcd.
enum Failure {
    Etcd(etcd_client::Error),
    /// Every endpoint refused connections for [`REFUSED_GRACE`].
    Refused,
}

/// How often the connection pings a member, and how long it waits for the
/// answer: a quarter of the TTL, at most 2 s (and not longer than a request
/// may take).
fn ping_every(config: &EtcdConfig) -> Duration {
    (config.ttl() / 4)
        .min(Duration::from_secs(2))
        .min(config.request_timeout())
}

/// How requests pick a member (see `members/balance.rs`): a member with a request
/// unanswered for a third of the request timeout (when a hedged copy goes
/// out) is passed over, at first for as long as a dead connection takes to
/// be found.
fn routing(config: &EtcdConfig) -> Routing {
    Routing {
        slow: config.request_timeout() / 3,
        cooldown: ping_every(config) * 2,
    }
}

/// Connects and checks that etcd answers, within the connect timeout (and
/// within [`REFUSED_GRACE`] when every endpoint refuses connections, unless
/// the connect timeout was set: then a starting server is waited for).
pub(crate) async fn connect(config: &EtcdConfig) -> Result<Client> {
    config.validate()?;
    let timeout = config.connect_timeout();
    let refused_limit = if config.connect_timeout_is_set() {
        timeout
    } else {
        REFUSED_GRACE.min(timeout)
    };
    let mut options = ConnectOptions::new()
        .with_connect_timeout(timeout)
        // A connection to a member that stopped answering (cut off, or its
        // host gone) is found dead within half a TTL, so the requests and
        // watches on it move to another member before a lease could lapse.
        .with_keep_alive(ping_every(config), ping_every(config))
        .with_keep_alive_while_idle(true)
        // A member cut off from its cluster ends our watches (we re-read)
        // instead of leaving them silent.
        .with_require_leader(true);
    if let Some((name, password)) = config.user() {
        // etcd lets an unused token expire (`--auth-token-ttl`): requests
        // refused for that re-authenticate once and are sent again.
        options = options
            .with_user(name.clone(), password.clone())
            .with_auto_token_refresh(true);
    }
    if let Some(tls) = tls_options(config)? {
        options = options.with_tls(tls);
    }
    // Some endpoints may be down: the client's balancer can route the
    // first request to one of them, so retry until the connect timeout.
    let last = Mutex::new(None);
    let started = Instant::now();
    let attempt = async {
        let mut client = Client::connect_with_balanced_channel(
            config.endpoints(),
            Some(options),
            routing(config),
        )
        .await
        .map_err(Failure::Etcd)?;
        let mut backoff = retry_backoff();
        let mut only_refused = true;
        loop {
            match probe(&mut client, config).await {
                Ok(_) => return Ok(client),
                // A failed handshake fails the same way on every retry.
                Err(e) if is_transient(&e) && tls_failure(config, &e).is_none() => {
                    only_refused &= is_connection_refused(&e);
                    {
                        let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
                        // An answer from a server ("no leader") tells more
                        // than a member that refuses connections.
                        if last
                            .as_ref()
                            .is_none_or(|old| is_server_answer(&e) || !is_server_answer(old))
                        {
                            *last = Some(e);
                        }
                    }
                    if only_refused && started.elapsed() >= refused_limit {
                        return Err(Failure::Refused);
                    }
                    backoff.sleep().await;
                }
                Err(e) => return Err(Failure::Etcd(e)),
            }
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(Failure::Etcd(e))) => Err(connect_error(config, e, timeout)),
        Ok(Err(Failure::Refused)) => Err(unreachable(config, refused_limit, refused_text())),
        Err(_) => match last.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(connect_error(config, e, timeout)),
            None => Err(unreachable(config, timeout, "no answer".into())),
        },
    }
}

/// One request that shows a member answers: a serializable count of the
/// prefix key, which the member answers from its own data, with or
/// without a leader, as `Maintenance.Status` does. Unlike `Status`, any
/// user whose role covers the prefix may make it: etcd 3.5.28 to 3.5.31
/// and 3.6.0 to 3.6.11 answer `Status` to root alone.
async fn probe(client: &mut Client, config: &EtcdConfig) -> Result<(), etcd_client::Error> {
    let count = GetOptions::new().with_count_only().with_serializable();
    client.get(config.prefix(), Some(count)).await.map(drop)
}

/// The error for a failed connect: a refusal or a TLS failure as such,
/// anything else as [`Error::Connect`] with a one-line cause.
fn connect_error(config: &EtcdConfig, err: etcd_client::Error, timeout: Duration) -> Error {
    if let Some(reason) = tls_failure(config, &err) {
        return Error::Tls {
            backend: "etcd",
            endpoints: config.endpoints().join(","),
            reason,
            source: Box::new(err),
        };
    }
    let err = match refused("connect", err) {
        Ok(public) => return public,
        Err(err) => err,
    };
    let cause = if is_connection_refused(&err) {
        refused_text()
    } else {
        cause_text(&err)
    };
    unreachable(config, timeout, cause)
}

fn unreachable(config: &EtcdConfig, timeout: Duration, cause: String) -> Error {
    Error::Connect {
        backend: "etcd",
        endpoints: config.endpoints().join(","),
        timeout,
        source: cause.into(),
    }
}

/// The cause and what to do when every endpoint refused connections (the
/// endpoints are named by [`Error::Connect`] itself).
fn refused_text() -> String {
    "connection refused: start etcd there, or fix --endpoints / FAIRLOCK_ENDPOINTS; \
     to wait for an etcd that is starting, set --connect-timeout / \
     FAIRLOCK_CONNECT_TIMEOUT (EtcdConfig::with_connect_timeout in code)"
        .into()
}

/// One line for what went wrong: etcd's own message for an answer, or the
/// innermost cause of a transport failure (not the client's debug dump).
fn cause_text(err: &etcd_client::Error) -> String {
    let mut cause: &(dyn std::error::Error + 'static) = match err {
        etcd_client::Error::GRpcStatus(status) if is_server_answer(err) => {
            return status.message().to_string();
        }
        etcd_client::Error::GRpcStatus(status) => status,
        etcd_client::Error::TransportError(e) => e,
        other => return other.to_string(),
    };
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::ping_every;
    use crate::etcd::config::EtcdConfig;

    fn config(ttl: u64, request_timeout_ms: u64) -> EtcdConfig {
        EtcdConfig::new(["http://127.0.0.1:2379"])
            .with_ttl(Duration::from_secs(ttl))
            .with_request_timeout(Duration::from_millis(request_timeout_ms))
    }

    #[test]
    fn a_dead_connection_is_found_within_half_a_ttl() {
        // Pinged every quarter TTL and given as long to answer.
        assert_eq!(ping_every(&config(2, 5_000)), Duration::from_millis(500));
        // Never slower than every 2 s, nor longer than a request may take.
        assert_eq!(ping_every(&config(60, 5_000)), Duration::from_secs(2));
        assert_eq!(ping_every(&config(60, 1_000)), Duration::from_secs(1));
    }
}
