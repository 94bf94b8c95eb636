//! Runs one parsed command line: dispatches to the command's module and
//! turns its result into output and an exit code.

use std::io::Write;
use std::process::ExitCode;

use crate::args::{BridgeCmd, Cli, Cmd, QuotaCmd};
use crate::error::Result;
use crate::exit::{exit_code, is_broken_pipe};
use crate::output::Out;

/// Runs the CLI; returns the process exit code.
pub(crate) fn run(cli: Cli) -> ExitCode {
    if matches!(cli.cmd, Cmd::Demo) {
        // The demo prints with `println!`, which panics on a closed pipe:
        // let it die of SIGPIPE as other tools do (Rust ignores the signal
        // by default). It opens no sockets, so only standard output can
        // raise it.
        // SAFETY: called before any other thread exists; SIG_DFL is a
        // valid disposition for SIGPIPE.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let out = Out::new(cli.json);
    let r = dispatch(&cli, &out).and_then(|code| out.flush().map(|()| code));
    match r {
        Ok(code) => ExitCode::from(code),
        // The reader of the output went away (`| head`): stop quietly, as
        // a command killed by SIGPIPE would, but without the signal.
        Err(e) if out.closed() && is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // What was printed before the error stays before it.
            let _ = out.flush();
            let shown = out.json
                && !out.closed()
                && out
                    .print_json(&serde_json::json!({"ok": false, "error": e.kind().as_str(), "message": e.to_string()}))
                    .and_then(|()| out.flush())
                    .is_ok();
            if !shown {
                // Not eprintln!: it panics when standard error is closed.
                let _ = writeln!(std::io::stderr(), "treelog: {e}");
            }
            ExitCode::from(exit_code(e.kind()))
        }
    }
}

fn dispatch(cli: &Cli, out: &Out) -> Result<u8> {
    match &cli.cmd {
        Cmd::Mkdir { parents, o, paths } => crate::fs::mkdir(cli, out, *parents, o, paths),
        Cmd::Touch {
            parents,
            o,
            block_size,
            paths,
        } => crate::fs::touch(cli, out, *parents, o, *block_size, paths),
        Cmd::Mv {
            overwrite,
            operands,
        } => crate::fs::mv(cli, out, *overwrite, operands),
        Cmd::Rm {
            recursive,
            force,
            paths,
        } => crate::fs::rm(cli, out, *recursive, *force, paths),
        Cmd::Chmod { mode, paths } => crate::fs::chmod(cli, out, *mode, paths),
        Cmd::Chown { spec, paths } => crate::fs::chown(cli, out, spec, paths),
        Cmd::Touchtime { mtime_ms, paths } => crate::fs::touchtime(cli, out, *mtime_ms, paths),
        Cmd::Ln {
            symbolic: _,
            parents,
            owner,
            group,
            target,
            link,
        } => crate::fs::ln(cli, out, (target, link), *parents, owner, group),
        Cmd::Readlink { path } => crate::usage::readlink(cli, out, path),
        Cmd::Getfattr {
            name,
            names_only,
            encoding,
            paths,
        } => crate::usage::getfattr(cli, out, name.as_deref(), *names_only, *encoding, paths),
        Cmd::Setfattr {
            name,
            value,
            remove,
            create,
            replace,
            paths,
        } => crate::fs::setfattr(
            cli,
            out,
            &crate::args::SetfattrArgs {
                name: name.as_deref(),
                value,
                remove: remove.as_deref(),
                flag: match (create, replace) {
                    (true, _) => crate::types::XattrFlag::Create,
                    (_, true) => crate::types::XattrFlag::Replace,
                    _ => crate::types::XattrFlag::Either,
                },
                paths,
            },
        ),
        Cmd::Quota { cmd } => match cmd {
            QuotaCmd::Set {
                path,
                inodes,
                bytes,
            } => crate::fs::quota_set(cli, out, path, *inodes, *bytes),
            QuotaCmd::Clear { path } => crate::fs::quota_clear(cli, out, path),
            QuotaCmd::Recount { path } => crate::fs::quota_recount(cli, out, path),
            QuotaCmd::Show { path } => crate::usage::quota_show(cli, out, path),
        },
        Cmd::Count {
            quota,
            human_readable,
            paths,
            help: _,
        } => crate::usage::count(cli, out, *quota, *human_readable, paths),
        Cmd::Complete { path, size } => crate::fs::complete(cli, out, path, *size),
        Cmd::Setsize { path, size } => crate::fs::setsize(cli, out, path, *size),
        Cmd::Ls(a) => crate::list::ls(cli, out, a),
        Cmd::Stat { id, paths } => crate::list::stat(cli, out, *id, paths),
        Cmd::Tail {
            from,
            snapshot,
            prefix,
            kinds,
            cursor,
            no_ack,
            auto_ack,
            resync,
            limit,
            follow,
        } => crate::tail::tail(
            cli,
            out,
            &crate::tail::TailArgs {
                from: *from,
                snapshot: *snapshot,
                prefix: prefix.clone(),
                kinds,
                cursor: cursor.as_deref(),
                ack: crate::tail::AckMode::choose(*no_ack, *auto_ack),
                resync: *resync,
                limit: *limit,
                follow: *follow,
            },
        ),
        Cmd::Ack { cursor, seq } => crate::tail::ack(cli, out, cursor, *seq),
        Cmd::Import(a) => crate::import::run(cli, out, a),
        Cmd::Dump(a) => crate::dump::dump(cli, out, a),
        Cmd::Load(a) => crate::dump::load(cli, out, a),
        Cmd::Serve(args) => crate::serve::run(cli, args),
        Cmd::Mount(args) => crate::mount_cmd::run(cli, args),
        Cmd::Completions { shell } => crate::cli_docs::completions(*shell),
        Cmd::Man => crate::cli_docs::man(),
        Cmd::Demo => crate::demo::run(&cli.data, out.json),
        Cmd::Bridge {
            cmd: BridgeCmd::Nats(a),
        } => crate::bridge::nats(cli, a),
        Cmd::Admin { cmd } => crate::admin_cmd::run(cli, out, cmd),
        Cmd::Cluster { cmd } => crate::cluster::run(cli, out, cmd),
    }
}
