//! The client address behind a trusted reverse proxy: when the socket peer is one of
//! `http.trusted_proxies`, the client is the right-most address of `X-Forwarded-For` that is not a
//! trusted proxy itself, and the request's `ConnectInfo` is rewritten to it, so the audit log, the
//! operators' protected addresses and the failed-login limit all see the client. A header from any
//! other peer is ignored.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;

use crate::config::TrustedProxies;

const X_FORWARDED_FOR: &str = "x-forwarded-for";

/// The client of a request whose socket peer is `peer`.
pub fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &TrustedProxies) -> IpAddr {
    if !trusted.trusts(peer) {
        return peer;
    }
    // Every proxy appends the address it received from; read from the right, past the trusted ones.
    let hops: Vec<&str> = headers
        .get_all(X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    for hop in hops.iter().rev() {
        let Ok(ip) = hop.parse::<IpAddr>() else {
            // What lies left of an unreadable hop cannot be told apart from what a client wrote.
            return peer;
        };
        if !trusted.trusts(ip) {
            return ip.to_canonical();
        }
    }
    peer
}

/// Rewrites the request's `ConnectInfo` to the client behind a trusted proxy.
pub async fn rewrite(
    State(trusted): State<Arc<TrustedProxies>>,
    mut request: Request,
    next: Next,
) -> Response {
    if !trusted.is_empty()
        && let Some(ConnectInfo(peer)) = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .copied()
    {
        let client = client_address(peer.ip(), request.headers(), &trusted);
        if client != peer.ip() {
            request
                .extensions_mut()
                .insert(ConnectInfo(SocketAddr::new(client, peer.port())));
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(peer: &str, forwarded: &[&str], trusted: &[&str], want: &str) {
        let mut headers = HeaderMap::new();
        for value in forwarded {
            headers.append(X_FORWARDED_FOR, value.parse().expect("header"));
        }
        let trusted = TrustedProxies::parse(trusted.iter().copied()).expect("trusted");
        let got = client_address(peer.parse().expect("peer"), &headers, &trusted);
        assert_eq!(got.to_string(), want, "peer {peer}, {forwarded:?}");
    }

    #[test]
    fn the_header_is_believed_only_from_a_trusted_peer() {
        let proxy = &["10.0.0.1"];
        check("10.0.0.1", &["192.0.2.7"], proxy, "192.0.2.7");
        // An untrusted peer's header is ignored.
        check("198.51.100.9", &["192.0.2.7"], proxy, "198.51.100.9");
        check("198.51.100.9", &["192.0.2.7"], &[], "198.51.100.9");
        // No header: the proxy itself.
        check("10.0.0.1", &[], proxy, "10.0.0.1");
    }

    #[test]
    fn the_client_is_the_right_most_hop_not_trusted() {
        let proxies = &["10.0.0.0/24"];
        // A client's own forged entry on the left does not count.
        check(
            "10.0.0.1",
            &["203.0.113.66, 192.0.2.7"],
            proxies,
            "192.0.2.7",
        );
        check("10.0.0.1", &["192.0.2.7, 10.0.0.2"], proxies, "192.0.2.7");
        check(
            "10.0.0.1",
            &["203.0.113.66", "192.0.2.7, 10.0.0.2"],
            proxies,
            "192.0.2.7",
        );
        // Only trusted hops: the left-most proxy's peer is unknown, the peer stays.
        check("10.0.0.1", &["10.0.0.3"], proxies, "10.0.0.1");
        // An unreadable hop stops the walk.
        check("10.0.0.1", &["192.0.2.7, unknown"], proxies, "10.0.0.1");
        check("10.0.0.1", &["::ffff:192.0.2.7"], proxies, "192.0.2.7");
    }
}
