//! etcd endpoints as people write them: `host`, `host:port`,
//! `http://host:port`, `https://[::1]`.

/// The port of an endpoint given without one.
pub const DEFAULT_PORT: u16 = 2379;

/// `endpoint` with `:2379` appended if it names no port: `host`,
/// `http://host`, `https://host/`, `[::1]`. Left as given when it has a
/// port or is not understood (validation and connect report those).
pub(crate) fn with_default_port(endpoint: String) -> String {
    let rest = ["http://", "https://"]
        .iter()
        .find_map(|scheme| {
            endpoint
                .get(..scheme.len())
                .filter(|s| s.eq_ignore_ascii_case(scheme))
                .map(|s| &endpoint[s.len()..])
        })
        .unwrap_or(&endpoint);
    let host = rest.trim_end_matches('/');
    let has_port = match host.strip_prefix('[') {
        Some(v6) => v6.contains("]:") || !v6.ends_with(']'),
        None => host.contains(':'),
    };
    if host.is_empty()
        || has_port
        || host.contains(['/', '@'])
        || host.contains(char::is_whitespace)
    {
        return endpoint;
    }
    let scheme = &endpoint[..endpoint.len() - rest.len()];
    format!("{scheme}{host}:{DEFAULT_PORT}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_without_a_port_get_2379() {
        let given = [
            "127.0.0.1",
            "etcd-1",
            "http://etcd-2",
            "HTTPS://etcd-3/",
            "[::1]",
            "127.0.0.1:1",
            "http://etcd-4:22379",
            "[::1]:4001",
            "",
        ];
        assert_eq!(
            given.map(|e| with_default_port(e.to_string())),
            [
                "127.0.0.1:2379",
                "etcd-1:2379",
                "http://etcd-2:2379",
                "HTTPS://etcd-3:2379",
                "[::1]:2379",
                "127.0.0.1:1",
                "http://etcd-4:22379",
                "[::1]:4001",
                "",
            ]
        );
    }
}
