//! fairlock's options in a Redis URL's query, for configurations that are
//! only a URL (`FAIRLOCK_ENDPOINTS`, a service's config file):
//!
//! ```text
//! redis+sentinel://s1:26379,s2:26379/mymaster?replica_acks=1
//! redis+cluster://h1:7000,h2:7001?replica_acks=off&data_loss_wait=30s
//! redis://127.0.0.1:6379?data_loss_wait=0
//! ```
//!
//! - `replica_acks=all|off|N`: [`RedisConfig::with_replica_acks`](crate::redis::RedisConfig::with_replica_acks);
//! - `data_loss_wait=DURATION`: [`RedisConfig::with_data_loss_wait`](crate::redis::RedisConfig::with_data_loss_wait).
//!
//! They are taken off the URL before it is used (`split`; the locker
//! applies them at connect, `durability.rs`). A plain `redis://` URL
//! keeps its other query options for the client (`protocol=resp3`...); a
//! sentinel or cluster URL has no others. An option given in two URLs, or
//! both in a URL and through `RedisConfig` (the flags and the environment
//! set it that way), must have one value.

use std::time::Duration;

use crate::redis::config::topology::{ReplicaAcks, is_deployment_url};
use crate::redis::config::url::redact;
use crate::{Error, Result, parse_duration};

/// The query option for [`RedisConfig::with_replica_acks`](crate::redis::RedisConfig::with_replica_acks).
pub(crate) const REPLICA_ACKS: &str = "replica_acks";
/// The query option for [`RedisConfig::with_data_loss_wait`](crate::redis::RedisConfig::with_data_loss_wait).
pub(crate) const DATA_LOSS_WAIT: &str = "data_loss_wait";

/// The options the URLs gave.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct UrlOptions {
    pub replica_acks: Option<ReplicaAcks>,
    pub data_loss_wait: Option<Duration>,
}

/// The URLs without fairlock's options, and the options. When the first
/// URL names a deployment, every item is a piece of it (a list split on
/// commas) and takes no other option.
pub(crate) fn split(urls: &[String]) -> Result<(Vec<String>, UrlOptions)> {
    let deployment = urls.first().is_some_and(|u| is_deployment_url(u));
    let mut options = UrlOptions::default();
    let mut out = Vec::with_capacity(urls.len());
    for url in urls {
        let Some((base, query)) = url.split_once('?') else {
            out.push(url.clone());
            continue;
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                REPLICA_ACKS => {
                    let acks = ReplicaAcks::parse(value)
                        .map_err(|e| bad(url, &format!("{REPLICA_ACKS}: {e}")))?;
                    set(&mut options.replica_acks, acks, url, REPLICA_ACKS)?;
                }
                DATA_LOSS_WAIT => {
                    let wait = parse_duration(value).map_err(|e| {
                        bad(
                            url,
                            &format!(
                                "{DATA_LOSS_WAIT}={value:?}: {e}; give a duration such as \
                                 10s, or 0 to grant at once on a dataset that may have lost \
                                 its locks"
                            ),
                        )
                    })?;
                    set(&mut options.data_loss_wait, wait, url, DATA_LOSS_WAIT)?;
                }
                _ if deployment => {
                    return Err(bad(
                        url,
                        &format!(
                            "has the option {name:?}, which a sentinel or cluster URL does \
                             not take; it takes {REPLICA_ACKS} and {DATA_LOSS_WAIT}"
                        ),
                    ));
                }
                _ => kept.push(pair),
            }
        }
        out.push(if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        });
    }
    Ok((out, options))
}

/// Records an option, refusing a second, different value.
fn set<T: PartialEq + Copy>(slot: &mut Option<T>, value: T, url: &str, name: &str) -> Result<()> {
    match slot {
        Some(old) if *old != value => Err(bad(
            url,
            &format!("gives {name} a value another URL gives otherwise; give it once"),
        )),
        _ => {
            *slot = Some(value);
            Ok(())
        }
    }
}

fn bad(url: &str, why: &str) -> Error {
    Error::InvalidConfig(format!("Redis URL {:?}: {why}", redact(url)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(urls: &[&str]) -> Vec<String> {
        urls.iter().map(|u| (*u).to_owned()).collect()
    }

    #[test]
    fn options_come_off_the_urls() {
        let (urls, o) = split(&strings(&[
            "redis+sentinel://s1",
            "s2/m?replica_acks=1&data_loss_wait=2s",
        ]))
        .unwrap();
        assert_eq!(urls, ["redis+sentinel://s1", "s2/m"]);
        assert_eq!(o.replica_acks, Some(ReplicaAcks::AtLeast(1)));
        assert_eq!(o.data_loss_wait, Some(Duration::from_secs(2)));
        let (urls, o) = split(&strings(&[
            "redis://a:1?protocol=resp3&data_loss_wait=0",
            "redis://b:1",
        ]))
        .unwrap();
        assert_eq!(urls, ["redis://a:1?protocol=resp3", "redis://b:1"]);
        assert_eq!(o.data_loss_wait, Some(Duration::ZERO));
        assert_eq!(o.replica_acks, None);
    }

    #[test]
    fn bad_options_say_what_to_write() {
        let err = |urls: &[&str]| split(&strings(urls)).unwrap_err().to_string();
        let e = err(&["redis+cluster://u:hunter2@a:1?replica_acks=most"]);
        assert!(e.contains("replica_acks") && !e.contains("hunter2"), "{e}");
        let e = err(&["redis+cluster://a:1?protocol=resp3"]);
        assert!(
            e.contains("\"protocol\"") && e.contains("data_loss_wait"),
            "{e}"
        );
        let e = err(&["redis://a:1?data_loss_wait=soon"]);
        assert!(e.contains("give a duration"), "{e}");
        let e = err(&[
            "redis://a:1?data_loss_wait=1s",
            "redis://b:1?data_loss_wait=2s",
        ]);
        assert!(e.contains("give it once"), "{e}");
    }
}
