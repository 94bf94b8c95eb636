//! treelog's attributes as the kernel's `stat`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType as Kind, INodeNo};
use treelog_proto::types::{FileType, Inode};

use crate::ids::IdMap;

/// `st_blksize`: the preferred I/O size programs size their buffers by
/// (cp reads in chunks of it). A file's treelog block size (128 MiB by
/// default, as HDFS) would make them allocate that much to read zeros.
const IO_BLOCK: u32 = 4096;

pub(crate) fn kind(k: FileType) -> Kind {
    match k {
        FileType::File => Kind::RegularFile,
        FileType::Directory => Kind::Directory,
        FileType::Symlink => Kind::Symlink,
    }
}

fn time(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

pub(crate) fn file_attr(i: &Inode, ids: &IdMap) -> FileAttr {
    let a = &i.attrs;
    let size = match a.kind {
        FileType::File => a.size,
        FileType::Directory => 4096,
        // A symbolic link's size is its target's length; treelog's `size`
        // of a link holds it.
        FileType::Symlink => a.size,
    };
    FileAttr {
        ino: INodeNo(i.id),
        size,
        // A file reads as zeros of its size, but its size is what `du`
        // is asked about: count it as allocated (a hole would show 0).
        blocks: size.div_ceil(512),
        // No access time is recorded: the last modification stands in.
        atime: time(a.mtime_ms),
        mtime: time(a.mtime_ms),
        ctime: time(a.change_ms),
        crtime: time(a.ctime_ms),
        kind: kind(a.kind),
        perm: (a.mode & 0o7777) as u16,
        // Directories: 1, "unknown" (as btrfs), so that find(1) never
        // trusts a count of subdirectories it cannot have.
        nlink: 1,
        uid: ids.uid(&a.owner),
        gid: ids.gid(&a.group),
        rdev: 0,
        blksize: IO_BLOCK,
        flags: 0,
    }
}
