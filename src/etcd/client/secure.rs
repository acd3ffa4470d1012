//! TLS options for the etcd client, and telling TLS, authentication and
//! permission failures apart from the rest.

use etcd_client::{Certificate, Identity, TlsOptions};
use tonic::Code;

use crate::etcd::config::EtcdConfig;
use crate::{Error, Result};

/// The client's TLS options: `None` for plain endpoints, the system's roots
/// for `https://` endpoints without a [`crate::TlsConfig`].
pub(crate) fn tls_options(config: &EtcdConfig) -> Result<Option<TlsOptions>> {
    let https = config
        .endpoints()
        .iter()
        .any(|e| e.to_ascii_lowercase().starts_with("https://"));
    let Some(tls) = config.tls() else {
        return Ok(https.then(|| TlsOptions::new().with_native_roots()));
    };
    let loaded = tls.load()?;
    let mut options = TlsOptions::new();
    options = match loaded.ca {
        Some(ca) => options.ca_certificate(Certificate::from_pem(ca)),
        None => options.with_native_roots(),
    };
    if let Some((cert, key)) = loaded.identity {
        options = options.identity(Identity::from_pem(cert, key));
    }
    if let Some(name) = tls.server_name() {
        options = options.domain_name(name);
    }
    Ok(Some(options))
}

/// `true` if etcd refused the auth token `err` was answered with (gRPC
/// code 16; a stale token's refusal reads so too, see `stale_token.rs`).
pub(crate) fn token_refused(err: &etcd_client::Error) -> bool {
    matches!(err, etcd_client::Error::GRpcStatus(s) if s.code() == Code::Unauthenticated)
}

/// What kind of refusal an etcd answer is.
pub(crate) enum Refusal {
    /// The credentials: wrong, unknown, missing, or auth disabled.
    Auth(String),
    /// The user may not do this.
    Permission(String),
}

/// Classifies an etcd answer by its gRPC code (and, where etcd uses a
/// generic code, its fixed message).
pub(crate) fn refusal(err: &etcd_client::Error) -> Option<Refusal> {
    let etcd_client::Error::GRpcStatus(status) = err else {
        return None;
    };
    let msg = status.message();
    match status.code() {
        Code::PermissionDenied => Some(Refusal::Permission(
            "the etcd user's role does not cover this key; grant it with `etcdctl role \
             grant-permission ROLE readwrite --prefix=true PREFIX` (see docs/production.md \
             in fairlock's repository)"
                .into(),
        )),
        Code::Unauthenticated => Some(Refusal::Auth(
            "etcd did not accept the auth token and a fresh one could not be had; check \
             the user and password (--user, FAIRLOCK_USER, FAIRLOCK_PASSWORD)"
                .into(),
        )),
        Code::InvalidArgument if msg.contains("authentication failed") => Some(Refusal::Auth(
            "the user name or password is wrong, or the user does not exist; check --user \
             (FAIRLOCK_USER) and FAIRLOCK_PASSWORD"
                .into(),
        )),
        Code::InvalidArgument if msg.contains("user name is empty") => Some(Refusal::Auth(
            "etcd has authentication enabled and no user was given; pass --user NAME with \
             the password in FAIRLOCK_PASSWORD, or a client certificate (--cert, --key) \
             whose common name is an etcd user"
                .into(),
        )),
        Code::FailedPrecondition if msg.contains("authentication is not enabled") => {
            Some(Refusal::Auth(
                "a user was given but etcd has authentication disabled; drop --user \
                 (FAIRLOCK_USER), or enable auth with `etcdctl auth enable`"
                    .into(),
            ))
        }
        _ => None,
    }
}

/// The public error for a refused request, if `err` is one.
pub(crate) fn refused(
    op: &'static str,
    err: etcd_client::Error,
) -> Result<Error, etcd_client::Error> {
    match refusal(&err) {
        Some(Refusal::Auth(reason)) => Ok(Error::Auth {
            backend: "etcd",
            reason,
            source: Box::new(err),
        }),
        Some(Refusal::Permission(reason)) => Ok(Error::PermissionDenied {
            backend: "etcd",
            op,
            reason,
            source: Box::new(err),
        }),
        None => Err(err),
    }
}

/// What is wrong with the TLS connection, if `err` is a failed one.
/// etcd-client's error hides its cause from `source()`, so the status or
/// transport error inside is searched.
pub(crate) fn tls_failure(config: &EtcdConfig, err: &etcd_client::Error) -> Option<String> {
    let inner: &(dyn std::error::Error + 'static) = match err {
        etcd_client::Error::GRpcStatus(status) => status,
        etcd_client::Error::TransportError(e) => e,
        _ => return None,
    };
    if let Some(reason) = crate::connect::tls::diagnose(inner) {
        return Some(reason);
    }
    // A server that demands a client certificate checks it after a TLS 1.3
    // handshake has ended for the client, and closes the connection.
    let no_identity = config.tls().is_none_or(|t| !t.has_client_identity());
    let tls = config.tls().is_some()
        || config
            .endpoints()
            .iter()
            .any(|e| e.to_ascii_lowercase().starts_with("https://"));
    let text = crate::connect::tls::chain_text(inner).to_ascii_lowercase();
    let closed = ["connection closed", "connection reset", "broken pipe"]
        .iter()
        .any(|w| text.contains(w));
    (tls && no_identity && closed).then(|| {
        "the server closed the connection during the TLS handshake: it most likely \
         requires a client certificate; pass --cert FILE and --key FILE (FAIRLOCK_CERT, \
         FAIRLOCK_CLIENT_KEY) signed by a CA the server trusts"
            .into()
    })
}
