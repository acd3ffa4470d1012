//! Test support: a throwaway certificate authority, made with the `openssl`
//! command when a test binary first asks for it (nothing is checked in, so
//! nothing expires in the repository).
//!
//! - `ca.pem`: the CA the servers and clients trust; `other-ca.pem`: a CA
//!   nobody uses (the "unknown CA" case);
//! - `server.pem`/`server.key`: valid for `localhost` and `127.0.0.1`;
//! - `expired.pem`/`expired.key`: the same names, expired in 2020;
//! - `client.pem`/`client.key`: a client certificate, CN `fairlock-client`.
//!
//! The files live in a temp dir that a small shell wrapper removes when
//! the test process exits (it reads our end of a pipe until EOF).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The generated files.
pub struct Certs {
    pub dir: PathBuf,
    /// Keeps the cleanup wrapper waiting until the process exits.
    _cleanup: Mutex<ChildStdin>,
}

impl Certs {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    pub fn ca(&self) -> PathBuf {
        self.path("ca.pem")
    }
    pub fn other_ca(&self) -> PathBuf {
        self.path("other-ca.pem")
    }
    pub fn server(&self) -> (PathBuf, PathBuf) {
        (self.path("server.pem"), self.path("server.key"))
    }
    pub fn expired(&self) -> (PathBuf, PathBuf) {
        (self.path("expired.pem"), self.path("expired.key"))
    }
    pub fn client(&self) -> (PathBuf, PathBuf) {
        (self.path("client.pem"), self.path("client.key"))
    }
    /// etcd's `--auth-token` for JWT tokens signed with the test key pair.
    pub fn jwt_auth_token(&self) -> String {
        format!(
            "jwt,pub-key={},priv-key={},sign-method=RS256,ttl=10m",
            self.path("jwt.pub").display(),
            self.path("jwt.key").display()
        )
    }
}

/// The CA and certificates of this test binary, made on first use.
pub fn certs() -> &'static Certs {
    static CERTS: OnceLock<Certs> = OnceLock::new();
    CERTS.get_or_init(make)
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect(
            "the TLS tests need the `openssl` command: apt-get install openssl \
             (scripts/test.sh installs it)",
        );
    assert!(
        out.status.success(),
        "openssl {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA-signed certificate `name.pem`/`name.key` for `cn` with `ext`
/// (an openssl extension section), by `openssl ca` so the validity dates
/// can be set.
fn issue(dir: &Path, name: &str, cn: &str, ext: &str, dates: (&str, &str)) {
    std::fs::write(dir.join(format!("{name}.ext")), ext).expect("write ext");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={cn}"),
        ],
    );
    openssl(
        dir,
        &[
            "ca",
            "-batch",
            "-config",
            "ca.cnf",
            "-notext",
            "-in",
            &format!("{name}.csr"),
            "-out",
            &format!("{name}.pem"),
            "-extfile",
            &format!("{name}.ext"),
            "-startdate",
            dates.0,
            "-enddate",
            dates.1,
        ],
    );
}

fn make() -> Certs {
    let dir = tempfile::Builder::new()
        .prefix("fairlock-test-certs-")
        .tempdir()
        .expect("temp dir")
        .keep();
    // The wrapper is meant to outlive this process (it cleans up after it).
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(r#"read -r _ || true; rm -rf "$DIR""#)
        .env("DIR", &dir)
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn cleanup wrapper");
    let cleanup = Mutex::new(child.stdin.take().expect("wrapper stdin"));
    for ca in ["ca", "other-ca"] {
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
                "-days",
                "2",
                "-subj",
                &format!("/CN=fairlock test {ca}"),
            ],
        );
    }
    std::fs::write(
        dir.join("ca.cnf"),
        "[ca]\ndefault_ca = test\n[test]\ndatabase = index.txt\nnew_certs_dir = .\n\
         serial = serial\ndefault_md = sha256\npolicy = any\ncertificate = ca.pem\n\
         private_key = ca.key\nunique_subject = no\n[any]\ncommonName = supplied\n",
    )
    .expect("write ca.cnf");
    std::fs::write(dir.join("index.txt"), "").expect("index");
    std::fs::write(dir.join("serial"), "1000\n").expect("serial");
    let server = "basicConstraints = CA:FALSE\nkeyUsage = digitalSignature\n\
                  extendedKeyUsage = serverAuth, clientAuth\n\
                  subjectAltName = DNS:localhost, IP:127.0.0.1\n";
    let client = "basicConstraints = CA:FALSE\nkeyUsage = digitalSignature\n\
                  extendedKeyUsage = clientAuth\n";
    let now = ("20200101000000Z", "20991231000000Z");
    // Valid from the past, as openssl's own defaults would be, until the CA
    // itself expires in two days: chains are checked against the CA too.
    issue(&dir, "server", "localhost", server, now);
    issue(&dir, "client", "fairlock-client", client, now);
    issue(
        &dir,
        "expired",
        "localhost",
        server,
        ("20200101000000Z", "20200102000000Z"),
    );
    // The key pair etcd signs JWT auth tokens with.
    openssl(&dir, &["genrsa", "-out", "jwt.key", "2048"]);
    openssl(
        &dir,
        &["rsa", "-in", "jwt.key", "-pubout", "-out", "jwt.pub"],
    );
    Certs {
        dir,
        _cleanup: cleanup,
    }
}

/// The etcd user fairlock runs as in the secured tests, its password, and
/// the only prefix its role may touch.
pub const ETCD_USER: (&str, &str) = ("app", "app-secret-pw");
pub const ETCD_PREFIX: &str = "/app-locks/";
/// etcd's root user (for the tests' own checks).
pub const ETCD_ROOT: &str = "root:root-secret-pw";
/// How long an unused auth token lives on the secured etcd (seconds).
pub const TOKEN_TTL: &str = "2";

/// Runs `etcdctl` against `etcd` over mutual TLS, with `args`; panics with
/// its output on failure.
pub fn etcdctl(etcd: &super::Etcd, args: &[&str]) -> String {
    let c = certs();
    let (cert, key) = c.client();
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg("--endpoints")
        .arg(&etcd.endpoint)
        .arg("--cacert")
        .arg(c.ca())
        .arg("--cert")
        .arg(cert)
        .arg("--key")
        .arg(key)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the tests need etcdctl (apt-get install etcd-client)");
    assert!(
        out.status.success(),
        "etcdctl {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An etcd serving clients over TLS that demands client certificates
/// (`--client-cert-auth`), with auth enabled: a root user, and
/// [`ETCD_USER`] whose role `locks` may only read and write under
/// [`ETCD_PREFIX`]. Unused auth tokens expire after [`TOKEN_TTL`] seconds,
/// and etcd logs each expiry ("deleted a simple token"): at info level in
/// etcd 3.4, at debug level in 3.5, so this etcd logs at debug level.
pub fn start_secure_etcd() -> super::Etcd {
    start_secure_etcd_with(&["--auth-token-ttl", TOKEN_TTL, "--log-level", "debug"])
}

/// [`start_secure_etcd`] with other `extra` arguments for etcd (its auth
/// token options, say).
pub fn start_secure_etcd_with(extra: &[&str]) -> super::Etcd {
    let c = certs();
    let (cert, key) = c.server();
    let mut args = vec!["--client-cert-auth"];
    args.extend_from_slice(extra);
    let etcd = super::Etcd::start_tls((&cert, &key), &c.ca(), &args);
    let (user, password) = ETCD_USER;
    for args in [
        &["user", "add", ETCD_ROOT, "--interactive=false"][..],
        &["role", "add", "root"],
        &["user", "grant-role", "root", "root"],
        &["role", "add", "locks"],
        &[
            "role",
            "grant-permission",
            "locks",
            "readwrite",
            "--prefix=true",
            ETCD_PREFIX,
        ],
        &[
            "user",
            "add",
            &format!("{user}:{password}"),
            "--interactive=false",
        ],
        &["user", "grant-role", user, "locks"],
        &["auth", "enable"],
    ] {
        etcdctl(&etcd, args);
    }
    etcd
}

/// The secured etcd of this test binary, started on first use.
pub fn secure_etcd() -> &'static super::Etcd {
    static ETCD: OnceLock<super::Etcd> = OnceLock::new();
    ETCD.get_or_init(start_secure_etcd)
}

/// fairlock's TLS settings for the test servers: the test CA and the
/// client certificate.
pub fn client_tls() -> fairlock::TlsConfig {
    let c = certs();
    let (cert, key) = c.client();
    fairlock::TlsConfig::new()
        .with_ca_file(c.ca())
        .with_cert_file(cert)
        .with_key_file(key)
}
