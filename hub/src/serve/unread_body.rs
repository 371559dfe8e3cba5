//! `Connection: close` on an answer given before the request's body was read to its end (a refusal
//! by authentication, a size or media-type check): hyper then closes the connection rather than read
//! the rest, and the header tells an HTTP/1.1 client so instead of leaving it to meet a reset on
//! its next request.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Version, header};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;

/// Runs `request`, noting whether its body was read to the end, and closes the connection after the
/// answer when it was not. HTTP/2 has streams of its own and no `Connection` header.
pub async fn close_if_unread(request: Request, next: Next) -> Response {
    if request.version() > Version::HTTP_11 || !has_body(&request) {
        return next.run(request).await;
    }
    let read = Arc::new(AtomicBool::new(false));
    let request = request.map(|body| {
        let read = Arc::clone(&read);
        let end = futures::stream::poll_fn(move |_| {
            read.store(true, Ordering::Release);
            Poll::<Option<Result<Bytes, axum::Error>>>::Ready(None)
        });
        Body::from_stream(body.into_data_stream().chain(end))
    });
    let mut response = next.run(request).await;
    if !read.load(Ordering::Acquire) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Whether the request announces a body: chunked, or a `Content-Length` other than 0.
fn has_body(request: &Request) -> bool {
    let headers = request.headers();
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0")
}
