//! The wire protocol (documented in `docs/PROTOCOL.md`).
//!
//! A connection carries frames: a 4-byte big-endian length followed by that
//! many bytes of postcard-encoded message. The client's first frame is a
//! [`Hello`]; the server answers [`ServerMsg::Welcome`] or an error and
//! closes. After that the client sends [`ClientMsg::Request`]s, each with an
//! id of its choosing; the server answers each with one
//! [`ServerMsg::Response`] carrying the same id, in completion order
//! (pipelining), except subscriptions, which answer with a stream of
//! responses ending in `StreamEnd` or an error.

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::bytestr::ByteString;
use crate::caller::Caller;
use crate::command::Command;
use crate::cursor::CursorInfo;
use crate::error::{Error, ErrorKind, Result};
use crate::read::ReadAt;
use crate::stream::{StreamItem, SubscribeOptions};
use crate::types::{ContentSummary, Inode, ListPage, Xattr};

/// Bytes 0..4 of every `Hello`.
pub const MAGIC: [u8; 4] = *b"TLOG";
/// The protocol version this build speaks. 2: event schema 2 (symlinks,
/// extended attributes, quotas, parent times; `Attrs` gained
/// `change_ms`), whose values a version-1 peer cannot decode.
pub const PROTOCOL_VERSION: u16 = 2;
/// What this release's Raft nodes can apply (docs/CLUSTER.md, "Feature
/// levels"): a cluster takes a command only when every member is at the
/// level it needs ([`crate::Command::feature_level`]). 2: the first
/// release that tells its peers its level (an earlier one counts as 1);
/// 3: names as bytes (a command naming a path that is not UTF-8 needs it,
/// [`crate::command::BYTE_NAMES_LEVEL`]).
pub const FEATURE_LEVEL: u32 = 3;
/// Default largest frame either side accepts.
pub const DEFAULT_MAX_FRAME: usize = 1 << 20;
/// The first allocation for a frame's payload; [`read_frame`] grows it as
/// bytes arrive.
pub const FRAME_READ_CHUNK: usize = 64 << 10;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub magic: [u8; 4],
    pub version: u16,
    /// The shared token, when the server requires one.
    pub token: Option<String>,
    /// Free text naming the client (for logs).
    pub client: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientMsg {
    Hello(Hello),
    Request {
        id: u64,
        body: RequestBody,
    },
    /// A request made for `caller` (docs/SECURITY.md, "Permissions"): a
    /// server that enforces permissions checks it as that user, once the
    /// connection's credential may act for users; one that does not
    /// answers it as a `Request`.
    RequestAs {
        id: u64,
        caller: Caller,
        body: RequestBody,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestBody {
    /// A namespace mutation; answered with `Seq`.
    Mutate(Command),
    /// Answered with `Inode`.
    Stat { path: ByteString },
    /// Answered with `Inode`.
    StatId { id: u64 },
    /// Answered with `Page`.
    List {
        path: ByteString,
        start_after: Option<ByteString>,
        limit: u32,
    },
    /// Answered with a stream of `Item`s (until cancelled or an error).
    Subscribe(SubscribeOptions),
    /// Stops the subscription with id `target`; answered
    /// with `Done`, and the target's stream ends with `StreamEnd`.
    Cancel { target: u64 },
    /// Acknowledges a durable cursor position; answered with `Done`.
    Ack { cursor: String, seq: u64 },
    /// Answered with `Cursors`.
    ListCursors,
    /// Answered with `Done`.
    DropCursor { cursor: String },
    /// Waits until the committed sequence reaches `seq` (a read-your-writes
    /// token from another connection) or `timeout_ms` passes; answered with
    /// `Seq` (the committed sequence then).
    WaitFor { seq: u64, timeout_ms: u64 },
    /// Answered with `Seq` (the committed sequence).
    Ping,
    /// Answered with `Info`.
    Info,
    /// Stat at a committed state (`docs/READS.md`); answered with
    /// `InodeAt`.
    StatAt { path: ByteString, at: ReadAt },
    /// Answered with `InodeAt`.
    StatIdAt { id: u64, at: ReadAt },
    /// A listing page at a committed state; answered with `PageAt`.
    ListAt {
        path: ByteString,
        start_after: Option<ByteString>,
        limit: u32,
        at: ReadAt,
    },
    /// Pins the newest committed state for reads at `ReadAt::Exactly`;
    /// answered with `Seq` (the state's sequence).
    PinView,
    /// Releases a pin; answered with `Done` (`NotFound` if it had expired).
    UnpinView { seq: u64 },
    /// Takes a backup on the server to be fetched in chunks, or with
    /// `resume` finds the one of that id again; answered with `Backup`.
    BackupBegin { resume: Option<u64> },
    /// Up to `len` bytes of the file `file` of backup `id` from `offset`
    /// (at most [`MAX_BACKUP_CHUNK`]); answered with `Chunk`.
    BackupChunk {
        id: u64,
        file: String,
        offset: u64,
        len: u32,
    },
    /// Releases backup `id` on the server; answered with `Done`.
    BackupEnd { id: u64 },
    /// Streams the committed log from sequence `from` as its stored bytes,
    /// for a replica (docs/PROTOCOL.md §14): answered with a stream of
    /// `Records`, until cancelled or an error (`Compacted` once `from` is
    /// below the log's start, `Incompatible` for another namespace or a
    /// history that diverged at `from - 1`).
    Replicate(ReplicateFrom),
    /// The node's role and positions; answered with `Status`.
    Status,
    /// `Subscribe` once the node has committed `min_seq` (a read-your-writes
    /// token): a snapshot subscription then starts from a state at least
    /// that new. Waits as a read at `ReadAt::AtLeast` does, then fails
    /// (`Lagging` on a replica, `Busy` on a leader).
    SubscribeAt {
        opts: SubscribeOptions,
        min_seq: u64,
    },
    /// A Raft message from another node of the cluster (docs/CLUSTER.md):
    /// `payload` is the postcard encoding of openraft's request for `rpc`
    /// (the `treelog-raft` crate); answered with `Raft` (its response) or
    /// an error.
    Raft { rpc: RaftRpc, payload: Vec<u8> },
    /// The administration of a Raft cluster; answered with `Cluster` (the
    /// node's view of the cluster once the request is done).
    Cluster(ClusterRequest),
    /// A symbolic link's target; answered with `Target`.
    Readlink { path: ByteString, at: ReadAt },
    /// A path's extended attributes: the one called `name`, or with `None`
    /// all of them; answered with `Xattrs`.
    GetXattrs {
        path: ByteString,
        name: Option<String>,
        at: ReadAt,
    },
    /// The usage under a path (`count`, docs/PROTOCOL.md); answered with
    /// `Summary`.
    Count { path: ByteString, at: ReadAt },
}

/// The Raft messages between nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RaftRpc {
    AppendEntries,
    Vote,
    PreVote,
    /// A snapshot's transfer begins (its meta and manifest).
    SnapshotBegin,
    /// Bytes of one of its files.
    SnapshotChunk,
    /// It is complete: install it.
    SnapshotEnd,
    TransferLeader,
    /// The leader's read index, for a linearizable read elsewhere.
    ReadIndex,
}

/// What an operator asks of a Raft cluster (`treelog cluster ...`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClusterRequest {
    /// The node's view of the cluster.
    Status,
    /// Makes a cluster of this one node (its only voter), with what its
    /// log holds; refused once it is a cluster's node.
    Init,
    /// Adds a non-voting member (a learner: it receives the log, serves
    /// reads and change streams); with `wait`, answers once it has caught
    /// up.
    AddLearner { node: u64, addr: String, wait: bool },
    /// Makes these members voters (the others stay as they are).
    Promote { nodes: Vec<u64> },
    /// Removes these members (voters or learners).
    Remove { nodes: Vec<u64> },
    /// Asks the leader to hand leadership to `node`.
    TransferLeader { node: u64 },
    /// Builds a snapshot now (Raft builds them by itself too).
    Snapshot,
}

/// A member of a Raft cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMember {
    pub node: u64,
    /// Its RPC address.
    pub addr: String,
    pub voter: bool,
    /// On the leader: the last entry it is known to hold, and how many
    /// entries it lacks.
    pub matched: Option<u64>,
    pub lag: Option<u64>,
}

/// A node's view of its Raft cluster (reply to `Cluster`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    pub node: u64,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub state: String,
    pub term: u64,
    pub leader: Option<u64>,
    pub leader_addr: Option<String>,
    pub members: Vec<ClusterMember>,
    pub last_log: Option<u64>,
    pub committed: Option<u64>,
    pub applied: Option<u64>,
    pub snapshot: Option<u64>,
    pub purged: Option<u64>,
}

/// Where a replica continues, and what it has, so that the source can
/// refuse a replica of another namespace or of a diverged history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicateFrom {
    /// The first sequence wanted (the replica's applied sequence + 1).
    pub from: u64,
    /// The replica's namespace id (`meta.namespace_id`, FORMAT §4).
    pub namespace: String,
    /// The CRC-32C field of the replica's record `from - 1` (none when
    /// `from` is 1): the source checks it against its own record there.
    pub prev_crc: Option<u32>,
    /// The most bytes of records per `Records` reply (at least one record
    /// is sent, whatever its size).
    pub max_batch_bytes: u32,
    /// A durable cursor the source keeps at the replica's position (set to
    /// `from - 1` here, then moved by the replica's `Ack`s), so that the
    /// source's retention keeps the records the replica still needs
    /// (within `--max-cursor-lag`, which expires it).
    pub cursor: Option<String>,
}

/// Whether a node takes writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Takes commands.
    Leader,
    /// Follows a source's log and refuses commands (`NotLeader`).
    Replica,
    /// A Raft cluster's node that does not lead: it refuses commands
    /// (`NotLeader`, naming the leader) and applies what the leader's
    /// majority committed.
    Follower,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Leader => "leader",
            Role::Replica => "replica",
            Role::Follower => "follower",
        })
    }
}

/// A node's role and positions (reply to `Status`, `treelog admin
/// status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub role: Role,
    /// On a replica, the address of the node that takes writes: its
    /// source, or its source's leader when the source is a replica too.
    pub leader: Option<String>,
    /// The namespace id shared by a leader and its replicas.
    pub namespace: String,
    /// The highest sequence this node has committed (applied and durable).
    pub applied_seq: u64,
    /// The leader's committed sequence, as this node last heard it (its own
    /// on a leader).
    pub leader_committed_seq: u64,
    /// Records the node is behind its leader (0 on a leader).
    pub lag_records: u64,
    /// How old the newest state this node has is, when the leader has a
    /// newer one: now minus the time of the last record applied (0 when
    /// caught up).
    pub lag_ms: u64,
    /// A replica is connected to its leader and streaming.
    pub connected: bool,
    pub log_start: u64,
    pub log_bytes: u64,
}

/// The most bytes one `BackupChunk` returns.
pub const MAX_BACKUP_CHUNK: u32 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerMsg {
    Welcome {
        version: u16,
        server: String,
        committed_seq: u64,
        max_frame: u32,
    },
    Response {
        id: u64,
        body: ResponseBody,
    },
    /// A connection-level error (bad frame, bad handshake, limits); the
    /// server closes the connection after sending it.
    Fatal {
        kind: ErrorKind,
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResponseBody {
    Seq(u64),
    Inode(Inode),
    Page(ListPage),
    Item(StreamItem),
    Cursors(Vec<CursorInfo>),
    Done,
    /// The end of a subscription's stream (after `Cancel` or shutdown).
    StreamEnd,
    Error {
        kind: ErrorKind,
        message: String,
    },
    /// Watermarks of the server's store (reply to `Info`).
    Info {
        committed_seq: u64,
        log_start: u64,
        log_bytes: u64,
    },
    /// An inode and the sequence of the state it was read at.
    InodeAt {
        inode: Inode,
        seq: u64,
    },
    /// A listing page and the sequence of the state it was read at.
    PageAt {
        page: ListPage,
        seq: u64,
    },
    /// A backup on the server (reply to `BackupBegin`): its id for the
    /// next requests and its manifest file's bytes (docs/FORMAT.md §12.3).
    Backup {
        id: u64,
        manifest: Vec<u8>,
    },
    /// Bytes of a backup's file from `offset`, with their CRC-32C (reply
    /// to `BackupChunk`); fewer than asked only at the file's end.
    Chunk {
        offset: u64,
        data: Vec<u8>,
        crc32c: u32,
    },
    /// Log records `first..first + records.len()`, each its stored bytes
    /// (docs/FORMAT.md §3: the envelope with its CRC), and the source's
    /// committed sequence and clock (ms since the epoch) when it sent them.
    /// An empty batch is a heartbeat.
    Records {
        first: u64,
        records: Vec<Vec<u8>>,
        committed: u64,
        now_ms: u64,
    },
    Status(NodeStatus),
    /// `NotLeader` with the leader's address.
    NotLeader {
        leader: Option<String>,
        message: String,
    },
    /// `Lagging`: what the replica has applied, what was wanted.
    Lagging {
        applied: u64,
        wanted: u64,
        waited_ms: u64,
        leader: Option<String>,
    },
    /// A Raft response (its postcard encoding; see `RequestBody::Raft`).
    Raft(Vec<u8>),
    Cluster(ClusterStatus),
    /// A symbolic link's target (reply to `Readlink`), read at `seq`.
    Target {
        target: ByteString,
        seq: u64,
    },
    /// Extended attributes in name order (reply to `GetXattrs`).
    Xattrs {
        xattrs: Vec<Xattr>,
        seq: u64,
    },
    /// Reply to `Count`.
    Summary {
        summary: ContentSummary,
        seq: u64,
    },
}

/// Error details a client turns back into an [`Error`]; `NotLeader` and
/// `Lagging` keep their fields (see [`response_error`]).
pub fn error_body(e: &Error) -> ResponseBody {
    match e {
        Error::NotLeader { leader } => ResponseBody::NotLeader {
            leader: leader.clone(),
            message: e.to_string(),
        },
        Error::Lagging {
            applied,
            wanted,
            waited_ms,
            leader,
        } => ResponseBody::Lagging {
            applied: *applied,
            wanted: *wanted,
            waited_ms: *waited_ms,
            leader: leader.clone(),
        },
        e => ResponseBody::Error {
            kind: e.kind(),
            message: e.to_string(),
        },
    }
}

/// The error a reply carries, if it is one.
pub fn response_error(body: &ResponseBody) -> Option<Error> {
    match body {
        ResponseBody::Error { kind, message } => Some(remote_error(*kind, message.clone())),
        ResponseBody::NotLeader { leader, .. } => Some(Error::NotLeader {
            leader: leader.clone(),
        }),
        ResponseBody::Lagging {
            applied,
            wanted,
            waited_ms,
            leader,
        } => Some(Error::Lagging {
            applied: *applied,
            wanted: *wanted,
            waited_ms: *waited_ms,
            leader: leader.clone(),
        }),
        _ => None,
    }
}

/// Rebuilds an error from the wire: the kind is exact, the message is the
/// server's text.
pub fn remote_error(kind: ErrorKind, message: String) -> Error {
    Error::Remote { kind, message }
}

pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    encode_into(msg, &mut out)?;
    Ok(out)
}

/// Appends `msg`'s frame (its length prefix and payload) to `out`, where
/// frames made before it may wait: a burst of replies goes out in one
/// write. On an error `out` is left as it was.
pub fn encode_into<T: Serialize>(msg: &T, out: &mut Vec<u8>) -> Result<()> {
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    let encoded = postcard::to_extend(msg, Extending(&mut *out))
        .map(drop)
        .map_err(|e| Error::InvalidArgument(format!("cannot encode message: {e}")));
    let len = encoded.and_then(|()| {
        u32::try_from(out.len() - start - 4)
            .map_err(|_| Error::InvalidArgument("message too large".into()))
    });
    match len {
        Ok(len) => {
            out[start..start + 4].copy_from_slice(&len.to_be_bytes());
            Ok(())
        }
        Err(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

/// A borrowed buffer postcard appends to (`to_extend` takes its writer by
/// value).
struct Extending<'a>(&'a mut Vec<u8>);

impl Extend<u8> for Extending<'_> {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

pub fn decode<'a, T: Deserialize<'a>>(payload: &'a [u8]) -> Result<T> {
    let (v, rest) = postcard::take_from_bytes::<T>(payload)
        .map_err(|e| Error::corrupt("frame", format!("does not decode: {e}")))?;
    if !rest.is_empty() {
        return Err(Error::corrupt(
            "frame",
            format!("{} trailing bytes", rest.len()),
        ));
    }
    Ok(v)
}

/// The error for a frame whose length prefix exceeds `max`.
pub fn frame_too_large(len: usize, max: usize) -> Error {
    Error::InvalidArgument(format!("frame of {len} bytes exceeds the limit of {max}"))
}

/// Reads one frame's payload. `Ok(None)` on a clean end of stream before a
/// frame starts. A length above `max` is refused before anything is
/// allocated; the buffer for a length within `max` grows as the payload
/// arrives, its capacity within twice the bytes received or
/// [`FRAME_READ_CHUNK`], whichever is larger.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max: usize) -> Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = r.read(&mut len[got..]).await?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(Error::corrupt(
                    "frame",
                    "connection closed inside a length prefix",
                ))
            };
        }
        got += n;
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(frame_too_large(len, max));
    }
    // The buffer grows as payload bytes arrive (at least one chunk, then
    // doubling, never past `len`): a length prefix alone, up to `max`, must
    // not commit `max` bytes of memory for a peer that sends nothing more.
    let mut buf = Vec::new();
    let mut filled = 0;
    while filled < len {
        if filled == buf.len() {
            let grow = filled.max(FRAME_READ_CHUNK).min(len - filled);
            buf.reserve_exact(grow);
            buf.resize(filled + grow, 0);
        }
        let n = r.read(&mut buf[filled..]).await?;
        if n == 0 {
            return Err(Error::corrupt(
                "frame",
                format!("connection closed inside a {len}-byte frame"),
            ));
        }
        filled += n;
    }
    Ok(Some(buf))
}

pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8]) -> Result<()> {
    w.write_all(bytes).await?;
    Ok(())
}

/// Writes queued frames to `w` until the queue closes, batching whatever is
/// queued into one flush (few syscalls under load). Each frame is dropped
/// as soon as it has been handed to `w` (the server's frames uncount
/// themselves from their connection's queue when dropped).
pub async fn write_loop<F: AsRef<[u8]>, W: AsyncWrite + Unpin>(
    mut rx: tokio::sync::mpsc::Receiver<F>,
    w: W,
) {
    let mut w = tokio::io::BufWriter::with_capacity(64 << 10, w);
    while let Some(f) = rx.recv().await {
        if w.write_all(f.as_ref()).await.is_err() {
            return;
        }
        drop(f);
        // Frames come in bursts: the replies of one commit round, each sent
        // by its own task. The first one wakes this task at once (tokio
        // runs a woken task next), so without a yield every reply went out
        // in its own `send`. Yielding once lets the other ready tasks queue
        // theirs, and one flush carries the burst.
        let mut yielded = false;
        loop {
            match rx.try_recv() {
                Ok(f) => {
                    if w.write_all(f.as_ref()).await.is_err() {
                        return;
                    }
                }
                Err(_) if !yielded => {
                    yielded = true;
                    tokio::task::yield_now().await;
                }
                Err(_) => break,
            }
        }
        if w.flush().await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll};

    /// Counts the writes that reach the socket (one per flush of the
    /// buffered writer here: the frames are small).
    struct CountingWriter(Arc<AtomicUsize>, Arc<std::sync::Mutex<Vec<u8>>>);

    impl AsyncWrite for CountingWriter {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            self.1.lock().unwrap().extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Serves `data` in reads of at most `step` bytes and records the
    /// largest buffer a read was offered (what the reader had allocated).
    struct ProbeReader {
        data: Vec<u8>,
        pos: usize,
        step: usize,
        largest_offer: usize,
    }

    impl AsyncRead for ProbeReader {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            self.largest_offer = self.largest_offer.max(buf.remaining());
            let n = buf
                .remaining()
                .min(self.step)
                .min(self.data.len() - self.pos);
            let start = self.pos;
            buf.put_slice(&self.data[start..start + n]);
            self.pos += n;
            Poll::Ready(Ok(()))
        }
    }

    fn read_frame_now(r: &mut ProbeReader, max: usize) -> Result<Option<Vec<u8>>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(read_frame(r, max))
    }

    /// A length prefix within the limit followed by a few bytes must not
    /// make the reader allocate (and offer the socket) the whole length.
    #[test]
    fn a_large_length_prefix_alone_does_not_commit_its_buffer() {
        let len: u32 = 200 << 20;
        let mut data = len.to_be_bytes().to_vec();
        data.extend_from_slice(b"only a few bytes");
        let mut r = ProbeReader {
            data,
            pos: 0,
            step: usize::MAX,
            largest_offer: 0,
        };
        let e = read_frame_now(&mut r, 256 << 20).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
        assert!(
            r.largest_offer <= FRAME_READ_CHUNK,
            "a read was offered {} bytes",
            r.largest_offer
        );
    }

    /// Growing the buffer in steps keeps every byte, for any read sizes.
    /// Writes some bytes, then fails: what a failed encoding leaves behind.
    struct FailsHalfway;

    impl Serialize for FailsHalfway {
        fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
            use serde::ser::{Error as _, SerializeTuple};
            let mut t = s.serialize_tuple(2)?;
            t.serialize_element(&u64::MAX)?;
            Err(S::Error::custom("refused"))
        }
    }

    #[test]
    fn frames_encoded_into_one_buffer_are_the_frames_one_by_one() {
        let msgs = [
            ServerMsg::Response {
                id: 1,
                body: ResponseBody::Seq(42),
            },
            ServerMsg::Response {
                id: 2,
                body: ResponseBody::Done,
            },
            ServerMsg::Fatal {
                kind: ErrorKind::Busy,
                message: "x".repeat(300),
            },
        ];
        let mut joined = Vec::new();
        let mut one_by_one = Vec::new();
        for m in &msgs {
            encode_into(m, &mut joined).unwrap();
            one_by_one.extend(encode(m).unwrap());
        }
        assert_eq!(joined, one_by_one);
        let mut r = &joined[..];
        for m in &msgs {
            let len = u32::from_be_bytes(r[..4].try_into().unwrap()) as usize;
            assert_eq!(&decode::<ServerMsg>(&r[4..4 + len]).unwrap(), m);
            r = &r[4 + len..];
        }
        assert!(r.is_empty());
        // A failed encoding leaves the frames before it whole.
        assert!(encode_into(&FailsHalfway, &mut joined).is_err());
        assert_eq!(joined, one_by_one);
    }

    #[test]
    fn frames_read_in_small_and_large_steps_keep_their_bytes() {
        for len in [
            0,
            1,
            FRAME_READ_CHUNK - 1,
            FRAME_READ_CHUNK,
            3 * FRAME_READ_CHUNK + 7,
        ] {
            for step in [1 << 10, 4093, 1 << 20] {
                let payload: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
                let mut data = (len as u32).to_be_bytes().to_vec();
                data.extend_from_slice(&payload);
                data.extend_from_slice(b"next frame");
                let mut r = ProbeReader {
                    data,
                    pos: 0,
                    step,
                    largest_offer: 0,
                };
                let got = read_frame_now(&mut r, 1 << 20).unwrap().unwrap();
                assert!(got == payload, "len {len} step {step}");
                assert_eq!(r.pos, 4 + len, "read past the frame");
                assert!(r.largest_offer <= len.max(4), "offered past the frame");
            }
        }
    }

    /// The frames of docs/PROTOCOL.md §11, byte for byte.
    #[test]
    fn the_documented_frames() {
        use crate::stream::{Filter, StartFrom};
        let hex = |b: Vec<u8>| {
            b.iter()
                .map(|x| format!("{x:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let req = |id, body| encode(&ClientMsg::Request { id, body }).unwrap();
        let resp = |id, body| encode(&ServerMsg::Response { id, body }).unwrap();
        let frames: Vec<(Vec<u8>, &str)> = vec![
            (
                encode(&ClientMsg::Hello(Hello {
                    magic: MAGIC,
                    version: PROTOCOL_VERSION,
                    token: None,
                    client: "x".into(),
                }))
                .unwrap(),
                "00 00 00 09 00 54 4c 4f 47 02 00 01 78",
            ),
            (
                encode(&ServerMsg::Welcome {
                    version: PROTOCOL_VERSION,
                    server: "treelog 0.1.0".into(),
                    committed_seq: 0,
                    max_frame: DEFAULT_MAX_FRAME as u32,
                })
                .unwrap(),
                "00 00 00 14 00 02 0d 74 72 65 65 6c 6f 67 20 30 2e 31 2e 30 00 80 80 40",
            ),
            (
                req(1, RequestBody::Stat { path: "/a".into() }),
                "00 00 00 06 01 01 01 02 2f 61",
            ),
            (req(2, RequestBody::Ping), "00 00 00 03 01 02 0a"),
            (
                resp(2, ResponseBody::Seq(300)),
                "00 00 00 05 01 02 00 ac 02",
            ),
            (
                req(
                    3,
                    RequestBody::Subscribe(SubscribeOptions {
                        from: StartFrom::Snapshot,
                        filter: Filter {
                            prefix: Some("/a".into()),
                            kinds: None,
                        },
                        cursor: None,
                        resync_on_move_in: None,
                    }),
                ),
                "00 00 00 0b 01 03 04 02 01 02 2f 61 00 00 00",
            ),
            (
                resp(3, ResponseBody::Item(StreamItem::Progress { seq: 300 })),
                "00 00 00 06 01 03 03 04 ac 02",
            ),
            (
                req(4, RequestBody::Cancel { target: 3 }),
                "00 00 00 04 01 04 05 03",
            ),
            (resp(4, ResponseBody::Done), "00 00 00 03 01 04 05"),
            (resp(3, ResponseBody::StreamEnd), "00 00 00 03 01 03 06"),
            (
                req(
                    5,
                    RequestBody::Count {
                        path: "/a".into(),
                        at: ReadAt::Latest,
                    },
                ),
                "00 00 00 07 01 05 1b 02 2f 61 00",
            ),
            (
                resp(
                    6,
                    ResponseBody::Error {
                        kind: ErrorKind::QuotaExceeded,
                        message: "q".into(),
                    },
                ),
                "00 00 00 06 01 06 07 16 01 71",
            ),
            (
                encode(&ClientMsg::RequestAs {
                    id: 7,
                    caller: Caller::new("u", vec!["g".into()]),
                    body: RequestBody::Ping,
                })
                .unwrap(),
                "00 00 00 08 02 07 01 75 01 01 67 0a",
            ),
        ];
        for (got, want) in frames {
            assert_eq!(hex(got), want);
        }
    }

    /// Replies of one commit round are sent by many tasks woken at once;
    /// the write loop must send them together, not one `send` each.
    #[test]
    fn a_burst_of_frames_from_ready_tasks_goes_out_in_few_writes() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let writes = Arc::new(AtomicUsize::new(0));
        let bytes = Arc::new(std::sync::Mutex::new(Vec::new()));
        rt.block_on(async {
            let (tx, rx) = tokio::sync::mpsc::channel::<Vec<u8>>(1024);
            let writer = tokio::spawn(write_loop(
                rx,
                CountingWriter(writes.clone(), bytes.clone()),
            ));
            let go = Arc::new(tokio::sync::Notify::new());
            let mut senders = Vec::new();
            for i in 0..64u8 {
                let (tx, go) = (tx.clone(), go.clone());
                let notified = go.notified_owned();
                senders.push(tokio::spawn(async move {
                    notified.await;
                    tx.send(vec![i]).await.unwrap();
                }));
            }
            // Wake them all at once from a task on the worker, as a commit
            // round's completion does: waking from this (non-worker) thread
            // would race the worker, which could run each sender and the
            // writer before the next sender is even queued.
            tokio::spawn(async move { go.notify_waiters() })
                .await
                .unwrap();
            for s in senders {
                s.await.unwrap();
            }
            drop(tx);
            writer.await.unwrap();
        });
        let mut got = bytes.lock().unwrap().clone();
        got.sort_unstable();
        assert_eq!(got, (0..64u8).collect::<Vec<_>>(), "every frame, once");
        let n = writes.load(Ordering::Relaxed);
        assert!(n <= 8, "{n} writes for 64 frames");
    }
}
