//! `treelog import DIR [DEST]`: mirrors a local directory tree into the
//! namespace: directories, regular files (size, mode, owner, group,
//! modification time) and symbolic links (target, owner, group, time),
//! each with its extended attributes (all that the caller may read:
//! `user.*`, and `trusted.*`/`security.*`/`system.*` where the local
//! system lets it list them). A file with several hard links is imported
//! once per name, as separate files (treelog has no hard links), and
//! counted. Other kinds (devices, sockets, FIFOs) are skipped and counted.
//!
//! A walker thread reads the tree (depth first, each directory's entries
//! in name order) into a bounded channel; up to `--jobs` entries are in
//! flight at once, each a short chain of commands that waits for the one
//! before (a file: create, complete with its size, its attributes, set its
//! time), so the writer commits many entries per group (and per fsync).
//! Entries do not wait for one another: every create makes missing
//! parents (`-p`), and a directory's own chain then sets its attributes
//! whatever created it. Directories' modification times are set last, once
//! everything is in them (an entry created in a directory moves its time,
//! as in POSIX), as `cp -a` does. Against `--server`, the same chains are
//! pipelined on one connection.

use std::collections::{HashMap, HashSet};
use std::ffi::CStr;
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use futures_util::StreamExt;
use indicatif::ProgressBar;
use tokio::sync::mpsc;

use crate::args::{Cli, ImportArgs};
use crate::backend::{open, Backend};
use crate::client::Client;
use crate::command::Command;
use crate::error::{Error, Result};
use crate::exit::{quote_always, reason, FirstFailure};
use crate::output::{outln, Out};
use crate::timefmt::human_size;
use crate::types::XattrFlag;
use treelog::ByteString;
use treelog::Treelog;

/// Failures printed on standard error; the rest are only counted.
const SHOWN_FAILURES: u64 = 10;

/// Where commands go: the two backends' async submission.
#[derive(Clone, Copy)]
pub(crate) enum Submitter<'a> {
    Local(&'a Treelog),
    Remote(&'a Client),
}

impl Submitter<'_> {
    pub(crate) async fn submit(self, cmd: Command) -> Result<u64> {
        match self {
            Submitter::Local(t) => t.submit_async(cmd).await,
            Submitter::Remote(c) => c.submit(cmd).await,
        }
    }
}

/// Mode, owner, group and modification time of a local entry.
#[derive(Debug, Clone)]
struct Attrs {
    mode: u32,
    owner: String,
    group: String,
    mtime_ms: u64,
}

/// An extended attribute read from a local entry.
type LocalXattr = (String, Vec<u8>);

/// What the walker found.
enum Walked {
    Dir {
        path: ByteString,
        attrs: Attrs,
        xattrs: Vec<LocalXattr>,
    },
    File {
        path: ByteString,
        attrs: Attrs,
        size: u64,
        xattrs: Vec<LocalXattr>,
        /// Another name of the same local file was found before: imported
        /// again as a file of its own.
        linked: bool,
    },
    Symlink {
        path: ByteString,
        attrs: Attrs,
        target: ByteString,
        xattrs: Vec<LocalXattr>,
    },
    Other,
    /// A local entry that could not be read or named.
    Failed {
        /// What could not be done (`cannot read directory`).
        what: &'static str,
        local: PathBuf,
        error: Error,
    },
}

impl Walked {
    fn path(&self) -> Option<&ByteString> {
        match self {
            Walked::Dir { path, .. } | Walked::File { path, .. } | Walked::Symlink { path, .. } => {
                Some(path)
            }
            Walked::Other | Walked::Failed { .. } => None,
        }
    }

    fn xattrs(&self) -> &[LocalXattr] {
        match self {
            Walked::Dir { xattrs, .. }
            | Walked::File { xattrs, .. }
            | Walked::Symlink { xattrs, .. } => xattrs,
            Walked::Other | Walked::Failed { .. } => &[],
        }
    }
}

/// The extended attributes of `local` itself (not of a link's target),
/// in name order. Those that vanish between the listing and the read are
/// left out; any other failure fails the entry.
fn read_xattrs(local: &Path) -> std::result::Result<Vec<LocalXattr>, (&'static str, Error)> {
    let names = match xattr::list(local) {
        Ok(n) => n,
        // A file system without extended attributes has none to import.
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(("cannot list the extended attributes of", Error::Io(e))),
    };
    let mut out = Vec::new();
    for name in names {
        let Some(text) = name.to_str() else {
            return Err((
                "cannot import an extended attribute of",
                Error::InvalidName {
                    name: name.to_string_lossy().into_owned(),
                    reason: "not valid UTF-8",
                },
            ));
        };
        match xattr::get(local, &name) {
            Ok(Some(v)) => out.push((text.to_owned(), v)),
            Ok(None) => {}
            Err(e) => return Err(("cannot read an extended attribute of", Error::Io(e))),
        }
    }
    out.sort();
    Ok(out)
}

/// User and group names by id, from the system's databases (numeric when
/// an id has no name), each looked up once.
#[derive(Default)]
struct Names {
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
}

impl Names {
    fn user(&mut self, uid: u32) -> String {
        self.users
            .entry(uid)
            .or_insert_with(|| user_name(uid).unwrap_or_else(|| uid.to_string()))
            .clone()
    }

    fn group(&mut self, gid: u32) -> String {
        self.groups
            .entry(gid)
            .or_insert_with(|| group_name(gid).unwrap_or_else(|| gid.to_string()))
            .clone()
    }
}

/// Calls a `get*_r` function with a buffer that grows while it is too small.
fn with_buffer(mut call: impl FnMut(&mut [u8]) -> libc::c_int) -> bool {
    let mut buf = vec![0u8; 1024];
    loop {
        match call(&mut buf) {
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 2, 0),
            0 => return true,
            _ => return false,
        }
    }
}

fn user_name(uid: u32) -> Option<String> {
    let mut name = None;
    with_buffer(|buf| {
        // SAFETY: passwd is plain data; getpwuid_r writes it and the
        // strings it points to into `buf`, which outlives their use here.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut found,
            )
        };
        if rc == 0 && !found.is_null() && !pwd.pw_name.is_null() {
            // SAFETY: a NUL-terminated string inside `buf`.
            let s = unsafe { CStr::from_ptr(pwd.pw_name) };
            name = s.to_str().ok().map(str::to_owned);
        }
        rc
    });
    name.filter(|n| !n.is_empty())
}

fn group_name(gid: u32) -> Option<String> {
    let mut name = None;
    with_buffer(|buf| {
        // SAFETY: as in user_name, for getgrgid_r.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::group = std::ptr::null_mut();
        let rc = unsafe {
            libc::getgrgid_r(
                gid,
                &mut grp,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut found,
            )
        };
        if rc == 0 && !found.is_null() && !grp.gr_name.is_null() {
            // SAFETY: a NUL-terminated string inside `buf`.
            let s = unsafe { CStr::from_ptr(grp.gr_name) };
            name = s.to_str().ok().map(str::to_owned);
        }
        rc
    });
    name.filter(|n| !n.is_empty())
}

fn attrs_of(m: &std::fs::Metadata, names: &mut Names) -> Attrs {
    // Before 1970 is shown as the epoch: treelog's times are unsigned.
    let ms = m
        .mtime()
        .checked_mul(1000)
        .and_then(|s| s.checked_add(m.mtime_nsec() / 1_000_000))
        .unwrap_or(0)
        .max(0) as u64;
    Attrs {
        mode: m.mode() & 0o7777,
        owner: names.user(m.uid()),
        group: names.group(m.gid()),
        mtime_ms: ms,
    }
}

fn shown(local: &Path) -> String {
    quote_always(local.as_os_str().as_bytes())
}

fn io_error(what: &str, local: &Path, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(
        e.kind(),
        format!("{what} {}: {e}", quote_always(local.as_os_str().as_bytes())),
    ))
}

/// Walks `root` (already sent as `dest`), depth first, sending what it
/// finds; stops when the receiver is gone.
fn walk(
    root: PathBuf,
    dest: ByteString,
    xattrs: bool,
    tx: mpsc::Sender<Walked>,
    found: ProgressBar,
) {
    let mut names = Names::default();
    // Files with more than one link, by (device, inode), once seen.
    let mut linked: HashSet<(u64, u64)> = HashSet::new();
    let mut stack = vec![(root, dest)];
    let send = |w: Walked| {
        found.inc_length(1);
        tx.blocking_send(w).is_ok()
    };
    while let Some((dir, tdir)) = stack.pop() {
        let mut entries =
            match std::fs::read_dir(&dir).and_then(|rd| rd.collect::<std::io::Result<Vec<_>>>()) {
                Ok(v) => v,
                Err(e) => {
                    if !send(Walked::Failed {
                        what: "cannot read directory",
                        error: Error::Io(e),
                        local: dir,
                    }) {
                        return;
                    }
                    continue;
                }
            };
        entries.sort_by_key(|e| e.file_name());
        let mut subdirs = Vec::new();
        for e in entries {
            let local = e.path();
            // Names are bytes: one that is not UTF-8 is imported as it is.
            let w = match e.metadata() {
                Err(err) => Walked::Failed {
                    what: "cannot stat",
                    error: Error::Io(err),
                    local,
                },
                Ok(m) => {
                    let path = crate::path::join(&tdir, e.file_name().as_bytes());
                    walked(
                        &local,
                        path,
                        &m,
                        xattrs,
                        &mut names,
                        &mut linked,
                        &mut subdirs,
                    )
                }
            };
            if !send(w) {
                return;
            }
        }
        // Popped in name order.
        stack.extend(subdirs.into_iter().rev());
    }
}

/// One local entry (`m` its own metadata, not a link's target's).
fn walked(
    local: &Path,
    path: ByteString,
    m: &std::fs::Metadata,
    with_xattrs: bool,
    names: &mut Names,
    linked: &mut HashSet<(u64, u64)>,
    subdirs: &mut Vec<(PathBuf, ByteString)>,
) -> Walked {
    let ft = m.file_type();
    if !(ft.is_dir() || ft.is_file() || ft.is_symlink()) {
        return Walked::Other;
    }
    let xattrs = if with_xattrs {
        match read_xattrs(local) {
            Ok(x) => x,
            Err((what, error)) => {
                return Walked::Failed {
                    what,
                    local: local.to_owned(),
                    error,
                }
            }
        }
    } else {
        Vec::new()
    };
    let attrs = attrs_of(m, names);
    if ft.is_dir() {
        subdirs.push((local.to_owned(), path.clone()));
        Walked::Dir {
            path,
            attrs,
            xattrs,
        }
    } else if ft.is_file() {
        Walked::File {
            path,
            attrs,
            size: m.len(),
            xattrs,
            linked: m.nlink() > 1 && !linked.insert((m.dev(), m.ino())),
        }
    } else {
        let target = match std::fs::read_link(local) {
            Ok(t) => t,
            Err(error) => {
                return Walked::Failed {
                    what: "cannot read link",
                    local: local.to_owned(),
                    error: Error::Io(error),
                }
            }
        };
        Walked::Symlink {
            path,
            attrs,
            target: target.into_os_string().into_vec().into(),
            xattrs,
        }
    }
}

/// One entry's commands, each after the one before succeeded.
async fn import_one(sub: Submitter<'_>, w: &Walked, block_size: u64) -> Result<()> {
    let Some(path) = w.path() else {
        return Ok(());
    };
    let mtime = match w {
        Walked::Dir { attrs, .. } => {
            sub.submit(Command::Mkdir {
                path: path.to_owned(),
                parents: true,
                mode: attrs.mode,
                owner: attrs.owner.clone(),
                group: attrs.group.clone(),
            })
            .await?;
            // Also when the directory existed, or a child's create made it.
            // (Its time once its entries are in: see `import`.)
            sub.submit(Command::SetAttr {
                path: path.to_owned(),
                mode: Some(attrs.mode),
                owner: Some(attrs.owner.clone()),
                group: Some(attrs.group.clone()),
                mtime_ms: None,
            })
            .await?;
            None
        }
        Walked::File { attrs, size, .. } => {
            sub.submit(Command::Create {
                path: path.to_owned(),
                parents: true,
                mode: attrs.mode,
                owner: attrs.owner.clone(),
                group: attrs.group.clone(),
                block_size,
            })
            .await?;
            sub.submit(Command::Complete {
                path: path.to_owned(),
                size: *size,
            })
            .await?;
            Some(attrs.mtime_ms)
        }
        Walked::Symlink { attrs, target, .. } => {
            sub.submit(Command::Symlink {
                target: target.clone(),
                path: path.to_owned(),
                parents: true,
                owner: attrs.owner.clone(),
                group: attrs.group.clone(),
            })
            .await?;
            Some(attrs.mtime_ms)
        }
        Walked::Other | Walked::Failed { .. } => return Ok(()),
    };
    for (name, value) in w.xattrs() {
        sub.submit(Command::SetXattr {
            path: path.to_owned(),
            name: name.clone(),
            value: value.clone().into(),
            flag: XattrFlag::Either,
        })
        .await?;
    }
    if let Some(mtime_ms) = mtime {
        // Last: completing sets the time to now.
        sub.submit(Command::SetAttr {
            path: path.to_owned(),
            mode: None,
            owner: None,
            group: None,
            mtime_ms: Some(mtime_ms),
        })
        .await?;
    }
    Ok(())
}

#[derive(Default)]
struct Tally {
    dirs: u64,
    files: u64,
    bytes: u64,
    symlinks: u64,
    /// Extended attributes set.
    xattrs: u64,
    /// Files imported again under another of their names.
    linked: u64,
    other: u64,
    failed: u64,
    failure: FirstFailure,
    /// The first failures, as printed.
    first: Vec<String>,
}

impl Tally {
    fn fail(&mut self, pb: &ProgressBar, line: String, e: &Error) {
        self.failed += 1;
        self.failure.note(e.kind());
        pb.set_message(format!("{} failed", self.failed));
        if self.failed <= SHOWN_FAILURES {
            pb.suspend(|| {
                let _ = writeln!(std::io::stderr(), "treelog: import: {line}");
            });
            self.first.push(line);
        }
    }
}

fn progress_bar(quiet: bool) -> ProgressBar {
    crate::output::progress_bar(
        quiet,
        "{spinner} importing: {pos}/{len} entries, {rate} entries/s, {elapsed} {msg}",
    )
}

async fn import(
    sub: Submitter<'_>,
    a: &ImportArgs,
    dest: &ByteString,
    pb: &ProgressBar,
) -> Result<Tally> {
    let root = std::fs::metadata(&a.dir).map_err(|e| io_error("cannot import", &a.dir, e))?;
    if !root.is_dir() {
        return Err(io_error(
            "cannot import",
            &a.dir,
            std::io::ErrorKind::NotADirectory.into(),
        ));
    }
    if dest != "/" {
        // DEST and its parents, when missing, get DIR's attributes; an
        // existing DEST is left as it is.
        let attrs = attrs_of(&root, &mut Names::default());
        sub.submit(Command::Mkdir {
            path: dest.clone(),
            parents: true,
            mode: attrs.mode,
            owner: attrs.owner,
            group: attrs.group,
        })
        .await?;
    }
    let (tx, rx) = mpsc::channel(4096);
    let walker = {
        let (dir, dest, found) = (a.dir.clone(), dest.clone(), pb.clone());
        let xattrs = !a.no_xattrs;
        std::thread::Builder::new()
            .name("treelog-import-walk".into())
            .spawn(move || walk(dir, dest, xattrs, tx, found))?
    };
    let block_size = a.block_size;
    let done =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|w| (w, rx)) })
            .map(|w| async move {
                let r = import_one(sub, &w, block_size).await;
                (w, r)
            })
            .buffer_unordered(a.jobs.max(1));
    let mut done = std::pin::pin!(done);
    let mut tally = Tally::default();
    // The directories imported, with their times: set at the end.
    let mut dir_times: Vec<(ByteString, u64)> = Vec::new();
    while let Some((w, r)) = done.next().await {
        pb.inc(1);
        tally.xattrs += match r {
            Ok(()) => w.xattrs().len() as u64,
            Err(_) => 0,
        };
        match (w, r) {
            (Walked::Failed { what, local, error }, _) => {
                let line = format!("{what} {}: {error}", shown(&local));
                tally.fail(pb, line, &error);
            }
            (
                Walked::Dir { path, .. } | Walked::File { path, .. } | Walked::Symlink { path, .. },
                Err(e),
            ) => {
                let line = format!(
                    "cannot import {}: {}",
                    quote_always(&path),
                    reason(&e, &[&path.to_str_lossy()])
                );
                tally.fail(pb, line, &e);
            }
            (Walked::Dir { path, attrs, .. }, Ok(())) => {
                tally.dirs += 1;
                dir_times.push((path, attrs.mtime_ms));
            }
            (Walked::File { size, linked, .. }, Ok(())) => {
                tally.files += 1;
                tally.bytes += size;
                tally.linked += u64::from(linked);
            }
            (Walked::Symlink { .. }, Ok(())) => tally.symlinks += 1,
            (Walked::Other, _) => tally.other += 1,
        }
    }
    // The channel closed: the walker has returned.
    let _ = walker.join();
    let times = futures_util::stream::iter(dir_times)
        .map(|(path, mtime_ms)| async move {
            let cmd = Command::SetAttr {
                path: path.clone(),
                mode: None,
                owner: None,
                group: None,
                mtime_ms: Some(mtime_ms),
            };
            (path, sub.submit(cmd).await)
        })
        .buffer_unordered(a.jobs.max(1));
    let mut times = std::pin::pin!(times);
    while let Some((path, r)) = times.next().await {
        if let Err(e) = r {
            let line = format!(
                "cannot set the time of {}: {}",
                quote_always(&path),
                reason(&e, &[&path.to_str_lossy()])
            );
            tally.fail(pb, line, &e);
        }
    }
    Ok(tally)
}

pub(crate) fn run(cli: &Cli, out: &Out, a: &ImportArgs) -> Result<u8> {
    let dest = crate::path::canonical(&a.dest)?;
    let t = open(cli)?;
    let pb = progress_bar(a.quiet);
    let started = Instant::now();
    let tally = match &t {
        Backend::Local(t) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(import(Submitter::Local(t), a, &dest, &pb)),
        Backend::Remote { rt, client } => {
            rt.block_on(import(Submitter::Remote(client), a, &dest, &pb))
        }
    };
    pb.finish_and_clear();
    let tally = tally?;
    // The state that holds everything imported (for --min-seq): locally
    // this process is the only writer; a client has seen every write's.
    let seq = match &t {
        Backend::Local(t) => t.committed_seq(),
        Backend::Remote { client, .. } => client.seen_seq(),
    };
    let secs = started.elapsed().as_secs_f64();
    let entries = tally.dirs + tally.files + tally.symlinks;
    let rate = entries as f64 / secs.max(1e-9);
    if tally.other > 0 {
        let _ = writeln!(
            std::io::stderr(),
            "treelog: import: skipped {} entries that are not directories, regular files or symbolic links (devices, sockets, FIFOs)",
            tally.other
        );
    }
    if tally.linked > 0 {
        let _ = writeln!(
            std::io::stderr(),
            "treelog: import: {} files had a hard link imported before them: each name is a file of its own (treelog has no hard links)",
            tally.linked
        );
    }
    if tally.failed > SHOWN_FAILURES {
        let _ = writeln!(
            std::io::stderr(),
            "treelog: import: {} more failures not shown",
            tally.failed - SHOWN_FAILURES
        );
    }
    if out.json {
        out.print_json(&serde_json::json!({
            "ok": tally.failed == 0,
            "op": "import",
            "source": a.dir.to_string_lossy(),
            "dest": dest,
            "directories": tally.dirs,
            "files": tally.files,
            "symlinks": tally.symlinks,
            "bytes": tally.bytes,
            "xattrs": tally.xattrs,
            "hard_links": tally.linked,
            "skipped": {"other": tally.other},
            "failed": tally.failed,
            "first_failures": tally.first,
            "seconds": secs,
            "entries_per_sec": rate,
            "seq": seq,
        }))?;
    } else {
        outln!(
            out,
            "imported {entries} entries ({} directories, {} files ({}), {} symbolic links; {} extended attributes) into {} in {secs:.2} s, {rate:.0} entries/s; {} skipped, {} failed (seq {seq})",
            tally.dirs,
            tally.files,
            human_size(tally.bytes),
            tally.symlinks,
            tally.xattrs,
            crate::output::quote(&dest),
            tally.other,
            tally.failed
        )?;
    }
    Ok(tally.failure.code())
}
