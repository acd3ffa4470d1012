//! A request body that says it has ended as soon as its last frame is out.
//!
//! tonic's request bodies learn that they are done only when polled once
//! more after their message, so hyper sends a request's message in one
//! DATA frame and the end of the stream in a second, empty one. On a
//! client that is busy, the two often go out in separate TCP packets, and
//! etcd's server reads and handles each on its own. [`EndWithLastFrame`] polls the
//! body once more right after each frame: when that says the body ended,
//! the frame itself carries the end of the stream. A stream that is not
//! done (a watch, a lease keepalive) answers "not yet" and goes on as
//! before.
//!
//! A workaround, wrapped around every request in `members/balance.rs`:
//! remove it once tonic's unary request bodies report their end with
//! their message (`is_end_stream()` true once the message is out, so hyper
//! ends the stream in the DATA frame itself). Its test
//! `a_single_message_ends_the_stream_with_itself` shows the behaviour this
//! relies on; run against a body without the wrapper, it shows whether the
//! workaround is still needed.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http_body::{Body, Frame, SizeHint};

/// What polling a body for its next frame gives.
type Next<B> = Option<Result<Frame<<B as Body>::Data>, <B as Body>::Error>>;

/// Wraps a request body, looking one frame ahead (see the module docs).
pub(crate) struct EndWithLastFrame<B: Body> {
    inner: B,
    /// A frame taken by the look ahead, not handed out yet.
    next: Next<B>,
    /// The inner body returned its end.
    ended: bool,
}

// The frame held here is never pinned: only `inner` is polled in place.
impl<B: Body + Unpin> Unpin for EndWithLastFrame<B> {}

impl<B: Body + Unpin> EndWithLastFrame<B> {
    pub(crate) fn new(inner: B) -> Self {
        EndWithLastFrame {
            inner,
            next: None,
            ended: false,
        }
    }

    fn poll_inner(&mut self, cx: &mut Context<'_>) -> Poll<Next<B>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.ended = true;
        }
        polled
    }
}

impl<B: Body + Unpin> Body for EndWithLastFrame<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Next<B>> {
        let this = self.get_mut();
        let frame = match this.next.take() {
            Some(frame) => frame,
            None => match ready!(this.poll_inner(cx)) {
                Some(frame) => frame,
                None => return Poll::Ready(None),
            },
        };
        // Only data can be followed by the end: trailers end a body
        // themselves.
        if frame.as_ref().is_ok_and(Frame::is_data)
            && let Poll::Ready(Some(next)) = this.poll_inner(cx)
        {
            this.next = Some(next);
        }
        Poll::Ready(Some(frame))
    }

    fn is_end_stream(&self) -> bool {
        self.next.is_none() && (self.ended || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        match self.next {
            // The inner body no longer counts the frame held here.
            Some(_) => SizeHint::default(),
            None => self.inner.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body::{Body, Frame};
    use http_body_util::{BodyExt, StreamBody};
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::ReceiverStream;
    use tonic::codegen::Bytes;

    use super::EndWithLastFrame;

    type Item = Result<Frame<Bytes>, std::convert::Infallible>;

    /// A body fed from a channel: like tonic's, it knows it has ended only
    /// when polled after its last frame.
    fn body() -> (
        mpsc::Sender<Item>,
        EndWithLastFrame<StreamBody<ReceiverStream<Item>>>,
    ) {
        let (tx, rx) = mpsc::channel(4);
        (
            tx,
            EndWithLastFrame::new(StreamBody::new(ReceiverStream::new(rx))),
        )
    }

    fn data(s: &'static str) -> Item {
        Ok(Frame::data(Bytes::from_static(s.as_bytes())))
    }

    async fn next(body: &mut EndWithLastFrame<StreamBody<ReceiverStream<Item>>>) -> Option<Bytes> {
        let frame = body.frame().await?.expect("no error");
        Some(frame.into_data().expect("a data frame"))
    }

    #[tokio::test]
    async fn a_single_message_ends_the_stream_with_itself() {
        let (tx, mut body) = body();
        tx.send(data("message")).await.unwrap();
        drop(tx);
        assert!(!body.is_end_stream(), "nothing sent yet");
        assert_eq!(next(&mut body).await.as_deref(), Some(&b"message"[..]));
        assert!(body.is_end_stream(), "known to have ended with the message");
        assert_eq!(next(&mut body).await, None);
    }

    #[tokio::test]
    async fn a_stream_still_open_goes_on_and_a_frame_looked_at_is_kept() {
        let (tx, mut body) = body();
        tx.send(data("a")).await.unwrap();
        assert_eq!(next(&mut body).await.as_deref(), Some(&b"a"[..]));
        assert!(!body.is_end_stream(), "more may come");
        // Two frames ready at once: the second is looked at, not lost.
        tx.send(data("b")).await.unwrap();
        tx.send(data("c")).await.unwrap();
        assert_eq!(next(&mut body).await.as_deref(), Some(&b"b"[..]));
        assert!(!body.is_end_stream(), "a frame is still held");
        drop(tx);
        assert_eq!(next(&mut body).await.as_deref(), Some(&b"c"[..]));
        assert!(body.is_end_stream());
        assert_eq!(next(&mut body).await, None);
    }
}
