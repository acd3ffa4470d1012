//! etcd's refusal of a stale auth token, read as the refusal of an
//! invalid one, so that etcd-client authenticates again and resends.
//!
//! With JWT auth tokens (`--auth-token jwt,...`), a token carries the
//! revision of etcd's auth store when it was issued, and etcd refuses every
//! request made with a token older than the last change to any user or
//! role: gRPC code 3, "revision of auth store is old". etcd's own Go client
//! authenticates again on that answer; etcd-client does so only on code
//! 16, "invalid auth token". Without this, a change to any user or role
//! fails every later request of a restricted user, and every lease of it
//! lapses a TTL later (from etcd 3.5.28 and 3.6.9 its renewals are checked
//! too; before, the reads that confirm them were). Simple tokens are looked
//! up anew on every request and never refused so.
//!
//! etcd sends the refusal in the trailers that end the answer (in its
//! headers when nothing came before it): [`renew_in_headers`] and
//! [`RenewInTrailers`] rewrite both places.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{HeaderMap, HeaderValue};
use http_body::{Body, Frame, SizeHint};

/// etcd's message for a token issued before the auth store's last change.
const STALE: &[u8] = b"etcdserver: revision of auth store is old";

/// etcd's message for a token it does not accept, on which etcd-client
/// authenticates again.
const INVALID: &str = "etcdserver: invalid auth token";

/// Rewrites a stale-token refusal in `headers` (or trailers) into an
/// invalid-token one.
pub(crate) fn renew_in_headers(headers: &mut HeaderMap) {
    let stale = headers
        .get("grpc-status")
        .is_some_and(|c| c.as_bytes() == b"3")
        && headers
            .get("grpc-message")
            .is_some_and(|m| m.as_bytes() == STALE);
    if stale {
        headers.insert("grpc-status", HeaderValue::from_static("16"));
        headers.insert("grpc-message", HeaderValue::from_static(INVALID));
    }
}

/// An answer's body whose trailers go through [`renew_in_headers`].
pub(crate) struct RenewInTrailers<B>(pub B);

impl<B: Body + Unpin> Body for RenewInTrailers<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let mut frame = ready!(Pin::new(&mut self.get_mut().0).poll_frame(cx));
        if let Some(trailers) = frame
            .as_mut()
            .and_then(|f| f.as_mut().ok())
            .and_then(Frame::trailers_mut)
        {
            renew_in_headers(trailers);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderMap;

    use super::renew_in_headers;

    fn status(code: &'static str, message: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("grpc-status", code.parse().unwrap());
        h.insert("grpc-message", message.parse().unwrap());
        h
    }

    #[test]
    fn only_a_stale_token_refusal_is_rewritten() {
        let mut stale = status("3", "etcdserver: revision of auth store is old");
        renew_in_headers(&mut stale);
        assert_eq!(stale, status("16", "etcdserver: invalid auth token"));
        for (code, message) in [
            (
                "3",
                "etcdserver: authentication failed, invalid user ID or password",
            ),
            ("7", "etcdserver: revision of auth store is old"),
            ("0", ""),
        ] {
            let mut other = status(code, message);
            renew_in_headers(&mut other);
            assert_eq!(other, status(code, message), "{code} {message}");
        }
    }
}
