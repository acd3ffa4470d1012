//! The backend the endpoints name (etcd, or Redis for `redis://` URLs),
//! behind one face for the commands: a locker, its id, the lock status.

use std::time::Duration;

use fairlock::etcd::EtcdLocker;
use fairlock::redis::RedisLocker;
use fairlock::{BackendConfig, Locker, Owner, Result};

/// A connected locker on either backend.
pub enum Conn {
    Etcd(EtcdLocker),
    Redis(RedisLocker),
}

/// One lock, as either backend reports it; serialized as a line of
/// `status --json`.
#[derive(serde::Serialize)]
pub struct LockView {
    pub key: String,
    pub holder: Option<HolderView>,
    pub waiters: Vec<WaiterView>,
    /// etcd: keys under the queue that fairlock did not write.
    #[serde(skip)]
    pub foreign: Vec<String>,
}

#[derive(serde::Serialize)]
pub struct HolderView {
    pub owner: Owner,
    pub fencing_token: u64,
    /// etcd: the session lease.
    pub lease: Option<i64>,
    /// Redis: time until the key expires unless extended.
    #[serde(rename = "ttl_left_ms", serialize_with = "millis")]
    pub ttl_left: Option<Duration>,
    /// Redis: on how many of how many nodes the key is held.
    #[serde(skip)]
    pub nodes: Option<(usize, usize)>,
}

#[derive(serde::Serialize)]
pub struct WaiterView {
    pub owner: Owner,
    pub locker: String,
    pub fair: bool,
}

/// A duration as whole milliseconds, or `null`.
fn millis<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&d.map(|d| d.as_millis() as u64), s)
}

impl Conn {
    pub async fn connect(config: &BackendConfig, fair: bool) -> Result<Conn> {
        match config {
            BackendConfig::Etcd(c) => Ok(Conn::Etcd(EtcdLocker::connect(c.clone(), fair).await?)),
            BackendConfig::Redis(c) => {
                Ok(Conn::Redis(RedisLocker::connect(c.clone(), fair).await?))
            }
            _ => Err(fairlock::Error::Unsupported(format!(
                "the {} backend in the fairlock command",
                config.backend()
            ))),
        }
    }

    pub fn locker(&self) -> &dyn Locker {
        match self {
            Conn::Etcd(l) => l,
            Conn::Redis(l) => l,
        }
    }

    /// The id that marks this locker's waiters in the status.
    pub fn id(&self) -> &str {
        match self {
            Conn::Etcd(l) => l.id(),
            Conn::Redis(l) => l.id(),
        }
    }

    pub async fn status(&self, key: Option<&fairlock::Key>) -> Result<Vec<LockView>> {
        match self {
            Conn::Etcd(l) => Ok(l
                .status(key)
                .await?
                .into_iter()
                .map(|s| LockView {
                    key: s.key,
                    holder: s.holder.map(|h| HolderView {
                        owner: h.owner,
                        fencing_token: h.fencing_token,
                        lease: Some(h.lease),
                        ttl_left: None,
                        nodes: None,
                    }),
                    waiters: s
                        .waiters
                        .iter()
                        .map(|w| WaiterView {
                            owner: w.owner.clone(),
                            locker: w.locker.clone(),
                            fair: w.fair,
                        })
                        .collect(),
                    foreign: s.foreign,
                })
                .collect()),
            Conn::Redis(l) => {
                let total = l.config().urls().len();
                Ok(l.status(key)
                    .await?
                    .into_iter()
                    .map(|s| LockView {
                        key: s.key,
                        holder: s.holder.map(|h| HolderView {
                            owner: h.owner,
                            fencing_token: h.fencing_token,
                            lease: None,
                            ttl_left: h.ttl_left,
                            nodes: (total > 1).then_some((h.nodes, total)),
                        }),
                        waiters: s
                            .waiters
                            .iter()
                            .map(|w| WaiterView {
                                owner: w.owner.clone(),
                                locker: w.locker.clone(),
                                fair: w.fair,
                            })
                            .collect(),
                        foreign: Vec::new(),
                    })
                    .collect())
            }
        }
    }

    /// Ends the session: etcd revokes its lease; Redis has none (held keys
    /// were released by their guards).
    pub async fn close(self) -> Result<()> {
        match self {
            Conn::Etcd(l) => l.close().await,
            Conn::Redis(_) => Ok(()),
        }
    }
}
