//! `EtcdConfig`: where etcd is and how locks behave on it.

use std::fmt;
use std::time::Duration;

use super::endpoint::with_default_port;
use crate::util::setters::{getters, setters};
use crate::{Error, Result, TlsConfig};

/// The smallest TTL etcd honours (it raises smaller ones to about 2 s).
pub const MIN_TTL: Duration = Duration::from_secs(2);
/// The largest TTL accepted: a crashed holder blocks its lock this long.
pub const MAX_TTL: Duration = Duration::from_secs(3600);
/// The endpoint used when none is configured.
pub const DEFAULT_ENDPOINT: &str = "127.0.0.1:2379";
/// The key prefix used when none is configured.
pub const DEFAULT_PREFIX: &str = "/fairlock/";

/// Which keys a locker reads and writes on etcd
/// ([`EtcdConfig::with_layout`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layout {
    /// fairlock's own: a lock key `P k` and its queue under
    /// `P k/_OWNERS_/`. Every primitive, fair and unfair.
    #[default]
    Fairlock,
    /// etcd's own, that of `etcdctl lock` and `etcdctl elect`, Go's
    /// `concurrency.Mutex` and `Election`, and etcd's lock and election
    /// services: one key `P k/<lease hex>` per contender, held in create
    /// order. fairlock and those exclude each other and queue in one line
    /// on one name. Fair `lock`, `try_lock` and elections; unfair mode,
    /// read/write locks, semaphores and `lock_all` are refused with
    /// [`Error::Unsupported`].
    Etcd,
}

impl Layout {
    /// The layout a setting names: `fairlock` or `etcd`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the two that exist.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "fairlock" => Ok(Layout::Fairlock),
            "etcd" => Ok(Layout::Etcd),
            other => Err(Error::InvalidConfig(format!(
                "layout {other:?} is not one fairlock knows; use \"etcd\" (etcd's own, \
                 shared with etcdctl lock and Go's concurrency package) or \"fairlock\""
            ))),
        }
    }
}

/// Configuration of the etcd backend.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use fairlock::etcd::EtcdConfig;
///
/// let config = EtcdConfig::new(["127.0.0.1:2379", "127.0.0.1:22379"])
///     .with_prefix("/myapp/locks/")
///     .with_ttl(Duration::from_secs(10))
///     .with_connect_timeout(Duration::from_secs(3));
/// assert_eq!(config.endpoints().len(), 2);
/// ```
#[derive(Clone)]
pub struct EtcdConfig {
    endpoints: Vec<String>,
    prefix: String,
    ttl: Duration,
    connect_timeout: Duration,
    /// Set by [`EtcdConfig::with_connect_timeout`]: then endpoints that
    /// refuse connections are retried for the whole connect timeout.
    connect_timeout_set: bool,
    request_timeout: Duration,
    user: Option<(String, String)>,
    tls: Option<TlsConfig>,
    write_batching: bool,
    layout: Layout,
}

impl EtcdConfig {
    /// A configuration for the given endpoints (`"host:port"` or
    /// `"http://host:port"`; an endpoint without a port gets
    /// [`super::DEFAULT_PORT`], 2379), with the defaults: prefix `/fairlock/`, TTL
    /// 10 s, connect timeout 5 s, request timeout 5 s.
    ///
    /// # Examples
    /// ```
    /// let config = fairlock::etcd::EtcdConfig::new(["10.0.0.7", "http://etcd-2"]);
    /// assert_eq!(config.endpoints(), ["10.0.0.7:2379", "http://etcd-2:2379"]);
    /// ```
    #[must_use]
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(endpoints: I) -> Self {
        EtcdConfig {
            endpoints: endpoints
                .into_iter()
                .map(|e| with_default_port(e.into()))
                .collect(),
            prefix: DEFAULT_PREFIX.to_string(),
            ttl: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            connect_timeout_set: false,
            request_timeout: Duration::from_secs(5),
            user: None,
            tls: None,
            write_batching: true,
            layout: Layout::Fairlock,
        }
    }

    /// Sets the key prefix under which all lock keys live. A trailing `/` is
    /// added if missing.
    #[must_use]
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        if !self.prefix.ends_with('/') {
            self.prefix.push('/');
        }
        self
    }

    setters! {
        /// Sets the session lease TTL: how long a crashed holder keeps its
        /// locks. At least 2 s (etcd's minimum) and at most an hour;
        /// rounded up to whole seconds.
        with_ttl(ttl: Duration) => ttl = ttl;
        /// Sets how long one etcd request may take before it fails.
        with_request_timeout(timeout: Duration) => request_timeout = timeout;
        /// Whether lockers that share a connection (made by
        /// [`super::EtcdLocker::another`], or returned by `get_locker` after
        /// one [`super::register`]) send the takes and releases they make
        /// at the same time together, as the branches of one etcd txn (on
        /// by default). While fewer than 4 writes are on their way, a write
        /// goes out at once; beyond that it waits (at most 20 ms) for one
        /// of them to be answered. Each write keeps its own compares and
        /// its own answer; together they cost etcd one raft proposal
        /// instead of one each, which matters when many tasks lock
        /// different keys. Off: every write is a request of its own.
        ///
        /// Either way, at most 64 takes and releases of a connection are on
        /// their way at once (with fairlock's [`Layout`]; the etcd layout's
        /// go out at once); more wait in line, and a write's request
        /// timeout counts from when it goes out. A burst of thousands of
        /// `lock` calls at once then waits in this process instead of
        /// overrunning etcd (which refuses proposals, and delays lease
        /// renewals, once it falls behind applying them).
        with_write_batching(on: bool) => write_batching = on;
        /// Which keys the locker uses ([`Layout`]): fairlock's own (the
        /// default) or etcd's, to share names with `etcdctl lock`, Go's
        /// `concurrency` package and etcd's lock service.
        with_layout(layout: Layout) => layout = layout;
        /// Connects over TLS: `https://` endpoints (a `host:port` endpoint
        /// is reached with `https://`), trusting the configured CA (or the
        /// system's roots), presenting the client certificate if set
        /// (mutual TLS). An `https://` endpoint without this uses TLS with
        /// the system's roots.
        ///
        /// # Examples
        /// ```
        /// use fairlock::{TlsConfig, etcd::EtcdConfig};
        ///
        /// let config = EtcdConfig::new(["https://etcd-1:2379"]).with_tls(
        ///     TlsConfig::new()
        ///         .with_ca_file("ca.pem")
        ///         .with_cert_file("client.pem")
        ///         .with_key_file("client.key"),
        /// );
        /// assert!(config.validate().is_ok());
        /// ```
        with_tls(tls: TlsConfig) => tls = Some(tls);
    }

    /// Sets how long connecting may take before [`Error::Connect`].
    ///
    /// Without it, connecting gives up after about a second when every
    /// endpoint refuses connections (nothing listens there). With it, such
    /// endpoints are retried for the whole timeout: set it to wait for a
    /// server that is still starting.
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self.connect_timeout_set = true;
        self
    }

    /// Authenticates as `name` (etcd auth). The password never appears in
    /// `Debug` output. The client renews its token when etcd lets it expire
    /// (`--auth-token-ttl`), so held locks outlive tokens.
    #[must_use]
    pub fn with_user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((name.into(), password.into()));
        self
    }

    /// The TLS settings, if set.
    #[must_use]
    pub fn tls(&self) -> Option<&TlsConfig> {
        self.tls.as_ref()
    }

    /// The user name, if set (the password stays private).
    #[must_use]
    pub fn user_name(&self) -> Option<&str> {
        self.user.as_ref().map(|(name, _)| name.as_str())
    }

    /// The endpoints.
    #[must_use]
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The key prefix (ends with `/`).
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    getters! {
        /// The session lease TTL.
        ttl: Duration;
        /// The connect timeout.
        connect_timeout: Duration;
        /// The per-request timeout. `lock` and `try_lock` retry requests
        /// that failed without an answer for up to twice this long before
        /// they report the failure.
        request_timeout: Duration;
        /// See [`EtcdConfig::with_write_batching`].
        write_batching: bool;
        /// See [`EtcdConfig::with_layout`].
        layout: Layout;
    }

    /// `true` once [`EtcdConfig::with_connect_timeout`] was called.
    pub(crate) fn connect_timeout_is_set(&self) -> bool {
        self.connect_timeout_set
    }

    pub(crate) fn user(&self) -> Option<&(String, String)> {
        self.user.as_ref()
    }

    /// The TTL in whole seconds, rounded up.
    pub(crate) fn ttl_secs(&self) -> i64 {
        let secs = self.ttl.as_secs() + u64::from(self.ttl.subsec_nanos() > 0);
        i64::try_from(secs).unwrap_or(i64::MAX)
    }

    /// Checks every value; the messages say what to change.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the bad value.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::InvalidConfig(msg));
        if self.endpoints.is_empty() {
            return bad("no etcd endpoints given; pass e.g. [\"127.0.0.1:2379\"] \
                        or set FAIRLOCK_ENDPOINTS"
                .into());
        }
        if let Some(e) = self
            .endpoints
            .iter()
            .find(|e| e.trim().is_empty() || e.contains(char::is_whitespace))
        {
            return bad(format!(
                "etcd endpoint {e:?} is empty or contains spaces; use \"host:port\" \
                 or \"http://host:port\""
            ));
        }
        if let Some(tls) = &self.tls {
            tls.validate()?;
            if let Some(e) = self
                .endpoints
                .iter()
                .find(|e| e.to_ascii_lowercase().starts_with("http://"))
            {
                return bad(format!(
                    "etcd endpoint {e:?} is plain http://, but TLS options (--cacert, --cert, \
                     --key) are given; use https://host:port for a TLS server, or drop the \
                     TLS options"
                ));
            }
        }
        if let Some((name, _)) = &self.user
            && (name.is_empty() || name.contains(':'))
        {
            return bad(format!(
                "etcd user name {name:?} is empty or contains ':'; give the name alone and \
                 the password in FAIRLOCK_PASSWORD"
            ));
        }
        if self.prefix.trim_matches('/').is_empty() {
            return bad(format!(
                "key prefix {:?} is empty; use e.g. \"/fairlock/\" so locks do not \
                 mix with other data",
                self.prefix
            ));
        }
        if self.ttl < MIN_TTL {
            return bad(format!(
                "TTL {:?} is below etcd's minimum lease TTL of {MIN_TTL:?}; use 2s or more",
                self.ttl
            ));
        }
        if self.ttl > MAX_TTL {
            return bad(format!(
                "TTL {:?} is over {MAX_TTL:?}: a crashed holder would block its locks \
                 that long; use a shorter TTL (keepalives renew it while you hold)",
                self.ttl
            ));
        }
        if self.connect_timeout.is_zero() || self.request_timeout.is_zero() {
            return bad("connect and request timeouts must be greater than zero".into());
        }
        Ok(())
    }
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig::new([DEFAULT_ENDPOINT])
    }
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field(
                "user",
                &self.user.as_ref().map(|(name, _)| (name, "<redacted>")),
            )
            .field("tls", &self.tls)
            .field("write_batching", &self.write_batching)
            .field("layout", &self.layout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_password() {
        let c = EtcdConfig::default()
            .with_user("root", "hunter2")
            .with_tls(TlsConfig::new().with_key_pem("-----BEGIN PRIVATE KEY-----secret"));
        let dbg = format!("{c:?}");
        assert!(dbg.contains("root") && !dbg.contains("hunter2"), "{dbg}");
        assert!(
            dbg.contains("redacted PEM") && !dbg.contains("secret"),
            "{dbg}"
        );
    }

    #[test]
    fn validation_names_the_problem() {
        let err = |c: EtcdConfig| c.validate().unwrap_err().to_string();
        assert!(err(EtcdConfig::new(Vec::<String>::new())).contains("no etcd endpoints"));
        assert!(err(EtcdConfig::new([""])).contains("empty"));
        assert!(err(EtcdConfig::default().with_ttl(Duration::from_secs(1))).contains("minimum"));
        assert!(err(EtcdConfig::default().with_ttl(Duration::from_secs(7200))).contains("over"));
        assert!(err(EtcdConfig::default().with_prefix("/")).contains("prefix"));
        let tls = || EtcdConfig::new(["http://a:2379"]).with_tls(TlsConfig::new());
        assert!(err(tls()).contains("plain http://"), "{}", err(tls()));
        let half = EtcdConfig::new(["https://a:2379"])
            .with_tls(TlsConfig::new().with_key_file("client.key"));
        assert!(err(half).contains("without its certificate"));
        EtcdConfig::new(["https://a:2379", "b:2379"])
            .with_tls(TlsConfig::new())
            .validate()
            .unwrap();
        EtcdConfig::default().validate().unwrap();
        assert_eq!(
            EtcdConfig::default()
                .with_ttl(Duration::from_millis(2500))
                .ttl_secs(),
            3
        );
    }
}
