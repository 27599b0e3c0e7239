//! `limits.allow_hosts` entries: an origin (`scheme://host[:port]`) a sink's plugin may send
//! requests to. Parsed once, when the config loads (`SinkSpec`); the plugin host's HTTP policy
//! matches requests against the parsed origins.

use http::Uri;

/// One allowlist entry: `scheme://host[:port]`, the port defaulted by the scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedOrigin {
    /// `http` or `https`.
    scheme: &'static str,
    /// Lower-case host name or IP literal (IPv6 without brackets).
    host: String,
    /// Explicit port, or 80 / 443.
    port: u16,
}

impl AllowedOrigin {
    /// Parses `http://host[:port]` or `https://host[:port]` (a trailing `/` is allowed; a path,
    /// query, user info or any other scheme is not). The error says what is wrong with `entry`.
    pub fn parse(entry: &str) -> Result<AllowedOrigin, String> {
        let bad = |why: &str| format!("entry `{entry}` {why}");
        let (scheme, rest) = entry
            .split_once("://")
            .ok_or_else(|| bad("must look like https://host[:port]"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => "http",
            "https" => "https",
            _ => return Err(bad("must use http:// or https://")),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#', '@']) {
            return Err(bad(
                "must be an origin only (scheme://host[:port]: no path, query or user info)",
            ));
        }
        let uri: Uri = format!("{scheme}://{authority}/")
            .parse()
            .map_err(|_| bad("has a malformed host or port"))?;
        let host = uri.host().map(normalize_host).unwrap_or_default();
        if host.is_empty() {
            return Err(bad("has no host"));
        }
        let after_host = authority
            .rsplit_once(']')
            .map_or(authority, |(_, rest)| rest);
        let port = match after_host.rsplit_once(':') {
            None => default_port(scheme),
            Some((_, port)) => port.parse().map_err(|_| bad("has an invalid port"))?,
        };
        Ok(AllowedOrigin { scheme, host, port })
    }

    /// The host: a lower-case name, or an IP literal (IPv6 without brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Whether `uri` (an absolute request URI) has this origin.
    pub fn matches(&self, uri: &Uri) -> bool {
        let Some(scheme) = uri.scheme_str().map(str::to_ascii_lowercase) else {
            return false;
        };
        let Some(host) = uri.host().map(normalize_host) else {
            return false;
        };
        scheme == self.scheme
            && host == self.host
            && uri.port_u16().unwrap_or_else(|| default_port(&scheme)) == self.port
    }
}

/// Lower-case, IPv6 brackets dropped.
fn normalize_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// 443 for `https`, else 80.
fn default_port(scheme: &str) -> u16 {
    if scheme == "https" { 443 } else { 80 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(text: &str) -> Uri {
        text.parse().unwrap()
    }

    #[test]
    fn origins_match_scheme_host_and_port() {
        let origin = AllowedOrigin::parse("https://Hooks.Example.com").unwrap();
        assert!(origin.matches(&uri("https://hooks.example.com/a?b=c")));
        assert!(origin.matches(&uri("https://hooks.example.com:443/")));
        assert!(!origin.matches(&uri("http://hooks.example.com/")));
        assert!(!origin.matches(&uri("https://hooks.example.com:8443/")));
        assert!(!origin.matches(&uri("https://evil.hooks.example.com/")));
        assert!(!origin.matches(&uri("https://hooks.example.com.evil/")));

        let local = AllowedOrigin::parse("http://127.0.0.1:8080/").unwrap();
        assert!(local.matches(&uri("http://127.0.0.1:8080/x")));
        assert!(!local.matches(&uri("http://127.0.0.1/x")));
        assert_eq!(local.host(), "127.0.0.1");

        let v6 = AllowedOrigin::parse("http://[::1]:9000").unwrap();
        assert!(v6.matches(&uri("http://[::1]:9000/")));
        assert_eq!(v6.host(), "::1");
    }

    #[test]
    fn bad_entries_are_refused() {
        for entry in [
            "example.com",
            "ftp://example.com",
            "https://example.com/path",
            "https://user@example.com",
            "https://",
            "https://example.com:99999",
            "https://example.com:",
        ] {
            let error = AllowedOrigin::parse(entry).expect_err(entry);
            assert!(error.contains(entry), "{error}");
        }
    }
}
