//! Which Redis deployment a configuration names: independent masters (one,
//! or several for Redlock), a Redis Cluster, or a master found through
//! Redis Sentinel; how many of its replicas must acknowledge a grant
//! ([`ReplicaAcks`], used by `durability.rs` and `replicas.rs`); and
//! reading the `redis+cluster://` and `redis+sentinel://` URLs that name
//! the last two.

use crate::redis::config::url::{DEFAULT_PORT, check_url, redact};
use crate::{Error, Result};

/// The port of a sentinel URL that names none.
pub(crate) const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// The kind of Redis deployment locks are taken on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Deployment {
    /// Independent masters: one instance (fair and unfair), or Redlock over
    /// several (unfair only).
    Masters,
    /// A Redis Cluster, reached through its seed nodes: each lock lives in
    /// the slot of its hash tag, on that slot's master.
    Cluster,
    /// The master that Redis Sentinel monitors under `master`, followed
    /// across failovers.
    Sentinel {
        /// The name the sentinels monitor the master under.
        master: String,
    },
}

impl Deployment {
    /// A short name for messages: `masters`, `cluster` or `sentinel`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Deployment::Masters => "masters",
            Deployment::Cluster => "cluster",
            Deployment::Sentinel { .. } => "sentinel",
        }
    }
}

/// How many replicas must acknowledge a grant or an extend before it
/// counts (see [`RedisConfig::with_replica_acks`](crate::redis::RedisConfig::with_replica_acks)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplicaAcks {
    /// Every replica the deployment lists as up: behind sentinels, the
    /// replicas `SENTINEL REPLICAS` names without a down flag; on a
    /// cluster, the replicas of the slot's master that are not failing.
    /// Read when the master is found and again at least every second
    /// while requests are sent, and at once after a write fell short. A
    /// replica that dies fails grants until the deployment marks it down
    /// (`down-after-milliseconds`, `cluster-node-timeout`). On one
    /// instance or Redlock nothing is waited for.
    #[default]
    All,
    /// At least this many replicas, on any deployment (on one instance:
    /// the replicas it has of its own, whoever promotes them).
    AtLeast(usize),
    /// None: a grant counts once the master has it. A failover that loses
    /// the master's newest writes can then let two holders overlap for up
    /// to a TTL; use fencing tokens where that matters.
    Off,
}

impl ReplicaAcks {
    /// Reads `all`, `off` or a number (as `FAIRLOCK_REPLICA_ACKS` takes it).
    ///
    /// # Examples
    /// ```
    /// use fairlock::redis::ReplicaAcks;
    ///
    /// assert_eq!(ReplicaAcks::parse("all").unwrap(), ReplicaAcks::All);
    /// assert_eq!(ReplicaAcks::parse("2").unwrap(), ReplicaAcks::AtLeast(2));
    /// assert_eq!(ReplicaAcks::parse("off").unwrap(), ReplicaAcks::Off);
    /// assert!(ReplicaAcks::parse("some").is_err());
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for anything else.
    pub fn parse(text: &str) -> Result<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "all" => Ok(ReplicaAcks::All),
            "off" | "0" => Ok(ReplicaAcks::Off),
            n => n.parse().map(ReplicaAcks::AtLeast).map_err(|_| {
                Error::InvalidConfig(format!(
                    "replica acknowledgements {text:?}: give all (every replica the \
                     deployment lists as up), off (none) or a number of replicas"
                ))
            }),
        }
    }
}

/// A deployment and the plain `redis://` / `rediss://` URLs of its nodes
/// (masters, cluster seeds or sentinels).
#[derive(Clone, Debug)]
pub(crate) struct Topology {
    pub deployment: Deployment,
    pub urls: Vec<String>,
}

/// The scheme of a deployment URL (`redis+cluster`, `rediss+sentinel`...):
/// the deployment's name and whether it uses TLS; `None` for other URLs.
fn deployment_scheme(url: &str) -> Option<(&'static str, bool)> {
    let (scheme, _) = url.split_once("://")?;
    match scheme.to_ascii_lowercase().as_str() {
        "redis+cluster" => Some(("cluster", false)),
        "rediss+cluster" => Some(("cluster", true)),
        "redis+sentinel" => Some(("sentinel", false)),
        "rediss+sentinel" => Some(("sentinel", true)),
        _ => None,
    }
}

/// Whether `url` names a cluster or sentinels (`redis+cluster://`,
/// `redis+sentinel://`, or their `rediss+` forms).
pub(crate) fn is_deployment_url(url: &str) -> bool {
    deployment_scheme(url).is_some()
}

/// Reads the configured URLs: plain `redis://` URLs are independent
/// masters (or, with `explicit`, cluster seeds or sentinels); a first URL
/// `redis+cluster://h1:7000,h2:7001` or
/// `redis+sentinel://s1:26379,s2:26379/mymaster` names a whole deployment,
/// its further hosts either in it or given as the next items (a comma
/// separated list split by the caller).
pub(crate) fn resolve(urls: &[String], explicit: Option<&Deployment>) -> Result<Topology> {
    let Some(first) = urls.first() else {
        return Ok(Topology {
            deployment: explicit.cloned().unwrap_or(Deployment::Masters),
            urls: Vec::new(),
        });
    };
    if deployment_scheme(first).is_none() {
        if let Some(url) = urls.iter().find(|u| is_deployment_url(u)) {
            return Err(Error::InvalidConfig(format!(
                "Redis URL {:?} names a whole deployment, but it is mixed with plain redis:// \
                 URLs; give one of: redis+cluster://h1:7000,h2:7001 (a cluster), \
                 redis+sentinel://s1:26379,s2:26379/mymaster (sentinels), or redis:// URLs \
                 alone (one instance, or Redlock over several)",
                redact(url)
            )));
        }
        let deployment = explicit.cloned().unwrap_or(Deployment::Masters);
        return Ok(Topology {
            deployment,
            urls: urls.to_vec(),
        });
    }
    if explicit.is_some() {
        return Err(Error::InvalidConfig(format!(
            "Redis URL {:?} names a deployment, but the configuration was made for one \
             already (RedisConfig::cluster or ::sentinel); give those plain redis:// URLs",
            redact(first)
        )));
    }
    parse_deployment_url(&urls.join(","))
}

/// Reads `redis+cluster://[user:pw@]h1[:port],h2[:port]` or
/// `redis+sentinel://[user:pw@]s1[:port],s2[:port]/master`.
fn parse_deployment_url(joined: &str) -> Result<Topology> {
    let shown = redact(joined);
    let Some((kind, tls)) = deployment_scheme(joined) else {
        return Err(Error::InvalidConfig(format!(
            "{shown:?} is not a redis+cluster:// or redis+sentinel:// URL"
        )));
    };
    let example = match kind {
        "cluster" => "redis+cluster://h1:7000,h2:7001",
        _ => "redis+sentinel://s1:26379,s2:26379/mymaster",
    };
    let bad = |why: String| {
        Err(Error::InvalidConfig(format!(
            "Redis {kind} URL {shown:?} {why}; write it as {example}"
        )))
    };
    let rest = joined.split_once("://").map_or("", |(_, r)| r);
    if let Some(extra) = rest.split(',').find(|h| h.contains("://")) {
        return bad(format!(
            "lists {:?} with a scheme of its own (a cluster or sentinel URL cannot be mixed \
             with other URLs; list further hosts as host:port)",
            redact(extra)
        ));
    }
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (Some(user), hosts),
        None => (None, authority),
    };
    if hosts.split(',').any(|h| h.trim().is_empty()) {
        return bad("has an empty host".into());
    }
    let master = path.trim_end_matches('/');
    let deployment = match kind {
        "cluster" if !master.is_empty() => {
            return bad(format!(
                "has a path {master:?}; a cluster has one database and no master name"
            ));
        }
        "cluster" => Deployment::Cluster,
        _ if master.is_empty() => {
            return bad("names no master: add the name the sentinels monitor it under".into());
        }
        _ if master.contains(['/', ' ', '?', '#']) => {
            return bad(format!(
                "has the master name {master:?}, which is not one name"
            ));
        }
        _ => Deployment::Sentinel {
            master: master.to_owned(),
        },
    };
    let default_port = match deployment {
        Deployment::Sentinel { .. } => DEFAULT_SENTINEL_PORT,
        _ => DEFAULT_PORT,
    };
    let scheme = if tls { "rediss" } else { "redis" };
    let mut urls = Vec::new();
    for host in hosts.split(',') {
        let host = host.trim();
        let port_given = match host.rsplit_once(']') {
            Some((_, after)) => after.starts_with(':'),
            None => host.contains(':'),
        };
        let host = if port_given {
            host.to_owned()
        } else {
            format!("{host}:{default_port}")
        };
        let url = match userinfo {
            Some(user) => format!("{scheme}://{user}@{host}"),
            None => format!("{scheme}://{host}"),
        };
        if check_url(&url).is_err() {
            return bad(format!(
                "has the host {:?}, which does not parse",
                redact(&url)
            ));
        }
        urls.push(url);
    }
    let mut seen = urls.clone();
    seen.sort();
    seen.dedup();
    if seen.len() != urls.len() {
        return bad("lists a host twice".into());
    }
    Ok(Topology { deployment, urls })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(urls: &[&str]) -> Vec<String> {
        urls.iter().map(|u| (*u).to_owned()).collect()
    }

    #[test]
    fn cluster_urls_list_seeds() {
        let t = resolve(&strings(&["redis+cluster://a:7000,b"]), None).unwrap();
        assert_eq!(t.deployment, Deployment::Cluster);
        assert_eq!(t.urls, ["redis://a:7000", "redis://b:6379"]);
        // As FAIRLOCK_ENDPOINTS is split on commas.
        let t = resolve(&strings(&["rediss+cluster://u:pw@a:1", "b:2"]), None).unwrap();
        assert_eq!(t.urls, ["rediss://u:pw@a:1", "rediss://u:pw@b:2"]);
    }

    #[test]
    fn sentinel_urls_name_their_master() {
        let t = resolve(&strings(&["redis+sentinel://s1,s2:5000/mymaster"]), None).unwrap();
        assert_eq!(
            t.deployment,
            Deployment::Sentinel {
                master: "mymaster".into()
            }
        );
        assert_eq!(t.urls, ["redis://s1:26379", "redis://s2:5000"]);
        let t = resolve(&strings(&["redis+sentinel://s1", "s2/m"]), None).unwrap();
        assert_eq!(t.urls.len(), 2);
    }

    #[test]
    fn bad_deployment_urls_say_what_to_write() {
        let err = |urls: &[&str]| resolve(&strings(urls), None).unwrap_err().to_string();
        let mixed = err(&["redis://a:1", "redis+cluster://b:2"]);
        assert!(mixed.contains("mixed with plain redis://"), "{mixed}");
        let mixed = err(&["redis+cluster://a:1", "redis://b:2"]);
        assert!(mixed.contains("scheme of its own"), "{mixed}");
        let nameless = err(&["redis+sentinel://u:hunter2@s1:26379,s2"]);
        assert!(nameless.contains("names no master"), "{nameless}");
        assert!(!nameless.contains("hunter2"), "{nameless}");
        assert!(err(&["redis+cluster://a:1/db"]).contains("path"));
        assert!(err(&["redis+cluster://a:1,,b:2"]).contains("empty host"));
        assert!(err(&["redis+cluster://a:1,a:1"]).contains("twice"));
        let explicit = resolve(
            &strings(&["redis+cluster://a:1"]),
            Some(&Deployment::Cluster),
        );
        assert!(explicit.is_err());
    }

    #[test]
    fn plain_urls_are_masters_unless_told() {
        let urls = strings(&["redis://a:1", "redis://b:1"]);
        assert_eq!(
            resolve(&urls, None).unwrap().deployment,
            Deployment::Masters
        );
        let t = resolve(&urls, Some(&Deployment::Cluster)).unwrap();
        assert_eq!((t.deployment, t.urls), (Deployment::Cluster, urls));
    }
}
