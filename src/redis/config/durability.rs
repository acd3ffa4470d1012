//! What a grant must survive before it counts, as [`RedisConfig`] sets it:
//! the replicas that must acknowledge it ([`ReplicaAcks`]), and how long a
//! dataset that may have lost its locks grants nothing (the data loss
//! wait, `epoch.rs`).
//!
//! Redis replicates asynchronously: a master acknowledges a write before
//! any replica has it, and a failover promotes a replica that may lack
//! the newest writes. A grant or extend that only the old master had is
//! lost with it, and the lock is free on the new master while its holder
//! goes on. So on a deployment with replicas a grant or extend counts only
//! once the replicas acknowledged it (`WAIT` after the script, on the same
//! connection): the holder's deadline never moves for a write a promoted
//! replica can lack.

use std::time::Duration;

use crate::redis::config::redis_config::RedisConfig;
use crate::redis::config::topology::ReplicaAcks;
use crate::redis::config::url_options::{self, DATA_LOSS_WAIT, REPLICA_ACKS};
use crate::{Error, Result, parse_duration};

impl RedisConfig {
    /// Sets how many replicas must acknowledge a grant or an extend before
    /// it counts (default [`ReplicaAcks::All`]). A grant the replicas did
    /// not acknowledge within the node timeout is given back and
    /// retried; an extend that was not acknowledged does not move the
    /// guard's deadline, so a holder whose writes stop reaching the
    /// replicas is told it lost the lock before the lock can expire on a
    /// promoted replica. Costs one `WAIT` per grant and extend, sent with
    /// the script (measured in `docs/performance.md`). A URL can set it
    /// too: `?replica_acks=all|off|N` (see `url_options.rs`).
    ///
    /// # Examples
    /// ```
    /// use fairlock::redis::{RedisConfig, ReplicaAcks};
    ///
    /// let config = RedisConfig::new(["redis+sentinel://s1:26379,s2:26379/mymaster"])
    ///     .with_replica_acks(ReplicaAcks::AtLeast(1));
    /// assert_eq!(config.replica_acks(), ReplicaAcks::AtLeast(1));
    /// ```
    #[must_use]
    pub fn with_replica_acks(mut self, acks: ReplicaAcks) -> Self {
        self.replica_acks = Some(acks);
        self
    }

    /// Sets how long a dataset that has lost fairlock's data grants
    /// nothing (default: the TTL; `Duration::ZERO` turns the wait off).
    ///
    /// A Redis that restarted without persistence, was flushed, or failed
    /// over to a replica without fairlock's keys has forgotten the locks
    /// it granted, while their holders may still run. fairlock tells such
    /// a dataset by a key it writes once, the epoch
    /// (`<prefix>_OWNERS_/epoch`): where the epoch and the fencing counter
    /// are both missing, the first grant waits this long, so every lock
    /// granted before the loss has expired (Redlock's "delayed restart").
    /// Tokens of that dataset start from the epoch, a server time in
    /// microseconds, so they never go back below a token given before.
    /// Set it to the longest TTL any locker of the prefix uses.
    ///
    /// On a brand-new Redis this wait is paid once per prefix (on a
    /// cluster, once per hash slot) before the first grant. A URL can set
    /// it too: `?data_loss_wait=30s`.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use fairlock::redis::RedisConfig;
    ///
    /// let config = RedisConfig::new(["redis://127.0.0.1:6379"])
    ///     .with_ttl(Duration::from_secs(30))
    ///     .with_data_loss_wait(Duration::from_secs(30));
    /// assert_eq!(config.data_loss_wait(), Duration::from_secs(30));
    /// ```
    #[must_use]
    pub fn with_data_loss_wait(mut self, wait: Duration) -> Self {
        self.data_loss_wait = Some(wait);
        self
    }

    /// The replicas that must acknowledge a grant or an extend.
    #[must_use]
    pub fn replica_acks(&self) -> ReplicaAcks {
        self.replica_acks.unwrap_or_default()
    }

    /// How long a dataset that lost fairlock's data grants nothing.
    #[must_use]
    pub fn data_loss_wait(&self) -> Duration {
        self.data_loss_wait.unwrap_or(self.ttl())
    }

    /// The data loss wait in whole milliseconds, as the scripts take it.
    pub(crate) fn data_loss_wait_ms(&self) -> String {
        self.data_loss_wait().as_millis().to_string()
    }

    /// Reads `FAIRLOCK_REPLICA_ACKS` and `FAIRLOCK_DATA_LOSS_WAIT`, where
    /// set and not blank.
    pub(crate) fn with_durability_from_env(self) -> Result<Self> {
        durability_from(
            self,
            std::env::var("FAIRLOCK_REPLICA_ACKS").ok(),
            std::env::var("FAIRLOCK_DATA_LOSS_WAIT").ok(),
        )
    }
}

impl RedisConfig {
    /// This configuration with the options of its URLs applied and taken
    /// off the URLs (see the module docs); done once, at connect.
    pub(crate) fn with_url_options(mut self) -> Result<Self> {
        let (urls, options) = url_options::split(&self.urls)?;
        if let Some(acks) = options.replica_acks {
            match self.replica_acks {
                Some(set) if set != acks => {
                    return Err(Error::InvalidConfig(format!(
                        "replica acknowledgements are set twice, to {set:?} \
                         (RedisConfig::with_replica_acks, --replica-acks or \
                         FAIRLOCK_REPLICA_ACKS) and to {acks:?} (the URL's {REPLICA_ACKS}); \
                         set them in one place"
                    )));
                }
                _ => self.replica_acks = Some(acks),
            }
        }
        if let Some(wait) = options.data_loss_wait {
            match self.data_loss_wait {
                Some(set) if set != wait => {
                    return Err(Error::InvalidConfig(format!(
                        "the data loss wait is set twice, to {set:?} \
                         (RedisConfig::with_data_loss_wait, --data-loss-wait or \
                         FAIRLOCK_DATA_LOSS_WAIT) and to {wait:?} (the URL's \
                         {DATA_LOSS_WAIT}); set it in one place"
                    )));
                }
                _ => self.data_loss_wait = Some(wait),
            }
        }
        self.urls = urls;
        Ok(self)
    }
}

/// [`RedisConfig::with_durability_from_env`] on the variables' values.
fn durability_from(
    mut config: RedisConfig,
    acks: Option<String>,
    wait: Option<String>,
) -> Result<RedisConfig> {
    if let Some(acks) = acks.filter(|s| !s.trim().is_empty()) {
        let acks = ReplicaAcks::parse(&acks)
            .map_err(|e| Error::InvalidConfig(format!("FAIRLOCK_REPLICA_ACKS: {e}")))?;
        config = config.with_replica_acks(acks);
    }
    if let Some(text) = wait.filter(|s| !s.trim().is_empty()) {
        let wait = parse_duration(&text).map_err(|e| {
            Error::InvalidConfig(format!(
                "FAIRLOCK_DATA_LOSS_WAIT={text:?}: {e}; give a duration such as 10s, or 0 \
                 to grant at once on a dataset that may have lost its locks"
            ))
        })?;
        config = config.with_data_loss_wait(wait);
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> RedisConfig {
        RedisConfig::new(["redis://127.0.0.1:6379"])
    }

    #[test]
    fn defaults_are_safe() {
        let c = config().with_ttl(Duration::from_secs(7));
        assert_eq!(c.replica_acks(), ReplicaAcks::All);
        assert_eq!(c.data_loss_wait(), Duration::from_secs(7));
    }

    #[test]
    fn the_environment_sets_both() {
        let some = |s: &str| Some(s.to_owned());
        let c = durability_from(config(), some("off"), some("0")).unwrap();
        assert_eq!(c.replica_acks(), ReplicaAcks::Off);
        assert_eq!(c.data_loss_wait(), Duration::ZERO);
        let c = durability_from(config(), some(" "), None).unwrap();
        assert_eq!(c.replica_acks(), ReplicaAcks::All);
        let err = durability_from(config(), some("most"), None).unwrap_err();
        assert!(err.to_string().contains("FAIRLOCK_REPLICA_ACKS"), "{err}");
        let err = durability_from(config(), None, some("soon")).unwrap_err();
        assert!(err.to_string().contains("FAIRLOCK_DATA_LOSS_WAIT"), "{err}");
    }

    #[test]
    fn the_url_and_the_config_agree_or_fail() {
        let url = |q: &str| RedisConfig::new([format!("redis+sentinel://s1/m?{q}")]);
        let c = url("replica_acks=off").with_url_options().unwrap();
        assert_eq!(c.replica_acks(), ReplicaAcks::Off);
        assert_eq!(c.urls(), ["redis+sentinel://s1/m"]);
        let c = url("replica_acks=off")
            .with_replica_acks(ReplicaAcks::Off)
            .with_url_options();
        assert!(c.is_ok());
        let e = url("replica_acks=off")
            .with_replica_acks(ReplicaAcks::All)
            .with_url_options()
            .unwrap_err()
            .to_string();
        assert!(e.contains("set twice"), "{e}");
        let e = url("data_loss_wait=1s")
            .with_data_loss_wait(Duration::ZERO)
            .with_url_options()
            .unwrap_err()
            .to_string();
        assert!(e.contains("set twice"), "{e}");
    }
}
