//! Checking a [`RedisConfig`] before anything is sent, with messages that
//! say what to change.

use crate::redis::config::redis_config::{MAX_TTL, MIN_TTL, RedisConfig};
use crate::redis::config::topology::Deployment;
use crate::redis::config::url::{check_url, redact};
use crate::{Error, Result};

impl RedisConfig {
    /// Checks every value; the messages say what to change.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the bad value.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::InvalidConfig(msg));
        if self.urls().is_empty() {
            return bad(
                "no Redis URLs given; pass e.g. [\"redis://127.0.0.1:6379\"] \
                        or set FAIRLOCK_ENDPOINTS=redis://127.0.0.1:6379"
                    .into(),
            );
        }
        let topology = self.topology()?;
        let urls = &topology.urls;
        for url in urls {
            check_url(url)?;
        }
        match &topology.deployment {
            Deployment::Cluster if self.prefix().contains(['{', '}']) => {
                return bad(format!(
                    "key prefix {:?} contains a brace; on Redis Cluster fairlock puts each \
                     lock's keys in one hash slot with the hash tag {{key}} after the prefix, \
                     which a brace in the prefix would change: use a prefix without {{ and }}",
                    self.prefix()
                ));
            }
            Deployment::Sentinel { master } if master.trim().is_empty() => {
                return bad(
                    "no master name given for the sentinels; name the master they monitor, \
                     e.g. RedisConfig::sentinel([\"redis://s1:26379\"], \"mymaster\") or \
                     redis+sentinel://s1:26379,s2:26379/mymaster"
                        .into(),
                );
            }
            Deployment::Sentinel { .. } => {}
            _ if self.sentinel_credentials().is_some() => {
                return bad(
                    "sentinel credentials are given, but the URLs name no sentinels; use \
                     redis+sentinel://s1:26379,s2:26379/mymaster or RedisConfig::sentinel"
                        .into(),
                );
            }
            _ => {}
        }
        if let Some(tls) = self.tls() {
            tls.validate()?;
            if let Some(url) = urls.iter().find(|u| !u.starts_with("rediss://")) {
                return bad(format!(
                    "Redis URL {:?} is plain redis://, but TLS options (--cacert, --cert, \
                     --key) are given; use rediss://host:port for a TLS server, or drop the \
                     TLS options",
                    redact(url)
                ));
            }
        }
        let mut seen = urls.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != urls.len() {
            return bad(format!(
                "a Redis URL is listed twice in {:?}; list each node once (Redlock needs \
                 distinct, independent masters)",
                urls.iter().map(|u| redact(u)).collect::<Vec<_>>()
            ));
        }
        if self.prefix().is_empty() {
            return bad(
                "key prefix is empty; use e.g. \"fairlock:\" so locks do not mix \
                        with other data"
                    .into(),
            );
        }
        if self.ttl() < MIN_TTL {
            return bad(format!(
                "TTL {:?} is below the minimum of {MIN_TTL:?}; use 1s or more \
                 (the watchdog keeps a held lock alive, so a longer TTL costs nothing \
                 while the holder lives)",
                self.ttl()
            ));
        }
        if self.ttl() > MAX_TTL {
            return bad(format!(
                "TTL {:?} is over {MAX_TTL:?}: a crashed holder would block its locks \
                 that long; use a shorter TTL (the watchdog extends it while you hold)",
                self.ttl()
            ));
        }
        if self.node_timeout().is_zero() || self.node_timeout() >= self.ttl() / 3 {
            return bad(format!(
                "per-node timeout {:?} must be above zero and below a third of the TTL \
                 ({:?}): an extend must finish well before the lock expires",
                self.node_timeout(),
                self.ttl() / 3
            ));
        }
        if self.connect_timeout().is_zero() {
            return bad("connect timeout must be greater than zero".into());
        }
        let (retry_delay, max_retry_delay) = self.retry_delay();
        if retry_delay.is_zero() || max_retry_delay < retry_delay {
            return bad(format!(
                "retry delay {:?} must be above zero and at most its cap {:?}",
                retry_delay, max_retry_delay
            ));
        }
        if !(0.0..0.5).contains(&self.drift_factor()) {
            return bad(format!(
                "drift factor {} must be at least 0 and below 0.5 (Redlock uses 0.01)",
                self.drift_factor()
            ));
        }
        // The watchdog's first extend is sent TTL/3 after the grant's
        // request and may take a per-node timeout, and as long again for
        // the replicas' acknowledgement: it must be answered before the
        // guard's local deadline.
        let period = self.ttl() / 3;
        if self
            .validity_left(period + self.node_timeout() * 2)
            .is_none()
        {
            return bad(format!(
                "TTL {:?} leaves no time for an extend: the watchdog extends after TTL/3 \
                 ({period:?}) and may wait the per-node timeout {:?} twice (the script, then \
                 the replicas' acknowledgement), which must end before \
                 TTL - drift - margin = {:?} - {:?} - {:?}; lower the drift factor {} or \
                 the per-node timeout, or raise the TTL",
                self.ttl(),
                self.node_timeout(),
                self.ttl(),
                self.drift(),
                self.margin(),
                self.drift_factor()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::TlsConfig;

    #[test]
    fn validation_names_the_problem() {
        let err = |c: RedisConfig| c.validate().unwrap_err().to_string();
        let one = || RedisConfig::new(["redis://127.0.0.1:6379"]);
        assert!(err(RedisConfig::new(Vec::<String>::new())).contains("no Redis URLs"));
        assert!(err(RedisConfig::new(["127.0.0.1:6379"])).contains("redis://"));
        assert!(err(RedisConfig::new(["redis://"])).contains("no host"));
        one().with_tls(TlsConfig::new()).validate().unwrap_err();
        RedisConfig::new(["rediss://h:1"]).validate().unwrap();
        RedisConfig::new(["rediss://h:1"])
            .with_tls(TlsConfig::new())
            .validate()
            .unwrap();
        let half =
            RedisConfig::new(["rediss://h:1"]).with_tls(TlsConfig::new().with_cert_file("c.pem"));
        assert!(err(half).contains("without its key"));
        assert!(err(RedisConfig::new(["redis://a:1", "redis://a:1"])).contains("twice"));
        assert!(err(one().with_ttl(Duration::from_millis(200))).contains("minimum"));
        assert!(err(one().with_ttl(Duration::from_secs(7200))).contains("over"));
        assert!(err(one().with_node_timeout(Duration::from_secs(5))).contains("third"));
        assert!(err(one().with_drift_factor(0.7)).contains("drift"));
        assert!(err(one().with_prefix("")).contains("prefix"));
        // Each value passes alone, but an extend cannot finish in time:
        // 3.33 s + 3 s >= 10 s - 3.002 s - 1 s.
        let late = err(one()
            .with_drift_factor(0.3)
            .with_node_timeout(Duration::from_secs(3)));
        assert!(
            late.contains("no time for an extend") && late.contains("3s"),
            "{late}"
        );
        one().validate().unwrap();
        one().with_drift_factor(0.3).validate().unwrap();
        let cluster = || RedisConfig::new(["redis+cluster://a:7000,b:7001"]);
        cluster().validate().unwrap();
        assert!(err(cluster().with_prefix("app{x}:")).contains("brace"));
        assert!(err(RedisConfig::sentinel(["redis://s:1"], " ")).contains("no master name"));
        assert!(err(one().with_sentinel_password("pw")).contains("no sentinels"));
        RedisConfig::new(["rediss+cluster://a:1", "b:2"])
            .with_tls(TlsConfig::new())
            .validate()
            .unwrap();
        assert!(err(cluster().with_tls(TlsConfig::new())).contains("plain redis://"));
    }
}
