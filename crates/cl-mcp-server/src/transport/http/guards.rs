//! The guards every request passes first: `Origin` (403), `Host` (403;
//! DNS-rebinding protection), the bearer token (401). Both headers are
//! parsed strictly (scheme, host, numeric port, nothing else) and the host
//! compared exactly.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;

use super::responses::{header_str, rpc_error_response};
use super::state::HttpState;
use crate::protocol::jsonrpc;

pub(super) fn is_loopback_host(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "[::1]")
}

/// The host of an authority `host[:port]`, lowercased, when the whole text
/// is exactly that: a registered name or IPv4 address (letters, digits, `-`,
/// `.`), or an IPv6 address in brackets; an optional port of digits only.
/// Anything else (userinfo `@`, a path, a second colon, a non-numeric port)
/// is refused, so `localhost:80@evil.example` or `localhost:3000.evil.example`
/// never pass for `localhost`.
pub(super) fn authority_host(authority: &str) -> Option<String> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let ip = inside.parse::<std::net::Ipv6Addr>().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (format!("[{ip}]"), port)
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        };
        let name_ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if !name_ok {
            return None;
        }
        (host.to_ascii_lowercase(), port)
    };
    if let Some(p) = port {
        if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        p.parse::<u16>().ok()?;
    }
    Some(host)
}

/// The host of an `Origin` header (`scheme://host[:port]`, nothing more).
pub(super) fn origin_host(origin: &str) -> Option<String> {
    let (scheme, authority) = origin.split_once("://")?;
    let scheme_ok = scheme
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !scheme_ok {
        return None;
    }
    authority_host(authority)
}

impl HttpState {
    pub(super) fn check_guards(&self, headers: &HeaderMap) -> Result<(), Box<Response>> {
        if let Some(origin) = headers.get("origin") {
            let origin = origin.to_str().unwrap_or("");
            let allowed = origin_host(origin).is_some_and(|h| is_loopback_host(&h))
                || self.options.allowed_origins.iter().any(|o| o == origin);
            if !allowed {
                return Err(Box::new(rpc_error_response(
                    StatusCode::FORBIDDEN,
                    jsonrpc::INVALID_REQUEST,
                    "Invalid Request",
                    &format!("Origin '{origin}' is not allowed (allow it with --allow-origin)"),
                )));
            }
        }
        if let Some(host) = headers.get("host") {
            let host = host.to_str().unwrap_or("");
            let bind_ip = match self.options.bind.ip() {
                std::net::IpAddr::V4(ip) => ip.to_string(),
                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            };
            let allowed = authority_host(host).is_some_and(|name| {
                is_loopback_host(&name)
                    || name == bind_ip
                    || self
                        .options
                        .allowed_hosts
                        .iter()
                        .any(|h| h.eq_ignore_ascii_case(&name))
            });
            if !allowed {
                return Err(Box::new(rpc_error_response(
                    StatusCode::FORBIDDEN,
                    jsonrpc::INVALID_REQUEST,
                    "Invalid Request",
                    &format!("Host '{host}' is not allowed (allow it with --allow-host)"),
                )));
            }
        }
        if let Some(token) = &self.options.token {
            let given =
                header_str(headers, "authorization").and_then(|v| v.strip_prefix("Bearer "));
            if given != Some(token.as_str()) {
                let mut r = rpc_error_response(
                    StatusCode::UNAUTHORIZED,
                    jsonrpc::INVALID_REQUEST,
                    "Invalid Request",
                    "Missing or wrong bearer token (Authorization: Bearer <token>)",
                );
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return Err(Box::new(r));
            }
        }
        Ok(())
    }
}
