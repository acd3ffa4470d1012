//! Redis URLs: checking them, and showing them without their passwords.

use crate::{Error, Result};

/// Checks that `url` is a `redis://` or `rediss://` URL the client can use.
pub(crate) fn check_url(url: &str) -> Result<()> {
    let shown = redact(url);
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

/// The URL with any password replaced, for logs and error messages.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    // The userinfo ends at the last '@' before the path.
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or("", |(u, _)| u);
            format!(
                "{scheme}://{user}:<redacted>@{host}{}",
                &rest[authority_end..]
            )
        }
        None => url.to_string(),
    }
}
