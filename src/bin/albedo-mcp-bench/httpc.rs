//! A minimal HTTP/1.1 keep-alive client for the daemon's API (the load generator and the
//! session scenarios): cheap, so the daemon's cost dominates. Content-Length and chunked
//! bodies. Over TCP it sends the daemon's API token (`Authorization: Bearer`), as every TCP
//! client must; over the daemon's Unix socket none (the socket's permissions are the check).

use crate::server::find;
use std::io::{self, Write as _};
use std::path::PathBuf;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub struct Conn {
    addr: String,
    /// The daemon's socket, when this connection goes through it.
    socket: Option<PathBuf>,
    /// The `Authorization` header line, ready to write.
    auth: Vec<u8>,
    stream: Option<Box<dyn Io>>,
    buf: Vec<u8>,
    req: Vec<u8>,
}

/// What the client reads from a response's head: its status and how its body is framed.
struct Head {
    status: u16,
    len: Option<usize>,
    chunked: bool,
    close: bool,
}

impl Head {
    /// `head` is the status line and the header lines, read as bytes (no copy into a
    /// `String`: this runs once per call of the load generator).
    fn parse(head: &[u8]) -> Head {
        let mut lines = head.split(|&b| b == b'\n');
        let status = lines
            .next()
            .and_then(|l| l.split(|&b| b == b' ').nth(1))
            .and_then(|s| std::str::from_utf8(s).ok()?.parse().ok())
            .unwrap_or(0);
        let mut h = Head {
            status,
            len: None,
            chunked: false,
            close: false,
        };
        for l in lines {
            let Some(colon) = l.iter().position(|&b| b == b':') else {
                continue;
            };
            let (k, v) = (&l[..colon], l[colon + 1..].trim_ascii());
            if k.eq_ignore_ascii_case(b"content-length") {
                h.len = std::str::from_utf8(v).ok().and_then(|v| v.parse().ok());
            } else if k.eq_ignore_ascii_case(b"transfer-encoding") {
                h.chunked = find(v, b"chunked").is_some();
            } else if k.eq_ignore_ascii_case(b"connection") {
                h.close = v.eq_ignore_ascii_case(b"close");
            }
        }
        h
    }
}

impl Conn {
    /// `addr` is `host:port`; `token` the daemon's API token.
    pub fn new(addr: &str, token: &str) -> Conn {
        Conn {
            addr: addr.to_owned(),
            socket: None,
            auth: format!("Authorization: Bearer {token}\r\n").into_bytes(),
            stream: None,
            buf: Vec::with_capacity(16 * 1024),
            req: Vec::with_capacity(1024),
        }
    }

    /// Through the daemon's Unix socket at `path`, with no token.
    pub fn unix(path: PathBuf) -> Conn {
        Conn {
            socket: Some(path),
            auth: Vec::new(),
            ..Conn::new("localhost", "")
        }
    }

    async fn stream(&mut self) -> io::Result<&mut Box<dyn Io>> {
        if self.stream.is_none() {
            let s: Box<dyn Io> = match &self.socket {
                Some(path) => Box::new(UnixStream::connect(path).await?),
                None => {
                    let s = TcpStream::connect(&self.addr).await?;
                    let _ = s.set_nodelay(true);
                    Box::new(s)
                }
            };
            self.stream = Some(s);
            self.buf.clear();
        }
        Ok(self.stream.as_mut().expect("connected"))
    }

    /// One request; answers the status and the body.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> io::Result<(u16, Vec<u8>)> {
        self.request_with(method, path, body, false)
            .await
            .map(|(st, b, _)| (st, b))
    }

    /// One request whose body is counted, not kept (its first 512 bytes are): answers the
    /// status, that start and the body's length. The load generator's way to read a
    /// 10 MiB answer without holding it.
    pub async fn request_counted(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> io::Result<(u16, Vec<u8>, usize)> {
        self.request_with(method, path, body, true).await
    }

    async fn request_with(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        discard: bool,
    ) -> io::Result<(u16, Vec<u8>, usize)> {
        match self.try_request(method, path, body, discard).await {
            Ok(r) => Ok(r),
            Err(e) => {
                self.stream = None;
                Err(e)
            }
        }
    }

    async fn try_request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        discard: bool,
    ) -> io::Result<(u16, Vec<u8>, usize)> {
        self.req.clear();
        self.req.extend_from_slice(method.as_bytes());
        self.req.push(b' ');
        self.req.extend_from_slice(path.as_bytes());
        self.req.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        self.req.extend_from_slice(self.addr.as_bytes());
        self.req.extend_from_slice(b"\r\n");
        self.req.extend_from_slice(&self.auth);
        if let Some(b) = body {
            // Into the request's own buffer: no allocation per call.
            let _ = write!(
                self.req,
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                b.len()
            );
        }
        self.req.extend_from_slice(b"\r\n");
        if let Some(b) = body {
            self.req.extend_from_slice(b);
        }
        let req = std::mem::take(&mut self.req);
        let r = self.stream().await?.write_all(&req).await;
        self.req = req;
        r?;
        // The head.
        let head_end = loop {
            if let Some(p) = find(&self.buf, b"\r\n\r\n") {
                break p + 4;
            }
            self.read_more().await?;
        };
        let Head {
            status,
            len,
            chunked,
            close,
        } = Head::parse(&self.buf[..head_end]);
        self.buf.drain(..head_end);
        if discard && !chunked {
            let n = len.unwrap_or(0);
            let mut start = Vec::new();
            // Only a failure's start is read (allocated for): a 200 is counted.
            let keep = if status == 200 { 0 } else { 512 };
            let mut seen = 0usize;
            loop {
                let take = (n - seen).min(self.buf.len());
                if start.len() < keep {
                    let k = take.min(keep - start.len());
                    start.extend_from_slice(&self.buf[..k]);
                }
                self.buf.drain(..take);
                seen += take;
                if seen >= n {
                    break;
                }
                self.read_more().await?;
            }
            if close {
                self.stream = None;
            }
            if self.buf.capacity() > 1 << 20 {
                self.buf.shrink_to(16 * 1024);
            }
            return Ok((status, start, n));
        }
        let body = if chunked {
            let mut body = Vec::new();
            loop {
                let line_end = loop {
                    if let Some(p) = find(&self.buf, b"\r\n") {
                        break p;
                    }
                    self.read_more().await?;
                };
                let size = usize::from_str_radix(
                    String::from_utf8_lossy(&self.buf[..line_end])
                        .split(';')
                        .next()
                        .unwrap_or("")
                        .trim(),
                    16,
                )
                .map_err(|_| io::Error::other("bad chunk size"))?;
                while self.buf.len() < line_end + 2 + size + 2 {
                    self.read_more().await?;
                }
                body.extend_from_slice(&self.buf[line_end + 2..line_end + 2 + size]);
                self.buf.drain(..line_end + 2 + size + 2);
                if size == 0 {
                    break;
                }
            }
            body
        } else {
            let n = len.unwrap_or(0);
            while self.buf.len() < n {
                self.read_more().await?;
            }
            let rest = self.buf.split_off(n);
            std::mem::replace(&mut self.buf, rest)
        };
        if close {
            self.stream = None;
        }
        if self.buf.capacity() > 1 << 20 {
            self.buf.shrink_to(16 * 1024);
        }
        let n = body.len();
        Ok((status, body, n))
    }

    /// Reads what the stream has into `buf`'s spare room (64 KiB at least), with no
    /// buffer of its own to zero and copy from.
    async fn read_more(&mut self) -> io::Result<()> {
        let s = self
            .stream
            .as_mut()
            .ok_or_else(|| io::Error::other("not connected"))?;
        self.buf.reserve(64 * 1024);
        let n = s.read_buf(&mut self.buf).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the daemon closed the connection",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Head;

    #[test]
    fn a_head_is_read_as_bytes() {
        let h = Head::parse(
            b"HTTP/1.1 200 OK\r\ncontent-length: 42\r\nContent-Type: application/json\r\n\r\n",
        );
        assert_eq!(
            (h.status, h.len, h.chunked, h.close),
            (200, Some(42), false, false)
        );
        let h = Head::parse(
            b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: gzip, chunked\r\nConnection:  close \r\n\r\n",
        );
        assert_eq!(
            (h.status, h.len, h.chunked, h.close),
            (503, None, true, true)
        );
        let h = Head::parse(b"garbage\r\n\r\n");
        assert_eq!((h.status, h.len), (0, None));
    }
}
