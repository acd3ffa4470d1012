//! Choosing the backend from the endpoints' scheme: `redis://` URLs are
//! Redis (one URL: a single instance, several: Redlock), `host:port` and
//! `http(s)://` endpoints are etcd.

use std::sync::Arc;
use std::time::Duration;

use crate::connect::scheme::{Kind, is_redis_deployment, kind};
use crate::{Error, Locker, Result};

/// A backend and its configuration, chosen by the endpoints' scheme.
///
/// # Examples
/// ```
/// use fairlock::BackendConfig;
///
/// let redis = BackendConfig::from_endpoints(["redis://127.0.0.1:6379"]).unwrap();
/// assert_eq!(redis.backend(), "redis");
/// let etcd = BackendConfig::from_endpoints(["127.0.0.1:2379"]).unwrap();
/// assert_eq!(etcd.backend(), "etcd");
/// assert!(BackendConfig::from_endpoints(["redis://a:1", "b:2379"]).is_err());
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum BackendConfig {
    /// etcd (`host:port` or `http(s)://host:port` endpoints).
    #[cfg(feature = "etcd")]
    Etcd(crate::etcd::EtcdConfig),
    /// Redis (`redis://` URLs: one instance, or Redlock over several;
    /// `redis+cluster://h1,h2`: a cluster; `redis+sentinel://s1,s2/master`:
    /// a master behind sentinels).
    #[cfg(feature = "redis")]
    Redis(crate::redis::RedisConfig),
}

/// The endpoint used when none is configured.
pub(crate) const DEFAULT_ENDPOINT: &str = "127.0.0.1:2379";

impl BackendConfig {
    /// The backend the endpoints name, with its default configuration: all
    /// `redis://` URLs (one: a single instance; several: Redlock), or all
    /// etcd endpoints (`host:port`, `http://host:port`).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for no endpoints, an empty one, an unknown
    /// scheme, Redis and etcd endpoints mixed, or a backend this build
    /// leaves out.
    pub fn from_endpoints<I, S>(endpoints: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let endpoints: Vec<String> = endpoints
            .into_iter()
            .map(|e| e.into().trim().to_owned())
            .collect();
        if endpoints.is_empty() {
            return Err(Error::InvalidConfig(
                "no endpoints given; pass e.g. redis://127.0.0.1:6379 (Redis) or \
                 127.0.0.1:2379 (etcd)"
                    .into(),
            ));
        }
        if endpoints.iter().any(String::is_empty) {
            return Err(Error::InvalidConfig(format!(
                "an endpoint in {:?} is empty; separate endpoints with single commas",
                endpoints.join(",")
            )));
        }
        // `redis+cluster://h1:7000,h2:7001` and `redis+sentinel://s1,s2/m`,
        // split on their commas: the hosts after the first are the same
        // deployment's (RedisConfig reads them).
        let whole = is_redis_deployment(&endpoints[0]);
        let kinds = endpoints
            .iter()
            .map(|e| if whole { Ok(Kind::Redis) } else { kind(e) })
            .collect::<Result<Vec<_>>>()?;
        if kinds.iter().any(|k| *k != kinds[0]) {
            return Err(Error::InvalidConfig(format!(
                "endpoints {:?} mix Redis (redis://) and etcd endpoints; one backend at a \
                 time: all redis:// URLs, or all etcd host:port endpoints",
                endpoints.join(",")
            )));
        }
        match kinds[0] {
            #[cfg(feature = "redis")]
            Kind::Redis => Ok(BackendConfig::Redis(crate::redis::RedisConfig::new(
                endpoints,
            ))),
            #[cfg(feature = "etcd")]
            Kind::Etcd => Ok(BackendConfig::Etcd(crate::etcd::EtcdConfig::new(endpoints))),
            #[allow(unreachable_patterns)]
            other => Err(Error::InvalidConfig(format!(
                "endpoints {:?} are {other:?} endpoints, but fairlock was built without its \
                 {} feature",
                endpoints.join(","),
                format!("{other:?}").to_lowercase()
            ))),
        }
    }

    /// Applies TLS files and credentials: on etcd a user needs a password;
    /// on Redis they apply to URLs without credentials of their own (a
    /// password alone is for the `default` user).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a user without a password, or a
    /// password without a user on etcd.
    pub fn with_access(self, access: crate::Access) -> Result<Self> {
        let tls = access.tls();
        let credentials = access.credentials()?;
        Ok(match self {
            #[cfg(feature = "etcd")]
            BackendConfig::Etcd(mut c) => {
                if let Some(tls) = tls {
                    c = c.with_tls(tls);
                }
                match credentials {
                    Some((Some(user), password)) => c = c.with_user(user, password),
                    Some((None, _)) => {
                        return Err(Error::InvalidConfig(
                            "FAIRLOCK_PASSWORD is set but no etcd user is given; pass --user \
                             NAME (FAIRLOCK_USER)"
                                .into(),
                        ));
                    }
                    None => {}
                }
                BackendConfig::Etcd(c)
            }
            #[cfg(feature = "redis")]
            BackendConfig::Redis(mut c) => {
                if let Some(tls) = tls {
                    c = c.with_tls(tls);
                }
                match credentials {
                    Some((Some(user), password)) => c = c.with_user(user, password),
                    Some((None, password)) => c = c.with_password(password),
                    None => {}
                }
                BackendConfig::Redis(c)
            }
        })
    }

    /// Sets the key prefix.
    #[must_use]
    pub fn with_prefix(self, prefix: impl Into<String>) -> Self {
        match self {
            #[cfg(feature = "etcd")]
            BackendConfig::Etcd(c) => BackendConfig::Etcd(c.with_prefix(prefix)),
            #[cfg(feature = "redis")]
            BackendConfig::Redis(c) => BackendConfig::Redis(c.with_prefix(prefix)),
        }
    }

    /// Sets which keys an etcd locker uses: fairlock's own layout (the
    /// default) or etcd's, shared with `etcdctl lock` and Go's
    /// `concurrency` package (see [`crate::etcd::Layout`]).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for etcd's layout on Redis endpoints.
    #[cfg(feature = "etcd")]
    pub fn with_layout(self, layout: crate::etcd::Layout) -> Result<Self> {
        match self {
            BackendConfig::Etcd(c) => Ok(BackendConfig::Etcd(c.with_layout(layout))),
            #[cfg(feature = "redis")]
            BackendConfig::Redis(_) if layout == crate::etcd::Layout::Etcd => {
                Err(Error::InvalidConfig(
                    "the etcd layout is for etcd endpoints; these are Redis URLs".into(),
                ))
            }
            #[cfg(feature = "redis")]
            redis @ BackendConfig::Redis(_) => Ok(redis),
        }
    }

    /// Sets the TTL: how long a crashed holder keeps its locks.
    #[must_use]
    pub fn with_ttl(self, ttl: Duration) -> Self {
        match self {
            #[cfg(feature = "etcd")]
            BackendConfig::Etcd(c) => BackendConfig::Etcd(c.with_ttl(ttl)),
            #[cfg(feature = "redis")]
            BackendConfig::Redis(c) => BackendConfig::Redis(c.with_ttl(ttl)),
        }
    }

    /// Sets how long connecting may take before
    /// [`Error::Connect`](crate::Error::Connect); on etcd, endpoints that
    /// refuse connections are then retried for that long (to wait for a
    /// server that is starting).
    #[must_use]
    pub fn with_connect_timeout(self, timeout: Duration) -> Self {
        match self {
            #[cfg(feature = "etcd")]
            BackendConfig::Etcd(c) => BackendConfig::Etcd(c.with_connect_timeout(timeout)),
            #[cfg(feature = "redis")]
            BackendConfig::Redis(c) => BackendConfig::Redis(c.with_connect_timeout(timeout)),
        }
    }

    /// `"etcd"` or `"redis"`.
    #[must_use]
    pub fn backend(&self) -> &'static str {
        match self {
            #[cfg(feature = "etcd")]
            BackendConfig::Etcd(_) => "etcd",
            #[cfg(feature = "redis")]
            BackendConfig::Redis(_) => "redis",
        }
    }

    /// The endpoints or URLs, as configured (URLs may hold passwords).
    #[must_use]
    pub fn endpoints(&self) -> Vec<String> {
        match self {
            #[cfg(feature = "etcd")]
            BackendConfig::Etcd(c) => c.endpoints().to_vec(),
            #[cfg(feature = "redis")]
            BackendConfig::Redis(c) => c.urls().to_vec(),
        }
    }

    /// The key prefix.
    #[must_use]
    pub fn prefix(&self) -> &str {
        match self {
            #[cfg(feature = "etcd")]
            BackendConfig::Etcd(c) => c.prefix(),
            #[cfg(feature = "redis")]
            BackendConfig::Redis(c) => c.prefix(),
        }
    }

    /// The TTL.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        match self {
            #[cfg(feature = "etcd")]
            BackendConfig::Etcd(c) => c.ttl(),
            #[cfg(feature = "redis")]
            BackendConfig::Redis(c) => c.ttl(),
        }
    }

    /// Checks every value; the messages say what to change.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the bad value.
    pub fn validate(&self) -> Result<()> {
        match self {
            #[cfg(feature = "etcd")]
            BackendConfig::Etcd(c) => c.validate(),
            #[cfg(feature = "redis")]
            BackendConfig::Redis(c) => c.validate(),
        }
    }

    /// Connects and registers the backend as the process-wide provider
    /// (see [`crate::etcd::register`], [`crate::redis::register`]).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad configuration; [`Error::Connect`]
    /// when the servers do not answer within the connect timeout.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is registered until the connection is up.
    pub async fn register(self) -> Result<()> {
        match self {
            #[cfg(feature = "etcd")]
            BackendConfig::Etcd(c) => crate::etcd::register(c).await,
            #[cfg(feature = "redis")]
            BackendConfig::Redis(c) => crate::redis::register(c).await,
        }
    }

    /// Connects and makes one locker, fair (arrival order) or unfair.
    ///
    /// # Errors
    /// As for [`BackendConfig::register`]; [`Error::Unsupported`] for fair
    /// mode on Redlock.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is written until the first lock.
    pub async fn connect(&self, fair: bool) -> Result<Arc<dyn Locker>> {
        Ok(match self {
            #[cfg(feature = "etcd")]
            BackendConfig::Etcd(c) => {
                Arc::new(crate::etcd::EtcdLocker::connect(c.clone(), fair).await?)
            }
            #[cfg(feature = "redis")]
            BackendConfig::Redis(c) => {
                Arc::new(crate::redis::RedisLocker::connect(c.clone(), fair).await?)
            }
        })
    }
}

#[cfg(all(test, feature = "etcd", feature = "redis"))]
mod tests {
    use super::*;
    use crate::etcd::Layout;
    use crate::parse_duration;

    #[test]
    fn etcd_s_layout_is_for_etcd_endpoints() {
        let pick = |e: &str| BackendConfig::from_endpoints([e]).unwrap();
        match pick("127.0.0.1:2379").with_layout(Layout::Etcd).unwrap() {
            BackendConfig::Etcd(c) => assert_eq!(c.layout(), Layout::Etcd),
            other => panic!("{other:?}"),
        }
        let redis = pick("redis://127.0.0.1:6379");
        let err = redis.clone().with_layout(Layout::Etcd).unwrap_err();
        assert!(err.to_string().contains("for etcd endpoints"), "{err}");
        assert!(redis.with_layout(Layout::Fairlock).is_ok());
    }

    #[test]
    fn scheme_picks_the_backend() {
        let pick = |e: &[&str]| BackendConfig::from_endpoints(e.iter().copied());
        assert_eq!(
            pick(&["redis://127.0.0.1:6379"]).unwrap().backend(),
            "redis"
        );
        let redlock = pick(&["redis://a:1", "redis://b:2", "redis://c:3"]).unwrap();
        match &redlock {
            BackendConfig::Redis(c) => assert!(c.is_redlock() && c.quorum() == 2),
            other => panic!("{other:?}"),
        }
        assert_eq!(pick(&["127.0.0.1:2379"]).unwrap().backend(), "etcd");
        assert_eq!(
            pick(&["http://a:2379", "b:2379"]).unwrap().backend(),
            "etcd"
        );
        let cluster = pick(&["redis+cluster://a:1", "b:2"]).unwrap();
        match &cluster {
            BackendConfig::Redis(c) => {
                assert!(!c.is_redlock() && c.quorum() == 1);
                c.validate().unwrap();
            }
            other => panic!("{other:?}"),
        }
        let mixed = pick(&["redis://a:1", "b:2379"]).unwrap_err().to_string();
        assert!(mixed.contains("mix"), "{mixed}");
        let unknown = pick(&["postgres://a"]).unwrap_err().to_string();
        assert!(unknown.contains("unknown scheme"), "{unknown}");
        assert!(
            pick(&["redis://a:1", ""])
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        assert!(pick(&[]).is_err());
    }

    #[test]
    fn prefix_and_ttl_apply_to_either() {
        let c = BackendConfig::from_endpoints(["redis://a:1"])
            .unwrap()
            .with_prefix("p:")
            .with_ttl(Duration::from_secs(3));
        assert_eq!((c.prefix(), c.ttl()), ("p:", Duration::from_secs(3)));
        assert_eq!(
            parse_duration("1500ms").unwrap(),
            Duration::from_millis(1500)
        );
    }
}
