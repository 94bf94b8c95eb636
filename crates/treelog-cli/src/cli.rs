//! The `treelog` command line: argument parsing and output formatting.
//! `main.rs` only calls [`run`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::admin;
use crate::command::Command;
use crate::error::{Error, ErrorKind, Result};
use crate::format::record;
use crate::store::{Store, StoreOptions};
use crate::types::{Inode, DEFAULT_BLOCK_SIZE, DEFAULT_DIR_MODE, DEFAULT_FILE_MODE};
use treelog::Durability;
use treelog::ReadAt;
use treelog::{Options, Treelog};

/// Default data directory when `--data` is not given.
pub const DEFAULT_DATA_DIR: &str = "treelog-data";

#[derive(Parser, Debug)]
#[command(
    name = "treelog",
    version,
    about = "Event-sourced filesystem-namespace metadata store on RocksDB"
)]
pub struct Cli {
    /// Data directory (created on first use).
    #[arg(long, global = true, env = "TREELOG_DATA", default_value = DEFAULT_DATA_DIR)]
    pub data: PathBuf,
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    pub json: bool,
    /// Talk to this server instead of opening the data directory.
    #[arg(long, global = true, env = "TREELOG_SERVER")]
    pub server: Option<String>,
    /// File holding the shared token (client: sent in the handshake; serve:
    /// required from clients).
    #[arg(long, global = true, env = "TREELOG_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// fsync each group before acknowledging (`sync`) or not (`none`).
    #[arg(long, global = true, value_enum, default_value_t = DurabilityArg::Sync)]
    pub durability: DurabilityArg,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DurabilityArg {
    Sync,
    None,
}

impl From<DurabilityArg> for Durability {
    fn from(d: DurabilityArg) -> Durability {
        match d {
            DurabilityArg::Sync => Durability::Sync,
            DurabilityArg::None => Durability::None,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct OwnerArgs {
    /// Permission bits, octal.
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<u32>,
    #[arg(long, default_value = "")]
    pub owner: String,
    #[arg(long, default_value = "")]
    pub group: String,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Create a directory.
    Mkdir {
        /// Create missing parents; an existing directory is not an error.
        #[arg(short, long)]
        parents: bool,
        #[command(flatten)]
        o: OwnerArgs,
        path: String,
    },
    /// Create an empty (incomplete) file.
    Touch {
        /// Create missing parent directories.
        #[arg(short, long)]
        parents: bool,
        #[command(flatten)]
        o: OwnerArgs,
        #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE)]
        block_size: u64,
        path: String,
    },
    /// List a directory.
    Ls {
        /// Long format (mode, owner, group, size, mtime, id).
        #[arg(short, long)]
        long: bool,
        /// Recurse into subdirectories.
        #[arg(short = 'R', long)]
        recursive: bool,
        /// Start after this name (paging).
        #[arg(long)]
        start_after: Option<String>,
        /// At most this many entries (per directory).
        #[arg(long)]
        limit: Option<usize>,
        #[arg(default_value = "/")]
        path: String,
    },
    /// Show an inode by path, or by id with --id.
    Stat {
        #[arg(long)]
        id: Option<u64>,
        path: Option<String>,
    },
    /// Rename (move) atomically.
    Mv {
        /// Replace an existing destination (file over file, empty dir over dir).
        #[arg(short = 'f', long)]
        overwrite: bool,
        src: String,
        dst: String,
    },
    /// Delete a file or directory.
    Rm {
        #[arg(short, long)]
        recursive: bool,
        path: String,
    },
    /// Change permission bits (octal).
    Chmod {
        #[arg(value_parser = parse_mode)]
        mode: u32,
        path: String,
    },
    /// Change owner and/or group: OWNER, OWNER:GROUP or :GROUP.
    Chown { spec: String, path: String },
    /// Set the modification time (milliseconds since the epoch).
    Touchtime { mtime_ms: u64, path: String },
    /// Mark a file complete with its final size.
    Complete { path: String, size: u64 },
    /// Change a file's size.
    Setsize { path: String, size: u64 },
    /// Print the change stream (records already committed; against a local
    /// data directory nothing else can write, so it stops when caught up).
    Tail {
        /// Start at this sequence number.
        #[arg(long, conflicts_with = "snapshot")]
        from: Option<u64>,
        /// Start with a consistent snapshot of the (filtered) tree.
        #[arg(long)]
        snapshot: bool,
        /// Only this subtree.
        #[arg(long)]
        prefix: Option<String>,
        /// Only these event kinds (create, complete, set_size, set_attr, delete, rename).
        #[arg(long, value_delimiter = ',')]
        kinds: Vec<String>,
        /// A durable cursor: resume after its acknowledged position and
        /// acknowledge what was written to standard output (only once it
        /// was written and flushed).
        #[arg(long)]
        cursor: Option<String>,
        /// With --cursor: never acknowledge; the consumer runs `treelog ack
        /// CURSOR SEQ` once it has processed the output up to SEQ.
        #[arg(long, requires = "cursor")]
        no_ack: bool,
        /// Re-snapshot the subtree when a directory moves into it (the
        /// default with --snapshot; give it when resuming with --from or a
        /// cursor a consumer that started from a snapshot).
        #[arg(long)]
        resync: bool,
        /// Stop after this many items.
        #[arg(long)]
        limit: Option<u64>,
        /// Keep waiting for new records (with --server).
        #[arg(short, long)]
        follow: bool,
    },
    /// Acknowledge a durable cursor up to SEQ (after processing what `tail
    /// --cursor CURSOR --no-ack` printed up to there).
    Ack { cursor: String, seq: u64 },
    /// Run the server.
    Serve(ServeArgs),
    /// Build a small tree, print it, show the log and verify the index.
    Demo,
    /// Operator commands.
    Admin {
        #[command(subcommand)]
        cmd: AdminCmd,
    },
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// RPC address.
    #[arg(long, default_value = "127.0.0.1:7400")]
    pub listen: std::net::SocketAddr,
    /// HTTP address (/metrics, /healthz, /readyz).
    #[arg(long, default_value = "127.0.0.1:7401")]
    pub http: std::net::SocketAddr,
    /// RPC connections at once (lowered, with a warning, to fit the
    /// open-file limit).
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Connections that may be waiting for their handshake at once
    /// (default: a quarter of --max-connections); the oldest is closed to
    /// admit a newer one.
    #[arg(long)]
    pub max_handshaking: Option<usize>,
    #[arg(long, default_value_t = 256)]
    pub max_in_flight: usize,
    /// Largest frame a client may send, 65536..=268435456 bytes.
    #[arg(long, default_value_t = crate::protocol::DEFAULT_MAX_FRAME)]
    pub max_frame: usize,
    /// Bytes of replies queued for one connection beyond which the server
    /// stops reading its requests until the client reads.
    #[arg(long, default_value_t = crate::server::DEFAULT_MAX_CONN_BUFFER_BYTES)]
    pub max_conn_buffer_bytes: usize,
    /// HTTP connections at once (more are answered 503).
    #[arg(long, default_value_t = 64)]
    pub max_http_connections: usize,
    /// Seconds an HTTP client has to send a request's headers.
    #[arg(long, default_value_t = 10)]
    pub http_header_timeout_secs: u64,
    /// Serve --listen on a non-loopback address without a token.
    #[arg(long)]
    pub allow_insecure_listen: bool,
    #[arg(long, default_value_t = 300)]
    pub idle_timeout_secs: u64,
    /// Log retention: keep at most this many records.
    #[arg(long)]
    pub retain_records: Option<u64>,
    /// Log retention: remove records older than this many seconds.
    #[arg(long)]
    pub retain_secs: Option<u64>,
    /// Log retention: keep at most about this many bytes.
    #[arg(long)]
    pub retain_bytes: Option<u64>,
    /// Expire cursors lagging more than this many records.
    #[arg(long)]
    pub max_cursor_lag: Option<u64>,
    /// Scheduling priority of change-stream delivery: `idle` (only CPU
    /// nothing else wants; subscribers never slow writes) or a niceness
    /// 0..19 (subscribers keep a share under full load).
    #[arg(long, default_value = "idle")]
    pub stream_priority: crate::stream::DeliveryPriority,
    /// Scheduling policy of the request workers: `normal`, or `batch` (a
    /// woken worker waits for the running thread to block rather than
    /// preempting it, so the commit pipeline finishes its round first;
    /// Linux `SCHED_BATCH`; see docs/OPERATIONS.md).
    #[arg(long, default_value = "normal")]
    pub worker_policy: crate::server::WorkerPolicy,
    /// Most inodes one recursive delete removes (a bigger subtree is
    /// refused with InvalidArgument, to be deleted in parts): its record
    /// holds an event per inode.
    #[arg(long, default_value_t = treelog::DEFAULT_MAX_DELETE_INODES)]
    pub max_delete_inodes: usize,
    /// Most bytes of one command's log record (a recursive delete of many
    /// long paths beyond it is refused with InvalidArgument).
    #[arg(long, default_value_t = treelog::DEFAULT_MAX_RECORD_BYTES)]
    pub max_record_bytes: usize,
    /// Token file (also accepted as the global --token-file).
    #[arg(long = "require-token-file")]
    pub token_file: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum AdminCmd {
    /// Replay the whole log into a scratch index and compare digests.
    Verify,
    /// Drop the index and rebuild it from the whole log (crash-safe: an
    /// interrupted rebuild is finished by the next open).
    Rebuild,
    /// Open a database whose write-ahead log is corrupt before its end
    /// (which every other command refuses), keeping the log up to the
    /// corruption and discarding every record after it. Recorded in the
    /// database; `admin info` shows it.
    AcceptWalLoss,
    /// Print log records and index entries.
    Dump {
        /// Only the log.
        #[arg(long)]
        log: bool,
        /// Only the index.
        #[arg(long)]
        index: bool,
        /// First log sequence to print.
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// Most log records to print.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Print watermarks, format version and writer state.
    Info,
    /// List durable cursors, or drop one.
    Cursors {
        /// Drop this cursor.
        #[arg(long)]
        drop: Option<String>,
    },
    /// Run one retention pass now.
    Retention {
        #[arg(long)]
        max_records: Option<u64>,
        /// Seconds.
        #[arg(long)]
        max_age: Option<u64>,
        #[arg(long)]
        max_bytes: Option<u64>,
        #[arg(long)]
        max_cursor_lag: Option<u64>,
    },
}

fn parse_mode(s: &str) -> std::result::Result<u32, String> {
    let s = s.strip_prefix("0o").unwrap_or(s);
    u32::from_str_radix(s, 8).map_err(|e| format!("mode must be octal: {e}"))
}

/// Process exit code of an error kind (documented in the README).
pub fn exit_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::NotFound => 3,
        ErrorKind::AlreadyExists => 4,
        ErrorKind::NotADirectory => 5,
        ErrorKind::IsADirectory => 6,
        ErrorKind::NotEmpty => 7,
        ErrorKind::InvalidName | ErrorKind::InvalidPath | ErrorKind::InvalidArgument => 8,
        ErrorKind::DictionaryFull => 9,
        ErrorKind::Corruption | ErrorKind::Incompatible => 10,
        ErrorKind::Compacted | ErrorKind::CursorExpired => 11,
        // Not 1: a script must not retry a command that may have been
        // applied as if it had failed.
        ErrorKind::OutcomeUnknown => 13,
        _ => 1,
    }
}

/// Exit code of `admin verify` when the digests differ.
pub const EXIT_VERIFY_MISMATCH: u8 = 12;

use crate::backend::Backend;
use crate::output::outln;
pub use crate::output::{quote, Out};

fn mutation(out: &Out, what: &str, path: &str, seq: u64) -> Result<()> {
    if out.json {
        out.print_json(&serde_json::json!({"ok": true, "op": what, "path": path, "seq": seq}))
    } else {
        outln!(out, "{what} {} (seq {seq})", quote(path))
    }
}

fn mode_string(i: &Inode) -> String {
    let mut s = String::with_capacity(10);
    s.push(if i.attrs.kind.is_dir() { 'd' } else { '-' });
    for shift in [6, 3, 0] {
        let b = (i.attrs.mode >> shift) & 7;
        s.push(if b & 4 != 0 { 'r' } else { '-' });
        s.push(if b & 2 != 0 { 'w' } else { '-' });
        s.push(if b & 1 != 0 { 'x' } else { '-' });
    }
    s
}

/// An `ls -l` line for an inode shown as `name` (quoted here for humans,
/// see [`quote`]).
pub fn long_line(i: &Inode, name: &str) -> String {
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            quote(s).into_owned()
        }
    };
    format!(
        "{} {:>8} {:>8} {:>12} {:>14} {}{} id={}",
        mode_string(i),
        or_dash(&i.attrs.owner),
        or_dash(&i.attrs.group),
        i.attrs.size,
        i.attrs.mtime_ms,
        quote(name),
        if i.attrs.kind.is_dir() {
            "/"
        } else if i.attrs.complete {
            ""
        } else {
            " (incomplete)"
        },
        i.id
    )
}

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

pub fn open(cli: &Cli) -> Result<Backend> {
    match &cli.server {
        Some(addr) => Backend::remote(addr, read_token(cli.token_file.as_deref())?),
        None => Backend::local(
            &cli.data,
            Options::default().durability(cli.durability.into()),
        )
        .map_err(|e| naming(&cli.data, e)),
    }
}

fn open_local(cli: &Cli) -> Result<Treelog> {
    if cli.server.is_some() {
        return Err(Error::InvalidArgument(
            "this command works on a local --data directory only".into(),
        ));
    }
    Treelog::open(
        &cli.data,
        Options::default().durability(cli.durability.into()),
    )
    .map_err(|e| naming(&cli.data, e))
}

/// An error about the data directory `dir`, with its path in the message
/// when it lacks one (an OS error says "Permission denied", not where),
/// keeping its kind.
pub fn naming(dir: &Path, e: Error) -> Error {
    let shown = dir.display().to_string();
    if e.to_string().contains(&shown) {
        return e;
    }
    match e {
        Error::Io(io) => Error::Io(std::io::Error::new(
            io.kind(),
            format!("data directory {shown}: {io}"),
        )),
        // RocksDB's errors (the storage engine is the library's business):
        // keep the kind, add the directory.
        Error::Corruption { .. } => e,
        e if e.kind() == ErrorKind::Corruption => Error::Corruption {
            what: "database",
            detail: format!("data directory {shown}: {e}"),
        },
        e if e.kind() == ErrorKind::Io => Error::Io(std::io::Error::other(format!(
            "data directory {shown}: {e}"
        ))),
        e => e,
    }
}

/// Reads a token file (surrounding whitespace ignored).
pub fn read_token(path: Option<&std::path::Path>) -> Result<Option<String>> {
    match path {
        None => Ok(None),
        Some(p) => {
            let t = std::fs::read_to_string(p)?.trim().to_owned();
            if t.is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "token file {} is empty",
                    p.display()
                )));
            }
            Ok(Some(t))
        }
    }
}

pub fn is_broken_pipe(e: &Error) -> bool {
    matches!(e, Error::Io(io) if io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Runs the CLI; returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
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

fn mutate(cli: &Cli, out: &Out, what: &str, shown: &str, cmd: Command) -> Result<u8> {
    let t = open(cli)?;
    let seq = t.submit(cmd)?;
    mutation(out, what, shown, seq)?;
    Ok(0)
}

fn dispatch(cli: &Cli, out: &Out) -> Result<u8> {
    match &cli.cmd {
        Cmd::Mkdir { parents, o, path } => mutate(
            cli,
            out,
            "mkdir",
            path,
            Command::Mkdir {
                path: path.clone(),
                parents: *parents,
                mode: o.mode.unwrap_or(DEFAULT_DIR_MODE),
                owner: o.owner.clone(),
                group: o.group.clone(),
            },
        ),
        Cmd::Touch {
            parents,
            o,
            block_size,
            path,
        } => mutate(
            cli,
            out,
            "create",
            path,
            Command::Create {
                path: path.clone(),
                parents: *parents,
                mode: o.mode.unwrap_or(DEFAULT_FILE_MODE),
                owner: o.owner.clone(),
                group: o.group.clone(),
                block_size: *block_size,
            },
        ),
        Cmd::Mv {
            overwrite,
            src,
            dst,
        } => mutate(
            cli,
            out,
            "rename",
            &format!("{src} -> {dst}"),
            Command::Rename {
                src: src.clone(),
                dst: dst.clone(),
                overwrite: *overwrite,
            },
        ),
        Cmd::Rm { recursive, path } => mutate(
            cli,
            out,
            "delete",
            path,
            Command::Delete {
                path: path.clone(),
                recursive: *recursive,
            },
        ),
        Cmd::Chmod { mode, path } => mutate(
            cli,
            out,
            "chmod",
            path,
            Command::SetAttr {
                path: path.clone(),
                mode: Some(*mode),
                owner: None,
                group: None,
                mtime_ms: None,
            },
        ),
        Cmd::Chown { spec, path } => {
            let (owner, group) = match spec.split_once(':') {
                Some((o, g)) => ((!o.is_empty()).then(|| o.to_owned()), Some(g.to_owned())),
                None => (Some(spec.clone()), None),
            };
            mutate(
                cli,
                out,
                "chown",
                path,
                Command::SetAttr {
                    path: path.clone(),
                    mode: None,
                    owner,
                    group,
                    mtime_ms: None,
                },
            )
        }
        Cmd::Touchtime { mtime_ms, path } => mutate(
            cli,
            out,
            "set_mtime",
            path,
            Command::SetAttr {
                path: path.clone(),
                mode: None,
                owner: None,
                group: None,
                mtime_ms: Some(*mtime_ms),
            },
        ),
        Cmd::Complete { path, size } => mutate(
            cli,
            out,
            "complete",
            path,
            Command::Complete {
                path: path.clone(),
                size: *size,
            },
        ),
        Cmd::Setsize { path, size } => mutate(
            cli,
            out,
            "set_size",
            path,
            Command::SetSize {
                path: path.clone(),
                size: *size,
            },
        ),
        Cmd::Ls {
            long,
            recursive,
            start_after,
            limit,
            path,
        } => {
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
                        *long,
                        *recursive,
                        start_after.as_deref(),
                        *limit,
                        &mut rows,
                        at,
                    )?;
                } else if out.json {
                    rows.push(serde_json::json!({"path": crate::path::canonical(path)?, "name": st.name, "inode": st}));
                } else if *long {
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
        Cmd::Stat { id, path } => {
            let t = open(cli)?;
            let (ino, p) = match (id, path) {
                (Some(id), _) => (t.stat_id(*id)?, t.path_of(*id)?),
                (None, Some(p)) => (t.stat(p)?, crate::path::canonical(p)?),
                (None, None) => return Err(Error::InvalidArgument("give a path or --id".into())),
            };
            print_stat(out, &ino, &p)?;
            Ok(0)
        }
        Cmd::Tail {
            from,
            snapshot,
            prefix,
            kinds,
            cursor,
            no_ack,
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
                auto_ack: !*no_ack,
                resync: *resync,
                limit: *limit,
                follow: *follow,
            },
        ),
        Cmd::Ack { cursor, seq } => {
            let t = open(cli)?;
            t.ack(cursor, *seq)?;
            if out.json {
                out.print_json(
                    &serde_json::json!({"ok": true, "op": "ack", "cursor": cursor, "seq": seq}),
                )?;
            } else {
                outln!(out, "cursor {cursor} acknowledged #{seq}")?;
            }
            Ok(0)
        }
        Cmd::Serve(args) => serve(cli, args),
        Cmd::Demo => crate::demo::run(&cli.data, out.json),
        Cmd::Admin { cmd } => admin_cmd(cli, out, cmd),
    }
}

fn serve(cli: &Cli, a: &ServeArgs) -> Result<u8> {
    let mut cfg = crate::server::ServerConfig::new(cli.data.clone());
    cfg.listen = a.listen;
    cfg.http = a.http;
    cfg.token = read_token(a.token_file.as_deref().or(cli.token_file.as_deref()))?;
    cfg.max_connections = a.max_connections;
    cfg.max_handshaking = a.max_handshaking;
    cfg.max_in_flight = a.max_in_flight;
    cfg.max_frame = a.max_frame;
    cfg.max_conn_buffer_bytes = a.max_conn_buffer_bytes;
    cfg.max_http_connections = a.max_http_connections;
    cfg.http_header_timeout = std::time::Duration::from_secs(a.http_header_timeout_secs);
    cfg.allow_insecure_listen = a.allow_insecure_listen;
    cfg.idle_timeout = std::time::Duration::from_secs(a.idle_timeout_secs);
    cfg.stream_priority = a.stream_priority;
    cfg.store = Options::default().durability(cli.durability.into());
    cfg.store.writer.max_delete_inodes = a.max_delete_inodes;
    cfg.store.writer.max_record_bytes = a.max_record_bytes;
    cfg.store.retention = crate::retention::RetentionPolicy {
        max_records: a.retain_records,
        max_age: a.retain_secs.map(std::time::Duration::from_secs),
        max_bytes: a.retain_bytes,
        max_cursor_lag: a.max_cursor_lag,
        interval: None,
    };
    let rt = crate::server::request_runtime(a.worker_policy)?;
    rt.block_on(crate::server::run(cfg))?;
    Ok(0)
}

fn admin_cmd(cli: &Cli, out: &Out, cmd: &AdminCmd) -> Result<u8> {
    let so = StoreOptions {
        create_if_missing: false,
        ..Default::default()
    };
    match cmd {
        AdminCmd::Verify => {
            let r = admin::verify_path(&cli.data, &so).map_err(|e| naming(&cli.data, e))?;
            if out.json {
                out.print_json(&serde_json::json!({"ok": r.ok(), "report": r}))?;
            } else {
                outln!(out, "records replayed: {}", r.records)?;
                outln!(out, "applied_seq:      {}", r.applied_seq)?;
                outln!(out, "live digest:      {}", r.live_digest)?;
                outln!(out, "replay digest:    {}", r.replay_digest)?;
                for p in &r.problems {
                    outln!(out, "problem: {p}")?;
                }
                outln!(
                    out,
                    "{}",
                    if r.ok() {
                        "OK: the index equals a replay of the log"
                    } else {
                        "MISMATCH"
                    }
                )?;
            }
            Ok(if r.ok() { 0 } else { EXIT_VERIFY_MISMATCH })
        }
        AdminCmd::Rebuild => {
            let n = admin::rebuild(&cli.data, &so).map_err(|e| naming(&cli.data, e))?;
            if out.json {
                out.print_json(&serde_json::json!({"ok": true, "replayed": n}))?;
            } else {
                outln!(out, "rebuilt the index from {n} log records")?;
            }
            Ok(0)
        }
        AdminCmd::AcceptWalLoss => {
            let r = admin::accept_wal_loss(&cli.data, &so)?;
            // To standard error as well: an operator's record of the loss,
            // whatever happens to the output.
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "treelog: accepted the loss of every write-ahead log record after sequence {} in {}",
                r.last_seq,
                cli.data.display()
            );
            if out.json {
                out.print_json(&serde_json::json!({"ok": true, "report": r}))?;
            } else {
                outln!(
                    out,
                    "the log now ends at sequence {}; {} records replayed{}",
                    r.last_seq,
                    r.replayed,
                    if r.rebuilt_index {
                        " (the index held lost records and was rebuilt from the log)"
                    } else {
                        ""
                    }
                )?;
            }
            Ok(0)
        }
        AdminCmd::Cursors { drop } => {
            let t = open(cli)?;
            if let Some(name) = drop {
                t.drop_cursor(name)?;
                mutation(out, "drop_cursor", name, t.committed_seq()?)?;
                return Ok(0);
            }
            let cs = t.cursors()?;
            if out.json {
                out.print_json(&cs)?;
            } else {
                outln!(out, "{:<24} {:>12} {:>10} state", "cursor", "acked", "lag")?;
                for c in cs {
                    let state = match c.state.expired {
                        Some((at, start)) => format!("EXPIRED at {at} (log start {start})"),
                        None => "live".into(),
                    };
                    outln!(
                        out,
                        "{:<24} {:>12} {:>10} {state}",
                        c.name,
                        c.state.acked,
                        c.lag
                    )?;
                }
            }
            Ok(0)
        }
        AdminCmd::Retention {
            max_records,
            max_age,
            max_bytes,
            max_cursor_lag,
        } => {
            let t = open_local(cli)?;
            let rep = t.run_retention(&crate::retention::RetentionPolicy {
                max_records: *max_records,
                max_age: max_age.map(std::time::Duration::from_secs),
                max_bytes: *max_bytes,
                max_cursor_lag: *max_cursor_lag,
                interval: None,
            })?;
            if out.json {
                out.print_json(&rep)?;
            } else {
                outln!(
                    out,
                    "log start {} -> {} ({} records, {} bytes removed); expired cursors: {:?}; held by: {:?}",
                    rep.old_start, rep.new_start, rep.removed_records, rep.removed_bytes, rep.expired_cursors, rep.held_by_cursor
                )?;
            }
            Ok(0)
        }
        AdminCmd::Info => {
            let store = Store::open(&cli.data, &so).map_err(|e| naming(&cli.data, e))?;
            let info = serde_json::json!({
                "format_version": store.format_version()?,
                "log_start": store.log_start()?,
                "applied_seq": store.applied_seq()?,
                "last_seq": store.last_log_seq()?,
                "wal_loss_accepted": admin::last_wal_loss(&store)?,
            });
            if out.json {
                out.print_json(&info)?;
            } else {
                outln!(out, "format_version: {}", info["format_version"])?;
                outln!(out, "log_start:      {}", info["log_start"])?;
                outln!(
                    out,
                    "applied_seq:    {} (index; replayed on open up to last_seq)",
                    info["applied_seq"]
                )?;
                outln!(out, "last_seq:       {}", info["last_seq"])?;
                if let Some(l) = admin::last_wal_loss(&store)? {
                    outln!(
                        out,
                        "wal loss:       accepted at {} ms, the log kept up to {}",
                        l.time_ms,
                        l.last_seq
                    )?;
                }
            }
            Ok(0)
        }
        AdminCmd::Dump {
            log,
            index,
            from,
            limit,
        } => {
            let store = Store::open(&cli.data, &so).map_err(|e| naming(&cli.data, e))?;
            let (show_log, show_index) = match (log, index) {
                (false, false) => (true, true),
                (l, i) => (*l, *i),
            };
            if show_log {
                if !out.json {
                    outln!(out, "== log (from {from}) ==")?;
                }
                for (n, item) in store.log_entries(*from)?.enumerate() {
                    if limit.is_some_and(|l| n as u64 >= l) {
                        break;
                    }
                    let (seq, v) = item?;
                    match record::decode_record(&v, Some(seq)) {
                        Ok(rec) if out.json => out.print_json(&serde_json::json!({"log": rec}))?,
                        Ok(rec) => {
                            outln!(out, "#{} t={} ({} bytes)", rec.seq, rec.time_ms, v.len())?;
                            for ev in &rec.events {
                                outln!(out, "    {}", describe_event(ev))?;
                            }
                        }
                        Err(e) => outln!(out, "#{seq} CORRUPT: {e}")?,
                    }
                }
            }
            if show_index {
                if !out.json {
                    outln!(out, "== index ==")?;
                }
                admin::dump_index(&store, |e| {
                    if out.json {
                        out.print_json(&e)
                    } else {
                        let line = match &e {
                            admin::DumpEntry::Inode {
                                key_hex,
                                id,
                                inode: Some(i),
                                ..
                            } => {
                                format!("inodes {key_hex} id={id} {}", long_line(i, &i.name))
                            }
                            admin::DumpEntry::Inode {
                                key_hex, id, error, ..
                            } => {
                                format!(
                                    "inodes {key_hex} id={id} CORRUPT: {}",
                                    error.as_deref().unwrap_or("?")
                                )
                            }
                            admin::DumpEntry::Special {
                                key_hex,
                                what,
                                value,
                            } => {
                                format!("inodes {key_hex} {what} = {value}")
                            }
                            admin::DumpEntry::Edge {
                                key_hex,
                                parent,
                                name,
                                child,
                            } => {
                                format!("edges  {key_hex} ({parent}, {name:?}) -> {child}")
                            }
                        };
                        outln!(out, "{line}")
                    }
                })?;
            }
            Ok(0)
        }
    }
}

pub fn parse_kind(k: &str) -> Result<crate::event::EventKind> {
    use crate::event::EventKind as K;
    Ok(match k {
        "create" => K::Create,
        "complete" => K::Complete,
        "set_size" | "setsize" => K::SetSize,
        "set_attr" | "setattr" => K::SetAttr,
        "delete" => K::Delete,
        "rename" => K::Rename,
        other => {
            return Err(Error::InvalidArgument(format!(
                "unknown event kind {other:?}"
            )))
        }
    })
}

/// One line describing an event, for humans (paths quoted, see [`quote`]).
pub fn describe_event(ev: &crate::event::Event) -> String {
    use crate::event::Event;
    match ev {
        Event::Create {
            id, path, attrs, ..
        } => format!(
            "create {} {} id={id} mode={:04o} owner={:?} group={:?}",
            if attrs.kind.is_dir() { "dir " } else { "file" },
            quote(path),
            attrs.mode,
            attrs.owner,
            attrs.group
        ),
        Event::Complete(u) => format!(
            "complete {} id={} size={}",
            quote(&u.path),
            u.id,
            u.new.size
        ),
        Event::SetSize(u) => format!(
            "set_size {} id={} size {} -> {}",
            quote(&u.path),
            u.id,
            u.old.size,
            u.new.size
        ),
        Event::SetAttr(u) => format!(
            "set_attr {} id={} mode {:04o}->{:04o} owner {:?}->{:?} group {:?}->{:?} mtime {}->{}",
            quote(&u.path),
            u.id,
            u.old.mode,
            u.new.mode,
            u.old.owner,
            u.new.owner,
            u.old.group,
            u.new.group,
            u.old.mtime_ms,
            u.new.mtime_ms
        ),
        Event::Delete { id, path, .. } => format!("delete {} id={id}", quote(path)),
        Event::Rename {
            id,
            old_path,
            new_path,
            ..
        } => format!("rename {} -> {} id={id}", quote(old_path), quote(new_path)),
    }
}
