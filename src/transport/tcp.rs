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
//! whenever a read finds the socket empty it re-arms `TCP_QUICKACK`: an ACK the kernel was
//! holding goes out at once. Cost: one `setsockopt` each time a read has to wait.

use actix_rt::net::{ActixStream, Ready, TcpStream};
use actix_service::Service;
use actix_tls::connect::{ConnectError, ConnectInfo, Connection, ConnectorService};
use futures_util::future::LocalBoxFuture;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A TCP stream that acknowledges promptly (see the module documentation).
#[derive(Debug)]
pub struct PromptAck(TcpStream);

impl PromptAck {
    /// Send any delayed ACK now and leave delayed-ACK mode. Best effort: a socket that does
    /// not take the option (not Linux) reads as before.
    fn ack_now(&self) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            let _ = socket2::SockRef::from(&self.0).set_tcp_quickack(true);
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
        let r = Pin::new(&mut this.0).poll_read(cx, buf);
        if r.is_pending() {
            this.ack_now();
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
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

impl ActixStream for PromptAck {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<Ready>> {
        let r = ActixStream::poll_read_ready(&self.0, cx);
        if r.is_pending() {
            self.ack_now();
        }
        r
    }

    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<Ready>> {
        ActixStream::poll_write_ready(&self.0, cx)
    }
}

/// The connector for `awc::Connector::connector`: actix-tls's resolver and TCP connector,
/// then `TCP_NODELAY` and [`PromptAck`].
#[derive(Clone, Default)]
pub struct PromptAckConnector(ConnectorService);

impl<R: actix_tls::connect::Host + 'static> Service<ConnectInfo<R>> for PromptAckConnector {
    type Response = Connection<R, PromptAck>;
    type Error = ConnectError;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    actix_service::always_ready!();

    fn call(&self, req: ConnectInfo<R>) -> Self::Future {
        let connecting = self.0.call(req);
        Box::pin(async move {
            let (stream, req) = connecting.await?.into_parts();
            stream.set_nodelay(true).map_err(ConnectError::Io)?;
            Ok(Connection::new(req, PromptAck(stream)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    #[actix_rt::test]
    async fn connections_have_nodelay_and_a_read_that_waits_rearms_quick_acks() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let conn = PromptAckConnector::default()
            .call(ConnectInfo::with_addr(addr.to_string(), addr))
            .await
            .unwrap();
        let (mut stream, _) = conn.into_parts();
        let _peer = listener.accept().unwrap();
        let sock = socket2::SockRef::from(&stream.0);
        assert!(sock.tcp_nodelay().unwrap());
        // Put the socket in delayed-ACK mode, as a busy keep-alive connection is.
        sock.set_tcp_quickack(false).unwrap();
        assert!(!sock.tcp_quickack().unwrap());
        // A read that finds nothing leaves delayed-ACK mode.
        let mut buf = [0u8; 16];
        let waited = poll_fn(|cx| {
            let mut rb = ReadBuf::new(&mut buf);
            Poll::Ready(Pin::new(&mut stream).poll_read(cx, &mut rb).is_pending())
        })
        .await;
        assert!(waited);
        let sock = socket2::SockRef::from(&stream.0);
        assert!(sock.tcp_quickack().unwrap());
    }
}
