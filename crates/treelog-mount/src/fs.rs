//! The FUSE operations. Each request is answered from a task on the
//! mount's runtime, so the kernel's requests are served concurrently
//! (and pipelined on the client's connection); the session's reading
//! thread only hands them over.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, Errno, FileHandle, FileType as Kind, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use tokio::runtime::Handle;
use treelog_client::Client;
use treelog_proto::command::Command;
use treelog_proto::error::{Error, ErrorKind};
use treelog_proto::path::MAX_NAME_LEN;
use treelog_proto::types::{FileType, Inode, XattrFlag, DEFAULT_BLOCK_SIZE};
use treelog_proto::ByteString;

use crate::attr::{file_attr, kind};
use crate::callers::Callers;
use crate::dir::{DirHandle, FIRST};
use crate::errno::errno;
use crate::ids::IdMap;
use crate::inodes::{Inodes, ROOT};
use crate::own::OwnWrites;
use crate::MountOptions;

/// Linux's `XATTR_NAME_MAX` and `XATTR_SIZE_MAX`: beyond them its calls
/// fail with ERANGE and E2BIG, before any filesystem sees them.
const XATTR_NAME_MAX: usize = 255;
const XATTR_SIZE_MAX: usize = 65_536;
const XATTR_NAMESPACES: [&str; 4] = ["user.", "trusted.", "security.", "system."];

/// How long `statfs` may spend counting the namespace.
const STATFS_DEADLINE: Duration = Duration::from_secs(5);

/// What the mount shares between its requests and its change-stream task.
pub(crate) struct Shared {
    pub(crate) client: Client,
    pub(crate) inodes: Mutex<Inodes>,
    pub(crate) ids: IdMap,
    pub(crate) own: OwnWrites,
    pub(crate) opts: MountOptions,
    callers: Callers,
    dirs: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<DirHandle>>>>,
    next_fh: AtomicU64,
}

impl Shared {
    pub(crate) fn new(client: Client, opts: MountOptions) -> Shared {
        Shared {
            client,
            inodes: Mutex::new(Inodes::new()),
            ids: IdMap::new(opts.nobody_uid, opts.nobody_gid),
            own: OwnWrites::default(),
            callers: Callers::new(opts.send_callers),
            opts,
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    fn path(&self, ino: INodeNo) -> Result<ByteString, Errno> {
        self.inodes.lock().unwrap().path(ino.0).ok_or(Errno::ENOENT)
    }

    /// The path of `name` in directory `parent`, checked as Linux's
    /// filesystems check names.
    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<(ByteString, ByteString), Errno> {
        // Names are bytes: any but '/' and NUL, as the kernel passes them.
        let name = name.as_bytes();
        if name.len() > MAX_NAME_LEN {
            return Err(Errno::ENAMETOOLONG);
        }
        let dir = self.path(parent)?;
        Ok((treelog_proto::path::join(&dir, name), name.into()))
    }

    /// Submits a mutation, remembering its sequence as this mount's own.
    async fn submit(&self, c: &Client, cmd: Command, op: &str) -> Result<u64, Errno> {
        match c.submit(cmd).await {
            Ok(seq) => {
                self.own.add(seq);
                Ok(seq)
            }
            Err(e) => Err(errno(&e, op)),
        }
    }

    async fn stat(&self, c: &Client, path: &[u8], op: &str) -> Result<Inode, Errno> {
        c.stat(path).await.map_err(|e| errno(&e, op))
    }

    async fn stat_id(&self, c: &Client, ino: INodeNo, op: &str) -> Result<Inode, Errno> {
        c.stat_id(ino.0).await.map_err(|e| errno(&e, op))
    }

    /// The client handle for `req`'s requests: made for its process's
    /// user (see `callers`).
    fn client_for(&self, req: &Request) -> Client {
        self.callers
            .client(&self.client, &self.ids, req.pid(), req.uid(), req.gid())
    }

    /// Replies with an entry the kernel now holds once more.
    fn entry(&self, i: &Inode) -> (fuser::FileAttr, Duration) {
        self.inodes
            .lock()
            .unwrap()
            .remember(i.id, i.parent, &i.name);
        (file_attr(i, &self.ids), self.opts.entry_ttl)
    }

    fn owner_group(&self, req: &Request) -> (String, String) {
        (
            self.ids.owner_name(req.uid()),
            self.ids.group_name(req.gid()),
        )
    }
}

fn utf8(s: &OsStr) -> Result<&str, Errno> {
    // Extended attribute names are text in treelog (not POSIX names): a
    // byte string that is not is an illegal byte sequence here.
    s.to_str().ok_or(Errno::EILSEQ)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn time_ms(t: TimeOrNow) -> u64 {
    match t {
        TimeOrNow::Now => now_ms(),
        TimeOrNow::SpecificTime(t) => t
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
    }
}

/// The filesystem handed to fuser.
pub(crate) struct TreelogFs {
    pub(crate) shared: Arc<Shared>,
    pub(crate) rt: Handle,
}

impl TreelogFs {
    /// Runs `f` on the runtime with the shared state and the client
    /// handle for `req`'s user.
    fn spawn<F, Fut>(&self, req: &Request, f: F)
    where
        F: FnOnce(Arc<Shared>, Client) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let c = self.shared.client_for(req);
        self.rt.spawn(f(self.shared.clone(), c));
    }
}

/// Replies with `r`'s entry, or its error.
fn reply_entry(s: &Shared, r: Result<Inode, Errno>, reply: ReplyEntry) {
    match r {
        Ok(i) => {
            let (attr, ttl) = s.entry(&i);
            reply.entry(&ttl, &attr, Generation(0));
        }
        Err(e) => reply.error(e),
    }
}

fn reply_empty(r: Result<(), Errno>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

/// The size protocol of getxattr and listxattr: size 0 asks how much.
fn reply_xattr(data: &[u8], size: u32, reply: ReplyXattr) {
    if size == 0 {
        reply.size(data.len() as u32);
    } else if data.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(data);
    }
}

fn check_xattr_name(name: &OsStr) -> Result<&str, Errno> {
    let name = utf8(name)?;
    if name.len() > XATTR_NAME_MAX {
        return Err(Errno::ERANGE);
    }
    if !XATTR_NAMESPACES
        .iter()
        .any(|ns| name.len() > ns.len() && name.starts_with(ns))
    {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(name)
}

/// A missing attribute is ENODATA; a missing file stays ENOENT.
fn xattr_errno(e: &Error, op: &str) -> Errno {
    if e.kind() == ErrorKind::NotFound && e.to_string().contains("no attribute") {
        Errno::NO_XATTR
    } else {
        errno(e, op)
    }
}

impl Filesystem for TreelogFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        use fuser::InitFlags as F;
        // readdirplus: a listing fills the kernel's entry and attribute
        // caches (ls -l, find, du stat nothing more); parallel dirops:
        // lookups and creates in one directory are not serialised.
        for f in [
            F::FUSE_DO_READDIRPLUS,
            F::FUSE_READDIRPLUS_AUTO,
            F::FUSE_PARALLEL_DIROPS,
            F::FUSE_CACHE_SYMLINKS,
        ] {
            if config.add_capabilities(f).is_err() {
                tracing::debug!(?f, "the kernel lacks a capability");
            }
        }
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let child = self.shared.child(parent, name);
        self.spawn(req, |s, c| async move {
            let r = match child {
                Ok((path, _)) => s.stat(&c, &path, "lookup").await,
                Err(e) => Err(e),
            };
            reply_entry(&s, r, reply);
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.shared.inodes.lock().unwrap().forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.spawn(req, |s, c| async move {
            match s.stat_id(&c, ino, "getattr").await {
                Ok(i) => reply.attr(&s.opts.attr_ttl, &file_attr(&i, &s.ids)),
                Err(e) => reply.error(e),
            }
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let path = self.shared.path(ino);
        self.spawn(req, |s, c| async move {
            let r = async {
                let path = path?;
                if let Some(size) = size {
                    let cmd = Command::SetSize {
                        path: path.clone(),
                        size,
                    };
                    s.submit(&c, cmd, "truncate").await?;
                }
                let owner = uid.map(|u| s.ids.owner_name(u));
                let group = gid.map(|g| s.ids.group_name(g));
                let mtime_ms = mtime.map(time_ms);
                if mode.is_some() || owner.is_some() || group.is_some() || mtime_ms.is_some() {
                    let cmd = Command::SetAttr {
                        path,
                        mode: mode.map(|m| m & 0o7777),
                        owner,
                        group,
                        mtime_ms,
                    };
                    s.submit(&c, cmd, "setattr").await?;
                }
                s.stat_id(&c, ino, "setattr").await
            }
            .await;
            match r {
                Ok(i) => reply.attr(&s.opts.attr_ttl, &file_attr(&i, &s.ids)),
                Err(e) => reply.error(e),
            }
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let path = self.shared.path(ino);
        self.spawn(req, |_, c| async move {
            let r = match path {
                Ok(p) => c.readlink(&p).await.map_err(|e| errno(&e, "readlink")),
                Err(e) => Err(e),
            };
            match r {
                Ok(t) => reply.data(t.as_bytes()),
                Err(e) => reply.error(e),
            }
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        // FIFOs, sockets and devices: EPERM, what Linux's mknod(2) gives
        // on a filesystem that does not support the kind of node.
        if mode & libc::S_IFMT != libc::S_IFREG {
            reply.error(Errno::EPERM);
            return;
        }
        let child = self.shared.child(parent, name);
        let (owner, group) = self.shared.owner_group(req);
        self.spawn(req, |s, c| async move {
            let r = async {
                let (path, _) = child?;
                s.submit(&c, create(&path, mode, owner, group), "mknod")
                    .await?;
                s.stat(&c, &path, "mknod").await
            }
            .await;
            reply_entry(&s, r, reply);
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let child = self.shared.child(parent, name);
        let (owner, group) = self.shared.owner_group(req);
        self.spawn(req, |s, c| async move {
            let r = async {
                let (path, _) = child?;
                let cmd = Command::Mkdir {
                    path: path.clone(),
                    parents: false,
                    // The kernel applied the umask already.
                    mode: mode & 0o7777,
                    owner,
                    group,
                };
                s.submit(&c, cmd, "mkdir").await?;
                s.stat(&c, &path, "mkdir").await
            }
            .await;
            reply_entry(&s, r, reply);
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.delete(req, parent, name, "unlink", reply);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.delete(req, parent, name, "rmdir", reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let child = self.shared.child(parent, link_name);
        let target = ByteString::from(target.as_os_str().as_bytes());
        let (owner, group) = self.shared.owner_group(req);
        self.spawn(req, |s, c| async move {
            let r = async {
                let (path, _) = child?;
                let cmd = Command::Symlink {
                    target,
                    path: path.clone(),
                    parents: false,
                    owner,
                    group,
                };
                s.submit(&c, cmd, "symlink").await?;
                s.stat(&c, &path, "symlink").await
            }
            .await;
            reply_entry(&s, r, reply);
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        // An exchange, or a whiteout, treelog cannot do in one record.
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            reply.error(Errno::EINVAL);
            return;
        }
        let overwrite = !flags.contains(RenameFlags::RENAME_NOREPLACE);
        let src = self.shared.child(parent, name);
        let dst = self.shared.child(newparent, newname);
        self.spawn(req, |s, c| async move {
            let r = async {
                let ((src, _), (dst, _)) = (src?, dst?);
                let cmd = Command::Rename {
                    src,
                    dst: dst.clone(),
                    overwrite,
                };
                s.submit(&c, cmd, "rename").await?;
                // Later requests about the moved inode must use its new
                // path at once, not when the change stream says so.
                if let Ok(i) = c.stat(&dst).await {
                    s.inodes.lock().unwrap().moved(i.id, i.parent, &i.name);
                }
                Ok(())
            }
            .await;
            reply_empty(r, reply);
        });
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        // No hard links: link(2)'s EPERM for a filesystem without them.
        reply.error(Errno::EPERM);
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // Contents are zeros that never change behind the kernel's back
        // (a size change invalidates the inode): keep the page cache.
        reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE);
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        self.spawn(req, |s, c| async move {
            match s.stat_id(&c, ino, "read").await {
                Ok(i) => {
                    let n = i.attrs.size.saturating_sub(offset).min(u64::from(size));
                    reply.data(&vec![0u8; n as usize]);
                }
                Err(e) => reply.error(e),
            }
        });
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        // treelog keeps no contents: refuse, never discard.
        reply.error(Errno::EOPNOTSUPP);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Every acknowledged change is already the server's.
        reply.ok();
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let fh = self.shared.next_fh.fetch_add(1, Ordering::Relaxed);
        self.shared
            .dirs
            .lock()
            .unwrap()
            .insert(fh, Arc::new(tokio::sync::Mutex::new(DirHandle::default())));
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.shared.dirs.lock().unwrap().remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some((path, parent, handle)) = self.dir(ino, fh) else {
            reply.error(Errno::EBADF);
            return;
        };
        self.spawn(req, |_, c| async move {
            let path = match path {
                Ok(p) => p,
                Err(e) => return reply.error(e),
            };
            let mut pos = offset;
            if pos == 0 {
                if reply.add(ino, 1, Kind::Directory, ".") {
                    return reply.ok();
                }
                pos = 1;
            }
            if pos == 1 {
                if reply.add(INodeNo(parent), 2, Kind::Directory, "..") {
                    return reply.ok();
                }
                pos = FIRST;
            }
            let mut h = handle.lock().await;
            loop {
                let entries = match h.entries_from(&c, &path, pos).await {
                    Ok(e) => e,
                    Err(e) => return reply.error(errno(&e, "readdir")),
                };
                if entries.is_empty() {
                    return reply.ok();
                }
                for e in entries {
                    let k = kind(e.inode.attrs.kind);
                    if reply.add(INodeNo(e.inode.id), pos + 1, k, OsStr::from_bytes(&e.name)) {
                        return reply.ok();
                    }
                    pos += 1;
                }
            }
        });
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let Some((path, parent, handle)) = self.dir(ino, fh) else {
            reply.error(Errno::EBADF);
            return;
        };
        self.spawn(req, |s, c| async move {
            let path = match path {
                Ok(p) => p,
                Err(e) => return reply.error(e),
            };
            let ttl = s.opts.entry_ttl;
            let mut pos = offset;
            // `.` and `..` carry no lookup (the kernel skips them): their
            // attributes only need to be well-formed.
            if pos < FIRST {
                let dir = match s.stat_id(&c, ino, "readdirplus").await {
                    Ok(i) => file_attr(&i, &s.ids),
                    Err(e) => return reply.error(e),
                };
                if pos == 0 && reply.add(ino, 1, ".", &ttl, &dir, Generation(0)) {
                    return reply.ok();
                }
                let mut up = dir;
                up.ino = INodeNo(parent);
                if reply.add(INodeNo(parent), 2, "..", &ttl, &up, Generation(0)) {
                    return reply.ok();
                }
                pos = FIRST;
            }
            let mut h = handle.lock().await;
            loop {
                let entries = match h.entries_from(&c, &path, pos).await {
                    Ok(e) => e,
                    Err(e) => return reply.error(errno(&e, "readdirplus")),
                };
                if entries.is_empty() {
                    return reply.ok();
                }
                for e in entries {
                    let attr = file_attr(&e.inode, &s.ids);
                    let id = INodeNo(e.inode.id);
                    if reply.add(
                        id,
                        pos + 1,
                        OsStr::from_bytes(&e.name),
                        &ttl,
                        &attr,
                        Generation(0),
                    ) {
                        return reply.ok();
                    }
                    // The kernel holds every entry the reply carries.
                    s.inodes
                        .lock()
                        .unwrap()
                        .remember(e.inode.id, ino.0, &e.name);
                    pos += 1;
                }
            }
        });
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.spawn(req, |_, c| async move {
            let summary = c.with_deadline(STATFS_DEADLINE).count("/").await;
            let (st, quota) = match &summary {
                Ok(c) => (c.usage, c.quota),
                Err(e) => {
                    tracing::debug!(error = %e, "statfs: the namespace could not be counted");
                    Default::default()
                }
            };
            let used_inodes = st.inodes();
            let files_limit = quota.and_then(|q| q.limit_inodes);
            let bytes_limit = quota.and_then(|q| q.limit_bytes);
            // Without a limit: room for as many again as are used, and at
            // least 2^32 inodes and 1 PiB, so that df shows something sane.
            let files = files_limit.unwrap_or((used_inodes * 2).max(1 << 32));
            let ffree = files.saturating_sub(used_inodes);
            const BSIZE: u64 = 4096;
            let used_blocks = st.bytes.div_ceil(BSIZE);
            let blocks = bytes_limit.map_or((used_blocks * 2).max(1 << 38), |b| b / BSIZE);
            let bfree = blocks.saturating_sub(used_blocks);
            reply.statfs(
                blocks,
                bfree,
                bfree,
                files,
                ffree,
                BSIZE as u32,
                MAX_NAME_LEN as u32,
                BSIZE as u32,
            );
        });
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let name = match check_xattr_name(name) {
            Ok(n) => n.to_owned(),
            Err(e) => return reply.error(e),
        };
        if value.len() > XATTR_SIZE_MAX {
            return reply.error(Errno::E2BIG);
        }
        let flag = match flags {
            0 => XattrFlag::Either,
            libc::XATTR_CREATE => XattrFlag::Create,
            libc::XATTR_REPLACE => XattrFlag::Replace,
            _ => return reply.error(Errno::EINVAL),
        };
        let path = self.shared.path(ino);
        let value = value.to_vec();
        self.spawn(req, |s, c| async move {
            let r = async {
                let cmd = Command::SetXattr {
                    path: path?,
                    name,
                    value: value.into(),
                    flag,
                };
                match c.submit(cmd).await {
                    Ok(seq) => {
                        s.own.add(seq);
                        Ok(())
                    }
                    Err(e) => Err(xattr_errno(&e, "setxattr")),
                }
            }
            .await;
            reply_empty(r, reply);
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let name = match check_xattr_name(name) {
            Ok(n) => n.to_owned(),
            // A name no attribute can have: there is none of it.
            Err(e) if e == Errno::EOPNOTSUPP => return reply.error(Errno::NO_XATTR),
            Err(e) => return reply.error(e),
        };
        let path = self.shared.path(ino);
        self.spawn(req, |_, c| async move {
            let path = match path {
                Ok(p) => p,
                Err(e) => return reply.error(e),
            };
            match c.xattrs(&path, Some(&name)).await {
                Ok(x) => match x.into_iter().find(|x| x.name == name) {
                    Some(x) => reply_xattr(&x.value, size, reply),
                    None => reply.error(Errno::NO_XATTR),
                },
                Err(e) => reply.error(xattr_errno(&e, "getxattr")),
            }
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let path = self.shared.path(ino);
        self.spawn(req, |_, c| async move {
            let path = match path {
                Ok(p) => p,
                Err(e) => return reply.error(e),
            };
            match c.xattrs(&path, None).await {
                Ok(x) => {
                    let mut names = Vec::new();
                    for a in x {
                        names.extend_from_slice(a.name.as_bytes());
                        names.push(0);
                    }
                    reply_xattr(&names, size, reply);
                }
                Err(e) => reply.error(errno(&e, "listxattr")),
            }
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = match check_xattr_name(name) {
            Ok(n) => n.to_owned(),
            Err(e) if e == Errno::EOPNOTSUPP => return reply.error(Errno::NO_XATTR),
            Err(e) => return reply.error(e),
        };
        let path = self.shared.path(ino);
        self.spawn(req, |s, c| async move {
            let r = async {
                let cmd = Command::RemoveXattr { path: path?, name };
                match c.submit(cmd).await {
                    Ok(seq) => {
                        s.own.add(seq);
                        Ok(())
                    }
                    Err(e) => Err(xattr_errno(&e, "removexattr")),
                }
            }
            .await;
            reply_empty(r, reply);
        });
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // With default_permissions the kernel checks and never asks.
        let (uid, gid) = (req.uid(), req.gid());
        self.spawn(req, |s, c| async move {
            let r = match s.stat_id(&c, ino, "access").await {
                Ok(i) => allowed(&file_attr(&i, &s.ids), uid, gid, mask),
                Err(e) => Err(e),
            };
            reply_empty(r, reply);
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let child = self.shared.child(parent, name);
        let (owner, group) = self.shared.owner_group(req);
        self.spawn(req, |s, c| async move {
            let r = async {
                let (path, _) = child?;
                match s
                    .submit(&c, create(&path, mode, owner, group), "create")
                    .await
                {
                    Ok(_) => {}
                    // Created by another client since the kernel looked:
                    // open(2) without O_EXCL opens what is there.
                    Err(e) if e == Errno::EEXIST && flags & libc::O_EXCL == 0 => {
                        let i = s.stat(&c, &path, "create").await?;
                        if i.attrs.kind != FileType::File {
                            return Err(Errno::EEXIST);
                        }
                        return Ok(i);
                    }
                    Err(e) => return Err(e),
                }
                s.stat(&c, &path, "create").await
            }
            .await;
            match r {
                Ok(i) => {
                    let (attr, ttl) = s.entry(&i);
                    reply.created(
                        &ttl,
                        &attr,
                        Generation(0),
                        FileHandle(0),
                        FopenFlags::FOPEN_KEEP_CACHE,
                    );
                }
                Err(e) => reply.error(e),
            }
        });
    }
}

impl TreelogFs {
    fn delete(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        op: &'static str,
        reply: ReplyEmpty,
    ) {
        let child = self.shared.child(parent, name);
        self.spawn(req, |s, c| async move {
            let r = async {
                let (path, _) = child?;
                let cmd = Command::Delete {
                    path,
                    recursive: false,
                };
                s.submit(&c, cmd, op).await.map(|_| ())
            }
            .await;
            reply_empty(r, reply);
        });
    }

    /// An open directory's path, parent and handle.
    #[allow(clippy::type_complexity)]
    fn dir(
        &self,
        ino: INodeNo,
        fh: FileHandle,
    ) -> Option<(
        Result<ByteString, Errno>,
        u64,
        Arc<tokio::sync::Mutex<DirHandle>>,
    )> {
        let handle = self.shared.dirs.lock().unwrap().get(&fh.0)?.clone();
        let parent = self.shared.inodes.lock().unwrap().parent(ino.0);
        Some((self.shared.path(ino), parent.unwrap_or(ROOT), handle))
    }
}

fn create(path: &[u8], mode: u32, owner: String, group: String) -> Command {
    Command::Create {
        path: path.into(),
        parents: false,
        mode: mode & 0o7777,
        owner,
        group,
        block_size: DEFAULT_BLOCK_SIZE,
    }
}

/// access(2) by the mode bits, as the kernel's own check would.
fn allowed(a: &fuser::FileAttr, uid: u32, gid: u32, mask: AccessFlags) -> Result<(), Errno> {
    let want = (mask.bits() & 0o7) as u32;
    if want == 0 {
        return Ok(());
    }
    let perm = u32::from(a.perm);
    if uid == 0 {
        // Root: anything, but execute only where someone may.
        let x_ok = want & 1 == 0 || a.kind == Kind::Directory || perm & 0o111 != 0;
        return if x_ok { Ok(()) } else { Err(Errno::EACCES) };
    }
    let bits = if uid == a.uid {
        perm >> 6
    } else if gid == a.gid {
        perm >> 3
    } else {
        perm
    } & 0o7;
    if bits & want == want {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}
