//! A connection's outgoing frames, bounded in bytes: replies and stream
//! items are encoded into a queue that one task writes to the socket, and
//! are counted until written, so that a client that does not read makes
//! the server stop reading its requests ([`Out::full`]) instead of
//! queueing without bound.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Notify};
use treelog::{ErrorKind, Result};
use treelog_proto::protocol::{self, ResponseBody, ServerMsg};
use treelog_proto::v1;

use crate::metrics::ServerMetrics;
use crate::stream::ConnWrite;

/// Bytes queued for one connection: counted when a frame is encoded,
/// uncounted when the frame is dropped (written to the socket, or thrown
/// away with the queue).
struct OutCount {
    queued: AtomicUsize,
    bound: usize,
    /// Woken when `queued` falls below `bound`, or the writer stops.
    drained: Notify,
    closed: AtomicBool,
    metrics: Option<Arc<ServerMetrics>>,
    /// The protocol version the client's Hello chose (the current one
    /// until then): how every frame to it is encoded.
    version: AtomicU16,
    /// Buffers handed to the writer (each one or many frames).
    pushes: AtomicU64,
}

impl OutCount {
    fn full(&self) -> bool {
        self.queued.load(Ordering::Acquire) >= self.bound && !self.closed.load(Ordering::Acquire)
    }

    fn add(&self, n: usize) {
        self.queued.fetch_add(n, Ordering::AcqRel);
        if let Some(m) = &self.metrics {
            m.queued_bytes.add(n as i64);
        }
    }

    fn sub(&self, n: usize) {
        let before = self.queued.fetch_sub(n, Ordering::AcqRel);
        if let Some(m) = &self.metrics {
            m.queued_bytes.sub(n as i64);
        }
        if before >= self.bound && before - n < self.bound {
            self.drained.notify_waiters();
        }
    }

    /// The writer stopped: nothing will drain any more; release the
    /// waiters (their frames are then dropped, and uncounted, at once).
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.drained.notify_waiters();
    }

    /// Waits until the queue is below its bound (or the writer stopped).
    async fn room(&self) {
        while self.full() {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            // Registered before the check: a drain in between still wakes it.
            drained.as_mut().enable();
            if !self.full() {
                return;
            }
            drained.await;
        }
    }
}

/// An encoded frame counted in its connection's queue until dropped.
struct Frame {
    bytes: Vec<u8>,
    count: Arc<OutCount>,
}

impl AsRef<[u8]> for Frame {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        self.count.sub(self.bytes.len());
    }
}

/// A connection's queue of outgoing frames (cloned by the requests that
/// reply on it).
#[derive(Clone)]
pub(crate) struct Out {
    tx: mpsc::Sender<Frame>,
    count: Arc<OutCount>,
}

impl Out {
    /// Queues an encoded frame, whatever the queue holds: callers wait for
    /// [`Out::room`] before they make one. False once the connection is
    /// gone.
    async fn push(&self, bytes: Vec<u8>) -> bool {
        self.count.add(bytes.len());
        self.count.pushes.fetch_add(1, Ordering::Relaxed);
        let frame = Frame {
            bytes,
            count: self.count.clone(),
        };
        self.tx.send(frame).await.is_ok()
    }

    /// Waits until the queue is below its bound (or the writer stopped).
    pub(crate) async fn room(&self) {
        self.count.room().await
    }

    /// The protocol version the connection speaks.
    pub(crate) fn version(&self) -> u16 {
        self.count.version.load(Ordering::Acquire)
    }

    /// Makes the connection speak `version` (its Hello's, once accepted).
    pub(crate) fn set_version(&self, version: u16) {
        self.count.version.store(version, Ordering::Release);
    }

    /// Buffers handed to the writer so far.
    #[cfg(test)]
    pub(crate) fn pushes(&self) -> u64 {
        self.count.pushes.load(Ordering::Relaxed)
    }

    /// Whether the queue has reached its bound (and the writer runs).
    pub(crate) fn full(&self) -> bool {
        self.count.full()
    }

    /// The queue of a connection whose replies may take `bound` bytes, and
    /// the task that writes it to `wr` (it ends once every [`Out`] is
    /// dropped and the queue is written).
    pub(crate) fn spawn_writer(
        wr: ConnWrite,
        bound: usize,
        metrics: Option<Arc<ServerMetrics>>,
    ) -> (Out, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel::<Frame>(1024);
        let count = Arc::new(OutCount {
            queued: AtomicUsize::new(0),
            bound,
            drained: Notify::new(),
            closed: AtomicBool::new(false),
            metrics,
            version: AtomicU16::new(protocol::PROTOCOL_VERSION),
            pushes: AtomicU64::new(0),
        });
        // One task owns the socket's write half and batches frames.
        let writer = {
            let count = count.clone();
            tokio::spawn(async move {
                protocol::write_loop(rx, wr).await;
                count.close();
            })
        };
        (Out { tx, count }, writer)
    }
}

/// Replies made by one task and handed to the writer together: a burst
/// (the reads a pipelining client sent in one segment, the writes one
/// commit round acknowledged) costs one queue push and one write, not one
/// of each per reply.
#[derive(Default)]
pub(crate) struct Gathered {
    buf: Vec<u8>,
}

/// Gathered replies past this many bytes go to the writer at once.
pub(crate) const GATHER_BYTES: usize = 64 << 10;

impl Gathered {
    /// Adds the response `body` to request `id`, in the connection's
    /// protocol version.
    pub(crate) fn respond(&mut self, out: &Out, id: u64, body: ResponseBody) {
        let msg = ServerMsg::Response { id, body };
        let encoded = if out.version() == v1::VERSION {
            v1::encode_server(&msg).map(|f| self.buf.extend_from_slice(&f))
        } else {
            protocol::encode_into(&msg, &mut self.buf)
        };
        if let Err(e) = encoded {
            // A reply that cannot be encoded (a bug, not the client's):
            // the client is told, and its request does not hang.
            let body = protocol::error_body(&treelog::Error::corrupt(
                "server",
                format!("the reply to request {id} does not encode: {e}"),
            ));
            let _ = protocol::encode_into(&ServerMsg::Response { id, body }, &mut self.buf);
        }
    }

    /// Bytes gathered and not yet handed to the writer.
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing is gathered.
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Hands what is gathered to the writer; false once the connection is
    /// gone.
    pub(crate) async fn flush(&mut self, out: &Out) -> bool {
        if self.buf.is_empty() {
            return true;
        }
        out.push(std::mem::take(&mut self.buf)).await
    }
}

/// Sends the response `body` to request `id`; false once the connection is gone.
pub(crate) async fn respond(out: &Out, id: u64, body: ResponseBody) -> bool {
    send(out, &ServerMsg::Response { id, body }).await
}

/// Sends `msg` in the connection's protocol version (translated for a
/// protocol-1 client, see `treelog_proto::v1`).
pub(crate) async fn send(out: &Out, msg: &ServerMsg) -> bool {
    let frame = if out.version() == v1::VERSION {
        v1::encode_server(msg)
    } else {
        protocol::encode(msg)
    };
    match frame {
        Ok(f) => out.push(f).await,
        Err(_) => false,
    }
}

/// Tells a connection refused before it is served why (a `Fatal` frame,
/// waiting at most a second for the socket), and closes it.
pub(crate) async fn refuse(mut sock: TcpStream, kind: ErrorKind, msg: &str) -> Result<()> {
    let frame = protocol::encode(&ServerMsg::Fatal {
        kind,
        message: msg.to_owned(),
    })?;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), sock.write_all(&frame)).await;
    let _ = sock.shutdown().await;
    Ok(())
}
