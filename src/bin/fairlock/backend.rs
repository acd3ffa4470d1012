//! The backend the endpoints name (etcd, or Redis for `redis://` URLs),
//! behind one face for the commands: a locker, its id, the lock status.

use fairlock::etcd::EtcdLocker;
use fairlock::redis::RedisLocker;
use fairlock::{BackendConfig, LockStatus, Locker, Result};

/// A connected locker on either backend.
pub enum Conn {
    Etcd(EtcdLocker),
    Redis(RedisLocker),
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

    pub async fn status(&self, key: Option<&fairlock::Key>) -> Result<Vec<LockStatus>> {
        match self {
            Conn::Etcd(l) => l.status(key).await,
            Conn::Redis(l) => l.status(key).await,
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
