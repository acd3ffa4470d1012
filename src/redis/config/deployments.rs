//! [`RedisConfig`] for a Redis Cluster or a master behind Redis Sentinel,
//! and the sentinels' own credentials.

use crate::redis::config::redis_config::RedisConfig;
use crate::redis::config::topology::Deployment;

impl RedisConfig {
    /// A Redis Cluster reached through `seeds` (`redis://host:port` URLs of
    /// any of its nodes; the others are found from them). Each lock's keys
    /// share one hash slot: `<prefix>{<key>}`, its queue, waiter records
    /// and fencing counter `<prefix>{<key>}/_OWNERS_/...`.
    /// Same as `RedisConfig::new(["redis+cluster://h1:7000,h2:7001"])`.
    ///
    /// # Examples
    /// ```
    /// use fairlock::redis::{Deployment, RedisConfig};
    ///
    /// let config = RedisConfig::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]);
    /// assert_eq!(config.deployment().unwrap(), Deployment::Cluster);
    /// assert_eq!(config.quorum(), 1);
    /// ```
    #[must_use]
    pub fn cluster<I: IntoIterator<Item = S>, S: Into<String>>(seeds: I) -> Self {
        Self::new(seeds).set_deployment(Deployment::Cluster)
    }

    /// The master that Redis Sentinel monitors as `master`, found through
    /// `sentinels` (`redis://host:26379` URLs) and followed across
    /// failovers. Same as
    /// `RedisConfig::new(["redis+sentinel://s1:26379,s2:26379/mymaster"])`.
    ///
    /// # Examples
    /// ```
    /// use fairlock::redis::RedisConfig;
    ///
    /// let config = RedisConfig::sentinel(["redis://s1:26379", "redis://s2:26379"], "mymaster")
    ///     .with_password("for the master")
    ///     .with_sentinel_password("for the sentinels");
    /// assert!(config.validate().is_ok());
    /// ```
    #[must_use]
    pub fn sentinel<I: IntoIterator<Item = S>, S: Into<String>>(
        sentinels: I,
        master: impl Into<String>,
    ) -> Self {
        Self::new(sentinels).set_deployment(Deployment::Sentinel {
            master: master.into(),
        })
    }

    /// Authenticates to the sentinels as the ACL user `name` (by default
    /// they get the same credentials as the master: the URL's own, or
    /// [`RedisConfig::with_user`]'s).
    #[must_use]
    pub fn with_sentinel_user(self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.set_sentinel_credentials(Some(name.into()), password.into())
    }

    /// Authenticates to the sentinels with `password` (their
    /// `requirepass`), as their `default` user.
    #[must_use]
    pub fn with_sentinel_password(self, password: impl Into<String>) -> Self {
        self.set_sentinel_credentials(None, password.into())
    }
}
