//! `Access`: TLS files and credentials, as the command's options and the
//! `FAIRLOCK_*` environment give them, for either backend.

use std::fmt;
use std::path::PathBuf;

use crate::{Error, Result, TlsConfig};

/// TLS files and credentials by their etcdctl names (`--cacert`, `--cert`,
/// `--key`, `--user NAME[:PASSWORD]`), applied with
/// [`crate::BackendConfig::with_access`]. The password never appears in
/// `Debug` output.
///
/// # Examples
/// ```
/// use fairlock::{Access, BackendConfig};
///
/// let access = Access {
///     cacert: Some("ca.pem".into()),
///     user: Some("app".into()),
///     password: Some("secret".into()),
///     ..Access::default()
/// };
/// let config = BackendConfig::from_endpoints(["https://etcd-1:2379"])?.with_access(access)?;
/// assert!(!format!("{config:?}").contains("secret"));
/// # Ok::<(), fairlock::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct Access {
    /// CA bundle to trust (PEM file), instead of the system's roots.
    pub cacert: Option<PathBuf>,
    /// Client certificate (PEM file), for mutual TLS.
    pub cert: Option<PathBuf>,
    /// The client certificate's key (PEM file).
    pub key: Option<PathBuf>,
    /// User name, or `NAME:PASSWORD` as etcdctl accepts it.
    pub user: Option<String>,
    /// The password (from `FAIRLOCK_PASSWORD`, so none is in argv).
    pub password: Option<String>,
}

impl Access {
    /// `FAIRLOCK_CACERT`, `FAIRLOCK_CERT`, `FAIRLOCK_CLIENT_KEY`, `FAIRLOCK_USER`
    /// and `FAIRLOCK_PASSWORD` (unset or empty ones are `None`).
    #[must_use]
    pub fn from_env() -> Access {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Access {
            cacert: var("FAIRLOCK_CACERT").map(PathBuf::from),
            cert: var("FAIRLOCK_CERT").map(PathBuf::from),
            key: var("FAIRLOCK_CLIENT_KEY").map(PathBuf::from),
            user: var("FAIRLOCK_USER"),
            password: var("FAIRLOCK_PASSWORD"),
        }
    }

    /// The TLS settings, if any file is given.
    pub(crate) fn tls(&self) -> Option<TlsConfig> {
        if self.cacert.is_none() && self.cert.is_none() && self.key.is_none() {
            return None;
        }
        let mut tls = TlsConfig::new();
        if let Some(ca) = &self.cacert {
            tls = tls.with_ca_file(ca);
        }
        if let Some(cert) = &self.cert {
            tls = tls.with_cert_file(cert);
        }
        if let Some(key) = &self.key {
            tls = tls.with_key_file(key);
        }
        Some(tls)
    }

    /// (user, password): `--user NAME:PASSWORD` splits; a user needs a
    /// password; a password alone is for Redis' `default` user.
    pub(crate) fn credentials(&self) -> Result<Option<(Option<String>, String)>> {
        match (&self.user, &self.password) {
            (Some(user), _) if user.contains(':') => {
                let (name, password) = user.split_once(':').unwrap_or_default();
                Ok(Some((Some(name.to_owned()), password.to_owned())))
            }
            (Some(user), Some(password)) => Ok(Some((Some(user.clone()), password.clone()))),
            (Some(user), None) => Err(Error::InvalidConfig(format!(
                "user {user:?} is given without a password; set FAIRLOCK_PASSWORD (or pass \
                 --user {user}:PASSWORD, which shows the password to other local users)"
            ))),
            (None, Some(password)) => Ok(Some((None, password.clone()))),
            (None, None) => Ok(None),
        }
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Access")
            .field("cacert", &self.cacert)
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field(
                "user",
                &self
                    .user
                    .as_ref()
                    .map(|u| u.split_once(':').map_or(u.as_str(), |(n, _)| n)),
            )
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}
