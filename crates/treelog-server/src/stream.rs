//! A connection's byte stream, plaintext or TLS, split into the halves its
//! reader and its writer own. An enum rather than a boxed trait object:
//! the plaintext path costs one branch per read or write, and no
//! allocation or lock.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use treelog_tls::ServerStream;

type Tls = ServerStream<TcpStream>;

/// An accepted connection, after its TLS handshake when it has one.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<Tls>),
}

impl Stream {
    pub(crate) fn into_split(self) -> (ConnRead, ConnWrite) {
        match self {
            Stream::Plain(s) => {
                let (r, w) = s.into_split();
                (ConnRead::Plain(r), ConnWrite::Plain(w))
            }
            Stream::Tls(s) => {
                // TLS state is shared by both directions: tokio's split
                // locks it per call.
                let (r, w) = tokio::io::split(*s);
                (ConnRead::Tls(r), ConnWrite::Tls(w))
            }
        }
    }
}

pub(crate) enum ConnRead {
    Plain(OwnedReadHalf),
    Tls(tokio::io::ReadHalf<Tls>),
}

pub(crate) enum ConnWrite {
    Plain(OwnedWriteHalf),
    Tls(tokio::io::WriteHalf<Tls>),
}

impl AsyncRead for ConnRead {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnRead::Plain(r) => Pin::new(r).poll_read(cx, buf),
            ConnRead::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ConnWrite {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ConnWrite::Plain(w) => Pin::new(w).poll_write(cx, buf),
            ConnWrite::Tls(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ConnWrite::Plain(w) => Pin::new(w).poll_write_vectored(cx, bufs),
            ConnWrite::Tls(w) => Pin::new(w).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ConnWrite::Plain(w) => w.is_write_vectored(),
            ConnWrite::Tls(w) => w.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnWrite::Plain(w) => Pin::new(w).poll_flush(cx),
            ConnWrite::Tls(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnWrite::Plain(w) => Pin::new(w).poll_shutdown(cx),
            ConnWrite::Tls(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}
