//! The namespace's reading commands: ls and stat.

use crate::args::Cli;
use crate::backend::{open, Backend};
use crate::describe::{long_line, mode_string};
use crate::error::{Error, Result};
use crate::output::{outln, quote, Out};
use crate::types::Inode;
use treelog::ReadAt;

fn print_stat(out: &Out, i: &Inode, path: &str) -> Result<()> {
    if out.json {
        return out.print_json(&serde_json::json!({"path": path, "inode": i}));
    }
    outln!(out, "path:       {}", quote(path))?;
    outln!(out, "id:         {}", i.id)?;
    outln!(out, "parent:     {}", i.parent)?;
    outln!(
        out,
        "type:       {}",
        if i.attrs.kind.is_dir() {
            "directory"
        } else {
            "file"
        }
    )?;
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
    outln!(out, "ctime_ms:   {}", i.attrs.ctime_ms)?;
    outln!(out, "mtime_ms:   {}", i.attrs.mtime_ms)
}

#[allow(clippy::too_many_arguments)]
fn list_into(
    t: &Backend,
    out: &Out,
    path: &str,
    long: bool,
    recursive: bool,
    start_after: Option<&str>,
    limit: Option<usize>,
    json_rows: &mut Vec<serde_json::Value>,
    at: ReadAt,
) -> Result<()> {
    let entries = match (limit, start_after) {
        (Some(l), _) => t.list_at(path, start_after, l, at)?.entries,
        (None, Some(_)) => {
            let mut v = Vec::new();
            let mut after = start_after.map(str::to_owned);
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
    if recursive && !out.json {
        outln!(out, "{}:", quote(&dir))?;
    }
    for e in &entries {
        let full = crate::path::join(&dir, &e.name);
        if out.json {
            json_rows.push(serde_json::json!({"path": full, "name": e.name, "inode": e.inode}));
        } else if long {
            outln!(out, "{}", long_line(&e.inode, &e.name))?;
        } else {
            outln!(
                out,
                "{}{}",
                quote(&e.name),
                if e.inode.attrs.kind.is_dir() { "/" } else { "" }
            )?;
        }
    }
    if recursive {
        for e in entries.iter().filter(|e| e.inode.attrs.kind.is_dir()) {
            let full = crate::path::join(&dir, &e.name);
            if !out.json {
                outln!(out)?;
            }
            list_into(t, out, &full, long, true, None, limit, json_rows, at)?;
        }
    }
    Ok(())
}

pub fn ls(
    cli: &Cli,
    out: &Out,
    long: bool,
    recursive: bool,
    start_after: Option<&str>,
    limit: Option<usize>,
    path: &str,
) -> Result<u8> {
    let t = open(cli)?;
    // Every page and directory at one committed state, pinned for
    // the listing: a tree that moves meanwhile is never seen
    // half-moved (docs/READS.md).
    let pinned = t.pin_view()?;
    let listed = (|| -> Result<Vec<serde_json::Value>> {
        let at = ReadAt::Exactly(pinned);
        let st = t.stat_at(path, at)?;
        let mut rows = Vec::new();
        if st.attrs.kind.is_dir() {
            list_into(
                &t,
                out,
                path,
                long,
                recursive,
                start_after,
                limit,
                &mut rows,
                at,
            )?;
        } else if out.json {
            rows.push(serde_json::json!({"path": crate::path::canonical(path)?, "name": st.name, "inode": st}));
        } else if long {
            outln!(out, "{}", long_line(&st, path))?;
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

pub fn stat(cli: &Cli, out: &Out, id: Option<u64>, path: Option<&str>) -> Result<u8> {
    let t = open(cli)?;
    let (ino, p) = match (id, path) {
        (Some(id), _) => (t.stat_id(id)?, t.path_of(id)?),
        (None, Some(p)) => (t.stat(p)?, crate::path::canonical(p)?),
        (None, None) => return Err(Error::InvalidArgument("give a path or --id".into())),
    };
    print_stat(out, &ino, &p)?;
    Ok(0)
}
