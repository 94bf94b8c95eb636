//! A connection's requests that wait for something before they are
//! answered (a commit, a read index, a sequence to arrive, a backup's
//! checkpoint): polled together on one task, and their replies gathered
//! per wake-up. One commit round that acknowledges many of a connection's
//! writes wakes this task once and sends their replies in one write,
//! where a task per request woke each one and queued each reply alone.

use std::future::Future;
use std::pin::Pin;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::mpsc;
use treelog_proto::protocol::ResponseBody;

use crate::out::{Gathered, Out, GATHER_BYTES};

/// A request being answered: its id and reply, once made.
pub(crate) type Answer = Pin<Box<dyn Future<Output = (u64, ResponseBody)> + Send>>;

/// Where a connection's reader hands the requests it does not answer at
/// once. Unbounded as a channel, bounded by what it carries: each answer
/// holds a place among the connection's requests in flight
/// (`ServerConfig::max_in_flight`) from before it is sent until it is
/// answered.
pub(crate) struct Answers {
    tx: mpsc::UnboundedSender<Answer>,
    task: tokio::task::JoinHandle<()>,
}

impl Answers {
    /// The answering task of the connection replying on `out`.
    pub(crate) fn spawn(out: Out) -> Answers {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(out, rx));
        Answers { tx, task }
    }

    /// Answers `answer` once it is ready; false once the connection's
    /// replies cannot be sent any more.
    pub(crate) fn add(&self, answer: Answer) -> bool {
        self.tx.send(answer).is_ok()
    }

    /// Waits until every request handed over is answered (their replies
    /// queued for the writer).
    pub(crate) async fn finish(self) {
        drop(self.tx);
        let _ = self.task.await;
    }
}

async fn run(out: Out, mut rx: mpsc::UnboundedReceiver<Answer>) {
    let mut pending = FuturesUnordered::new();
    let mut gathered = Gathered::default();
    let mut open = true;
    loop {
        tokio::select! {
            // Replies first: a client that keeps sending cannot hold back
            // the answers to what it sent (and it sends no more than its
            // places in flight).
            biased;
            Some((id, body)) = pending.next(), if !pending.is_empty() => {
                gathered.respond(&out, id, body);
                // Every other reply ready by now goes with it.
                while gathered.len() < GATHER_BYTES {
                    match pending.next().now_or_never() {
                        Some(Some((id, body))) => gathered.respond(&out, id, body),
                        _ => break,
                    }
                }
                if !gathered.flush(&out).await {
                    // The connection is gone: what is pending still runs
                    // to its end (a write is not undone by it), unsent.
                    drop(rx);
                    while pending.next().await.is_some() {}
                    return;
                }
            },
            next = rx.recv(), if open => match next {
                Some(a) => {
                    pending.push(a);
                    while let Ok(a) = rx.try_recv() {
                        pending.push(a);
                    }
                }
                None => open = false,
            },
            else => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};
    use treelog_proto::protocol::{self, ServerMsg};

    use crate::stream::ConnWrite;

    /// Replies that become ready together leave in one queue push, and
    /// every one of them arrives.
    #[tokio::test(flavor = "current_thread")]
    async fn replies_ready_together_go_in_one_push() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        let (_rd, wr) = server.into_split();
        let (out, writer) = Out::spawn_writer(ConnWrite::Plain(wr), 1 << 20, None);
        let answers = Answers::spawn(out.clone());
        let go = Arc::new(tokio::sync::Notify::new());
        for id in 0..64u64 {
            // Waiting from now on, polled or not.
            let mut ready = Box::pin(go.clone().notified_owned());
            ready.as_mut().enable();
            assert!(answers.add(Box::pin(async move {
                ready.await;
                (id, ResponseBody::Seq(id * 10))
            })));
        }
        let before = out.pushes();
        go.notify_waiters();
        answers.finish().await;
        assert_eq!(
            out.pushes() - before,
            1,
            "64 replies ready at once, one push"
        );
        drop(out);
        writer.await.unwrap();
        let mut bytes = Vec::new();
        client.read_to_end(&mut bytes).await.unwrap();
        let mut seen = Vec::new();
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            match protocol::decode::<ServerMsg>(&rest[4..4 + len]).unwrap() {
                ServerMsg::Response {
                    id,
                    body: ResponseBody::Seq(s),
                } => {
                    assert_eq!(s, id * 10);
                    seen.push(id);
                }
                other => panic!("unexpected {other:?}"),
            }
            rest = &rest[4 + len..];
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..64).collect::<Vec<_>>());
    }
}
