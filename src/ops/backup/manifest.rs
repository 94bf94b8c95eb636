//! A backup's manifest: what it holds, checked line by line and by its
//! trailing SHA-256.

use super::*;

/// The manifest of a backup (its JSON body; see docs/FORMAT.md §12.3).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    /// [`BACKUP_FORMAT`].
    pub backup_format: u32,
    /// `treelog <version>` of the build that took it.
    pub created_by: String,
    /// When it was taken, ms since the epoch.
    pub created_ms: u64,
    /// `meta.format_version` of the database in `db/`.
    pub format_version: u64,
    /// The committed sequence the backup holds: the last record of its
    /// log, and its index's `applied_seq`.
    pub seq: u64,
    /// `meta.log_start` of the database: its log holds `log_start..=seq`.
    pub log_start: u64,
    /// `meta.log_bytes`.
    pub log_bytes: u64,
    /// Inodes in the index, the root included.
    pub inodes: u64,
    /// The index digest of `admin verify` (SHA-256 of `inodes` and
    /// `edges`) at `seq`.
    pub index_digest: String,
    /// The owner dictionary, id 1 first.
    pub owners: Vec<String>,
    /// The group dictionary, id 1 first.
    pub groups: Vec<String>,
    /// Every file of `db/`, by name.
    pub files: Vec<BackupFile>,
    /// The database of a Raft cluster's node: the log id of the entry at
    /// `seq` and the last membership applied (a Raft snapshot's meta).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft: Option<RaftManifest>,
}

/// A Raft snapshot's meta in a backup's manifest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RaftManifest {
    /// `[term, node, index]` of the entry at `seq` (none: nothing
    /// applied).
    pub applied: Option<[u64; 3]>,
    /// The last membership applied: its entry's `[term, node, index]` and
    /// its bytes, hex.
    pub membership: Option<([u64; 3], String)>,
}

impl RaftManifest {
    pub(super) fn of(store: &Store) -> Result<Option<RaftManifest>> {
        if consensus::node_id(store)?.is_none() {
            return Ok(None);
        }
        let id = |i: &format::meta::RaftLogId| [i.term, i.node, i.index];
        let st = consensus::AppliedState::load(store)?;
        let applied = st.applied;
        Ok(Some(RaftManifest {
            applied: applied.as_ref().map(id),
            membership: st.membership.map(|(i, m)| (id(&i), hex::encode(m))),
        }))
    }
}

/// One file of a backup's `db/` directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BackupFile {
    /// Its name in `db/` (no directories).
    pub name: String,
    pub size: u64,
    /// CRC-32C (Castagnoli) of its bytes, 8 lowercase hex digits.
    pub crc32c: String,
}

impl Manifest {
    /// The manifest file's bytes: the JSON body, a newline, then the
    /// trailer line `sha256 <hex of the body's SHA-256>` and a newline.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut body = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::InvalidArgument(format!("backup manifest: {e}")))?;
        body.push(b'\n');
        let sum = hex::encode(Sha256::digest(&body));
        body.extend_from_slice(format!("{TRAILER_PREFIX}{sum}\n").as_bytes());
        Ok(body)
    }

    /// Decodes and checks a manifest file's bytes; `file` names it in
    /// errors.
    pub fn decode(bytes: &[u8], file: &Path) -> Result<Manifest> {
        let bad = |detail: String| backup_corrupt(file, detail);
        let text = bytes
            .strip_suffix(b"\n")
            .ok_or_else(|| bad("it does not end with a newline (truncated?)".into()))?;
        let cut = text
            .iter()
            .rposition(|&b| b == b'\n')
            .ok_or_else(|| bad("it has no checksum line (truncated?)".into()))?;
        let (body, trailer) = (&bytes[..=cut], &text[cut + 1..]);
        let want = std::str::from_utf8(trailer)
            .ok()
            .and_then(|t| t.strip_prefix(TRAILER_PREFIX))
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| {
                bad("its last line is not `sha256 <64 hex digits>` (truncated?)".into())
            })?;
        let got = hex::encode(Sha256::digest(body));
        if !got.eq_ignore_ascii_case(want) {
            return Err(bad(format!(
                "its SHA-256 is {got} but its checksum line says {want}: the manifest is damaged"
            )));
        }
        #[derive(serde::Deserialize)]
        struct Version {
            backup_format: u32,
        }
        let v: Version =
            serde_json::from_slice(body).map_err(|e| bad(format!("no backup_format: {e}")))?;
        if v.backup_format != BACKUP_FORMAT {
            return Err(Error::Incompatible {
                path: file.display().to_string(),
                detail: format!(
                    "backup format {} is not supported by this build (supported: [{BACKUP_FORMAT}])",
                    v.backup_format
                ),
            });
        }
        let m: Manifest =
            serde_json::from_slice(body).map_err(|e| bad(format!("does not decode: {e}")))?;
        let mut names = std::collections::BTreeSet::new();
        for f in &m.files {
            if !valid_file_name(&f.name) {
                return Err(bad(format!("file name {:?} is not a plain name", f.name)));
            }
            if !names.insert(f.name.as_str()) {
                return Err(bad(format!("file {:?} is listed twice", f.name)));
            }
            if parse_crc(&f.crc32c).is_none() {
                return Err(bad(format!(
                    "file {:?}: crc32c {:?} is not 8 hex digits",
                    f.name, f.crc32c
                )));
            }
        }
        if !names.contains("CURRENT") {
            return Err(bad("it lists no CURRENT file".into()));
        }
        Ok(m)
    }
}

impl BackupFile {
    /// The file's CRC-32C (`decode` checked that it parses).
    pub fn crc(&self) -> u32 {
        parse_crc(&self.crc32c).unwrap_or_default()
    }
}

pub(super) fn valid_file_name(n: &str) -> bool {
    !n.is_empty() && n != "." && n != ".." && !n.contains(['/', '\\', '\0'])
}

pub(super) fn crc_hex(crc: u32) -> String {
    format!("{crc:08x}")
}

pub(super) fn parse_crc(s: &str) -> Option<u32> {
    (s.len() == 8)
        .then(|| u32::from_str_radix(s, 16).ok())
        .flatten()
}

pub(super) fn backup_corrupt(file: &Path, detail: impl std::fmt::Display) -> Error {
    Error::corrupt("backup", format!("{}: {detail}", file.display()))
}

/// Reads and checks the manifest of the backup at `src`.
pub fn read_manifest(src: &Path) -> Result<Manifest> {
    let file = src.join(MANIFEST_FILE);
    let bytes = match std::fs::read(&file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let detail = if src.is_dir() {
                "is missing: this is not a complete treelog backup (the manifest is written last)"
            } else {
                "is missing: there is no backup directory here"
            };
            return Err(backup_corrupt(&file, detail));
        }
        Err(e) => return Err(backup_corrupt(&file, e)),
    };
    Manifest::decode(&bytes, &file)
}
