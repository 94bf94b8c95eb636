//! The namespace's reading commands: ls and stat, each at one pinned
//! committed state that --consistency and --min-seq allow.

use std::io::Write;

use crate::args::{Cli, LsArgs};
use crate::backend::{open, Backend};
use crate::describe::{long_line, mode_string, LongFormat};
use crate::error::{Error, Result};
use crate::exit::{quote_always, reason, FirstFailure};
use crate::output::{outln, quote, Out};
use crate::timefmt::{TimeFormatter, TimeStyle};
use crate::types::Inode;
use treelog::bytestr::BStr;
use treelog::{ByteString, ReadAt};

/// One stat's output; `seq` is the state it was read at (in --json).
fn print_stat(out: &Out, i: &Inode, path: &ByteString, seq: u64) -> Result<()> {
    if out.json {
        return out.print_json(&serde_json::json!({"path": path, "inode": i, "seq": seq}));
    }
    outln!(out, "path:       {}", quote(path))?;
    outln!(out, "id:         {}", i.id)?;
    outln!(out, "parent:     {}", i.parent)?;
    outln!(out, "type:       {}", i.attrs.kind.as_str())?;
    outln!(out, "mode:       {:04o} ({})", i.attrs.mode, mode_string(i))?;
    // Empty (unset) stays empty rather than `''`.
    let q = |s: &str| {
        if s.is_empty() {
            String::new()
        } else {
            quote(s).into_owned()
        }
    };
    outln!(out, "owner:      {}", q(&i.attrs.owner))?;
    outln!(out, "group:      {}", q(&i.attrs.group))?;
    outln!(out, "size:       {}", i.attrs.size)?;
    outln!(out, "block_size: {}", i.attrs.block_size)?;
    outln!(out, "complete:   {}", i.attrs.complete)?;
    // The milliseconds as stored, and the date they are.
    let times = TimeFormatter::new(TimeStyle::full_iso());
    outln!(
        out,
        "ctime_ms:   {} ({})",
        i.attrs.ctime_ms,
        times.format(i.attrs.ctime_ms)
    )?;
    outln!(
        out,
        "mtime_ms:   {} ({})",
        i.attrs.mtime_ms,
        times.format(i.attrs.mtime_ms)
    )?;
    outln!(
        out,
        "change_ms:  {} ({})",
        i.attrs.change_ms,
        times.format(i.attrs.change_ms)
    )
}

/// What a listing prints, the same for every directory of `ls -R`.
struct Listing<'a> {
    t: &'a Backend,
    out: &'a Out,
    /// `-l`: how its lines look.
    long: Option<&'a LongFormat>,
    recursive: bool,
    limit: Option<usize>,
    at: ReadAt,
}

impl Listing<'_> {
    fn list_into(
        &self,
        path: &[u8],
        start_after: Option<&BStr>,
        json_rows: &mut Vec<serde_json::Value>,
    ) -> Result<()> {
        let (t, out, at) = (self.t, self.out, self.at);
        let entries = match (self.limit, start_after) {
            (Some(l), _) => t.list_at(path, start_after, l, at)?.entries,
            (None, Some(_)) => {
                let mut v = Vec::new();
                let mut after = start_after.map(ByteString::from);
                loop {
                    let p = t.list_at(path, after.as_deref(), 1000, at)?;
                    v.extend(p.entries);
                    match p.next_start_after {
                        Some(n) => after = Some(n),
                        None => break,
                    }
                }
                v
            }
            (None, None) => t.list_all_at(path, at)?,
        };
        let dir = crate::path::canonical(path)?;
        if self.recursive && !out.json {
            outln!(out, "{}:", quote(&dir))?;
        }
        for e in &entries {
            let full = crate::path::join(&dir, &e.name);
            if out.json {
                json_rows.push(serde_json::json!({"path": full, "name": e.name, "inode": e.inode}));
            } else if let Some(long) = self.long {
                outln!(out, "{}", long_line(&e.inode, &e.name, long))?;
            } else {
                outln!(
                    out,
                    "{}{}",
                    quote(&e.name),
                    if e.inode.attrs.kind.is_dir() { "/" } else { "" }
                )?;
            }
        }
        if self.recursive {
            for e in entries.iter().filter(|e| e.inode.attrs.kind.is_dir()) {
                let full = crate::path::join(&dir, &e.name);
                if !out.json {
                    outln!(out)?;
                }
                self.list_into(&full, None, json_rows)?;
            }
        }
        Ok(())
    }
}

pub(crate) fn ls(cli: &Cli, out: &Out, a: &LsArgs) -> Result<u8> {
    let path = &a.path;
    let long_format = (a.long || a.full_time).then(|| {
        let style = match (&a.time_style, a.full_time) {
            (Some(s), _) => s.clone(),
            (None, true) => TimeStyle::full_iso(),
            (None, false) => TimeStyle::locale(),
        };
        LongFormat::new(style, a.human_readable)
    });
    let t = open(cli)?;
    // Every page and directory at one committed state, pinned for
    // the listing: a tree that moves meanwhile is never seen
    // half-moved (docs/READS.md); one that --consistency and --min-seq
    // allow.
    let pinned = t.pin_view_at(crate::consistency::prepare(cli, &t)?)?;
    let listed = (|| -> Result<Vec<serde_json::Value>> {
        let at = ReadAt::Exactly(pinned);
        let st = t.stat_at(path, at)?.value;
        let mut rows = Vec::new();
        if st.attrs.kind.is_dir() {
            let listing = Listing {
                t: &t,
                out,
                long: long_format.as_ref(),
                recursive: a.recursive,
                limit: a.limit,
                at,
            };
            listing.list_into(path, a.start_after.as_deref(), &mut rows)?;
        } else if out.json {
            rows.push(serde_json::json!({"path": crate::path::canonical(path)?, "name": st.name, "inode": st}));
        } else if let Some(long) = &long_format {
            outln!(out, "{}", long_line(&st, path, long))?;
        } else {
            outln!(out, "{}", quote(path))?;
        }
        Ok(rows)
    })();
    t.unpin_view(pinned);
    let rows = listed?;
    if out.json {
        out.print_json(&rows)?;
    }
    Ok(0)
}

/// `stat PATH...` (all at one pinned state, like `ls`), or `stat --id ID`.
/// As coreutils' stat, a missing path is reported and the others are
/// still shown; the exit code is then that of the first failure.
pub(crate) fn stat(cli: &Cli, out: &Out, id: Option<u64>, paths: &[ByteString]) -> Result<u8> {
    let t = open(cli)?;
    let pinned = t.pin_view_at(crate::consistency::prepare(cli, &t)?)?;
    let r = stat_pinned(&t, out, id, paths, pinned);
    t.unpin_view(pinned);
    r
}

fn stat_pinned(
    t: &Backend,
    out: &Out,
    id: Option<u64>,
    paths: &[ByteString],
    pinned: u64,
) -> Result<u8> {
    let at = ReadAt::Exactly(pinned);
    if let Some(id) = id {
        let ino = t.stat_id_at(id, at)?;
        print_stat(out, &ino, &t.path_of(id, at)?, pinned)?;
        return Ok(0);
    }
    if paths.is_empty() {
        return Err(Error::InvalidArgument("give a path or --id".into()));
    }
    let mut failure = FirstFailure::default();
    for (n, p) in paths.iter().enumerate() {
        let read = t
            .stat_at(p, at)
            .and_then(|r| Ok((r.value, crate::path::canonical(p)?)));
        match read {
            Ok((ino, canonical)) => {
                if n > 0 && !out.json {
                    outln!(out)?;
                }
                print_stat(out, &ino, &canonical, pinned)?;
            }
            // The connection or the pin is gone: no other path can be read.
            Err(e) if !e.kind().is_user_error() => return Err(e),
            Err(e) => {
                failure.note(e.kind());
                if out.json {
                    out.print_json(&serde_json::json!({
                        "ok": false, "path": p, "seq": pinned,
                        "error": e.kind().as_str(), "message": e.to_string(),
                    }))?;
                } else {
                    // What was printed for the operands before stays before.
                    out.flush()?;
                    let _ = writeln!(
                        std::io::stderr(),
                        "treelog: cannot stat {}: {}",
                        quote_always(p),
                        reason(&e, &[&p.to_str_lossy()])
                    );
                }
            }
        }
    }
    Ok(failure.code())
}
