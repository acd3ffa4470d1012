//! Which backend an endpoint names, by its scheme, and the typos of a
//! scheme that would otherwise send a user to the wrong server.

use crate::{Error, Result};

/// The backend an endpoint names.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Etcd,
    Redis,
}

/// The schemes an endpoint may start with.
const SCHEMES: [&str; 4] = ["redis", "rediss", "http", "https"];

/// The backend an endpoint names, by its scheme.
pub(crate) fn kind(endpoint: &str) -> Result<Kind> {
    let Some((scheme, rest)) = endpoint.split_once("://") else {
        return bare_kind(endpoint);
    };
    match scheme.to_ascii_lowercase().as_str() {
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" | "redis+sentinel"
        | "rediss+sentinel" => Ok(Kind::Redis),
        "http" | "https" => Ok(Kind::Etcd),
        other => {
            let (endpoint, rest) = (redact(endpoint), redact(rest));
            let hint = closest_scheme(other)
                .map(|s| format!("did you mean {s}://{rest}? "))
                .unwrap_or_default();
            Err(Error::InvalidConfig(format!(
                "endpoint {endpoint:?} has the unknown scheme {other:?}; {hint}use \
                 redis://host:port for Redis, or host:port / http://host:port for etcd"
            )))
        }
    }
}

/// Whether `endpoint` names a whole Redis deployment
/// (`redis+cluster://h1,h2`, `redis+sentinel://s1,s2/m`): the endpoints
/// after it, split on its commas, are its own hosts.
pub(crate) fn is_redis_deployment(endpoint: &str) -> bool {
    endpoint.split_once("://").is_some_and(|(scheme, _)| {
        let scheme = scheme.to_ascii_lowercase();
        scheme.ends_with("+cluster") || scheme.ends_with("+sentinel")
    }) && kind(endpoint).is_ok_and(|k| k == Kind::Redis)
}

/// An endpoint without `://`: etcd's `host[:port]`, unless it is a
/// mistyped URL (`redis:/host:6379`, `rediss:host`, `http:/host`).
fn bare_kind(endpoint: &str) -> Result<Kind> {
    let Some((head, rest)) = endpoint.split_once(':') else {
        return Ok(Kind::Etcd);
    };
    let known = SCHEMES.contains(&head.to_ascii_lowercase().as_str());
    let port = !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit());
    if rest.starts_with('/') || (known && !port) {
        let scheme = if known {
            head.to_ascii_lowercase()
        } else {
            closest_scheme(head).unwrap_or("redis").to_owned()
        };
        let host = rest.trim_start_matches('/');
        let (endpoint, host) = (redact(endpoint), redact(host));
        return Err(Error::InvalidConfig(format!(
            "endpoint {endpoint:?} looks like a mistyped URL; did you mean {scheme}://{host}? \
             (etcd endpoints are host:port or http://host:port)"
        )));
    }
    Ok(Kind::Etcd)
}

/// `endpoint` with the password of a `user:password@` part replaced, for
/// messages about endpoints that are not valid URLs.
fn redact(endpoint: &str) -> String {
    let Some(at) = endpoint.rfind('@') else {
        return endpoint.to_owned();
    };
    match endpoint[..at].rfind(':') {
        Some(colon) => format!("{}:***{}", &endpoint[..colon], &endpoint[at..]),
        None => endpoint.to_owned(),
    }
}

/// The known scheme a typo most likely meant (at most two edits away).
fn closest_scheme(typo: &str) -> Option<&'static str> {
    let typo = typo.to_ascii_lowercase();
    SCHEMES
        .iter()
        .map(|s| (edit_distance(&typo, s), *s))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, s)| s)
}

/// Levenshtein distance of two short ASCII strings.
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::{Kind, kind};

    #[test]
    fn mistyped_schemes_name_the_likely_intent() {
        let err = |e: &str| kind(e).unwrap_err().to_string();
        for (typo, meant) in [
            ("redis:/host:6379", "did you mean redis://host:6379?"),
            ("rediss:host", "did you mean rediss://host?"),
            ("htp://x:2379", "did you mean http://x:2379?"),
            ("reddis://h:1", "did you mean redis://h:1?"),
            ("http:/x", "did you mean http://x?"),
        ] {
            let text = err(typo);
            assert!(text.contains(meant), "{typo}: {text}");
        }
        let secret = err("redis:/app:s3cret@h:6379");
        assert!(!secret.contains("s3cret"), "{secret}");
        assert!(secret.contains("redis://app:***@h:6379"), "{secret}");
        let secret = err("reddis://app:s3cret@h:1");
        assert!(!secret.contains("s3cret"), "{secret}");
        let far = err("postgres://a");
        assert!(!far.contains("did you mean"), "{far}");
        // A host named like a scheme, with a port, is still a host.
        assert_eq!(kind("redis:2379").unwrap(), Kind::Etcd);
        assert_eq!(kind("etcd-1").unwrap(), Kind::Etcd);
        assert_eq!(kind("rediss://h").unwrap(), Kind::Redis);
        assert_eq!(kind("redis+cluster://h:1").unwrap(), Kind::Redis);
        assert_eq!(kind("rediss+sentinel://h/m").unwrap(), Kind::Redis);
    }
}
