//! `TlsConfig`: the CA bundle, client identity and server name of a TLS
//! connection, for either backend; and the words for a failed handshake.

use std::fmt;
use std::path::PathBuf;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::{Error, Result};

/// Where a PEM document comes from.
#[derive(Clone)]
enum Pem {
    File(PathBuf),
    Bytes(Vec<u8>),
}

impl Pem {
    fn read(&self, what: &str, flag: &str) -> Result<Vec<u8>> {
        match self {
            Pem::Bytes(b) => Ok(b.clone()),
            Pem::File(path) => std::fs::read(path).map_err(|e| {
                Error::InvalidConfig(format!(
                    "cannot read the {what} file {}: {e}; check the path given to {flag}",
                    path.display()
                ))
            }),
        }
    }

    fn describe(&self, secret: bool) -> String {
        match (self, secret) {
            (Pem::File(path), _) => path.display().to_string(),
            (Pem::Bytes(_), true) => "<redacted PEM>".into(),
            (Pem::Bytes(b), false) => format!("<{} bytes of PEM>", b.len()),
        }
    }
}

/// TLS settings: which CAs to trust (the system's roots when none is
/// given), an optional client certificate and key (mutual TLS), and an
/// optional server name to expect instead of the endpoint's host.
///
/// The key never appears in `Debug` output (a key file's path does).
///
/// # Examples
/// ```
/// use fairlock::TlsConfig;
///
/// let tls = TlsConfig::new()
///     .with_ca_file("/etc/fairlock/ca.pem")
///     .with_cert_file("/etc/fairlock/client.pem")
///     .with_key_file("/etc/fairlock/client.key");
/// assert!(tls.validate().is_ok());
/// // Half a client identity is refused.
/// assert!(TlsConfig::new().with_cert_file("client.pem").validate().is_err());
/// ```
#[derive(Clone, Default)]
pub struct TlsConfig {
    ca: Option<Pem>,
    cert: Option<Pem>,
    key: Option<Pem>,
    server_name: Option<String>,
}

/// The PEM documents of a [`TlsConfig`], read and checked.
pub(crate) struct LoadedTls {
    pub ca: Option<Vec<u8>>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsConfig {
    /// TLS with the system's trusted roots and no client certificate.
    #[must_use]
    pub fn new() -> Self {
        TlsConfig::default()
    }

    /// Trusts the CA certificates in the PEM file at `path` (instead of the
    /// system's roots).
    #[must_use]
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca = Some(Pem::File(path.into()));
        self
    }

    /// Trusts the CA certificates in `pem` (instead of the system's roots).
    #[must_use]
    pub fn with_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca = Some(Pem::Bytes(pem.into()));
        self
    }

    /// Presents the client certificate (chain) in the PEM file at `path`;
    /// needs [`TlsConfig::with_key_file`] or [`TlsConfig::with_key_pem`].
    #[must_use]
    pub fn with_cert_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.cert = Some(Pem::File(path.into()));
        self
    }

    /// Presents the client certificate (chain) in `pem`.
    #[must_use]
    pub fn with_cert_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.cert = Some(Pem::Bytes(pem.into()));
        self
    }

    /// The client certificate's private key, from the PEM file at `path`.
    #[must_use]
    pub fn with_key_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.key = Some(Pem::File(path.into()));
        self
    }

    /// The client certificate's private key, in `pem`.
    #[must_use]
    pub fn with_key_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.key = Some(Pem::Bytes(pem.into()));
        self
    }

    /// Expects the server's certificate to be valid for `name` instead of
    /// the endpoint's host (etcd only; Redis checks the URL's host).
    #[must_use]
    pub fn with_server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// The server name to expect, if set.
    #[must_use]
    pub fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// `true` when a client certificate and key are set.
    #[must_use]
    pub fn has_client_identity(&self) -> bool {
        self.cert.is_some() && self.key.is_some()
    }

    /// Checks that a client certificate comes with its key and the other
    /// way round (files are read when connecting).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for half a client identity.
    pub fn validate(&self) -> Result<()> {
        match (&self.cert, &self.key) {
            (Some(_), None) => Err(Error::InvalidConfig(
                "a client certificate was given without its key; pass both --cert FILE and \
                 --key FILE (FAIRLOCK_CERT and FAIRLOCK_CLIENT_KEY), or neither \
                 (FAIRLOCK_KEY does not name the client key: it is the held lock's \
                 name, set for the command `fairlock lock` runs)"
                    .into(),
            )),
            (None, Some(_)) => Err(Error::InvalidConfig(
                "a client key was given without its certificate; pass both --cert FILE and \
                 --key FILE (FAIRLOCK_CERT and FAIRLOCK_CLIENT_KEY), or neither"
                    .into(),
            )),
            _ => Ok(()),
        }
    }

    /// Reads the files and checks that each holds what it should.
    pub(crate) fn load(&self) -> Result<LoadedTls> {
        self.validate()?;
        let certs = |pem: &[u8], what: &str, flag: &str, origin: &Pem| {
            let found = CertificateDer::pem_slice_iter(pem)
                .collect::<Result<Vec<_>, _>>()
                .map(|c| c.len())
                .unwrap_or(0);
            if found == 0 {
                return Err(Error::InvalidConfig(format!(
                    "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----); give {flag} \
                     the {what} in PEM form",
                    origin.describe(false)
                )));
            }
            Ok(())
        };
        let ca = match &self.ca {
            Some(origin) => {
                let pem = origin.read("CA", "--cacert")?;
                certs(&pem, "CA certificate", "--cacert", origin)?;
                Some(pem)
            }
            None => None,
        };
        let identity = match (&self.cert, &self.key) {
            (Some(cert_origin), Some(key_origin)) => {
                let cert = cert_origin.read("client certificate", "--cert")?;
                certs(&cert, "client certificate", "--cert", cert_origin)?;
                let key = key_origin.read("client key", "--key")?;
                if PrivateKeyDer::from_pem_slice(&key).is_err() {
                    return Err(Error::InvalidConfig(format!(
                        "{} holds no PEM private key (-----BEGIN PRIVATE KEY-----); give --key \
                         the client certificate's key in PEM form",
                        key_origin.describe(true)
                    )));
                }
                Some((cert, key))
            }
            _ => None,
        };
        Ok(LoadedTls { ca, identity })
    }
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca", &self.ca.as_ref().map(|p| p.describe(false)))
            .field("cert", &self.cert.as_ref().map(|p| p.describe(false)))
            .field("key", &self.key.as_ref().map(|p| p.describe(true)))
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// What to do about a failed TLS handshake whose cause is somewhere in
/// `err`'s chain, or `None` when no TLS error is in it.
pub(crate) fn diagnose(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(explain(tls));
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(tls) = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>())
        {
            return Some(explain(tls));
        }
        cur = e.source();
    }
    // Some clients (redis) keep only the text of the rustls error.
    let text = chain_text(err);
    let by_text = [
        ("UnknownIssuer", E::InvalidCertificate(C::UnknownIssuer)),
        (
            "not valid for name",
            E::InvalidCertificate(C::NotValidForName),
        ),
        ("certificate expired", E::InvalidCertificate(C::Expired)),
        (
            "certificate not valid yet",
            E::InvalidCertificate(C::NotValidYet),
        ),
        (
            "alert: CertificateRequired",
            E::AlertReceived(A::CertificateRequired),
        ),
        (
            "alert: HandshakeFailure",
            E::AlertReceived(A::HandshakeFailure),
        ),
        ("alert: BadCertificate", E::AlertReceived(A::BadCertificate)),
        ("alert: UnknownCA", E::AlertReceived(A::UnknownCA)),
        (
            "alert: CertificateExpired",
            E::AlertReceived(A::CertificateExpired),
        ),
    ];
    by_text
        .iter()
        .find(|(needle, _)| text.contains(needle))
        .map(|(_, e)| explain(e))
}

fn explain(err: &rustls::Error) -> String {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    match err {
        E::InvalidCertificate(C::UnknownIssuer) => {
            "the server's certificate is not signed by a CA fairlock trusts; pass the CA \
             that signed it with --cacert FILE (FAIRLOCK_CACERT)"
                .into()
        }
        E::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            "the server's certificate is not valid for the host name fairlock connected \
             to; connect by a name the certificate lists (or set TlsConfig::with_server_name \
             to one), or reissue the certificate"
                .into()
        }
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
            "the server's certificate has expired (or this machine's clock is wrong); \
             renew the server's certificate"
                .into()
        }
        E::InvalidCertificate(C::NotValidYet | C::NotValidYetContext { .. }) => {
            "the server's certificate is not valid yet (check this machine's clock)".into()
        }
        E::AlertReceived(A::CertificateRequired | A::HandshakeFailure | A::BadCertificate) => {
            "the server refused the handshake: it requires a client certificate it \
             trusts; pass --cert FILE and --key FILE (FAIRLOCK_CERT, FAIRLOCK_CLIENT_KEY) signed \
             by a CA the server trusts"
                .into()
        }
        E::AlertReceived(A::UnknownCA) => "the server does not trust the client certificate's \
             CA; pass a --cert FILE signed by a CA the server trusts"
            .into(),
        E::AlertReceived(A::CertificateExpired) => {
            "the server says the client certificate has expired; renew it".into()
        }
        E::InvalidMessage(_) | E::InappropriateMessage { .. } => {
            "the server did not answer in TLS: is this its TLS port? Use a plain endpoint \
             for a server without TLS"
                .into()
        }
        _ => {
            "check --cacert, --cert and --key (FAIRLOCK_CACERT, FAIRLOCK_CERT, FAIRLOCK_CLIENT_KEY)"
                .into()
        }
    }
}

/// `err` and its sources, on one line.
pub(crate) fn chain_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cur = e.source();
    }
    text
}
