//! The client of one Redis URL (TLS, credentials), and telling a failed
//! TLS connection from the rest.

use redis::{ClientTlsConfig, ConnectionInfo, IntoConnectionInfo, TlsCertificates};

use crate::redis::config::redis_config::RedisConfig;
use crate::redis::config::url::{redact, with_port};
use crate::redis::connect::node_error::NodeError;
use crate::{Error, Result};

/// A client for `url`: TLS for `rediss://` (the configured CA and client
/// certificate), and the configured credentials unless the URL has its own.
pub(crate) fn client(config: &RedisConfig, url: &str) -> Result<redis::Client> {
    let info = connection_info(url, config.credentials())?;
    match certificates(config, url)? {
        None => redis::Client::open(info).map_err(|e| invalid(url, &e)),
        Some(certs) => redis::Client::build_with_tls(info, certs).map_err(|e| invalid(url, &e)),
    }
}

/// The error for a URL the client refuses.
pub(crate) fn invalid(url: &str, e: &redis::RedisError) -> Error {
    Error::InvalidConfig(format!(
        "Redis URL {:?} cannot be used ({:?}); use redis://host:port or rediss://host:port",
        redact(url),
        e.kind()
    ))
}

/// How to reach `url`, with `credentials` (user, password) unless the URL
/// carries its own.
pub(crate) fn connection_info(
    url: &str,
    credentials: Option<(Option<&str>, &str)>,
) -> Result<ConnectionInfo> {
    let mut info = with_port(url)
        .into_connection_info()
        .map_err(|e| invalid(url, &e))?;
    if let Some((user, password)) = credentials
        && info.redis_settings().password().is_none()
    {
        let mut settings = info.redis_settings().clone().set_password(password);
        if let Some(user) = user {
            settings = settings.set_username(user);
        }
        info = info.set_redis_settings(settings);
    }
    Ok(info)
}

/// The CA and client certificate for a `rediss://` URL (none for
/// `redis://`).
pub(crate) fn certificates(config: &RedisConfig, url: &str) -> Result<Option<TlsCertificates>> {
    if !url.starts_with("rediss://") {
        return Ok(None);
    }
    // ring is the one provider built in; a process may have chosen its own.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let loaded = config.tls().map(|t| t.load()).transpose()?;
    let (root_cert, identity) = match loaded {
        Some(l) => (l.ca, l.identity),
        None => (None, None),
    };
    Ok(Some(TlsCertificates {
        client_tls: identity.map(|(client_cert, client_key)| ClientTlsConfig {
            client_cert,
            client_key,
        }),
        root_cert,
    }))
}

/// What is wrong with the TLS connection, if `err` is a failed one.
pub(crate) fn tls_failure(config: &RedisConfig, err: &NodeError) -> Option<String> {
    let inner: &(dyn std::error::Error + 'static) = err.redis_error()?;
    if let Some(reason) = crate::connect::tls::diagnose(inner) {
        return Some(reason);
    }
    // A server that demands a client certificate checks it after a TLS 1.3
    // handshake has ended for the client, and closes the connection.
    let tls = config.urls().iter().any(|u| u.starts_with("rediss"));
    let no_identity = config.tls().is_none_or(|t| !t.has_client_identity());
    let text = crate::connect::tls::chain_text(inner);
    let closed = [
        "connection reset",
        "closed",
        "broken pipe",
        "unexpected end",
    ]
    .iter()
    .any(|w| text.to_ascii_lowercase().contains(w));
    (tls && no_identity && closed).then(|| {
        "the server closed the connection during the TLS handshake: it most likely \
         requires a client certificate; pass --cert FILE and --key FILE (FAIRLOCK_CERT, \
         FAIRLOCK_CLIENT_KEY) signed by a CA the server trusts"
            .into()
    })
}
