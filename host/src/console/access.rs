//! Who may read the console and who may act on it.
//!
//! - **Reading** is open to loopback peers while no `[admin] read_token` is set; with one set
//!   (or from any other address) it needs a token: `read_token` or `token`.
//! - **Actions** (requeue, purge, pause, resume, reload) need `[admin] token`
//!   (`OUTBOXD_ADMIN_TOKEN`), from any address; without one configured they are off.
//! - A token comes as `Authorization: Bearer …` (scripts, `/api/…`) or through the login form,
//!   which sets an `HttpOnly`, `SameSite=Strict` session cookie. A form sent with a session
//!   carries that session's CSRF token and is refused without it, or when the browser says it
//!   came from another site (`Origin`, `Sec-Fetch-Site`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cookie::{Cookie, SameSite};
use rand::Rng;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::request::ConsoleRequest;
use crate::config::admin::AdminToken;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "outboxd_console";
/// How long a login lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Most sessions kept (the oldest goes first).
const MAX_SESSIONS: usize = 256;

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Grant {
    /// Read pages and `/api/…`.
    Read,
    /// Read and act.
    Act,
}

/// How a caller was let in: printed in the action log ("who").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// What it may do.
    pub grant: Grant,
    /// `127.0.0.1:53122 (session)`, `10.0.0.7:4100 (bearer token)`, `127.0.0.1:53122 (loopback)`.
    pub who: String,
    /// The session's CSRF token, to put in forms (`None` without a session).
    pub csrf: Option<String>,
}

/// Why a request was denied access, as the page or JSON says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessDenied {
    /// 401 (no or a wrong token) or 403 (actions off, CSRF).
    pub status: http::StatusCode,
    /// One sentence naming the way in.
    pub message: String,
}

/// One browser's login: what its token granted and the CSRF token of its forms.
struct LoginSession {
    grant: Grant,
    csrf: String,
    created: Instant,
}

/// The tokens and the logged-in sessions, each kept under the SHA-256 of its cookie value (a
/// lookup compares digests, never the secret itself).
pub struct Access {
    token: Option<AdminToken>,
    read_token: Option<AdminToken>,
    sessions: Mutex<BTreeMap<[u8; 32], LoginSession>>,
}

fn random_hex() -> String {
    let bytes: [u8; 24] = rand::rng().random();
    hex::encode(bytes)
}

fn session_key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// The session cookie: `HttpOnly`, `SameSite=Strict`, for the whole console.
fn session_cookie(value: String, max_age: Duration) -> String {
    Cookie::build((SESSION_COOKIE, value))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .max_age(cookie::time::Duration::seconds(max_age.as_secs() as i64))
        .build()
        .to_string()
}

impl Access {
    /// Access with these tokens.
    pub fn new(token: Option<AdminToken>, read_token: Option<AdminToken>) -> Access {
        Access {
            token,
            read_token,
            sessions: Mutex::new(BTreeMap::new()),
        }
    }

    /// Whether actions are on at all (`[admin] token` is set).
    pub fn actions_on(&self) -> bool {
        self.token.is_some()
    }

    /// What `token` grants, if anything.
    fn grant_of(&self, token: &str) -> Option<Grant> {
        if self.token.as_ref().is_some_and(|t| t.matches(token)) {
            Some(Grant::Act)
        } else if self.read_token.as_ref().is_some_and(|t| t.matches(token)) {
            Some(Grant::Read)
        } else {
            None
        }
    }

    /// A login with `token`: the `Set-Cookie` value of a new session, or why not.
    pub fn login(&self, token: &str) -> Result<String, AccessDenied> {
        let grant = self.grant_of(token).ok_or_else(|| AccessDenied {
            status: http::StatusCode::UNAUTHORIZED,
            message: "wrong token: use [admin] token (or OUTBOXD_ADMIN_TOKEN), or [admin] read_token to read only".into(),
        })?;
        let id = random_hex();
        if let Ok(mut sessions) = self.sessions.lock() {
            sessions.retain(|_, s| s.created.elapsed() < SESSION_TTL);
            while sessions.len() >= MAX_SESSIONS {
                let oldest = sessions
                    .iter()
                    .min_by_key(|(_, s)| s.created)
                    .map(|(k, _)| *k);
                match oldest {
                    Some(key) => sessions.remove(&key),
                    None => break,
                };
            }
            sessions.insert(
                session_key(&id),
                LoginSession {
                    grant,
                    csrf: random_hex(),
                    created: Instant::now(),
                },
            );
        }
        Ok(session_cookie(id, SESSION_TTL))
    }

    /// Ends the request's session; the `Set-Cookie` value that clears the cookie.
    pub fn logout(&self, request: &ConsoleRequest) -> String {
        if let (Some(id), Ok(mut sessions)) = (request.cookie(SESSION_COOKIE), self.sessions.lock())
        {
            sessions.remove(&session_key(&id));
        }
        session_cookie(String::new(), Duration::ZERO)
    }

    /// Who is asking: a session, a bearer token, or a loopback reader.
    pub fn caller(&self, request: &ConsoleRequest) -> Result<Caller, AccessDenied> {
        let peer = request.peer;
        if let Some(bearer) = request
            .header("authorization")
            .and_then(|h| h.strip_prefix("Bearer "))
        {
            return match self.grant_of(bearer.trim()) {
                Some(grant) => Ok(Caller {
                    grant,
                    who: format!("{peer} (bearer token)"),
                    csrf: None,
                }),
                None => Err(AccessDenied {
                    status: http::StatusCode::UNAUTHORIZED,
                    message: "wrong bearer token".into(),
                }),
            };
        }
        if let Some(id) = request.cookie(SESSION_COOKIE)
            && let Ok(sessions) = self.sessions.lock()
            && let Some(session) = sessions.get(&session_key(&id))
            && session.created.elapsed() < SESSION_TTL
        {
            return Ok(Caller {
                grant: session.grant,
                who: format!("{peer} (session)"),
                csrf: Some(session.csrf.clone()),
            });
        }
        if self.read_token.is_none() && is_loopback(peer) {
            return Ok(Caller {
                grant: Grant::Read,
                who: format!("{peer} (loopback)"),
                csrf: None,
            });
        }
        Err(AccessDenied {
            status: http::StatusCode::UNAUTHORIZED,
            message: if self.read_token.is_some() {
                "reading the console needs a token: log in at /login with [admin] read_token or [admin] token".into()
            } else {
                format!(
                    "reading the console from {} needs a token: it is open on loopback only; set [admin] read_token (or use [admin] token) and log in at /login",
                    peer.ip()
                )
            },
        })
    }

    /// The caller of an action (`what`, e.g. `requeue`): one with the action token, and for a
    /// session a form with its CSRF token from this site.
    pub fn actor(&self, request: &ConsoleRequest, what: &str) -> Result<Caller, AccessDenied> {
        if !self.actions_on() {
            return Err(AccessDenied {
                status: http::StatusCode::FORBIDDEN,
                message: format!(
                    "{what} refused: console actions are off; set [admin] token (or OUTBOXD_ADMIN_TOKEN) and restart"
                ),
            });
        }
        let refuse = |message: String| AccessDenied {
            status: http::StatusCode::FORBIDDEN,
            message,
        };
        let caller = self.caller(request).map_err(|r| AccessDenied {
            message: format!("{what} refused: {}", r.message),
            ..r
        })?;
        if caller.grant != Grant::Act {
            return Err(refuse(format!(
                "{what} refused: actions need [admin] token (log in at /login with it, or send Authorization: Bearer …)"
            )));
        }
        if let Some(csrf) = &caller.csrf {
            let given = request.f("csrf");
            if given.is_empty() || !bool::from(csrf.as_bytes().ct_eq(given.as_bytes())) {
                return Err(refuse(format!(
                    "{what} refused: the form's CSRF token is missing or stale (reload the page)"
                )));
            }
            // A browser says where a form came from: only this origin (or the user's own
            // navigation) may act; another site, another port of this host, or an opaque
            // origin (`null`) may not.
            let cross_site = request
                .header("sec-fetch-site")
                .is_some_and(|s| !matches!(s, "same-origin" | "none"))
                || request.header("origin").is_some_and(|origin| {
                    request
                        .header("host")
                        .is_none_or(|host| origin.split("://").nth(1) != Some(host))
                });
            if cross_site {
                return Err(refuse(format!(
                    "{what} refused: the form came from another site"
                )));
            }
        }
        Ok(caller)
    }
}

/// Whether `peer` is a loopback address (IPv4 127/8, IPv6 ::1, or IPv4 mapped into IPv6).
pub fn is_loopback(peer: SocketAddr) -> bool {
    match peer.ip() {
        std::net::IpAddr::V4(ip) => ip.is_loopback(),
        std::net::IpAddr::V6(ip) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(peer: &str, headers: &[(&'static str, &str)]) -> ConsoleRequest {
        let mut map = http::HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, value.parse().unwrap());
        }
        ConsoleRequest::new(
            http::Method::GET,
            &"/".parse().unwrap(),
            &map,
            b"",
            peer.parse().unwrap(),
        )
    }

    fn token(text: &str) -> AdminToken {
        crate::config::Config::from_toml_str(
            &format!("[admin]\ntoken = \"{text}\"\n"),
            std::iter::empty(),
        )
        .expect("config")
        .admin
        .token
        .expect("token")
    }

    #[test]
    fn reading_is_open_on_loopback_only_until_a_read_token_is_set() {
        let open = Access::new(None, None);
        assert_eq!(
            open.caller(&request("127.0.0.1:4000", &[])).unwrap().grant,
            Grant::Read
        );
        assert!(open.caller(&request("[::1]:4000", &[])).is_ok());
        let refused = open.caller(&request("10.1.2.3:4000", &[])).unwrap_err();
        assert_eq!(refused.status, http::StatusCode::UNAUTHORIZED);
        assert!(
            refused.message.contains("from 10.1.2.3") && refused.message.contains("read_token"),
            "{}",
            refused.message
        );
        let read = token("read-token-0123456789");
        let closed = Access::new(None, Some(read));
        assert!(
            closed.caller(&request("127.0.0.1:4000", &[])).is_err(),
            "a read token closes loopback too"
        );
        let bearer = closed
            .caller(&request(
                "10.1.2.3:4000",
                &[("authorization", "Bearer read-token-0123456789")],
            ))
            .unwrap();
        assert_eq!(bearer.grant, Grant::Read);
        assert!(
            closed
                .actor(
                    &request(
                        "10.1.2.3:4000",
                        &[("authorization", "Bearer read-token-0123456789")]
                    ),
                    "pause"
                )
                .is_err()
        );
    }

    #[test]
    fn a_login_is_a_session_whose_forms_need_its_csrf_token() {
        let access = Access::new(Some(token("act-token-0123456789")), None);
        assert!(access.login("wrong").is_err());
        let cookie = access.login("act-token-0123456789").unwrap();
        let pair = cookie.split(';').next().unwrap().to_string();
        let caller = access
            .caller(&request("10.0.0.9:1", &[("cookie", &pair)]))
            .unwrap();
        assert_eq!(caller.grant, Grant::Act);
        let csrf = caller.csrf.clone().unwrap();
        let mut form = request(
            "10.0.0.9:1",
            &[("cookie", &pair), ("host", "h:1"), ("origin", "http://h:1")],
        );
        assert!(
            access
                .actor(&form, "pause")
                .unwrap_err()
                .message
                .contains("CSRF")
        );
        form.form = vec![("csrf".into(), csrf)];
        assert!(access.actor(&form, "pause").is_ok());
        form.headers.insert("sec-fetch-site", "same-site".into());
        assert!(
            access
                .actor(&form, "pause")
                .unwrap_err()
                .message
                .contains("another site")
        );
    }
}
