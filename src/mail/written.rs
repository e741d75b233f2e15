//! Whether the end of a message has left us: the one fact that decides
//! what a failed send means (RFC 5321: the relay has the message once it
//! read the final dot, and only its reply can say it did not take it).
//!
//! [`Watched`] is the connection's TCP stream with a [`Written`] beside
//! it. The transaction [arms](Written::arm) it just before it writes the
//! message and its final dot; the first flush that completes after that
//! (lettre flushes after every write, and a TLS layer above flushes its
//! records through this stream before it flushes it) means every byte of
//! the message, dot included, was handed to the kernel:
//! [`Written::written`]. A failure before that is a message the relay
//! never had (it goes back unattempted); any failure after it (a reset, an
//! EOF, a timeout, a read error) leaves the delivery unknown. A connection
//! without a watch (implicit TLS, where lettre opens the socket itself)
//! counts every failure once the message began as after the dot: unknown,
//! never sent twice.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

const IDLE: u8 = 0;
const ARMED: u8 = 1;
const WRITTEN: u8 = 2;

/// Called once the message has left us (see [`Written::arm`]).
pub type OnWritten = Box<dyn FnOnce() + Send>;

/// What is known of the message being written on one connection.
#[derive(Default)]
pub struct Written {
    state: AtomicU8,
    /// Called when the armed write is flushed.
    on_written: Mutex<Option<OnWritten>>,
}

impl std::fmt::Debug for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Written").field(&self.written()).finish()
    }
}

impl Written {
    /// The message's last write begins: the next completed flush ends it,
    /// and then calls `on_written`.
    pub fn arm(&self, on_written: Option<OnWritten>) {
        *self.callback() = on_written;
        self.state.store(ARMED, Ordering::SeqCst);
    }

    /// Every byte of the message, final dot included, has left us.
    pub fn written(&self) -> bool {
        self.state.load(Ordering::SeqCst) == WRITTEN
    }

    /// The transaction is over: a callback not called by now never will
    /// be (dropped here, not kept with a connection that goes back to the
    /// pool), and the next transaction starts unarmed.
    pub fn reset(&self) {
        self.state.store(IDLE, Ordering::SeqCst);
        drop(self.callback().take());
    }

    fn callback(&self) -> std::sync::MutexGuard<'_, Option<OnWritten>> {
        self.on_written.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn flushed(&self) {
        if self
            .state
            .compare_exchange(ARMED, WRITTEN, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
            && let Some(call) = self.callback().take()
        {
            call();
        }
    }
}

/// A TCP stream that tells its [`Written`] when an armed write was flushed.
#[derive(Debug)]
pub struct Watched {
    inner: TcpStream,
    written: Arc<Written>,
}

impl Watched {
    pub fn new(inner: TcpStream, written: Arc<Written>) -> Self {
        Self { inner, written }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let flushed = Pin::new(&mut self.inner).poll_flush(cx);
        if let Poll::Ready(Ok(())) = flushed {
            self.written.flushed();
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl lettre::transport::smtp::client::AsyncTokioStream for Watched {
    fn peer_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.inner.peer_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn only_a_flush_after_arming_counts_as_written() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let tcp = TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let written = Arc::new(Written::default());
        let mut stream = Watched::new(tcp, Arc::clone(&written));
        stream
            .write_all(b"MAIL FROM:<a@b>\r\n")
            .await
            .unwrap_or_default();
        stream.flush().await.unwrap_or_default();
        assert!(!written.written(), "a flush before arming");
        let called = Arc::new(AtomicU8::new(0));
        let count = Arc::clone(&called);
        written.arm(Some(Box::new(move || {
            count.fetch_add(1, Ordering::SeqCst);
        })));
        assert!(!written.written(), "armed, not yet flushed");
        stream.write_all(b"body\r\n.\r\n").await.unwrap_or_default();
        stream.flush().await.unwrap_or_default();
        stream.flush().await.unwrap_or_default();
        assert!(written.written());
        assert_eq!(called.load(Ordering::SeqCst), 1, "called once");
        written.reset();
        assert!(!written.written(), "a new transaction");
    }
}
