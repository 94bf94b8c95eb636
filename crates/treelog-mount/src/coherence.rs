//! Coherence through the change stream: the kernel may cache entries and
//! attributes for long, because every committed record invalidates
//! exactly what it changed (`notify_inval_entry` for names created,
//! removed or moved, `notify_inval_inode` for attributes), within
//! milliseconds of its commit.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

use fuser::{INodeNo, Notifier};
use tokio::sync::mpsc;
use treelog_client::{Backoff, RemoteSubscription};
use treelog_proto::event::Event;
use treelog_proto::stream::{StartFrom, StreamItem, SubscribeOptions};
use treelog_proto::ByteString;

use crate::fs::Shared;

/// One thing the kernel must forget.
enum Inval {
    Entry(u64, ByteString),
    Inode(u64),
}

/// Batches (one per record) waiting for the notifying thread. Bounded:
/// when the kernel is slow to take them, the stream is read more slowly
/// and the server holds the rest (its log).
const QUEUE: usize = 1024;

/// Subscribes from the server's current position (before mounting, so
/// that nothing committed after the mount answers its first request is
/// missed).
pub(crate) async fn subscribe(s: &Shared) -> treelog_proto::Result<RemoteSubscription> {
    s.client
        .subscribe(SubscribeOptions {
            from: StartFrom::Now,
            ..Default::default()
        })
        .await
}

/// Follows the stream until the runtime stops, resubscribing (and
/// invalidating everything) when it cannot be resumed.
pub(crate) fn start(
    rt: &tokio::runtime::Handle,
    s: Arc<Shared>,
    sub: RemoteSubscription,
    notifier: Notifier,
) {
    let (tx, mut rx) = mpsc::channel::<Vec<Inval>>(QUEUE);
    // Notifications are writes to /dev/fuse that wait for the kernel's
    // locks (a directory's, held while a request on it is answered): a
    // thread of their own, never a runtime worker.
    let spawned = std::thread::Builder::new()
        .name("treelog-inval".into())
        .spawn(move || {
            while let Some(batch) = rx.blocking_recv() {
                for i in batch {
                    // ENOENT: the kernel had already dropped it.
                    let _ = match &i {
                        Inval::Entry(parent, name) => {
                            notifier.inval_entry(INodeNo(*parent), OsStr::from_bytes(name))
                        }
                        Inval::Inode(ino) => notifier.inval_inode(INodeNo(*ino), 0, 0),
                    };
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "no thread for invalidations: the mount's caches follow their TTLs only");
        return;
    }
    rt.spawn(follow(s, sub, tx));
}

async fn follow(s: Arc<Shared>, mut sub: RemoteSubscription, tx: mpsc::Sender<Vec<Inval>>) {
    loop {
        while let Some(item) = sub.next().await {
            let batch = match item {
                Ok(StreamItem::Record {
                    seq,
                    time_ms,
                    events,
                }) => {
                    let mine = s.own.delivered(seq);
                    let batch = record(&s, events.iter().map(|e| &*e.event), mine);
                    tracing::trace!(
                        seq,
                        lag_ms = treelog_proto::now_ms().saturating_sub(time_ms),
                        "record"
                    );
                    batch
                }
                Ok(StreamItem::Progress { .. }) => continue,
                Ok(other) => {
                    tracing::warn!(
                        ?other,
                        "unexpected change-stream item: invalidating every cached entry"
                    );
                    everything(&s)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the change stream ended");
                    break;
                }
            };
            if !batch.is_empty() && tx.send(batch).await.is_err() {
                return;
            }
        }
        // The stream cannot be resumed where it stopped (the server lost
        // that part of its log, or was gone too long): start again now and
        // forget everything the kernel holds, since records were missed.
        let mut backoff = Backoff::new();
        sub = loop {
            match subscribe(&s).await {
                Ok(sub) => break sub,
                Err(e) => {
                    tracing::warn!(error = %e, "resubscribing to the change stream");
                    tokio::time::sleep(backoff.next_pause().max(Duration::from_millis(100))).await;
                }
            }
        };
        s.own.clear();
        let batch = everything(&s);
        tracing::warn!(
            inodes = s.inodes.lock().unwrap().len(),
            "change stream resubscribed after a gap: invalidating every cached entry and attribute"
        );
        if tx.send(batch).await.is_err() {
            return;
        }
    }
}

/// What one record invalidates, with the inode table brought up to date.
/// A record of this mount's own changes the table only.
fn record<'a>(s: &Shared, events: impl Iterator<Item = &'a Event>, mine: bool) -> Vec<Inval> {
    let mut t = s.inodes.lock().unwrap();
    let mut out = Vec::new();
    let entry =
        |out: &mut Vec<Inval>, t: &crate::inodes::Inodes, parent: u64, name: &ByteString| {
            if t.contains(parent) {
                out.push(Inval::Entry(parent, name.clone()));
                out.push(Inval::Inode(parent));
            }
        };
    for ev in events {
        match ev {
            Event::Create { parent, name, .. } | Event::Symlink { parent, name, .. } => {
                entry(&mut out, &t, *parent, name);
            }
            Event::Delete {
                id, parent, name, ..
            } => {
                t.removed(*id);
                entry(&mut out, &t, *parent, name);
                if t.contains(*id) {
                    out.push(Inval::Inode(*id));
                }
            }
            Event::Rename {
                id,
                old_parent,
                old_name,
                new_parent,
                new_name,
                ..
            } => {
                t.moved(*id, *new_parent, new_name);
                entry(&mut out, &t, *old_parent, old_name);
                entry(&mut out, &t, *new_parent, new_name);
                if t.contains(*id) {
                    out.push(Inval::Inode(*id));
                }
            }
            Event::Complete(u) | Event::SetSize(u) | Event::SetAttr(u) => {
                if t.contains(u.id) {
                    out.push(Inval::Inode(u.id));
                }
            }
            Event::SetXattr { id, .. } | Event::RemoveXattr { id, .. } => {
                if t.contains(*id) {
                    out.push(Inval::Inode(*id));
                }
            }
            Event::SetQuota { .. } | Event::ClearQuota { .. } => {}
        }
    }
    if mine {
        out.clear();
    }
    out
}

fn everything(s: &Shared) -> Vec<Inval> {
    let (entries, inodes) = s.inodes.lock().unwrap().everything();
    entries
        .into_iter()
        .map(|(p, n)| Inval::Entry(p, n))
        .chain(inodes.into_iter().map(Inval::Inode))
        .collect()
}
