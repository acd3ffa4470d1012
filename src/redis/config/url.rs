//! Redis URLs: checking them, telling a mistyped scheme by what it likely
//! meant, and showing them without their passwords.

use crate::{Error, Result};

/// The port of a URL that names none.
pub(crate) const DEFAULT_PORT: u16 = 6379;

/// Checks that `url` is a `redis://` or `rediss://` URL the client can use.
pub(crate) fn check_url(url: &str) -> Result<()> {
    let shown = redact(url);
    if let Some(meant) = meant_url(url) {
        return Err(Error::InvalidConfig(format!(
            "Redis URL {shown:?} has a malformed scheme; did you mean {:?}?",
            redact(&meant)
        )));
    }
    let bad = |why: &str| {
        Err(Error::InvalidConfig(format!(
            "Redis URL {shown:?} {why}; use redis://host:port (or rediss://host:port for \
             TLS), e.g. redis://127.0.0.1:6379"
        )))
    };
    let Some(rest) = url
        .strip_prefix("redis://")
        .or_else(|| url.strip_prefix("rediss://"))
    else {
        return bad("does not start with redis:// or rediss://");
    };
    let host = rest.rsplit('@').next().unwrap_or_default();
    if host.is_empty() || host.starts_with(['/', ':']) || url.contains(char::is_whitespace) {
        return bad("has no host or contains spaces");
    }
    if let Err(e) = ::redis::Client::open(url) {
        // The parser's message may quote the URL: keep it out.
        return bad(&format!("does not parse ({:?})", e.kind()));
    }
    Ok(())
}

/// The URL a mistyped scheme most likely meant: `redis:/host:6379`,
/// `redis:host`, `rediss:///host` or `REDIS://host` give
/// `redis://host:6379` (with `rediss` kept); `None` when the scheme is
/// well formed or is not Redis' at all.
pub(crate) fn meant_url(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once(':')?;
    let lower = scheme.to_ascii_lowercase();
    if lower != "redis" && lower != "rediss" {
        return None;
    }
    if scheme == lower && rest.starts_with("//") && !rest.starts_with("///") {
        return None;
    }
    let host = rest.trim_start_matches('/');
    if host.is_empty() {
        return None;
    }
    Some(with_port(&format!("{lower}://{host}")))
}

/// The URL with the default port added when its authority names none.
pub(crate) fn with_port(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    // `[::1]` has colons of its own; a port follows the closing bracket.
    let port_given = match host.rsplit_once(']') {
        Some((_, after)) => after.starts_with(':'),
        None => host.contains(':'),
    };
    if host.is_empty() || port_given {
        return url.to_string();
    }
    format!("{scheme}://{authority}:{DEFAULT_PORT}{path}")
}

/// The URL with any password replaced, for logs and error messages; a URL
/// with a mistyped scheme (`redis:/user:pw@host`) too.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once(':') else {
        return url.to_string();
    };
    let after_slashes = rest.trim_start_matches('/');
    let slashes = &rest[..rest.len() - after_slashes.len()];
    // The userinfo ends at the last '@' before the path.
    let authority_end = after_slashes.find('/').unwrap_or(after_slashes.len());
    match after_slashes[..authority_end].rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or("", |(u, _)| u);
            format!(
                "{scheme}:{slashes}{user}:<redacted>@{host}{}",
                &after_slashes[authority_end..]
            )
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mistyped_schemes_name_the_likely_intent() {
        let meant = |u: &str| meant_url(u);
        assert_eq!(
            meant("redis:/host:6379").as_deref(),
            Some("redis://host:6379")
        );
        assert_eq!(meant("rediss:host").as_deref(), Some("rediss://host:6379"));
        assert_eq!(meant("redis:///h:1/0").as_deref(), Some("redis://h:1/0"));
        assert_eq!(meant("REDIS://h:1").as_deref(), Some("redis://h:1"));
        for fine in [
            "redis://h:1",
            "rediss://h",
            "h:6379",
            "http://h:1",
            "redis:",
        ] {
            assert_eq!(meant(fine), None, "{fine}");
        }
        let err = check_url("redis:/u:pw@host:6379").unwrap_err().to_string();
        assert!(
            err.contains("did you mean \"redis://u:<redacted>@host:6379\"?"),
            "{err}"
        );
        assert!(!err.contains("pw@"), "{err}");
    }

    #[test]
    fn urls_without_a_port_take_6379() {
        assert_eq!(with_port("redis://h"), "redis://h:6379");
        assert_eq!(with_port("redis://u:p@h/2"), "redis://u:p@h:6379/2");
        assert_eq!(with_port("rediss://[::1]"), "rediss://[::1]:6379");
        for kept in ["redis://h:7000", "redis://[::1]:7000/1", "redis://"] {
            assert_eq!(with_port(kept), kept);
        }
        let info = redis::IntoConnectionInfo::into_connection_info("redis://127.0.0.1").unwrap();
        assert_eq!(info.addr().to_string(), "127.0.0.1:6379");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://u:pw@h:1/0"), "redis://u:<redacted>@h:1/0");
        assert_eq!(redact("redis://:pw@h:1"), "redis://:<redacted>@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(redact("redis:/u:pw@h:1"), "redis:/u:<redacted>@h:1");
        assert_eq!(redact("rediss:u:pw@h"), "rediss:u:<redacted>@h");
    }
}
