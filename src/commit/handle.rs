//! [`WriterHandle`]: the bounded queue in front of the writer, and the
//! ways to hand it work and wait for the answer.

use crossbeam_channel::{Sender, TrySendError};

use crate::commit::request::{Control, Incoming, Request, Work};
use crate::error::{Error, Result};

/// The sending end of the writer's queue.
pub(crate) struct WriterHandle {
    tx: Option<Sender<Incoming>>,
}

/// The writer drops a reply only when it dies (it answers every request it
/// takes, also at shutdown): the command may have reached the log.
pub(crate) fn reply_lost() -> Error {
    Error::OutcomeUnknown("the writer thread ended without replying".into())
}

/// The answer to work handed to the writer.
pub(crate) type ReplyRx = tokio::sync::oneshot::Receiver<Result<u64>>;

impl WriterHandle {
    pub(crate) fn new(tx: Sender<Incoming>) -> WriterHandle {
        WriterHandle { tx: Some(tx) }
    }

    fn sender(&self) -> Result<&Sender<Incoming>> {
        self.tx.as_ref().ok_or(Error::ShuttingDown)
    }

    /// Queues `work`, blocking while the queue is full; returns where its
    /// answer comes.
    pub(crate) fn queue(&self, work: Work) -> Result<ReplyRx> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.sender()?
            .send(Incoming::Work(Request::new(work, reply)))
            .map_err(|_| Error::ShuttingDown)?;
        Ok(rx)
    }

    /// Hands `work` to the writer and blocks until it is answered.
    pub(crate) fn send(&self, work: Work) -> Result<u64> {
        self.queue(work)?
            .blocking_recv()
            .map_err(|_| reply_lost())?
    }

    /// Hands `work` to the writer from async code and waits for its answer
    /// without blocking the runtime.
    pub(crate) async fn send_async(&self, work: Work) -> Result<u64> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.put_async(Incoming::Work(Request::new(work, reply)))
            .await?;
        rx.await.map_err(|_| reply_lost())?
    }

    /// Hands a control to the writer and waits for its answer.
    pub(crate) async fn control(&self, control: Control) -> Result<u64> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.put_async(Incoming::Control(control, reply)).await?;
        rx.await.map_err(|_| reply_lost())?
    }

    async fn put_async(&self, item: Incoming) -> Result<()> {
        match self.sender()?.try_send(item) {
            Ok(()) => Ok(()),
            Err(TrySendError::Disconnected(_)) => Err(Error::ShuttingDown),
            Err(TrySendError::Full(item)) => {
                // Back-pressure: wait for room on a blocking-pool thread.
                let tx = self.sender()?.clone();
                // (The item is dropped on failure, not returned.)
                tokio::task::spawn_blocking(move || tx.send(item).map_err(drop))
                    .await
                    .map_err(|_| Error::ShuttingDown)?
                    .map_err(|_| Error::ShuttingDown)
            }
        }
    }

    /// Closes the queue: the writer answers what is queued, then ends.
    pub(crate) fn close(&mut self) {
        self.tx.take();
    }
}
