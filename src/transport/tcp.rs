//! TCP under the HTTP transport: the connector awc dials with, and the stream it reads.
//!
//! Owns: how a TCP connection to an MCP server is made and how its socket acknowledges what
//! it reads. Must not touch: HTTP, sessions, TLS (awc layers rustls over this stream), the
//! client core.
//!
//! Why it exists: uvicorn (under the Python `mcp` SDK and FastMCP, the most common HTTP MCP
//! servers) writes a response's head and its body in two sends with Nagle's algorithm on, so
//! the body waits until the client acknowledges the head; and Linux delays that ACK on a busy
//! keep-alive connection by up to 40 ms. Every call to such a server took 44 ms over a reused
//! connection (1.8 ms once the ACK is prompt; measured with the bench's `real_python_http`).
//! So every connection is made with `TCP_NODELAY` (our own writes are never held either), and
//! a server seen to stall gets prompt ACKs: whenever a read of a response that has begun to
//! arrive has to wait, `TCP_QUICKACK` is re-armed, and an ACK the kernel was holding goes out
//! at once.
//!
//! Seen to stall: a read that waited for the rest of a response for 30 ms or more (a delayed
//! ACK is at least 40 ms). That costs one stall, usually during the handshake, and from then
//! on every connection to that server acknowledges promptly. Other servers never pay the
//! `setsockopt` per response, nor the lone ACKs it sends instead of riding on the next
//! request: re-arming after every response cost the bench's own one-segment HTTP server
//! about 10 % of its calls per second at 16 in flight. A server whose stream is merely slow
//! (SSE events some time apart) may be marked too; that only costs it the same.

use actix_rt::net::{ActixStream, Ready, TcpStream};
use actix_service::Service;
use actix_tls::connect::{ConnectError, ConnectInfo, Connection, ConnectorService};
use futures_util::future::LocalBoxFuture;
use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// A wait this long for the rest of a response means the server waits for our ACK.
const STALL: Duration = Duration::from_millis(30);

/// A TCP stream that acknowledges promptly once its server is seen to stall (see the module
/// documentation).
#[derive(Debug)]
pub struct PromptAck {
    stream: TcpStream,
    /// Shared by every connection to the same server (and shown in its transport's stats).
    stalls: Arc<AtomicBool>,
    /// Data came in since our last write: a response has begun.
    read_since_write: Cell<bool>,
    /// When a read of a begun response started to wait.
    waiting_since: Cell<Option<Instant>>,
}

impl PromptAck {
    fn new(stream: TcpStream, stalls: Arc<AtomicBool>) -> PromptAck {
        PromptAck {
            stream,
            stalls,
            read_since_write: Cell::new(false),
            waiting_since: Cell::new(None),
        }
    }

    /// A read is about to wait.
    fn waiting(&self) {
        if !self.read_since_write.get() {
            // For the first byte of a response: the server is not waiting for us.
            return;
        }
        if self.stalls.load(Ordering::Relaxed) {
            self.read_since_write.set(false);
            self.ack_now();
        } else if self.waiting_since.get().is_none() {
            self.waiting_since.set(Some(Instant::now()));
        }
    }

    /// Data came in.
    fn read_some(&self) {
        self.read_since_write.set(true);
        if let Some(t) = self.waiting_since.take() {
            if !self.stalls.load(Ordering::Relaxed) && t.elapsed() >= STALL {
                tracing::debug!(
                    waited_ms = t.elapsed().as_millis() as u64,
                    "a response stalled mid-way; this server gets prompt ACKs from now on"
                );
                self.stalls.store(true, Ordering::Relaxed);
            }
        }
    }

    /// We sent something: what comes next is a new response.
    fn wrote(&self) {
        self.read_since_write.set(false);
        self.waiting_since.set(None);
    }

    /// Send any delayed ACK now and leave delayed-ACK mode. Best effort: a socket that does
    /// not take the option (not Linux) reads as before.
    fn ack_now(&self) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            let _ = socket2::SockRef::from(&self.stream).set_tcp_quickack(true);
        }
    }
}

impl AsyncRead for PromptAck {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.stream).poll_read(cx, buf);
        match &r {
            Poll::Pending => this.waiting(),
            Poll::Ready(Ok(())) if buf.filled().len() > before => this.read_some(),
            Poll::Ready(_) => {}
        }
        r
    }
}

impl AsyncWrite for PromptAck {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.stream).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.wrote();
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.wrote();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl ActixStream for PromptAck {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<Ready>> {
        let r = ActixStream::poll_read_ready(&self.stream, cx);
        if r.is_pending() {
            self.waiting();
        }
        r
    }

    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<Ready>> {
        ActixStream::poll_write_ready(&self.stream, cx)
    }
}

/// The connector for `awc::Connector::connector`, one per server: actix-tls's resolver and
/// TCP connector, then `TCP_NODELAY` and [`PromptAck`], with what was learnt of the server.
#[derive(Clone, Default)]
pub struct PromptAckConnector {
    connect: ConnectorService,
    stalls: Arc<AtomicBool>,
}

impl PromptAckConnector {
    /// A connector that records in `stalls` whether its server was seen to stall.
    pub fn new(stalls: Arc<AtomicBool>) -> PromptAckConnector {
        PromptAckConnector {
            connect: ConnectorService::default(),
            stalls,
        }
    }
}

impl<R: actix_tls::connect::Host + 'static> Service<ConnectInfo<R>> for PromptAckConnector {
    type Response = Connection<R, PromptAck>;
    type Error = ConnectError;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    actix_service::always_ready!();

    fn call(&self, req: ConnectInfo<R>) -> Self::Future {
        let connecting = self.connect.call(req);
        let stalls = self.stalls.clone();
        Box::pin(async move {
            let (stream, req) = connecting.await?.into_parts();
            stream.set_nodelay(true).map_err(ConnectError::Io)?;
            Ok(Connection::new(req, PromptAck::new(stream, stalls)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop_cx() -> Context<'static> {
        Context::from_waker(std::task::Waker::noop())
    }

    fn quick(s: &PromptAck) -> bool {
        socket2::SockRef::from(&s.stream).tcp_quickack().unwrap()
    }

    /// Put the socket in delayed-ACK mode, as a busy keep-alive connection is.
    fn delayed(s: &PromptAck) {
        socket2::SockRef::from(&s.stream)
            .set_tcp_quickack(false)
            .unwrap();
    }

    fn read(s: &mut PromptAck) -> Poll<usize> {
        let mut buf = [0u8; 64];
        let mut rb = ReadBuf::new(&mut buf);
        match Pin::new(s).poll_read(&mut noop_cx(), &mut rb) {
            Poll::Ready(r) => Poll::Ready(r.map(|()| rb.filled().len()).unwrap()),
            Poll::Pending => Poll::Pending,
        }
    }

    async fn read_when_there(s: &mut PromptAck) -> usize {
        loop {
            if let Poll::Ready(n) = read(s) {
                return n;
            }
            // Let the runtime poll its reactor (without letting paused time move on).
            tokio::task::yield_now().await;
        }
    }

    #[actix_rt::test]
    async fn nodelay_always_and_prompt_acks_once_a_response_stalled() {
        tokio::time::pause();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connector = PromptAckConnector::default();
        let conn = connector
            .call(ConnectInfo::with_addr(addr.to_string(), addr))
            .await
            .unwrap();
        let (mut stream, _) = conn.into_parts();
        let (mut peer, _) = listener.accept().unwrap();
        let mut send = |b: &[u8]| std::io::Write::write_all(&mut peer, b).unwrap();
        assert!(socket2::SockRef::from(&stream.stream)
            .tcp_nodelay()
            .unwrap());

        // A request goes out; waiting for the first byte of its answer changes nothing.
        let _ = Pin::new(&mut stream).poll_write(&mut noop_cx(), b"POST / HTTP/1.1\r\n\r\n");
        delayed(&stream);
        assert!(read(&mut stream).is_pending());
        assert!(!quick(&stream));
        // The head arrives, the body is late by less than a delayed ACK: nothing learnt.
        send(b"HTTP/1.1 200 OK\r\n");
        assert!(read_when_there(&mut stream).await > 0);
        assert!(read(&mut stream).is_pending());
        assert!(
            !quick(&stream),
            "no setsockopt for a server not seen to stall"
        );
        tokio::time::advance(Duration::from_millis(10)).await;
        send(b"Content-Length: 0\r\n");
        assert!(read_when_there(&mut stream).await > 0);
        assert!(!connector.stalls.load(Ordering::Relaxed));
        // The rest waits 40 ms: the server is marked.
        assert!(read(&mut stream).is_pending());
        tokio::time::advance(Duration::from_millis(40)).await;
        send(b"\r\n");
        assert!(read_when_there(&mut stream).await > 0);
        assert!(connector.stalls.load(Ordering::Relaxed));
        // From now on a wait mid-response re-arms quick ACKs, once per piece.
        delayed(&stream);
        assert!(read(&mut stream).is_pending());
        assert!(quick(&stream));
        delayed(&stream);
        assert!(read(&mut stream).is_pending());
        assert!(!quick(&stream));
        // A new connection to the same server knows it at once.
        let (mut other, _) = connector
            .call(ConnectInfo::with_addr(addr.to_string(), addr))
            .await
            .unwrap()
            .into_parts();
        let (mut peer2, _) = listener.accept().unwrap();
        std::io::Write::write_all(&mut peer2, b"HTTP/1.1 200 OK\r\n").unwrap();
        assert!(read_when_there(&mut other).await > 0);
        delayed(&other);
        assert!(read(&mut other).is_pending());
        assert!(quick(&other));
    }
}
