//! A snapshot's transfer from the leader to a node that lacks the purged
//! part of the log (docs/CLUSTER.md): the leader sends the snapshot's
//! manifest (`SnapshotBegin`), every file of its checkpoint in chunks with
//! their CRC-32C (`SnapshotChunk`), then its meta (`SnapshotEnd`); the
//! receiver lays them out as a backup (`db/` and the manifest), and Raft
//! installs it: every file checked against the manifest, the index digest
//! against the manifest's (`backup::restore`), then the index replaced in
//! place (`Replication::install`).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use treelog::backup::{Manifest, DB_DIR, MANIFEST_FILE};
use treelog::{Error, Result};

use crate::types::{SnapshotMeta, Vote};

/// Where a snapshot being received is laid out, in the data directory.
pub const INCOMING_DIR: &str = ".treelog-snapshot-incoming";
/// Where a received snapshot is restored before its install.
pub const INSTALL_DIR: &str = ".treelog-snapshot-install";
/// Where the last snapshot installed is kept (the node's current one).
pub const CURRENT_DIR: &str = ".treelog-snapshot-current";

/// Lays out a snapshot built here as a received one is (`db/` and the
/// manifest) at `to`.
pub fn lay_out(b: &treelog::backup::ServedBackup, to: &Path) -> std::io::Result<()> {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to.join(DB_DIR))?;
    for f in &b.manifest().files {
        let mut out = std::fs::File::create(to.join(DB_DIR).join(&f.name))?;
        let mut offset = 0;
        while offset < f.size {
            let (data, _) = b
                .read_chunk(&f.name, offset, CHUNK_BYTES)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            if data.is_empty() {
                break;
            }
            std::io::Write::write_all(&mut out, &data)?;
            offset += data.len() as u64;
        }
        out.sync_all()?;
    }
    std::fs::write(to.join(MANIFEST_FILE), b.manifest_bytes())
}

/// Bytes of a file per `SnapshotChunk`.
pub const CHUNK_BYTES: usize = 1 << 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotBegin {
    pub vote: Vote,
    /// The transfer's id (the snapshot's last log id, as text).
    pub id: String,
    /// The manifest file's bytes.
    pub manifest: Vec<u8>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotChunk {
    pub id: String,
    pub file: String,
    pub offset: u64,
    pub data: Vec<u8>,
    pub crc32c: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotEnd {
    pub id: String,
    pub vote: Vote,
    pub meta: SnapshotMeta,
}

/// The snapshot a node is receiving (one at a time: a new one replaces
/// it).
pub struct Receiver {
    data: PathBuf,
    current: Mutex<Option<Incoming>>,
}

struct Incoming {
    id: String,
    /// The sender's vote: the end of the transfer must carry the same.
    vote: Vote,
    dir: PathBuf,
    manifest: Manifest,
}

fn refused(detail: impl Into<String>) -> Error {
    Error::InvalidArgument(format!("snapshot transfer: {}", detail.into()))
}

impl Receiver {
    pub fn new(data: &Path) -> Receiver {
        Receiver {
            data: data.to_owned(),
            current: Mutex::new(None),
        }
    }

    fn dir(&self) -> PathBuf {
        self.data.join(INCOMING_DIR)
    }

    /// Starts receiving a snapshot (any other being received is dropped),
    /// if it comes from the leader of this node's current term or a newer
    /// one (`current`: this node's vote), as AppendEntries would be: an
    /// older leader, or a node that is no leader, cannot even replace the
    /// transfer under way.
    pub fn begin(&self, b: SnapshotBegin, current: &Vote) -> Result<()> {
        check_sender(current, &b.vote)?;
        let dir = self.dir();
        let manifest = Manifest::decode(&b.manifest, &dir.join(MANIFEST_FILE))?;
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        *cur = None;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(DB_DIR))?;
        for f in &manifest.files {
            if f.name.is_empty() || f.name.contains('/') || f.name == "." || f.name == ".." {
                return Err(refused(format!("a file named {:?}", f.name)));
            }
            std::fs::File::create(dir.join(DB_DIR).join(&f.name))?.set_len(f.size)?;
        }
        std::fs::write(dir.join(MANIFEST_FILE), &b.manifest)?;
        *cur = Some(Incoming {
            id: b.id,
            vote: b.vote,
            dir,
            manifest,
        });
        Ok(())
    }

    /// Writes a chunk where it belongs (its CRC checked first).
    pub fn chunk(&self, c: SnapshotChunk) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let inc = cur
            .as_ref()
            .filter(|i| i.id == c.id)
            .ok_or_else(|| refused(format!("no transfer {} under way", c.id)))?;
        let f = inc
            .manifest
            .files
            .iter()
            .find(|f| f.name == c.file)
            .ok_or_else(|| refused(format!("no file {:?} in the manifest", c.file)))?;
        if c.offset.saturating_add(c.data.len() as u64) > f.size {
            return Err(refused(format!(
                "{} bytes at {} pass the end of {} ({} bytes)",
                c.data.len(),
                c.offset,
                f.name,
                f.size
            )));
        }
        if crc32c::crc32c(&c.data) != c.crc32c {
            return Err(Error::corrupt(
                "snapshot chunk",
                format!("{} at {}: its CRC-32C does not match", c.file, c.offset),
            ));
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(inc.dir.join(DB_DIR).join(&f.name))?;
        file.write_all_at(&c.data, c.offset)?;
        Ok(())
    }

    /// The transfer `id` is complete: its directory, for the install
    /// (which checks every file against the manifest).
    pub fn end(&self, id: &str, vote: &Vote, current: &Vote) -> Result<PathBuf> {
        check_sender(current, vote)?;
        let mut cur = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let inc = cur
            .take()
            .filter(|i| i.id == id)
            .ok_or_else(|| refused(format!("no transfer {id} under way")))?;
        if inc.vote != *vote {
            return Err(refused(format!(
                "transfer {id} began under another leader's vote"
            )));
        }
        for f in &inc.manifest.files {
            std::fs::File::open(inc.dir.join(DB_DIR).join(&f.name))?.sync_all()?;
        }
        treelog::backup::sync_dir(&inc.dir.join(DB_DIR))?;
        Ok(inc.dir)
    }
}

/// Whether a snapshot from the sender of `sender` may be taken by a node
/// whose vote is `current`: only from a leader (a committed vote) of the
/// current term or a newer one; within the current term, only from the
/// leader this node knows, if it knows one.
pub fn check_sender(current: &Vote, sender: &Vote) -> Result<()> {
    let (cur, snd) = (&current.leader_id, &sender.leader_id);
    if !sender.committed {
        return Err(refused(format!(
            "node {} is not a leader (its vote in term {} is not committed)",
            snd.node_id, snd.term
        )));
    }
    if snd.term < cur.term {
        return Err(refused(format!(
            "node {} led term {}, and this node is in term {}",
            snd.node_id, snd.term, cur.term
        )));
    }
    if snd.term == cur.term && current.committed && snd.node_id != cur.node_id {
        return Err(refused(format!(
            "node {} is not the leader of term {} (node {} is)",
            snd.node_id, snd.term, cur.node_id
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(term: u64, node: u64) -> Vote {
        Vote::new_committed(term, node)
    }

    #[test]
    fn a_snapshot_comes_only_from_the_current_leader() {
        let current = leader(5, 1);
        check_sender(&current, &leader(5, 1)).unwrap();
        check_sender(&current, &leader(6, 2)).unwrap();
        // A stale leader, another node claiming the same term, a candidate.
        for bad in [leader(4, 1), leader(5, 2), Vote::new(6, 2)] {
            let e = check_sender(&current, &bad).unwrap_err();
            assert_eq!(e.kind(), treelog::ErrorKind::InvalidArgument, "{e}");
        }
        // A node that has only voted (no leader known) takes the term's
        // leader.
        check_sender(&Vote::new(5, 3), &leader(5, 2)).unwrap();
    }

    #[test]
    fn a_stale_begin_does_not_touch_the_transfer_under_way() {
        let dir = tempfile::tempdir().unwrap();
        let r = Receiver::new(dir.path());
        let b = SnapshotBegin {
            vote: leader(3, 2),
            id: "x".into(),
            manifest: vec![],
        };
        let e = r.begin(b, &leader(4, 1)).unwrap_err();
        assert!(e.to_string().contains("led term 3"), "{e}");
        assert!(!r.dir().exists(), "nothing written for a refused sender");
        let e = r.end("x", &leader(3, 2), &leader(4, 1)).unwrap_err();
        assert!(e.to_string().contains("led term 3"), "{e}");
    }
}
