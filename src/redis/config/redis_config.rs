//! `RedisConfig`: which Redis masters, and how locks behave on them.

use std::fmt;
use std::time::Duration;

use crate::redis::config::topology::{Deployment, ReplicaAcks, Topology, resolve};
use crate::redis::config::url::redact;
use crate::redis::config::url_options::split;
use crate::util::setters::{getters, setters};
use crate::{Result, TlsConfig};

/// The smallest TTL accepted: the watchdog extends every TTL/3 and each
/// extend may take a per-node timeout, so shorter TTLs expire under load.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// The largest TTL accepted: a crashed holder blocks its lock this long.
pub const MAX_TTL: Duration = Duration::from_secs(3600);
/// The key prefix used when none is configured.
pub const DEFAULT_PREFIX: &str = "fairlock:";
/// Redlock's clock drift factor: the share of the TTL by which clocks of
/// the client and the servers may run at different rates.
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;

/// Configuration of the Redis backend.
///
/// One URL is a single Redis instance; several are independent masters
/// locked together with Redlock (a lock is held when a majority of them
/// grant it). URLs are `redis://[user:password@]host[:port][/db]`, or
/// `rediss://...` for TLS (see [`RedisConfig::with_tls`]).
///
/// A Redis Cluster is named by its seed nodes,
/// `redis+cluster://h1:7000,h2:7001` (or [`RedisConfig::cluster`]); a
/// master behind Redis Sentinel by its sentinels and the name they monitor
/// it under, `redis+sentinel://s1:26379,s2:26379/mymaster` (or
/// [`RedisConfig::sentinel`]). `rediss+cluster://` and `rediss+sentinel://`
/// use TLS.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use fairlock::redis::RedisConfig;
///
/// let config = RedisConfig::new(["redis://127.0.0.1:6379"])
///     .with_prefix("myapp:locks:")
///     .with_ttl(Duration::from_secs(10))
///     .with_node_timeout(Duration::from_millis(200));
/// assert!(config.validate().is_ok());
/// assert_eq!(config.quorum(), 1);
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    pub(crate) urls: Vec<String>,
    prefix: String,
    ttl: Duration,
    node_timeout: Duration,
    connect_timeout: Duration,
    retry_delay: Duration,
    max_retry_delay: Duration,
    drift_factor: f64,
    tls: Option<TlsConfig>,
    /// (user, password) for URLs that carry no credentials; no user means
    /// Redis' `default` user.
    credentials: Option<(Option<String>, String)>,
    /// The same for sentinels, when theirs differ.
    sentinel_credentials: Option<(Option<String>, String)>,
    /// Set by [`RedisConfig::cluster`] and [`RedisConfig::sentinel`];
    /// otherwise the URLs' schemes tell.
    deployment: Option<Deployment>,
    /// Replica acknowledgements and the data loss wait (`durability.rs`).
    /// `None`: [`ReplicaAcks::All`].
    pub(crate) replica_acks: Option<ReplicaAcks>,
    /// `None`: the TTL.
    pub(crate) data_loss_wait: Option<Duration>,
}

impl RedisConfig {
    /// A configuration for the given URLs, with the defaults: prefix
    /// `fairlock:`, TTL 10 s, per-node timeout 250 ms, connect timeout 5 s,
    /// retry delay 50 ms (up to 1 s, with jitter), drift factor 0.01, every
    /// replica acknowledging grants and extends, and a data loss wait of
    /// one TTL (see `with_replica_acks` and `with_data_loss_wait`).
    #[must_use]
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(urls: I) -> Self {
        RedisConfig {
            urls: urls.into_iter().map(Into::into).collect(),
            prefix: DEFAULT_PREFIX.to_string(),
            ttl: Duration::from_secs(10),
            node_timeout: Duration::from_millis(250),
            connect_timeout: Duration::from_secs(5),
            retry_delay: Duration::from_millis(50),
            max_retry_delay: Duration::from_secs(1),
            drift_factor: DEFAULT_DRIFT_FACTOR,
            tls: None,
            credentials: None,
            sentinel_credentials: None,
            deployment: None,
            replica_acks: None,
            data_loss_wait: None,
        }
    }

    /// Names the deployment (see `deployments.rs`).
    pub(crate) fn set_deployment(mut self, deployment: Deployment) -> Self {
        self.deployment = Some(deployment);
        self
    }

    /// Sets the sentinels' own credentials (see `deployments.rs`).
    pub(crate) fn set_sentinel_credentials(
        mut self,
        user: Option<String>,
        password: String,
    ) -> Self {
        self.sentinel_credentials = Some((user, password));
        self
    }

    /// The deployment the configuration names.
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] for a deployment URL that does not
    /// parse, or one mixed with other URLs.
    pub fn deployment(&self) -> Result<Deployment> {
        Ok(self.topology()?.deployment)
    }

    /// The deployment and its nodes' plain URLs.
    pub(crate) fn topology(&self) -> Result<Topology> {
        let (urls, _) = split(&self.urls)?;
        resolve(&urls, self.deployment.as_ref())
    }

    /// The sentinels' own credentials, when set apart from the master's.
    pub(crate) fn sentinel_credentials(&self) -> Option<(Option<&str>, &str)> {
        self.sentinel_credentials
            .as_ref()
            .map(|(user, password)| (user.as_deref(), password.as_str()))
    }

    setters! {
        /// Sets the prefix of every Redis key fairlock writes.
        with_prefix(prefix: impl Into<String>) => prefix = prefix.into();
        /// Sets the lock TTL: how long a crashed holder keeps its lock. The
        /// watchdog extends held locks every TTL/3. At least 1 s, at most an
        /// hour.
        with_ttl(ttl: Duration) => ttl = ttl;
        /// Sets how long one request to one Redis node may take before that
        /// node counts as not answering. Must be below TTL/3, and an extend
        /// sent at TTL/3 must end within it before the guard's local deadline
        /// (TTL - drift - margin, the margin being TTL/10, at most 1 s).
        with_node_timeout(timeout: Duration) => node_timeout = timeout;
        /// Sets how long connecting may take before [`Error::Connect`](crate::Error::Connect).
        with_connect_timeout(timeout: Duration) => connect_timeout = timeout;
        /// Sets Redlock's clock drift factor (default 0.01): a grant is trusted
        /// for `ttl - elapsed - (ttl * factor + 2 ms)`.
        with_drift_factor(factor: f64) => drift_factor = factor;
        /// TLS settings for `rediss://` URLs: the CA to trust (else the
        /// system's roots) and a client certificate for servers that demand one
        /// (`tls-auth-clients yes`). The server name checked is the URL's host.
        ///
        /// # Examples
        /// ```
        /// use fairlock::{TlsConfig, redis::RedisConfig};
        ///
        /// let config = RedisConfig::new(["rediss://locks:secret@redis-1:6380"])
        ///     .with_tls(TlsConfig::new().with_ca_file("ca.pem"));
        /// assert!(config.validate().is_ok());
        /// ```
        with_tls(tls: TlsConfig) => tls = Some(tls);
        /// Authenticates as Redis' `default` user with `password` (`requirepass`)
        /// on every URL that carries no credentials of its own.
        with_password(password: impl Into<String>) => credentials = Some((None, password.into()));
    }

    /// Sets the pause before retrying: a Redlock attempt that got the lock
    /// on too few nodes waits a random time below `delay`; a failing
    /// request is retried after `delay`, doubling up to `max` (with jitter).
    #[must_use]
    pub fn with_retry_delay(mut self, delay: Duration, max: Duration) -> Self {
        self.retry_delay = delay;
        self.max_retry_delay = max;
        self
    }

    /// Authenticates as the ACL user `name` on every URL that carries no
    /// credentials of its own. The password never appears in `Debug`
    /// output or errors.
    #[must_use]
    pub fn with_user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some((Some(name.into()), password.into()));
        self
    }

    /// The TLS settings, if set.
    #[must_use]
    pub fn tls(&self) -> Option<&TlsConfig> {
        self.tls.as_ref()
    }

    /// The user and password for URLs without credentials.
    pub(crate) fn credentials(&self) -> Option<(Option<&str>, &str)> {
        self.credentials
            .as_ref()
            .map(|(user, password)| (user.as_deref(), password.as_str()))
    }

    /// The URLs, one per Redis master.
    #[must_use]
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The key prefix.
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    getters! {
        /// The lock TTL.
        ttl: Duration;
        /// The per-node request timeout.
        node_timeout: Duration;
        /// The connect timeout.
        connect_timeout: Duration;
        /// The clock drift factor.
        drift_factor: f64;
    }

    /// The first retry pause and its cap.
    #[must_use]
    pub fn retry_delay(&self) -> (Duration, Duration) {
        (self.retry_delay, self.max_retry_delay)
    }

    /// How many nodes must grant a lock: 1 for a single instance, a
    /// cluster or a master behind sentinels, a majority (N/2 + 1) for
    /// Redlock over N masters.
    #[must_use]
    pub fn quorum(&self) -> usize {
        self.lock_nodes() / 2 + 1
    }

    /// `true` for Redlock (more than one independent master).
    #[must_use]
    pub fn is_redlock(&self) -> bool {
        self.lock_nodes() > 1
    }

    /// How many independent masters a lock is taken on: 1 but for Redlock.
    fn lock_nodes(&self) -> usize {
        match self.topology() {
            Ok(t) if t.deployment == Deployment::Masters => t.urls.len(),
            Ok(_) => 1,
            Err(_) => self.urls.len(),
        }
    }

    /// The time a grant is not trusted for, by Redlock's rule: TTL x drift
    /// factor + 2 ms.
    #[must_use]
    pub fn drift(&self) -> Duration {
        self.ttl.mul_f64(self.drift_factor) + Duration::from_millis(2)
    }

    /// The TTL in whole milliseconds, as `PX` takes it.
    pub(crate) fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// How much earlier than Redis a guard's local deadline ends: a tenth
    /// of the TTL, at most one second (on top of the drift). Deadlines
    /// count from when a request was sent, not when it was answered.
    pub(crate) fn margin(&self) -> Duration {
        (self.ttl / 10).min(Duration::from_secs(1))
    }

    /// How long a grant or extend whose request was sent `elapsed` ago is
    /// still trusted locally: `ttl - elapsed - drift - margin`, or `None`
    /// when nothing is left (such a grant is given back, not handed out
    /// as a guard that is already not held).
    pub(crate) fn validity_left(&self, elapsed: Duration) -> Option<Duration> {
        self.ttl
            .checked_sub(elapsed + self.drift() + self.margin())
            .filter(|left| !left.is_zero())
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field(
                "urls",
                &self.urls.iter().map(|u| redact(u)).collect::<Vec<_>>(),
            )
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("node_timeout", &self.node_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("retry_delay", &self.retry_delay)
            .field("max_retry_delay", &self.max_retry_delay)
            .field("drift_factor", &self.drift_factor)
            .field("tls", &self.tls)
            .field(
                "credentials",
                &self
                    .credentials
                    .as_ref()
                    .map(|(user, _)| (user, "<redacted>")),
            )
            .field(
                "sentinel_credentials",
                &self
                    .sentinel_credentials
                    .as_ref()
                    .map(|(user, _)| (user, "<redacted>")),
            )
            .field("deployment", &self.deployment)
            .field("replica_acks", &self.replica_acks)
            .field("data_loss_wait", &self.data_loss_wait)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_leave_room_for_drift_and_margin() {
        let c = RedisConfig::new(["redis://127.0.0.1:6379"]);
        let (ttl, drift, margin) = (c.ttl(), c.drift(), c.margin());
        assert_eq!(margin, Duration::from_secs(1));
        let last_ok = ttl - drift - margin - Duration::from_millis(1);
        assert_eq!(c.validity_left(last_ok), Some(Duration::from_millis(1)));
        // Within the drift bound, but its deadline (which subtracts the
        // margin too) has passed: not a grant.
        assert_eq!(c.validity_left(ttl - drift - margin / 2), None);
        assert_eq!(c.validity_left(ttl - drift - margin), None);
        assert_eq!(c.validity_left(ttl * 2), None);
    }

    #[test]
    fn quorum_and_drift() {
        let five: Vec<_> = (0..5)
            .map(|i| format!("redis://127.0.0.1:{}", 7000 + i))
            .collect();
        let config = RedisConfig::new(five);
        assert_eq!(config.quorum(), 3);
        assert!(config.is_redlock());
        assert_eq!(config.drift(), Duration::from_millis(102));
    }

    #[test]
    fn debug_hides_passwords() {
        let c = RedisConfig::new(["redis://app:hunter2@10.0.0.1:6379"]);
        let dbg = format!("{c:?}");
        assert!(dbg.contains("app") && !dbg.contains("hunter2"), "{dbg}");
        let c = RedisConfig::new(["rediss://app:hunt@er2@10.0.0.1:6379/0"]).with_user("u", "pw42");
        let dbg = format!("{c:?}");
        assert!(
            dbg.contains("rediss://app:<redacted>@10.0.0.1:6379/0"),
            "{dbg}"
        );
        assert!(!dbg.contains("hunt") && !dbg.contains("pw42"), "{dbg}");
        let s = RedisConfig::new(["redis+sentinel://app:hunter2@s1,s2/m"])
            .with_sentinel_user("s", "pw43");
        let dbg = format!("{s:?}");
        assert!(!dbg.contains("hunter2") && !dbg.contains("pw43"), "{dbg}");
        let bad = RedisConfig::new(["rediss://app:hunter2@"])
            .validate()
            .unwrap_err();
        assert!(!bad.to_string().contains("hunter2"), "{bad}");
    }
}
