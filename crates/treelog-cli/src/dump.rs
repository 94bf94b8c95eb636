//! `treelog dump PATH` and `treelog load FILE DEST`: a subtree as JSON
//! Lines and back (what `juicefs dump`/`load` do for a volume's metadata).
//!
//! The dump is read at one pinned state (every line of it is of the same
//! sequence) and written depth first, a directory before its entries, each
//! directory's entries in name order, so that a load can create entries in
//! the order it reads them. Its first line names the format and the state;
//! its last line counts the entries, so that a truncated dump is refused
//! before anything is loaded. The layout is in docs/DUMP.md.
//!
//! A load sets what a client can set: kind, mode, owner, group, size and
//! completeness, block size, link target, extended attributes, and the
//! modification time (directories' last, once their entries are in).
//! Creation and change times are the load's own, and quotas are not part
//! of a dump (`treelog quota show` lists a directory's).

use std::collections::BTreeMap;
use std::io::{BufRead, BufWriter, Seek, Write};
use std::path::PathBuf;

use clap::Args;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use crate::args::Cli;
use crate::backend::{open, Backend};
use crate::command::Command;
use crate::error::{Error, Result};
use crate::exit::{quote_always, reason, FirstFailure};
use crate::import::Submitter;
use crate::output::{outln, Out};
use crate::types::{FileType, Inode, XattrFlag};
use treelog::{ByteString, ReadAt};

/// The version a dump's header carries; a load refuses any other.
const DUMP_VERSION: u32 = 1;

/// Entries read per listing request.
const PAGE: usize = 1000;

/// `treelog dump`.
#[derive(Args, Debug)]
pub(crate) struct DumpArgs {
    /// The subtree's root (a directory, or any single entry).
    #[arg(default_value = "/", value_parser = crate::args::BytesArg)]
    pub path: ByteString,
    /// Write to FILE (made durable before the command succeeds) instead of
    /// standard output.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// `treelog load`.
#[derive(Args, Debug)]
pub(crate) struct LoadArgs {
    /// A `treelog dump`'s output, or - for standard input.
    pub file: PathBuf,
    /// Where the dump's root goes (created with its missing parents; an
    /// existing entry fails alone, as with `import`).
    #[arg(value_parser = crate::args::BytesArg)]
    pub dest: ByteString,
    /// Entries in flight at once.
    #[arg(long, default_value_t = 256)]
    pub jobs: usize,
}

/// The first line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    treelog_dump: u32,
    /// The dumped path.
    root: ByteString,
    /// The state every entry was read at.
    seq: u64,
}

/// The last line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Trailer {
    end: bool,
    entries: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Dir,
    File,
    Symlink,
}

/// One entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    /// Relative to the dump's root: "" for the root, "a/b" below it.
    /// Names that are not UTF-8 take the escape `{"base64": …}`.
    path: ByteString,
    kind: Kind,
    mode: u32,
    owner: String,
    group: String,
    mtime_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    complete: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    block_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target: Option<ByteString>,
    /// Name → value in hexadecimal (values are bytes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    xattrs: BTreeMap<String, String>,
}

fn json_line(w: &mut impl Write, v: &impl Serialize) -> Result<()> {
    serde_json::to_writer(&mut *w, v).map_err(|e| Error::Io(e.into()))?;
    w.write_all(b"\n")?;
    Ok(())
}

/// One entry of the dump, read at `at`.
fn entry_of(b: &Backend, rel: ByteString, abs: &[u8], inode: &Inode, at: ReadAt) -> Result<Entry> {
    let a = &inode.attrs;
    let mut e = Entry {
        path: rel,
        kind: match a.kind {
            FileType::Directory => Kind::Dir,
            FileType::File => Kind::File,
            FileType::Symlink => Kind::Symlink,
        },
        mode: a.mode,
        owner: a.owner.clone(),
        group: a.group.clone(),
        mtime_ms: a.mtime_ms,
        size: None,
        complete: None,
        block_size: None,
        target: None,
        xattrs: BTreeMap::new(),
    };
    match a.kind {
        FileType::File => {
            e.size = Some(a.size);
            e.complete = Some(a.complete);
            e.block_size = Some(a.block_size);
        }
        FileType::Symlink => e.target = Some(b.readlink_at(abs, at)?),
        FileType::Directory => {}
    }
    for x in b.xattrs_at(abs, None, at)? {
        e.xattrs.insert(x.name, hex::encode(&x.value[..]));
    }
    Ok(e)
}

fn join_rel(rel: &[u8], name: &[u8]) -> ByteString {
    let mut out = ByteString::from(rel);
    if !rel.is_empty() {
        out.push(b'/');
    }
    out.push_bytes(name);
    out
}

fn write_dump(b: &Backend, root: &[u8], seq: u64, w: &mut impl Write) -> Result<u64> {
    let at = ReadAt::Exactly(seq);
    json_line(
        w,
        &Header {
            treelog_dump: DUMP_VERSION,
            root: root.into(),
            seq,
        },
    )?;
    let top = b.stat_at(root, at)?.value;
    json_line(w, &entry_of(b, ByteString::new(), root, &top, at)?)?;
    let mut entries = 1u64;
    // Directories being listed: (absolute path, relative path, where the
    // next page starts). Depth first: memory is one page per level.
    let mut stack: Vec<(ByteString, ByteString, Option<ByteString>)> = Vec::new();
    if top.attrs.kind.is_dir() {
        stack.push((root.into(), ByteString::new(), None));
    }
    while let Some((abs, rel, after)) = stack.pop() {
        let page = b.list_at(&abs, after.as_deref(), PAGE, at)?;
        let mut descend = None;
        let mut next = page.next_start_after;
        for (i, d) in page.entries.iter().enumerate() {
            let (cabs, crel) = (crate::path::join(&abs, &d.name), join_rel(&rel, &d.name));
            json_line(w, &entry_of(b, crel.clone(), &cabs, &d.inode, at)?)?;
            entries += 1;
            if d.inode.attrs.kind.is_dir() {
                // Its entries come next; this directory resumes after it.
                descend = Some((cabs, crel));
                next = if i + 1 < page.entries.len() || next.is_some() {
                    Some(d.name.clone())
                } else {
                    None
                };
                break;
            }
        }
        if let Some(after) = next {
            stack.push((abs, rel, Some(after)));
        }
        if let Some((cabs, crel)) = descend {
            stack.push((cabs, crel, None));
        }
    }
    json_line(w, &Trailer { end: true, entries })?;
    Ok(entries)
}

pub(crate) fn dump(cli: &Cli, out: &Out, a: &DumpArgs) -> Result<u8> {
    let root = crate::path::canonical(&a.path)?;
    let b = open(cli)?;
    let seq = b.pin_view_at(crate::consistency::prepare(cli, &b)?)?;
    let result = match &a.output {
        Some(file) => {
            let f = std::fs::File::create(file)?;
            let mut w = BufWriter::new(f);
            let n = write_dump(&b, &root, seq, &mut w);
            n.and_then(|n| {
                let f = w.into_inner().map_err(|e| Error::Io(e.into_error()))?;
                f.sync_all()?;
                Ok(n)
            })
        }
        None => {
            let stdout = std::io::stdout();
            let mut w = BufWriter::new(stdout.lock());
            write_dump(&b, &root, seq, &mut w).and_then(|n| {
                w.flush()?;
                Ok(n)
            })
        }
    };
    b.unpin_view(seq);
    let n = result?;
    if let Some(file) = &a.output {
        outln!(
            out,
            "dumped {n} entries of {} at seq {seq} to {}",
            crate::output::quote(&root),
            file.display()
        )?;
    }
    Ok(0)
}

/// A dump's lines after the header, checked whole before anything is
/// loaded: every line parses, the trailer is there and counts them.
fn check(r: &mut impl BufRead) -> Result<(Header, u64)> {
    let bad = |line: u64, detail: String| Error::corrupt("dump", format!("line {line}: {detail}"));
    let mut lines = 0u64;
    let mut header = None;
    let mut trailer = None;
    let mut buf = String::new();
    loop {
        buf.clear();
        if r.read_line(&mut buf)? == 0 {
            break;
        }
        lines += 1;
        if trailer.is_some() {
            return Err(bad(lines, "a line after the end".into()));
        }
        let text = buf.trim_end_matches('\n');
        if lines == 1 {
            let h: Header = serde_json::from_str(text)
                .map_err(|e| bad(1, format!("not a treelog dump header ({e})")))?;
            if h.treelog_dump != DUMP_VERSION {
                return Err(Error::InvalidArgument(format!(
                    "a dump of version {} (this treelog reads version {DUMP_VERSION})",
                    h.treelog_dump
                )));
            }
            header = Some(h);
        } else if let Ok(t) = serde_json::from_str::<Trailer>(text) {
            trailer = Some(t);
        } else {
            let e: Entry = serde_json::from_str(text).map_err(|e| bad(lines, e.to_string()))?;
            validate(&e).map_err(|d| bad(lines, d))?;
            if (lines == 2) != e.path.is_empty() {
                return Err(bad(
                    lines,
                    "the root entry must come first, and once".into(),
                ));
            }
        }
    }
    let header = header.ok_or_else(|| bad(0, "empty".into()))?;
    let t = trailer.ok_or_else(|| bad(lines, "truncated: no end line".into()))?;
    let entries = lines - 2;
    if !t.end || t.entries != entries {
        return Err(bad(
            lines,
            format!("the end line counts {} entries, {entries} read", t.entries),
        ));
    }
    Ok((header, entries))
}

/// What a load could not do something with, before it writes anything.
fn validate(e: &Entry) -> std::result::Result<(), String> {
    if e.path.starts_with(b"/") || e.path.ends_with(b"/") {
        return Err(format!("path {:?} is not relative", e.path));
    }
    if e.path
        .split(|b| *b == b'/')
        .any(|c| c == b"." || c == b"..")
    {
        return Err(format!("path {:?} has . or ..", e.path));
    }
    let fields = (e.size.is_some(), e.target.is_some());
    let ok = match e.kind {
        Kind::Dir => fields == (false, false),
        Kind::File => fields == (true, false),
        Kind::Symlink => fields == (false, true),
    };
    if !ok {
        return Err(format!("fields that a {:?} does not have", e.kind));
    }
    for v in e.xattrs.values() {
        hex::decode(v).map_err(|err| format!("xattr value: {err}"))?;
    }
    Ok(())
}

/// One entry's commands, each after the one before.
async fn load_one(sub: Submitter<'_>, dest: &[u8], e: &Entry) -> Result<()> {
    let path = if e.path.is_empty() {
        ByteString::from(dest)
    } else {
        crate::path::join(dest, &e.path)
    };
    match e.kind {
        Kind::Dir => {
            sub.submit(Command::Mkdir {
                path: path.clone(),
                parents: true,
                mode: e.mode,
                owner: e.owner.clone(),
                group: e.group.clone(),
            })
            .await?;
            sub.submit(Command::SetAttr {
                path: path.clone(),
                mode: Some(e.mode),
                owner: Some(e.owner.clone()),
                group: Some(e.group.clone()),
                mtime_ms: None,
            })
            .await?;
        }
        Kind::File => {
            sub.submit(Command::Create {
                path: path.clone(),
                parents: true,
                mode: e.mode,
                owner: e.owner.clone(),
                group: e.group.clone(),
                block_size: e.block_size.unwrap_or(crate::types::DEFAULT_BLOCK_SIZE),
            })
            .await?;
            let size = e.size.unwrap_or(0);
            if e.complete == Some(true) {
                sub.submit(Command::Complete {
                    path: path.clone(),
                    size,
                })
                .await?;
            } else if size != 0 {
                sub.submit(Command::SetSize {
                    path: path.clone(),
                    size,
                })
                .await?;
            }
        }
        Kind::Symlink => {
            sub.submit(Command::Symlink {
                target: e.target.clone().unwrap_or_default(),
                path: path.clone(),
                parents: true,
                owner: e.owner.clone(),
                group: e.group.clone(),
            })
            .await?;
        }
    }
    for (name, value) in &e.xattrs {
        let value = hex::decode(value).map_err(|err| Error::InvalidArgument(err.to_string()))?;
        sub.submit(Command::SetXattr {
            path: path.clone(),
            name: name.clone(),
            value: value.into(),
            flag: XattrFlag::Either,
        })
        .await?;
    }
    if e.kind != Kind::Dir {
        sub.submit(Command::SetAttr {
            path,
            mode: None,
            owner: None,
            group: None,
            mtime_ms: Some(e.mtime_ms),
        })
        .await?;
    }
    Ok(())
}

#[derive(Default)]
struct Loaded {
    entries: u64,
    failed: u64,
    failure: FirstFailure,
}

async fn load_all(sub: Submitter<'_>, r: impl BufRead, dest: &[u8], jobs: usize) -> Result<Loaded> {
    // Lines after the header, as entries (the check passed: they parse).
    let entries = r.lines().skip(1).filter_map(|l| {
        let l = l.ok()?;
        serde_json::from_str::<Entry>(&l).ok()
    });
    let mut done = std::pin::pin!(futures_util::stream::iter(entries)
        .map(|e| async move {
            let r = load_one(sub, dest, &e).await;
            (e, r)
        })
        .buffer_unordered(jobs.max(1)));
    let mut loaded = Loaded::default();
    let mut dir_times = Vec::new();
    let note = |loaded: &mut Loaded, path: &ByteString, e: &Error| {
        loaded.failed += 1;
        loaded.failure.note(e.kind());
        if loaded.failed <= 10 {
            eprintln!(
                "treelog: load: cannot load {}: {}",
                quote_always(path),
                reason(e, &[&path.to_str_lossy()])
            );
        }
    };
    while let Some((e, r)) = done.next().await {
        let path = if e.path.is_empty() {
            ByteString::from(dest)
        } else {
            crate::path::join(dest, &e.path)
        };
        match r {
            Ok(()) => {
                loaded.entries += 1;
                if e.kind == Kind::Dir {
                    dir_times.push((path, e.mtime_ms));
                }
            }
            Err(err) => note(&mut loaded, &path, &err),
        }
    }
    // Deepest first is not needed: setting a time changes no parent's.
    for (path, mtime_ms) in dir_times {
        let cmd = Command::SetAttr {
            path: path.clone(),
            mode: None,
            owner: None,
            group: None,
            mtime_ms: Some(mtime_ms),
        };
        if let Err(err) = sub.submit(cmd).await {
            note(&mut loaded, &path, &err);
        }
    }
    Ok(loaded)
}

/// The dump as a file that can be read twice (standard input is spooled
/// to an unlinked temporary file).
fn dump_file(path: &std::path::Path) -> Result<std::fs::File> {
    if path.as_os_str() != "-" {
        return Ok(std::fs::File::open(path)?);
    }
    let dir = std::env::temp_dir();
    let tmp = dir.join(format!("treelog-load-{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    std::fs::remove_file(&tmp)?;
    std::io::copy(&mut std::io::stdin().lock(), &mut f)?;
    f.rewind()?;
    Ok(f)
}

pub(crate) fn load(cli: &Cli, out: &Out, a: &LoadArgs) -> Result<u8> {
    let dest = crate::path::canonical(&a.dest)?;
    let mut f = dump_file(&a.file)?;
    let (header, entries) = check(&mut std::io::BufReader::new(&mut f))?;
    f.rewind()?;
    let t = open(cli)?;
    let r = std::io::BufReader::new(f);
    let loaded = match &t {
        Backend::Local(t) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(load_all(Submitter::Local(t), r, &dest, a.jobs)),
        Backend::Remote { rt, client } => {
            rt.block_on(load_all(Submitter::Remote(client), r, &dest, a.jobs))
        }
    }?;
    if out.json {
        out.print_json(&serde_json::json!({
            "ok": loaded.failed == 0,
            "op": "load",
            "source_root": header.root,
            "source_seq": header.seq,
            "dest": dest,
            "entries": entries,
            "loaded": loaded.entries,
            "failed": loaded.failed,
        }))?;
    } else {
        outln!(
            out,
            "loaded {} of {entries} entries (dump of {} at seq {}) into {}; {} failed",
            loaded.entries,
            crate::output::quote(&header.root),
            header.seq,
            crate::output::quote(&dest),
            loaded.failed
        )?;
    }
    Ok(loaded.failure.code())
}
