//! Who the dashboard answers: the checks against DNS rebinding and cross-site requests, the
//! headers that keep the page out of frames, and the time a request may take.
//!
//! A web page the operator visits can make the browser send requests to the dashboard under
//! a name the attacker controls (DNS rebinding: `evil.example` first resolves to the attacker,
//! then to 127.0.0.1), so the browser treats the dashboard as the page's own origin. Such a
//! request carries the attacker's name in `Host`. So:
//!
//! - **Host.** A request is answered only if its `Host` (the port aside) is `localhost`, an IP
//!   address the dashboard listens on (any IP address when it listens on all of them, `0.0.0.0`
//!   or `::`; a loopback address always), or a name given with `--allow-host` (as given, with
//!   or without a port). A browser sends an IP address as `Host` only for a page loaded from
//!   that address, which a rebinding page is not. Anything else gets 403.
//! - **Origin.** A `POST` (the only writes: dead-letter actions) must carry an `Origin` whose
//!   host and port are the request's `Host`: the dashboard's own page. A missing or other
//!   `Origin` gets 403 (browsers send it on every `POST`; a script adds it).
//! - **Frames.** Every response says `X-Frame-Options: DENY` and `Content-Security-Policy:
//!   frame-ancestors 'none'`, so no page can frame the dashboard and click for the operator.
//! - **Time.** A connection must send a request's headers within the header timeout (hyper's
//!   `http1_header_read_timeout`, also between requests of a kept-alive connection), and a
//!   request must be answered within [`REQUEST_TIMEOUT`] (its body read included), else 408:
//!   trickling clients cannot hold connections open.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, Request, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// The longest a request may take, body read included, before it is answered 408.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The `Host` names and addresses the dashboard answers (see the module documentation).
#[derive(Clone, Debug)]
pub struct HostPolicy {
    listen: SocketAddr,
    names: Vec<String>,
}

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// No `Host` header, or one the policy does not allow.
    #[error("Host {0:?} is not this dashboard's address, localhost or an --allow-host name")]
    Host(String),
    /// A `POST` without an `Origin` of the request's own `Host`.
    #[error(
        "a POST must come from the dashboard's own page: Origin {origin:?} is not http(s)://{host}"
    )]
    Origin {
        /// The `Origin` sent (empty if none).
        origin: String,
        /// The request's `Host`.
        host: String,
    },
}

impl HostPolicy {
    /// The policy of a dashboard listening on `listen`, also answering the `names` given
    /// (`--allow-host`: a name, or a name and port).
    pub fn new(listen: SocketAddr, names: Vec<String>) -> HostPolicy {
        let names = names
            .into_iter()
            .map(|n| n.trim().to_ascii_lowercase())
            .filter(|n| !n.is_empty())
            .collect();
        HostPolicy { listen, names }
    }

    /// Whether a request with `Host: host` is answered.
    pub fn allows_host(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let name = host_name(&host);
        if name == "localhost" || self.names.iter().any(|n| *n == host || *n == name) {
            return true;
        }
        let Ok(ip) = name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        else {
            return false;
        };
        ip.is_loopback() || ip == self.listen.ip() || self.listen.ip().is_unspecified()
    }

    /// Checks a request's `Host` and, for a `POST`, its `Origin`.
    pub fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
        let text = |name| {
            headers
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
                .map(str::to_string)
        };
        let host = text(header::HOST).unwrap_or_default();
        if !self.allows_host(&host) {
            return Err(Refusal::Host(host));
        }
        if *method == Method::POST {
            let origin = text(header::ORIGIN).unwrap_or_default();
            let own = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .is_some_and(|rest| rest.trim_end_matches('/').eq_ignore_ascii_case(host.trim()));
            if !own {
                return Err(Refusal::Origin { origin, host });
            }
        }
        Ok(())
    }
}

/// The host name of a `Host` value without its port (`[::1]:80` → `[::1]`, `a:80` → `a`).
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// The middleware of every route: refuses what [`HostPolicy::check`] refuses (403), bounds
/// the request's time ([`REQUEST_TIMEOUT`], 408), and adds the frame headers to every
/// response.
pub async fn guard(
    State(policy): State<Arc<HostPolicy>>,
    request: Request<Body>,
    next: Next<Body>,
) -> Response {
    let mut response = match policy.check(request.method(), request.headers()) {
        Err(refusal) => {
            tracing::debug!(%refusal, path = %request.uri().path(), "request refused");
            refused(StatusCode::FORBIDDEN, &refusal.to_string())
        }
        Ok(()) => match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
            Ok(response) => response,
            Err(_) => refused(StatusCode::REQUEST_TIMEOUT, "request took too long"),
        },
    };
    let headers = response.headers_mut();
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'"),
    );
    response
}

fn refused(code: StatusCode, error: &str) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::json!({ "error": error }).to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(listen: &str, names: &[&str]) -> HostPolicy {
        HostPolicy::new(
            listen.parse().expect("address"),
            names.iter().map(|n| n.to_string()).collect(),
        )
    }

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name.clone(), HeaderValue::from_str(value).expect("value"));
        }
        map
    }

    #[test]
    fn hosts_allowed_are_the_listen_address_localhost_and_names_given() {
        let p = policy("127.0.0.1:7780", &["Dash.Example"]);
        for ok in [
            "127.0.0.1:7780",
            "localhost:7780",
            "LOCALHOST",
            "[::1]:7780",
            "dash.example:443",
            "dash.example",
        ] {
            assert!(p.allows_host(ok), "{ok}");
        }
        for refused in [
            "evil.example:7780",
            "",
            "10.0.0.1:7780",
            "localhost.evil:7780",
        ] {
            assert!(!p.allows_host(refused), "{refused}");
        }
        let any = policy("0.0.0.0:7780", &[]);
        assert!(any.allows_host("10.0.0.1:7780"));
        assert!(!any.allows_host("evil.example:7780"));
        let with_port = policy("127.0.0.1:7780", &["dash.example:8443"]);
        assert!(with_port.allows_host("dash.example:8443"));
        assert!(!with_port.allows_host("dash.example:80"));
    }

    #[test]
    fn a_post_needs_its_own_origin() {
        let p = policy("127.0.0.1:7780", &[]);
        let host = (header::HOST, "127.0.0.1:7780");
        assert!(p
            .check(&Method::GET, &headers(std::slice::from_ref(&host)))
            .is_ok());
        assert!(p
            .check(
                &Method::POST,
                &headers(&[host.clone(), (header::ORIGIN, "http://127.0.0.1:7780")])
            )
            .is_ok());
        for origin in ["http://evil.example", "null", "http://127.0.0.1:7781"] {
            assert!(
                p.check(
                    &Method::POST,
                    &headers(&[host.clone(), (header::ORIGIN, origin)])
                )
                .is_err(),
                "{origin}"
            );
        }
        assert!(p.check(&Method::POST, &headers(&[host])).is_err());
        assert!(matches!(
            p.check(&Method::GET, &headers(&[(header::HOST, "evil.example")])),
            Err(Refusal::Host(_))
        ));
    }
}
