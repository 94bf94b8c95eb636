//! A backup fetched from a server (`treelog --server ADDR admin backup
//! DEST`, and a replica's bootstrap): the server takes the backup
//! (a caught-up checkpoint, docs/FORMAT.md §12) and this fetches it in
//! chunks, each with its CRC-32C, into `.<DEST name>.fetching` beside
//! DEST. That directory keeps what was fetched and how far (synced): a run
//! that was interrupted (killed, the connection lost) is resumed by the
//! next run with the same DEST, as long as the server still holds the
//! backup (docs/PROTOCOL.md §13). Once every file is fetched and matches
//! the manifest, the manifest is put in place and the directory renamed
//! to DEST.

use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use treelog::backup::{self, Manifest};
use treelog::error::{Error, Result};
use treelog_client::Client;
use treelog_proto::protocol::{RequestBody, ResponseBody};

/// The fetched manifest, kept until the backup is complete.
const PENDING_MANIFEST: &str = "manifest.pending";
/// How far each file was fetched (JSON, replaced atomically).
const STATE_FILE: &str = "fetch-state.json";
/// A file's progress is synced and recorded at least every this many bytes.
const RECORD_EVERY: u64 = 16 << 20;
/// Tries per chunk whose bytes fail their checksum.
const CHUNK_TRIES: u32 = 3;

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct State {
    backup_id: u64,
    /// Per file: bytes fetched (synced) and their CRC-32C so far.
    files: BTreeMap<String, (u64, u32)>,
}

/// What [`fetch`] did.
#[derive(Debug, serde::Serialize)]
pub struct Fetched {
    pub dest: PathBuf,
    pub backup_id: u64,
    pub seq: u64,
    pub inodes: u64,
    pub index_digest: String,
    pub files: usize,
    pub bytes: u64,
    /// Bytes an earlier, interrupted run had fetched already.
    pub resumed_bytes: u64,
    /// Chunks fetched again after failing their checksum.
    pub retried_chunks: u64,
    pub elapsed_ms: u64,
}

/// How long the source may take to answer `BackupBegin`: it takes a
/// checkpoint and digests the whole index first (~20 s per 10^7 inodes on a
/// 2-core host). The client's default deadline (30 s) is shorter than a
/// 10^8-inode source's digest, and each retry would start another backup.
const BACKUP_BEGIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(3600);

async fn call(client: &Client, body: RequestBody) -> Result<ResponseBody> {
    match body {
        RequestBody::BackupBegin { .. } => {
            client.with_deadline(BACKUP_BEGIN_DEADLINE).call(body).await
        }
        body => client.call(body).await,
    }
}

fn unexpected(what: &str, got: &ResponseBody) -> Error {
    Error::Protocol(format!("unexpected reply to {what}: {got:?}"))
}

/// The staging directory of a fetch into `dest`.
fn staging_of(dest: &Path) -> Result<PathBuf> {
    let name = dest
        .file_name()
        .ok_or_else(|| Error::InvalidArgument(format!("{} names no directory", dest.display())))?;
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    Ok(parent.join(format!(".{}.fetching", name.to_string_lossy())))
}

fn io_at<T>(path: &Path, r: std::io::Result<T>) -> Result<T> {
    r.map_err(|e| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", path.display()),
        ))
    })
}

fn save_state(dir: &Path, st: &State) -> Result<()> {
    let tmp = dir.join(format!("{STATE_FILE}.tmp"));
    let bytes = serde_json::to_vec(st).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    let _ = std::fs::remove_file(&tmp);
    backup::write_new_synced(&tmp, &bytes)?;
    io_at(&tmp, std::fs::rename(&tmp, dir.join(STATE_FILE)))?;
    backup::sync_dir(dir)
}

fn load_state(dir: &Path) -> Option<(State, Vec<u8>)> {
    let st = serde_json::from_slice(&std::fs::read(dir.join(STATE_FILE)).ok()?).ok()?;
    let manifest = std::fs::read(dir.join(PENDING_MANIFEST)).ok()?;
    Some((st, manifest))
}

/// Fetches a backup from the server `client` is connected to into `dest`
/// (which must not exist, or be empty), resuming an interrupted fetch into
/// the same `dest`; chunks of at most `chunk` bytes.
pub async fn fetch(
    client: &Client,
    dest: &Path,
    chunk: u32,
    mut note: impl FnMut(&str),
) -> Result<Fetched> {
    let started = Instant::now();
    backup::check_new_dir(dest, "backup destination")?;
    let dir = staging_of(dest)?;
    let mut resumed = None;
    if let Some((st, pending)) = load_state(&dir) {
        match call(
            client,
            RequestBody::BackupBegin {
                resume: Some(st.backup_id),
            },
        )
        .await
        {
            Ok(ResponseBody::Backup { id, manifest })
                if id == st.backup_id && manifest == pending =>
            {
                resumed = Some((st, manifest));
            }
            Ok(other) => return Err(unexpected("BackupBegin", &other)),
            Err(e) => note(&format!(
                "the interrupted fetch in {} cannot be resumed ({e}): starting over",
                dir.display()
            )),
        }
    }
    let (mut st, manifest_bytes) = match resumed {
        Some(r) => r,
        None => {
            if dir.exists() {
                io_at(&dir, std::fs::remove_dir_all(&dir))?;
            }
            let (id, manifest) =
                match call(client, RequestBody::BackupBegin { resume: None }).await? {
                    ResponseBody::Backup { id, manifest } => (id, manifest),
                    other => return Err(unexpected("BackupBegin", &other)),
                };
            io_at(&dir, std::fs::create_dir_all(dir.join(backup::DB_DIR)))?;
            backup::write_new_synced(&dir.join(PENDING_MANIFEST), &manifest)?;
            let st = State {
                backup_id: id,
                files: BTreeMap::new(),
            };
            save_state(&dir, &st)?;
            (st, manifest)
        }
    };
    let manifest = Manifest::decode(&manifest_bytes, &dir.join(PENDING_MANIFEST))?;
    let resumed_bytes: u64 = st.files.values().map(|(n, _)| n).sum();
    if resumed_bytes > 0 {
        let total: u64 = manifest.files.iter().map(|f| f.size).sum();
        note(&format!(
            "resuming backup {} (sequence {}): {resumed_bytes} of {total} bytes were fetched already",
            st.backup_id, manifest.seq
        ));
    }
    let mut retried = 0u64;
    for f in &manifest.files {
        let path = dir.join(backup::DB_DIR).join(&f.name);
        let (mut at, mut crc) = st.files.get(&f.name).copied().unwrap_or((0, 0));
        if at > f.size {
            (at, crc) = (0, 0);
        }
        let mut file = io_at(
            &path,
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path),
        )?;
        // Whatever an interrupted run wrote past its last record goes.
        io_at(&path, file.set_len(at))?;
        io_at(&path, file.seek(SeekFrom::Start(at)))?;
        let mut recorded = at;
        while at < f.size {
            let want = (f.size - at).min(u64::from(chunk)) as u32;
            let mut tries = 0;
            let data = loop {
                let body = RequestBody::BackupChunk {
                    id: st.backup_id,
                    file: f.name.clone(),
                    offset: at,
                    len: want,
                };
                let (offset, data, sum) = match call(client, body).await? {
                    ResponseBody::Chunk {
                        offset,
                        data,
                        crc32c,
                    } => (offset, data, crc32c),
                    other => return Err(unexpected("BackupChunk", &other)),
                };
                if offset != at || data.is_empty() || data.len() > want as usize {
                    return Err(Error::Protocol(format!(
                        "the server sent {} bytes at {offset} of {} for {want} at {at}",
                        data.len(),
                        f.name
                    )));
                }
                if crc32c::crc32c(&data) == sum {
                    break data;
                }
                tries += 1;
                retried += 1;
                if tries >= CHUNK_TRIES {
                    return Err(Error::corrupt(
                        "backup",
                        format!(
                            "{}: the chunk at offset {at} failed its CRC-32C {tries} times on \
                             the way from the server",
                            path.display()
                        ),
                    ));
                }
                note(&format!(
                    "{}: the chunk at offset {at} failed its CRC-32C: fetching it again",
                    f.name
                ));
            };
            io_at(&path, file.write_all(&data))?;
            crc = crc32c::crc32c_append(crc, &data);
            at += data.len() as u64;
            treelog::failpoint::crash_point("fetch::after_chunk");
            if at - recorded >= RECORD_EVERY || at == f.size {
                io_at(&path, file.sync_data())?;
                st.files.insert(f.name.clone(), (at, crc));
                save_state(&dir, &st)?;
                recorded = at;
            }
        }
        if crc != f.crc() {
            // Fetch it whole again next time.
            st.files.remove(&f.name);
            save_state(&dir, &st)?;
            return Err(Error::corrupt(
                "backup",
                format!(
                    "{}: its CRC-32C is {crc:08x}, the manifest says {}",
                    path.display(),
                    f.crc32c
                ),
            ));
        }
    }
    // Complete: the manifest goes in place last, then the directory.
    backup::sync_dir(&dir.join(backup::DB_DIR))?;
    io_at(
        &dir,
        std::fs::rename(dir.join(PENDING_MANIFEST), dir.join(backup::MANIFEST_FILE)),
    )?;
    io_at(&dir, std::fs::remove_file(dir.join(STATE_FILE)))?;
    backup::sync_dir(&dir)?;
    io_at(dest, std::fs::rename(&dir, dest))?;
    backup::sync_dir(
        dest.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )?;
    // The server may release it now (it would after a while anyway).
    let _ = call(client, RequestBody::BackupEnd { id: st.backup_id }).await;
    Ok(Fetched {
        dest: dest.to_owned(),
        backup_id: st.backup_id,
        seq: manifest.seq,
        inodes: manifest.inodes,
        index_digest: manifest.index_digest.clone(),
        files: manifest.files.len(),
        bytes: manifest.files.iter().map(|f| f.size).sum(),
        resumed_bytes,
        retried_chunks: retried,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}
