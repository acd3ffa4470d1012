//! Configuration from the environment: the `FAIRLOCK_*` variables, for
//! every backend, and the process-wide setup that reads them.

use std::sync::Arc;
use std::time::Duration;

use crate::connect::backend_config::{BackendConfig, DEFAULT_ENDPOINT};
use crate::{Error, Locker, Result, parse_duration};

impl BackendConfig {
    /// Reads the environment: `FAIRLOCK_ENDPOINTS` (comma separated;
    /// default `127.0.0.1:2379`, etcd), `FAIRLOCK_PREFIX`, `FAIRLOCK_TTL`
    /// (e.g. `10s`, `1500ms`, `2m`, or plain seconds) and
    /// `FAIRLOCK_CONNECT_TIMEOUT` (the same forms; see
    /// [`BackendConfig::with_connect_timeout`]), `FAIRLOCK_LAYOUT` (`etcd`
    /// or `fairlock`, etcd only; see `BackendConfig::with_layout`); for
    /// Redis also
    /// `FAIRLOCK_REPLICA_ACKS` (`all`, `off` or a number; see
    /// `RedisConfig::with_replica_acks`) and `FAIRLOCK_DATA_LOSS_WAIT` (a
    /// duration; see `RedisConfig::with_data_loss_wait`), which etcd
    /// endpoints ignore.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] as for [`BackendConfig::from_endpoints`],
    /// or when `FAIRLOCK_TTL`, `FAIRLOCK_CONNECT_TIMEOUT` or
    /// `FAIRLOCK_LAYOUT` does not parse.
    pub fn from_env() -> Result<Self> {
        let endpoints = std::env::var("FAIRLOCK_ENDPOINTS")
            .ok()
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let mut config = Self::from_endpoints(endpoints.split(','))?;
        if let Ok(prefix) = std::env::var("FAIRLOCK_PREFIX") {
            config = config.with_prefix(prefix);
        }
        if let Ok(ttl) = std::env::var("FAIRLOCK_TTL") {
            let ttl = parse_duration(&ttl)
                .map_err(|e| Error::InvalidConfig(format!("FAIRLOCK_TTL={ttl:?}: {e}")))?;
            config = config.with_ttl(ttl);
        }
        if let Some(timeout) = connect_timeout_from_env()? {
            config = config.with_connect_timeout(timeout);
        }
        #[cfg(feature = "etcd")]
        if let Some(layout) = std::env::var("FAIRLOCK_LAYOUT")
            .ok()
            .filter(|s| !s.is_empty())
        {
            let layout = crate::etcd::Layout::parse(&layout)
                .map_err(|e| Error::InvalidConfig(format!("FAIRLOCK_LAYOUT: {e}")))?;
            config = config.with_layout(layout)?;
        }
        // Irrefutable in a build with Redis alone.
        #[cfg(feature = "redis")]
        #[allow(irrefutable_let_patterns)]
        if let BackendConfig::Redis(redis) = config {
            config = BackendConfig::Redis(redis.with_durability_from_env()?);
        }
        config.with_access(crate::Access::from_env())
    }
}

/// `FAIRLOCK_CONNECT_TIMEOUT`, if set and not blank.
///
/// # Errors
/// [`Error::InvalidConfig`] when it does not parse as a duration.
fn connect_timeout_from_env() -> Result<Option<Duration>> {
    connect_timeout_from(std::env::var("FAIRLOCK_CONNECT_TIMEOUT").ok())
}

/// [`connect_timeout_from_env`] on the variable's value `var`.
fn connect_timeout_from(var: Option<String>) -> Result<Option<Duration>> {
    let Some(text) = var.filter(|s| !s.trim().is_empty()) else {
        return Ok(None);
    };
    parse_duration(&text).map(Some).map_err(|e| {
        Error::InvalidConfig(format!(
            "FAIRLOCK_CONNECT_TIMEOUT={text:?}: {e}; give a duration such as 10s"
        ))
    })
}

// Written here, with `BackendConfig::from_env`, rather than in
// etcd/config.rs: this file imports backend.rs, which imports that one.
#[cfg(feature = "etcd")]
impl crate::etcd::EtcdConfig {
    /// Reads the environment: `FAIRLOCK_ENDPOINTS` (comma separated, default
    /// `127.0.0.1:2379`), `FAIRLOCK_PREFIX`, `FAIRLOCK_TTL` (e.g. `10s`,
    /// `1500ms`, `2m`, or plain seconds), `FAIRLOCK_CACERT`,
    /// `FAIRLOCK_CERT`, `FAIRLOCK_CLIENT_KEY` (TLS) and `FAIRLOCK_USER`,
    /// `FAIRLOCK_PASSWORD` (etcd auth), as [`crate::BackendConfig::from_env`]
    /// does for every backend.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `FAIRLOCK_TTL` does not parse, or the
    /// endpoints are not etcd endpoints (e.g. `redis://` URLs) or are
    /// malformed.
    pub fn from_env() -> Result<Self> {
        match BackendConfig::from_env()? {
            BackendConfig::Etcd(config) => Ok(config),
            #[allow(unreachable_patterns)]
            other => Err(Error::InvalidConfig(format!(
                "FAIRLOCK_ENDPOINTS={:?} are not etcd endpoints; set e.g. \
                 FAIRLOCK_ENDPOINTS=127.0.0.1:2379",
                other.endpoints().join(",")
            ))),
        }
    }
}

/// Registers the backend named by `FAIRLOCK_ENDPOINTS` (see
/// [`BackendConfig::from_env`]) as the process-wide locker provider.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> fairlock::Result<()> {
/// // FAIRLOCK_ENDPOINTS=redis://127.0.0.1:6379 picks Redis,
/// // FAIRLOCK_ENDPOINTS=127.0.0.1:2379 (or nothing) picks etcd.
/// fairlock::register_from_env().await?;
/// let locker = fairlock::get_locker(true)?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::InvalidConfig`] for a bad environment; [`Error::Connect`] when
/// the servers do not answer.
///
/// # Cancel safety
/// Cancel safe: nothing is registered until the connection is up.
pub async fn register_from_env() -> Result<()> {
    BackendConfig::from_env()?.register().await
}

/// One locker on the backend named by `FAIRLOCK_ENDPOINTS`.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> fairlock::Result<()> {
/// let locker = fairlock::connect_from_env(false).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// As for [`register_from_env`]; [`Error::Unsupported`] for fair mode on
/// Redlock.
///
/// # Cancel safety
/// Cancel safe: nothing is written until the first lock.
pub async fn connect_from_env(fair: bool) -> Result<Arc<dyn Locker>> {
    BackendConfig::from_env()?.connect(fair).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_timeout_variable_parses_or_names_itself() {
        assert_eq!(connect_timeout_from(None).unwrap(), None);
        assert_eq!(connect_timeout_from(Some(" ".into())).unwrap(), None);
        assert_eq!(
            connect_timeout_from(Some("1500ms".into())).unwrap(),
            Some(Duration::from_millis(1500))
        );
        let err = connect_timeout_from(Some("soon".into())).unwrap_err();
        assert!(
            err.to_string()
                .contains("FAIRLOCK_CONNECT_TIMEOUT=\"soon\""),
            "{err}"
        );
    }
}
