//! Raft's state machine: the store's index. Committed entries are applied
//! by the store's writer with the function replay uses
//! (`Replication::apply`); snapshots are the store's checkpoints
//! (`Treelog::serve_backup`), and installing one replaces the index in
//! place (`Replication::install`, crash-safe).

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::StreamExt;
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use treelog::backup::ServedBackup;

use crate::metrics::RaftMetrics;
/// A snapshot of treelog's state machine.
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, SnapshotData>;

use crate::types::{
    encode_entry, from_meta_id, io_err, log_id, stored_membership, LogId, SnapshotMeta, StoreRef,
    StoredMembership, TypeConfig,
};

/// A snapshot's data: one this node built (a checkpoint it serves in
/// chunks), or a directory laid out as a backup (`db/` and the manifest):
/// one received from the leader, kept once installed.
#[derive(Clone)]
pub enum SnapshotData {
    Built(Arc<ServedBackup>),
    Dir(PathBuf),
}

impl SnapshotData {
    /// The manifest file's bytes.
    pub fn manifest_bytes(&self) -> io::Result<Vec<u8>> {
        match self {
            SnapshotData::Built(b) => Ok(b.manifest_bytes().to_vec()),
            SnapshotData::Dir(d) => std::fs::read(d.join(treelog::backup::MANIFEST_FILE)),
        }
    }

    /// Up to `len` bytes of file `name` from `offset`, and their CRC-32C.
    pub fn read_chunk(&self, name: &str, offset: u64, len: usize) -> io::Result<(Vec<u8>, u32)> {
        match self {
            SnapshotData::Built(b) => b.read_chunk(name, offset, len).map_err(io_err),
            SnapshotData::Dir(d) => {
                use std::os::unix::fs::FileExt;
                if name.contains('/') {
                    return Err(io::Error::other(format!("a file named {name:?}")));
                }
                let f = std::fs::File::open(d.join(treelog::backup::DB_DIR).join(name))?;
                let size = f.metadata()?.len();
                let len = len.min(size.saturating_sub(offset) as usize);
                let mut buf = vec![0u8; len];
                f.read_exact_at(&mut buf, offset)?;
                let crc = crc32c::crc32c(&buf);
                Ok((buf, crc))
            }
        }
    }
}

/// The snapshots of one node: the current one (the last built or
/// installed), which Raft sends to a node that lacks the purged part of
/// the log.
#[derive(Default)]
pub struct Snapshots {
    current: Mutex<Option<(SnapshotMeta, SnapshotData)>>,
}

impl Snapshots {
    fn current(&self) -> Option<(SnapshotMeta, SnapshotData)> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set(&self, meta: SnapshotMeta, data: SnapshotData) {
        let old = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace((meta, data.clone()));
        // A kept directory goes once another snapshot replaces it.
        if let Some((_, SnapshotData::Dir(d))) = old {
            if !matches!(&data, SnapshotData::Dir(n) if *n == d) {
                let _ = std::fs::remove_dir_all(d);
            }
        }
    }
}

/// A node's openraft instance.
pub type Raft = openraft::Raft<TypeConfig, StateMachine>;

pub struct StateMachine {
    t: StoreRef,
    snapshots: Arc<Snapshots>,
    metrics: Option<Arc<RaftMetrics>>,
}

impl StateMachine {
    pub fn new(
        t: StoreRef,
        snapshots: Arc<Snapshots>,
        metrics: Option<Arc<RaftMetrics>>,
    ) -> StateMachine {
        StateMachine {
            t,
            snapshots,
            metrics,
        }
    }
}

/// The meta of a snapshot, from its manifest.
pub fn snapshot_meta(b: &ServedBackup) -> io::Result<SnapshotMeta> {
    let m = b.manifest();
    let r = m.raft.as_ref().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "the checkpoint is not a Raft node's (its manifest has no Raft meta)",
        )
    })?;
    let id = |a: &[u64; 3]| treelog::format::meta::RaftLogId {
        term: a[0],
        node: a[1],
        index: a[2],
    };
    let membership = match &r.membership {
        Some((mid, hexed)) => Some((
            id(mid),
            hex::decode(hexed).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
        )),
        None => None,
    };
    Ok(SnapshotMeta {
        last_log_id: r.applied.map(|a| log_id(a[0], a[1], a[2])),
        last_membership: stored_membership(membership)?,
    })
}

pub struct SnapshotBuilder {
    t: StoreRef,
    snapshots: Arc<Snapshots>,
    metrics: Option<Arc<RaftMetrics>>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        let started = Instant::now();
        // Held, then the store taken: a node that stopped meanwhile has
        // released it, and nothing starts writing.
        let busy = self.t.hold().await;
        let t = self.t.get()?;
        let served = tokio::task::spawn_blocking(move || {
            let _busy = busy;
            t.serve_backup()
        })
        .await
        .map_err(io::Error::other)?
        .map_err(io_err)?;
        let served = Arc::new(served);
        let meta = snapshot_meta(&served)?;
        tracing::info!(
            seq = served.manifest().seq,
            files = served.manifest().files.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "built a snapshot"
        );
        if let Some(m) = &self.metrics {
            m.snapshot_built(started.elapsed());
        }
        self.snapshots
            .set(meta.clone(), SnapshotData::Built(served.clone()));
        Ok(Snapshot {
            meta,
            snapshot: SnapshotData::Built(served),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, StoredMembership)> {
        let t = self.t.get()?;
        let st = t.replication().applied().map_err(io_err)?;
        let applied = st.applied.map(|a| from_meta_id(&a));
        Ok((applied, stored_membership(st.membership)?))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> io::Result<()>
    where
        Strm: futures_util::Stream<Item = io::Result<EntryResponder<TypeConfig>>>
            + Unpin
            + openraft::OptionalSend,
    {
        let mut values = Vec::new();
        let mut responders = Vec::new();
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            values.push(encode_entry(&entry)?);
            if let Some(r) = responder {
                responders.push((entry.log_id.index, r));
            }
        }
        if values.is_empty() {
            return Ok(());
        }
        let n = values.len() as u64;
        let t = self.t.get()?;
        t.replication().apply(values).await.map_err(io_err)?;
        if let Some(m) = &self.metrics {
            m.applied(n);
        }
        for (seq, r) in responders {
            r.send(seq);
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            t: self.t.clone(),
            snapshots: self.snapshots.clone(),
            metrics: self.metrics.clone(),
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        data: SnapshotData,
    ) -> io::Result<()> {
        let started = Instant::now();
        let t = self.t.get()?;
        let data_dir = t.store().path().to_owned();
        let dir = match data {
            SnapshotData::Dir(d) => d,
            // Another node's, in this process (the storage tests): laid
            // out as received first.
            SnapshotData::Built(b) => {
                let to = data_dir.join(crate::snapshot::INCOMING_DIR);
                let busy = self.t.hold().await;
                self.t.get()?;
                tokio::task::spawn_blocking(move || {
                    let _busy = busy;
                    crate::snapshot::lay_out(&b, &to).map(|()| to)
                })
                .await
                .map_err(io::Error::other)??
            }
        };
        let want = meta
            .last_log_id
            .as_ref()
            .map(|l| l.index)
            .ok_or_else(|| io::Error::other("a snapshot without a last log id"))?;
        let install_dir = data_dir.join(crate::snapshot::INSTALL_DIR);
        let received = dir.clone();
        // Every file checked against the manifest and the index digest
        // against the manifest's, into a database of its own.
        let busy = self.t.hold().await;
        self.t.get()?;
        let restored = tokio::task::spawn_blocking(move || {
            let _busy = busy;
            let _ = std::fs::remove_dir_all(&install_dir);
            treelog::backup::restore(&received, &install_dir, &mut |_| {}).map(|r| (r, install_dir))
        })
        .await
        .map_err(io::Error::other)?
        .map_err(io_err)?;
        let (report, install_dir) = restored;
        if report.seq != want {
            return Err(io::Error::other(format!(
                "the snapshot's database is at sequence {}, its meta says {want}",
                report.seq
            )));
        }
        let seq = t.replication().install(install_dir).await.map_err(io_err)?;
        // Kept as this node's current snapshot (Raft may send it on).
        let kept = data_dir.join(crate::snapshot::CURRENT_DIR);
        if kept != dir {
            let _ = std::fs::remove_dir_all(&kept);
            std::fs::rename(&dir, &kept)?;
        }
        self.snapshots.set(meta.clone(), SnapshotData::Dir(kept));
        tracing::info!(
            seq,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "installed a snapshot from the leader"
        );
        if let Some(m) = &self.metrics {
            m.snapshot_installed(started.elapsed());
        }
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        Ok(self
            .snapshots
            .current()
            .map(|(meta, snapshot)| Snapshot { meta, snapshot }))
    }
}
