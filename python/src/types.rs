//! The values the API returns: frozen, comparable, with a readable repr
//! (dataclass-like), built from the protocol's types.

use pyo3::prelude::*;

use treelog_proto::cursor::CursorInfo;
use treelog_proto::types::{self as t, FileType};

/// File type bits of `st_mode` (as `stat.S_IFREG` etc.).
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;
const S_IFLNK: u32 = 0o120000;

/// An inode as ``stat`` returns it: its id, its parent's id, its name and
/// its attributes. Times are milliseconds since the epoch (``*_ms``); the
/// float properties ``mtime``, ``ctime`` and ``change_time`` are seconds,
/// as :func:`os.stat` gives them.
#[pyclass(frozen, get_all, eq, module = "treelog")]
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Stat {
    /// The inode's id (stable across renames).
    pub(crate) id: u64,
    /// The parent directory's id (0 for the root).
    pub(crate) parent: u64,
    /// The entry's name ("" for the root).
    pub(crate) name: String,
    /// "file", "directory" or "symlink".
    pub(crate) kind: &'static str,
    /// A file's size in bytes (0 for directories and links).
    pub(crate) size: u64,
    pub(crate) block_size: u64,
    /// Creation time, ms since the epoch.
    pub(crate) ctime_ms: u64,
    /// Modification time (a file's content, a directory's entries).
    pub(crate) mtime_ms: u64,
    /// Change time (POSIX ctime): the last change of content or attributes.
    pub(crate) change_ms: u64,
    /// Permission bits (0o755); `st_mode` adds the type bits.
    pub(crate) mode: u32,
    /// Whether a file was completed (`complete`); directories are.
    pub(crate) complete: bool,
    pub(crate) owner: String,
    pub(crate) group: String,
}

pub(crate) fn kind_name(k: FileType) -> &'static str {
    match k {
        FileType::File => "file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
    }
}

impl Stat {
    pub(crate) fn new(id: u64, parent: u64, name: &str, a: &t::Attrs) -> Stat {
        Stat {
            id,
            parent,
            name: name.to_owned(),
            kind: kind_name(a.kind),
            size: a.size,
            block_size: a.block_size,
            ctime_ms: a.ctime_ms,
            mtime_ms: a.mtime_ms,
            change_ms: a.change_ms,
            mode: a.mode,
            complete: a.complete,
            owner: a.owner.clone(),
            group: a.group.clone(),
        }
    }

    pub(crate) fn of(i: &t::Inode) -> Stat {
        Stat::new(i.id, i.parent, &i.name.to_str_lossy(), &i.attrs)
    }
}

#[pymethods]
impl Stat {
    #[getter]
    pub(crate) fn is_dir(&self) -> bool {
        self.kind == "directory"
    }

    #[getter]
    fn is_file(&self) -> bool {
        self.kind == "file"
    }

    #[getter]
    fn is_symlink(&self) -> bool {
        self.kind == "symlink"
    }

    /// The mode with its file type bits, as `os.stat().st_mode`.
    #[getter]
    fn st_mode(&self) -> u32 {
        let ty = match self.kind {
            "directory" => S_IFDIR,
            "symlink" => S_IFLNK,
            _ => S_IFREG,
        };
        ty | (self.mode & 0o7777)
    }

    /// Modification time in seconds since the epoch.
    #[getter]
    fn mtime(&self) -> f64 {
        self.mtime_ms as f64 / 1000.0
    }

    /// Creation time in seconds since the epoch.
    #[getter]
    fn ctime(&self) -> f64 {
        self.ctime_ms as f64 / 1000.0
    }

    /// Change time in seconds since the epoch.
    #[getter]
    fn change_time(&self) -> f64 {
        self.change_ms as f64 / 1000.0
    }

    pub(crate) fn __repr__(&self) -> String {
        format!(
            "Stat(id={}, parent={}, name={:?}, kind={:?}, size={}, mode=0o{:o}, complete={}, \
             owner={:?}, group={:?}, mtime_ms={})",
            self.id,
            self.parent,
            self.name,
            self.kind,
            self.size,
            self.mode,
            if self.complete { "True" } else { "False" },
            self.owner,
            self.group,
            self.mtime_ms
        )
    }
}

/// One entry of a listing or a walk: its name, its full path and its stat.
#[pyclass(frozen, get_all, eq, module = "treelog")]
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct DirEntry {
    pub(crate) name: String,
    pub(crate) path: String,
    pub(crate) stat: Stat,
}

impl DirEntry {
    pub(crate) fn new(dir: &str, e: &t::DirEntry) -> DirEntry {
        DirEntry {
            name: e.name.clone().to_string(),
            path: treelog_proto::path::join(dir, &e.name).to_string(),
            stat: Stat::of(&e.inode),
        }
    }
}

#[pymethods]
impl DirEntry {
    #[getter]
    fn is_dir(&self) -> bool {
        self.stat.is_dir()
    }

    pub(crate) fn __repr__(&self) -> String {
        format!(
            "DirEntry(path={:?}, stat={})",
            self.path,
            self.stat.__repr__()
        )
    }
}

/// One page of a listing: up to ``limit`` entries, the name to pass as
/// ``start_after`` for the next page (``None`` on the last), and the
/// sequence of the state it was read at.
#[pyclass(frozen, get_all, eq, module = "treelog")]
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Page {
    pub(crate) entries: Vec<DirEntry>,
    pub(crate) next_start_after: Option<String>,
    pub(crate) seq: u64,
}

#[pymethods]
impl Page {
    fn __len__(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn __repr__(&self) -> String {
        format!(
            "Page(<{} entries>, next_start_after={:?}, seq={})",
            self.entries.len(),
            self.next_start_after,
            self.seq
        )
    }
}

/// A directory quota: its limits (``None``: none) and its subtree's usage
/// (the directory itself excluded).
#[pyclass(frozen, get_all, eq, module = "treelog")]
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Quota {
    pub(crate) limit_inodes: Option<u64>,
    pub(crate) limit_bytes: Option<u64>,
    pub(crate) files: u64,
    pub(crate) directories: u64,
    pub(crate) symlinks: u64,
    pub(crate) bytes: u64,
}

impl Quota {
    pub(crate) fn of(q: &t::Quota) -> Quota {
        Quota {
            limit_inodes: q.limit_inodes,
            limit_bytes: q.limit_bytes,
            files: q.usage.files,
            directories: q.usage.directories,
            symlinks: q.usage.symlinks,
            bytes: q.usage.bytes,
        }
    }
}

#[pymethods]
impl Quota {
    /// Inodes in use: files, directories and links.
    #[getter]
    fn inodes(&self) -> u64 {
        self.files + self.directories + self.symlinks
    }

    pub(crate) fn __repr__(&self) -> String {
        format!(
            "Quota(limit_inodes={:?}, limit_bytes={:?}, files={}, directories={}, symlinks={}, bytes={})",
            self.limit_inodes, self.limit_bytes, self.files, self.directories, self.symlinks, self.bytes
        )
    }
}

/// What ``count`` reports of a path (``du -s``): the path itself and
/// everything under it, and its own quota when it has one.
#[pyclass(frozen, get_all, eq, module = "treelog")]
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) files: u64,
    pub(crate) directories: u64,
    pub(crate) symlinks: u64,
    /// The sizes of the files.
    pub(crate) bytes: u64,
    pub(crate) quota: Option<Quota>,
    /// Directories whose usage came from their quota's counters.
    pub(crate) from_counters: u64,
    /// Inodes whose entries were read.
    pub(crate) walked: u64,
}

impl Summary {
    pub(crate) fn of(s: &t::ContentSummary) -> Summary {
        Summary {
            files: s.usage.files,
            directories: s.usage.directories,
            symlinks: s.usage.symlinks,
            bytes: s.usage.bytes,
            quota: s.quota.as_ref().map(Quota::of),
            from_counters: s.from_counters,
            walked: s.walked,
        }
    }
}

#[pymethods]
impl Summary {
    #[getter]
    fn inodes(&self) -> u64 {
        self.files + self.directories + self.symlinks
    }

    pub(crate) fn __repr__(&self) -> String {
        format!(
            "Summary(files={}, directories={}, symlinks={}, bytes={}, quota={})",
            self.files,
            self.directories,
            self.symlinks,
            self.bytes,
            self.quota
                .as_ref()
                .map_or_else(|| "None".to_owned(), |q| q.__repr__())
        )
    }
}

/// A durable cursor (``cursors()``): its acknowledged position, its lag
/// behind the log's end, and whether retention expired it.
#[pyclass(frozen, get_all, eq, module = "treelog")]
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub(crate) name: String,
    pub(crate) acked: u64,
    pub(crate) lag: u64,
    pub(crate) created_ms: u64,
    pub(crate) updated_ms: u64,
    /// When retention expired it (ms since the epoch), or ``None``.
    pub(crate) expired_ms: Option<u64>,
}

impl Cursor {
    pub(crate) fn of(c: &CursorInfo) -> Cursor {
        Cursor {
            name: c.name.clone(),
            acked: c.state.acked,
            lag: c.lag,
            created_ms: c.state.created_ms,
            updated_ms: c.state.updated_ms,
            expired_ms: c.state.expired.map(|(t, _)| t),
        }
    }
}

#[pymethods]
impl Cursor {
    pub(crate) fn __repr__(&self) -> String {
        format!(
            "Cursor(name={:?}, acked={}, lag={}, expired_ms={:?})",
            self.name, self.acked, self.lag, self.expired_ms
        )
    }
}
