//! The namespace's mutating commands: mkdir, touch, mv, rm, chmod, chown,
//! touchtime, complete, setsize, ln -s, setfattr, quota set and clear.
//!
//! Like coreutils, a command with several operands (`mkdir -p A B C`)
//! runs each on its own, in order, as its own command (its own log
//! record): a failure is reported for its operand (on standard error, or
//! as a JSON line with `--json`) and the others still run. The exit code
//! is that of the first failure (see [`FirstFailure`]), 0 when none failed.

use std::io::Write;

use crate::args::{Cli, OwnerArgs};
use crate::backend::open;
use crate::command::Command;
use crate::error::{Error, ErrorKind, Result};
use crate::exit::{quote_always, reason, FirstFailure};
use crate::output::{outln, quote, Out};
use crate::types::{DEFAULT_DIR_MODE, DEFAULT_FILE_MODE};
use treelog::ByteString;

/// Prints the confirmation of a mutation.
pub(crate) fn mutation(out: &Out, what: &str, path: &ByteString, seq: u64) -> Result<()> {
    if out.json {
        out.print_json(&serde_json::json!({"ok": true, "op": what, "path": path, "seq": seq}))
    } else {
        outln!(out, "{what} {} (seq {seq})", quote(path))
    }
}

/// One operand's command.
struct Op {
    /// The operation's name in the output (`mkdir`, `create`, ...).
    what: &'static str,
    /// The operand: a path, or for `mv` the source.
    path: ByteString,
    /// `mv`'s destination.
    dst: Option<ByteString>,
    cmd: Command,
}

impl Op {
    fn new(what: &'static str, path: &ByteString, cmd: Command) -> Op {
        Op {
            what,
            path: path.clone(),
            dst: None,
            cmd,
        }
    }
}

/// How a command words a failure: `cannot create directory` for mkdir;
/// chmod says `cannot access` for a missing path and `changing
/// permissions of` otherwise, as GNU's do.
type Verb = fn(ErrorKind) -> &'static str;

/// Runs `ops` one after the other (see the module's documentation).
/// `ignored` failures (`rm -f` of a missing path) are neither printed nor
/// counted. An error before the first operand (opening the data directory,
/// connecting) fails the whole command, as it always did.
fn run_ops(
    cli: &Cli,
    out: &Out,
    ops: Vec<Op>,
    verb: Verb,
    ignored: impl Fn(&Error) -> bool,
) -> Result<u8> {
    let t = open(cli)?;
    let mut failure = FirstFailure::default();
    for op in ops {
        let Op {
            what,
            path,
            dst,
            cmd,
        } = op;
        let shown = match &dst {
            Some(d) => {
                let mut s = path.clone();
                s.push_bytes(" -> ");
                s.push_bytes(d);
                s
            }
            None => path.clone(),
        };
        match t.submit(cmd) {
            Ok(seq) if out.json => {
                let mut v = serde_json::json!({"ok": true, "op": what, "path": shown, "seq": seq});
                if let Some(d) = &dst {
                    v["src"] = serde_json::to_value(&path).unwrap_or_default();
                    v["dst"] = serde_json::to_value(d).unwrap_or_default();
                }
                out.print_json(&v)?;
            }
            Ok(seq) => match &dst {
                Some(d) => outln!(out, "{what} {} -> {} (seq {seq})", quote(&path), quote(d))?,
                None => mutation(out, what, &path, seq)?,
            },
            Err(e) if ignored(&e) => {}
            Err(e) => {
                failure.note(e.kind());
                if out.json {
                    let mut v = serde_json::json!({
                        "ok": false, "op": what, "path": shown,
                        "error": e.kind().as_str(), "message": e.to_string(),
                    });
                    if let Some(d) = &dst {
                        v["src"] = serde_json::to_value(&path).unwrap_or_default();
                        v["dst"] = serde_json::to_value(d).unwrap_or_default();
                    }
                    out.print_json(&v)?;
                } else {
                    // What was printed for the operands before stays before.
                    out.flush()?;
                    let line = match &dst {
                        Some(d) => format!(
                            "treelog: {} {} to {}: {}",
                            verb(e.kind()),
                            quote_always(&path),
                            quote_always(d),
                            reason(&e, &[&path.to_str_lossy(), &d.to_str_lossy()])
                        ),
                        None => format!(
                            "treelog: {} {}: {}",
                            verb(e.kind()),
                            quote_always(&path),
                            reason(&e, &[&path.to_str_lossy()])
                        ),
                    };
                    // Not eprintln!: it panics when standard error is closed.
                    let _ = writeln!(std::io::stderr(), "{line}");
                }
            }
        }
    }
    Ok(failure.code())
}

fn never(_: &Error) -> bool {
    false
}

pub(crate) fn mkdir(
    cli: &Cli,
    out: &Out,
    parents: bool,
    o: &OwnerArgs,
    paths: &[ByteString],
) -> Result<u8> {
    let ops = paths
        .iter()
        .map(|p| {
            Op::new(
                "mkdir",
                p,
                Command::Mkdir {
                    path: p.clone(),
                    parents,
                    mode: o.mode.unwrap_or(DEFAULT_DIR_MODE),
                    owner: o.owner.clone(),
                    group: o.group.clone(),
                },
            )
        })
        .collect();
    run_ops(cli, out, ops, |_| "cannot create directory", never)
}

pub(crate) fn touch(
    cli: &Cli,
    out: &Out,
    parents: bool,
    o: &OwnerArgs,
    block_size: u64,
    paths: &[ByteString],
) -> Result<u8> {
    let ops = paths
        .iter()
        .map(|p| {
            Op::new(
                "create",
                p,
                Command::Create {
                    path: p.clone(),
                    parents,
                    mode: o.mode.unwrap_or(DEFAULT_FILE_MODE),
                    owner: o.owner.clone(),
                    group: o.group.clone(),
                    block_size,
                },
            )
        })
        .collect();
    run_ops(cli, out, ops, |_| "cannot touch", never)
}

/// The last component of `path` (`mv A B DIR` moves A to DIR/A).
fn basename(path: &[u8]) -> Result<&[u8]> {
    crate::path::components(path)?
        .last()
        .copied()
        .ok_or_else(|| Error::InvalidArgument("the root cannot be moved".into()))
}

/// `mv SRC DST` renames SRC to exactly DST (GNU's `mv -T`: an existing
/// directory DST is replaced with `-f` if empty, never moved into);
/// `mv SRC... DIR` with several sources, or `mv SRC DIR/` with a trailing
/// slash, moves each source into DIR under its own name.
pub(crate) fn mv(cli: &Cli, out: &Out, overwrite: bool, operands: &[ByteString]) -> Result<u8> {
    let (dst, srcs) = operands
        .split_last()
        .ok_or_else(|| Error::InvalidArgument("mv needs a source and a destination".into()))?;
    let into_dir = srcs.len() > 1 || dst.ends_with(b"/");
    let dir = match dst.strip_suffix(b"/") {
        Some(d) if !d.is_empty() => d,
        _ => dst.as_bytes(),
    };
    let mut ops = Vec::with_capacity(srcs.len());
    for src in srcs {
        let to = match basename(src.as_ref()) {
            Ok(name) if into_dir => crate::path::join(dir, name),
            // Not moved into DIR: the rename refuses the source itself
            // (the root, a bad path), naming the operand.
            _ => dst.clone(),
        };
        ops.push(Op {
            what: "rename",
            path: src.clone(),
            dst: Some(to.clone()),
            cmd: Command::Rename {
                src: src.clone(),
                dst: to,
                overwrite,
            },
        });
    }
    run_ops(cli, out, ops, |_| "cannot move", never)
}

/// `rm [-r] [-f] PATH...`; with `-f` a path that does not exist is no
/// error (and not mentioned), as with GNU `rm -f`.
pub(crate) fn rm(
    cli: &Cli,
    out: &Out,
    recursive: bool,
    force: bool,
    paths: &[ByteString],
) -> Result<u8> {
    if paths.is_empty() {
        return Ok(0);
    }
    let ops = paths
        .iter()
        .map(|p| {
            Op::new(
                "delete",
                p,
                Command::Delete {
                    path: p.clone(),
                    recursive,
                },
            )
        })
        .collect();
    run_ops(
        cli,
        out,
        ops,
        |_| "cannot remove",
        move |e| force && e.kind() == ErrorKind::NotFound,
    )
}

fn set_attr(
    path: &ByteString,
    mode: Option<u32>,
    owner: Option<String>,
    group: Option<String>,
    mtime_ms: Option<u64>,
) -> Command {
    Command::SetAttr {
        path: path.to_owned(),
        mode,
        owner,
        group,
        mtime_ms,
    }
}

pub(crate) fn chmod(cli: &Cli, out: &Out, mode: u32, paths: &[ByteString]) -> Result<u8> {
    let ops = paths
        .iter()
        .map(|p| Op::new("chmod", p, set_attr(p, Some(mode), None, None, None)))
        .collect();
    run_ops(
        cli,
        out,
        ops,
        |k| match k {
            ErrorKind::NotFound => "cannot access",
            _ => "changing permissions of",
        },
        never,
    )
}

/// `OWNER`, `OWNER:GROUP` or `:GROUP` (`OWNER:` sets the group to none).
fn parse_owner_group(spec: &str) -> (Option<String>, Option<String>) {
    match spec.split_once(':') {
        Some((o, g)) => ((!o.is_empty()).then(|| o.to_owned()), Some(g.to_owned())),
        None => (Some(spec.to_owned()), None),
    }
}

pub(crate) fn chown(cli: &Cli, out: &Out, spec: &str, paths: &[ByteString]) -> Result<u8> {
    let (owner, group) = parse_owner_group(spec);
    let ops = paths
        .iter()
        .map(|p| {
            Op::new(
                "chown",
                p,
                set_attr(p, None, owner.clone(), group.clone(), None),
            )
        })
        .collect();
    run_ops(
        cli,
        out,
        ops,
        |k| match k {
            ErrorKind::NotFound => "cannot access",
            _ => "changing ownership of",
        },
        never,
    )
}

pub(crate) fn touchtime(cli: &Cli, out: &Out, mtime_ms: u64, paths: &[ByteString]) -> Result<u8> {
    let ops = paths
        .iter()
        .map(|p| {
            Op::new(
                "set_mtime",
                p,
                set_attr(p, None, None, None, Some(mtime_ms)),
            )
        })
        .collect();
    run_ops(
        cli,
        out,
        ops,
        |k| match k {
            ErrorKind::NotFound => "cannot access",
            _ => "setting times of",
        },
        never,
    )
}

pub(crate) fn complete(cli: &Cli, out: &Out, path: &ByteString, size: u64) -> Result<u8> {
    let op = Op::new(
        "complete",
        path,
        Command::Complete {
            path: path.to_owned(),
            size,
        },
    );
    run_ops(cli, out, vec![op], |_| "cannot complete", never)
}

pub(crate) fn setsize(cli: &Cli, out: &Out, path: &ByteString, size: u64) -> Result<u8> {
    let op = Op::new(
        "set_size",
        path,
        Command::SetSize {
            path: path.to_owned(),
            size,
        },
    );
    run_ops(cli, out, vec![op], |_| "cannot set the size of", never)
}

/// `ln -s TARGET LINK`.
pub(crate) fn ln(
    cli: &Cli,
    out: &Out,
    a: (&ByteString, &ByteString),
    parents: bool,
    owner: &str,
    group: &str,
) -> Result<u8> {
    let (target, link) = a;
    let op = Op {
        what: "symlink",
        path: link.to_owned(),
        dst: None,
        cmd: Command::Symlink {
            target: target.to_owned(),
            path: link.to_owned(),
            parents,
            owner: owner.to_owned(),
            group: group.to_owned(),
        },
    };
    run_ops(
        cli,
        out,
        vec![op],
        |_| "failed to create symbolic link",
        never,
    )
}

/// A setfattr value: `0x` and hex digits, or the text's bytes.
fn parse_value(v: &str) -> Result<Vec<u8>> {
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(h) => crate::types::parse_hex(h)
            .ok_or_else(|| Error::InvalidArgument(format!("value {v:?} is not hex digit pairs"))),
        None => Ok(v.as_bytes().to_vec()),
    }
}

/// `setfattr -n NAME -v VALUE PATH...` / `setfattr -x NAME PATH...`.
pub(crate) fn setfattr(cli: &Cli, out: &Out, a: &crate::args::SetfattrArgs<'_>) -> Result<u8> {
    let ops = match (a.name, a.remove) {
        (_, Some(name)) => a
            .paths
            .iter()
            .map(|p| {
                Op::new(
                    "remove_xattr",
                    p,
                    Command::RemoveXattr {
                        path: p.clone(),
                        name: name.to_owned(),
                    },
                )
            })
            .collect(),
        (Some(name), None) => {
            let value = crate::types::Bytes(parse_value(a.value)?);
            a.paths
                .iter()
                .map(|p| {
                    Op::new(
                        "set_xattr",
                        p,
                        Command::SetXattr {
                            path: p.clone(),
                            name: name.to_owned(),
                            value: value.clone(),
                            flag: a.flag,
                        },
                    )
                })
                .collect()
        }
        (None, None) => {
            return Err(Error::InvalidArgument(
                "give -n NAME (with -v VALUE) or -x NAME".into(),
            ))
        }
    };
    run_ops(cli, out, ops, |_| "cannot set attributes of", never)
}

/// `quota set PATH [--inodes N] [--bytes N]`.
pub(crate) fn quota_set(
    cli: &Cli,
    out: &Out,
    path: &ByteString,
    inodes: Option<u64>,
    bytes: Option<u64>,
) -> Result<u8> {
    let op = Op::new(
        "set_quota",
        path,
        Command::SetQuota {
            path: path.to_owned(),
            inodes,
            bytes,
        },
    );
    run_ops(cli, out, vec![op], |_| "cannot set the quota of", never)
}

/// `quota clear PATH`.
pub(crate) fn quota_clear(cli: &Cli, out: &Out, path: &ByteString) -> Result<u8> {
    let op = Op::new(
        "clear_quota",
        path,
        Command::ClearQuota {
            path: path.to_owned(),
        },
    );
    run_ops(cli, out, vec![op], |_| "cannot clear the quota of", never)
}

/// `quota recount PATH`.
pub(crate) fn quota_recount(cli: &Cli, out: &Out, path: &ByteString) -> Result<u8> {
    let op = Op::new(
        "recount_quota",
        path,
        Command::RecountQuota {
            path: path.to_owned(),
        },
    );
    run_ops(cli, out, vec![op], |_| "cannot recount the quota of", never)
}
