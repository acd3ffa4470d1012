//! Exit codes of `fairlock` itself (documented in `--help`), and how an
//! error is reported on stderr.

/// Bad arguments.
pub const USAGE: u8 = 2;
/// The backend (etcd or Redis) unreachable or failing.
pub const UNAVAILABLE: u8 = 69;
/// Authentication failed, or permission was denied (EX_NOPERM).
pub const NOPERM: u8 = 77;
/// The lock was held (`--nonblock`) or the wait timed out.
pub const CONFLICT: u8 = 75;
/// The lock was lost while the command ran.
pub const LOST: u8 = 76;
/// The command could not be executed.
pub const NOT_EXECUTABLE: u8 = 126;
/// The command was not found.
pub const NOT_FOUND: u8 = 127;

/// The exit code for a failure to reach or use the backend:
/// [`NOPERM`] for refused credentials or permissions, else
/// [`UNAVAILABLE`].
pub fn of(e: &fairlock::Error) -> u8 {
    match e {
        fairlock::Error::Auth { .. } | fairlock::Error::PermissionDenied { .. } => NOPERM,
        // A key in use as another kind of lock, or more permits than
        // supported, say: retrying cannot help.
        fairlock::Error::InvalidKey { .. }
        | fairlock::Error::InvalidConfig(_)
        | fairlock::Error::Unsupported(_) => USAGE,
        _ => UNAVAILABLE,
    }
}

/// An error on stderr: its message, then the innermost cause when that
/// adds something (an I/O or TLS error), never the layers between, which
/// repeat it inside transport dumps.
pub fn report(e: &dyn std::error::Error) {
    eprintln!("fairlock: {e}");
    if let Some(root) = root_cause(e) {
        eprintln!("fairlock: cause: {root}");
    }
}

/// The innermost cause's text, if `e`'s own message does not contain it.
fn root_cause(e: &dyn std::error::Error) -> Option<String> {
    let mut root = None;
    let mut cause = e.source();
    while let Some(c) = cause {
        root = Some(c.to_string());
        cause = c.source();
    }
    root.filter(|r| !e.to_string().contains(r.as_str()))
}

#[cfg(test)]
mod tests {
    use super::root_cause;

    #[test]
    fn report_names_only_the_innermost_new_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let err = fairlock::Error::Backend {
            backend: "etcd",
            op: "lock",
            source: Box::new(io),
        };
        assert_eq!(root_cause(&err).as_deref(), Some("connection refused"));
        let plain = fairlock::Error::InvalidConfig("no endpoints".into());
        assert_eq!(root_cause(&plain), None);
    }
}
