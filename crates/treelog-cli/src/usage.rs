//! Reads of what format 2 added: `readlink`, `getfattr`, `count` and
//! `quota show`, each at a state --consistency and --min-seq allow (per
//! read: the paths of one command may be read at different states).

use crate::args::{Cli, ValueEncoding};
use crate::backend::open;
use crate::consistency::prepare;
use crate::describe::limit;
use crate::error::{Error, Result};
use crate::exit::{quote_always, reason, FirstFailure};
use crate::output::{outln, quote, Out};
use crate::timefmt::human_size;
use crate::types::{ContentSummary, Xattr};
use treelog::ByteString;

pub(crate) fn readlink(cli: &Cli, out: &Out, path: &ByteString) -> Result<u8> {
    let t = open(cli)?;
    let target = t.readlink_at(path, prepare(cli, &t)?)?;
    if out.json {
        out.print_json(&serde_json::json!({"path": path, "target": target}))?;
    } else {
        // Raw, as readlink(1) prints it: the bytes are the target.
        out.write_bytes(&target)?;
        out.write_bytes(b"\n")?;
    }
    Ok(0)
}

/// A value as getfattr shows it: `"text"` with `\ooo` for bytes that are
/// not printable ASCII (and for `"` and `\`), or `0x` and hex digits.
fn shown(v: &[u8], e: ValueEncoding) -> String {
    match e {
        ValueEncoding::Hex => format!("0x{}", crate::types::hex_string(v)),
        ValueEncoding::Text => {
            let mut s = String::with_capacity(v.len() + 2);
            s.push('"');
            for &b in v {
                if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
                    s.push(b as char);
                } else {
                    s.push_str(&format!("\\{b:03o}"));
                }
            }
            s.push('"');
            s
        }
    }
}

/// `getfattr [-n NAME] [--names-only] [-e ENC] PATH...`.
pub(crate) fn getfattr(
    cli: &Cli,
    out: &Out,
    name: Option<&str>,
    names_only: bool,
    encoding: ValueEncoding,
    paths: &[ByteString],
) -> Result<u8> {
    let t = open(cli)?;
    let at = prepare(cli, &t)?;
    let mut failure = FirstFailure::default();
    for p in paths {
        match t.xattrs_at(p, name, at) {
            Ok(attrs) if out.json => out.print_json(&serde_json::json!({
                "path": p,
                "xattrs": attrs.iter().map(|Xattr { name, value }| serde_json::json!({
                    "name": name,
                    "value_hex": crate::types::hex_string(value),
                })).collect::<Vec<_>>(),
            }))?,
            Ok(attrs) => {
                if attrs.is_empty() {
                    continue;
                }
                outln!(out, "# file: {}", quote(p))?;
                for a in &attrs {
                    if names_only {
                        outln!(out, "{}", a.name)?;
                    } else {
                        outln!(out, "{}={}", a.name, shown(&a.value, encoding))?;
                    }
                }
                outln!(out)?;
            }
            Err(e) => failed(out, &mut failure, "", p, &e)?,
        }
    }
    Ok(failure.code())
}

/// Reports a path's failure (a JSON line, or a line on standard error
/// after what was printed before it) and notes its exit code.
fn failed(
    out: &Out,
    failure: &mut FirstFailure,
    what: &str,
    p: &ByteString,
    e: &Error,
) -> Result<()> {
    failure.note(e.kind());
    if out.json {
        return out.print_json(&serde_json::json!({
            "ok": false, "path": p, "error": e.kind().as_str(), "message": e.to_string(),
        }));
    }
    out.flush()?;
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "treelog: {what}{}: {}",
        quote_always(p),
        reason(e, &[&p.to_str_lossy()])
    );
    Ok(())
}

fn size(n: u64, human: bool) -> String {
    if human {
        human_size(n)
    } else {
        n.to_string()
    }
}

/// `count [-q] [-h] PATH...`: as `hdfs dfs -count [-q]`, with symbolic
/// links in a column of their own.
pub(crate) fn count(
    cli: &Cli,
    out: &Out,
    quota: bool,
    human: bool,
    paths: &[ByteString],
) -> Result<u8> {
    let t = open(cli)?;
    let at = t.settle(prepare(cli, &t)?)?;
    let mut failure = FirstFailure::default();
    for p in paths {
        match t.count_at(p, at) {
            Ok(s) if out.json => out.print_json(&serde_json::json!({"path": p, "summary": s}))?,
            Ok(s) => {
                let mut line = String::new();
                if quota {
                    line.push_str(&quota_columns(&s, human));
                }
                let u = &s.usage;
                line.push_str(&format!(
                    "{:>12} {:>12} {:>12} {:>15} {}",
                    u.directories,
                    u.files,
                    u.symlinks,
                    size(u.bytes, human),
                    quote(p)
                ));
                outln!(out, "{line}")?;
            }
            Err(e) => failed(out, &mut failure, "count: ", p, &e)?,
        }
    }
    Ok(failure.code())
}

/// HDFS's `-q` columns: inode quota and what remains, byte quota and what
/// remains (`none` and `inf` without one).
fn quota_columns(s: &ContentSummary, human: bool) -> String {
    let (qi, ri, qb, rb) = match &s.quota {
        Some(q) => (
            limit(q.limit_inodes),
            q.limit_inodes.map_or("inf".into(), |l| {
                (l as i128 - q.usage.inodes() as i128).to_string()
            }),
            q.limit_bytes.map_or("none".into(), |l| size(l, human)),
            q.limit_bytes.map_or("inf".into(), |l| {
                let left = l as i128 - q.usage.bytes as i128;
                if left < 0 || !human {
                    left.to_string()
                } else {
                    human_size(left as u64)
                }
            }),
        ),
        None => ("none".into(), "inf".into(), "none".into(), "inf".into()),
    };
    format!("{qi:>12} {ri:>12} {qb:>15} {rb:>15} ")
}

/// `quota show PATH`.
pub(crate) fn quota_show(cli: &Cli, out: &Out, path: &ByteString) -> Result<u8> {
    let t = open(cli)?;
    let s = t.count_at(path, t.settle(prepare(cli, &t)?)?)?;
    if out.json {
        out.print_json(&serde_json::json!({"path": path, "quota": s.quota}))?;
        return Ok(0);
    }
    let Some(q) = s.quota else {
        outln!(out, "{}: no quota", quote(path))?;
        return Ok(0);
    };
    let u = &q.usage;
    outln!(out, "path:          {}", quote(path))?;
    outln!(
        out,
        "inodes:        {} used of {}",
        u.inodes(),
        limit(q.limit_inodes)
    )?;
    outln!(
        out,
        "bytes:         {} used of {}",
        u.bytes,
        limit(q.limit_bytes)
    )?;
    outln!(
        out,
        "usage:         {} directories, {} files, {} symbolic links below it",
        u.directories,
        u.files,
        u.symlinks
    )?;
    Ok(0)
}
