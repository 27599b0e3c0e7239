//! One console request as the admin listener hands it over ([`ConsoleRequest`]: method, path,
//! query and form values, the headers access needs, the peer), and the responses the console
//! sends, every one with the console's security headers (a strict Content-Security-Policy: no
//! inline script or style, nothing from another origin; no framing; no caching).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;

/// A console response.
pub type Reply = Response<Full<Bytes>>;

/// The Content-Security-Policy of every console response.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Most bytes of a form body read.
pub const MAX_FORM_BYTES: usize = 256 * 1024;

/// A request, read.
#[derive(Debug, Clone)]
pub struct ConsoleRequest {
    /// `GET`, `POST`, …
    pub method: http::Method,
    /// The path, e.g. `/events`.
    pub path: String,
    /// Query values, in order (a key may repeat).
    pub query: Vec<(String, String)>,
    /// Form values of a `POST` body (`application/x-www-form-urlencoded`), in order.
    pub form: Vec<(String, String)>,
    /// The headers access reads: `cookie`, `authorization`, `origin`, `sec-fetch-site`, `accept`.
    pub headers: BTreeMap<&'static str, String>,
    /// Who connected.
    pub peer: SocketAddr,
}

impl ConsoleRequest {
    /// Builds one from its parts (`body`: the form, when there is one).
    pub fn new(
        method: http::Method,
        uri: &http::Uri,
        headers: &http::HeaderMap,
        body: &[u8],
        peer: SocketAddr,
    ) -> ConsoleRequest {
        let pairs = |text: &[u8]| -> Vec<(String, String)> {
            url::form_urlencoded::parse(text)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        };
        let mut kept = BTreeMap::new();
        for name in [
            "cookie",
            "authorization",
            "origin",
            "sec-fetch-site",
            "accept",
            "host",
        ] {
            if let Some(value) = headers.get(name).and_then(|v| v.to_str().ok()) {
                kept.insert(name, value.to_string());
            }
        }
        ConsoleRequest {
            method,
            path: uri.path().to_string(),
            query: pairs(uri.query().unwrap_or("").as_bytes()),
            form: pairs(body),
            headers: kept,
            peer,
        }
    }

    /// The first query value of `key`, trimmed; `""` when absent.
    pub fn q(&self, key: &str) -> &str {
        first(&self.query, key)
    }

    /// The first form value of `key`, trimmed; `""` when absent.
    pub fn f(&self, key: &str) -> &str {
        first(&self.form, key)
    }

    /// Every form value of `key` (checkboxes), non-empty ones only.
    pub fn f_all(&self, key: &str) -> Vec<String> {
        self.form
            .iter()
            .filter(|(k, v)| k == key && !v.trim().is_empty())
            .map(|(_, v)| v.trim().to_string())
            .collect()
    }

    /// A header access reads.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// A cookie's value.
    pub fn cookie(&self, name: &str) -> Option<String> {
        cookie::Cookie::split_parse(self.header("cookie")?)
            .flatten()
            .find(|cookie| cookie.name() == name)
            .map(|cookie| cookie.value().to_string())
    }
}

fn first<'a>(pairs: &'a [(String, String)], key: &str) -> &'a str {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.trim())
}

/// A response with the console's headers.
pub fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Reply {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// An HTML page.
pub fn html(status: StatusCode, body: String) -> Reply {
    respond(status, "text/html; charset=utf-8", body)
}

/// A JSON document.
pub fn json(status: StatusCode, value: &impl serde::Serialize) -> Reply {
    let body = serde_json::to_vec_pretty(value)
        .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}").into_bytes());
    respond(status, "application/json", body)
}

/// `303 See Other` to `location` (a path of this console), optionally setting a cookie.
pub fn redirect(location: &str, cookie: Option<String>) -> Reply {
    let mut response = respond(
        StatusCode::SEE_OTHER,
        "text/plain; charset=utf-8",
        Bytes::new(),
    );
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    if let Some(cookie) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// `path?k=v&…` with each value percent-encoded; empty values are left out.
pub fn href(path: &str, params: &[(&str, &str)]) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for (key, value) in params.iter().filter(|(_, value)| !value.is_empty()) {
        query.append_pair(key, value);
    }
    match query.finish() {
        query if query.is_empty() => path.to_string(),
        query => format!("{path}?{query}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn links_encode_their_values() {
        assert_eq!(
            super::href(
                "/event",
                &[("app", "a b"), ("id", "x&y=<z>"), ("empty", "")]
            ),
            "/event?app=a+b&id=x%26y%3D%3Cz%3E"
        );
        assert_eq!(super::href("/events", &[("type", "")]), "/events");
    }
}
