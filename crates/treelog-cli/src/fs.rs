//! The namespace's mutating commands: mkdir, touch, mv, rm, chmod, chown,
//! touchtime, complete, setsize.

use crate::args::{Cli, OwnerArgs};
use crate::backend::open;
use crate::command::Command;
use crate::error::Result;
use crate::output::{outln, quote, Out};
use crate::types::{DEFAULT_DIR_MODE, DEFAULT_FILE_MODE};

pub fn mutation(out: &Out, what: &str, path: &str, seq: u64) -> Result<()> {
    if out.json {
        out.print_json(&serde_json::json!({"ok": true, "op": what, "path": path, "seq": seq}))
    } else {
        outln!(out, "{what} {} (seq {seq})", quote(path))
    }
}

fn mutate(cli: &Cli, out: &Out, what: &str, shown: &str, cmd: Command) -> Result<u8> {
    let t = open(cli)?;
    let seq = t.submit(cmd)?;
    mutation(out, what, shown, seq)?;
    Ok(0)
}

pub fn mkdir(cli: &Cli, out: &Out, parents: bool, o: &OwnerArgs, path: &str) -> Result<u8> {
    mutate(
        cli,
        out,
        "mkdir",
        path,
        Command::Mkdir {
            path: path.to_owned(),
            parents,
            mode: o.mode.unwrap_or(DEFAULT_DIR_MODE),
            owner: o.owner.clone(),
            group: o.group.clone(),
        },
    )
}

pub fn touch(
    cli: &Cli,
    out: &Out,
    parents: bool,
    o: &OwnerArgs,
    block_size: u64,
    path: &str,
) -> Result<u8> {
    mutate(
        cli,
        out,
        "create",
        path,
        Command::Create {
            path: path.to_owned(),
            parents,
            mode: o.mode.unwrap_or(DEFAULT_FILE_MODE),
            owner: o.owner.clone(),
            group: o.group.clone(),
            block_size,
        },
    )
}

pub fn mv(cli: &Cli, out: &Out, overwrite: bool, src: &str, dst: &str) -> Result<u8> {
    mutate(
        cli,
        out,
        "rename",
        &format!("{src} -> {dst}"),
        Command::Rename {
            src: src.to_owned(),
            dst: dst.to_owned(),
            overwrite,
        },
    )
}

pub fn rm(cli: &Cli, out: &Out, recursive: bool, path: &str) -> Result<u8> {
    mutate(
        cli,
        out,
        "delete",
        path,
        Command::Delete {
            path: path.to_owned(),
            recursive,
        },
    )
}

pub fn chmod(cli: &Cli, out: &Out, mode: u32, path: &str) -> Result<u8> {
    mutate(
        cli,
        out,
        "chmod",
        path,
        Command::SetAttr {
            path: path.to_owned(),
            mode: Some(mode),
            owner: None,
            group: None,
            mtime_ms: None,
        },
    )
}

pub fn chown(cli: &Cli, out: &Out, spec: &str, path: &str) -> Result<u8> {
    let (owner, group) = match spec.split_once(':') {
        Some((o, g)) => ((!o.is_empty()).then(|| o.to_owned()), Some(g.to_owned())),
        None => (Some(spec.to_owned()), None),
    };
    mutate(
        cli,
        out,
        "chown",
        path,
        Command::SetAttr {
            path: path.to_owned(),
            mode: None,
            owner,
            group,
            mtime_ms: None,
        },
    )
}

pub fn touchtime(cli: &Cli, out: &Out, mtime_ms: u64, path: &str) -> Result<u8> {
    mutate(
        cli,
        out,
        "set_mtime",
        path,
        Command::SetAttr {
            path: path.to_owned(),
            mode: None,
            owner: None,
            group: None,
            mtime_ms: Some(mtime_ms),
        },
    )
}

pub fn complete(cli: &Cli, out: &Out, path: &str, size: u64) -> Result<u8> {
    mutate(
        cli,
        out,
        "complete",
        path,
        Command::Complete {
            path: path.to_owned(),
            size,
        },
    )
}

pub fn setsize(cli: &Cli, out: &Out, path: &str, size: u64) -> Result<u8> {
    mutate(
        cli,
        out,
        "set_size",
        path,
        Command::SetSize {
            path: path.to_owned(),
            size,
        },
    )
}
