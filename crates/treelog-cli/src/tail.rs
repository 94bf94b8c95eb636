//! `treelog tail`: prints a change stream, and acknowledges a durable cursor
//! only for what standard output took.
//!
//! At-least-once is the cursor's promise, so an item is acknowledged only
//! after it was written to standard output in full and flushed (to a
//! regular file: and fsynced); a consumer that stops (`| head`) makes a
//! write fail, and the cursor then stays at the last item written whole.
//! Written is not processed when standard output is a pipe or a socket:
//! the bytes may sit in its buffer, or the reader's, when the reader stops.
//! There `tail` acknowledges nothing unless told to (`--auto-ack`, at most
//! once); the consumer runs `treelog ack` after processing.
//!
//! A resync snapshot's trigger is not a resume point either
//! (docs/STREAMS.md §7): until the snapshot ends, what can be acknowledged
//! is the position before the record that triggered it.

use std::time::Duration;

use crate::args::Cli;
use crate::backend::open;
use crate::backend::{Backend, Sub};
use crate::describe::{describe_event, long_line, LongFormat};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::exit::is_broken_pipe;
use crate::output::quote;
use crate::output::{outln, Out};
use crate::stream::{Filter, Scope, ScopedEvent, StartFrom, StreamItem, SubscribeOptions};

/// While items keep coming, acknowledge at least this often (items), so
/// that a long-running follower's cursor does not lag until it expires.
const ACK_EVERY: u64 = 1024;

pub(crate) struct TailArgs<'a> {
    pub from: Option<u64>,
    pub snapshot: bool,
    pub prefix: Option<treelog::ByteString>,
    pub kinds: &'a [String],
    pub cursor: Option<&'a str>,
    pub ack: AckMode,
    pub resync: bool,
    pub limit: Option<u64>,
    pub follow: bool,
}

/// When `tail --cursor` acknowledges, as the flags say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AckMode {
    /// `--no-ack`.
    Never,
    /// `--auto-ack`: what standard output took, whatever it is.
    Always,
    /// By what standard output is (see [`Acks::of_stdout`]).
    ByOutput,
}

impl AckMode {
    pub(crate) fn choose(no_ack: bool, auto_ack: bool) -> AckMode {
        match (no_ack, auto_ack) {
            (true, _) => AckMode::Never,
            (false, true) => AckMode::Always,
            (false, false) => AckMode::ByOutput,
        }
    }
}

/// How this run acknowledges.
enum Acks {
    /// `--no-ack`.
    Never,
    /// Standard output is a pipe or a socket: the consumer acknowledges.
    ByConsumer,
    /// After the write and flush (a terminal, a device; `--auto-ack`).
    AfterFlush,
    /// A regular file: after it is also on disk, so that a crash of the
    /// machine cannot lose lines the cursor has moved past.
    AfterSync(std::fs::File),
}

impl Acks {
    fn of(mode: AckMode) -> Result<Acks> {
        Ok(match mode {
            AckMode::Never => Acks::Never,
            AckMode::ByOutput => Acks::of_stdout()?,
            // Still to disk when it is a file.
            AckMode::Always => match Acks::of_stdout()? {
                Acks::ByConsumer => Acks::AfterFlush,
                a => a,
            },
        })
    }

    /// By the type of the file standard output is open on.
    fn of_stdout() -> Result<Acks> {
        use std::os::fd::AsFd;
        use std::os::unix::fs::FileTypeExt;
        let fd = std::io::stdout().as_fd().try_clone_to_owned()?;
        let file = std::fs::File::from(fd);
        let ft = file.metadata()?.file_type();
        Ok(if ft.is_fifo() || ft.is_socket() {
            Acks::ByConsumer
        } else if ft.is_file() {
            Acks::AfterSync(file)
        } else {
            Acks::AfterFlush
        })
    }

    fn automatic(&self) -> bool {
        matches!(self, Acks::AfterFlush | Acks::AfterSync(_))
    }
}

/// What was written and what may be acknowledged.
struct Written<'a> {
    t: &'a Backend,
    cursor: Option<&'a str>,
    acks: Acks,
    /// The resume point of the output so far: the position of the last
    /// item written in full that completes one, or the position before
    /// the record that triggered a resync being streamed.
    safe: Option<u64>,
    /// `safe` before the last record written: a resync that follows that
    /// record falls back to it.
    before_record: Option<u64>,
    acked: Option<u64>,
    since_ack: u64,
    /// Between a `SnapshotStart` and its `SnapshotEnd`, or after a record
    /// that calls for a resync, before the resync's `SnapshotStart`.
    in_snapshot: bool,
    /// The subtree, when resyncs are on (see [`triggers_resync`]).
    resync_prefix: Option<treelog::ByteString>,
}

impl Written<'_> {
    /// Notes an item that was written and flushed.
    fn written(&mut self, item: &StreamItem) {
        match item {
            StreamItem::Record { seq, events, .. } => {
                self.before_record = self.safe;
                match &self.resync_prefix {
                    // A resync follows: it has to be seen before this
                    // record's position counts.
                    Some(prefix) if triggers_resync(events, prefix) => self.in_snapshot = true,
                    _ => self.safe = Some(*seq),
                }
            }
            StreamItem::SnapshotStart { resync, .. } => {
                self.in_snapshot = true;
                if *resync {
                    self.safe = self.before_record;
                }
            }
            StreamItem::SnapshotEnd { seq } => {
                self.in_snapshot = false;
                self.safe = Some(*seq);
            }
            StreamItem::Progress { seq } => self.safe = Some(*seq),
            StreamItem::SnapshotEntry { .. } => {}
        }
        self.since_ack += 1;
    }

    /// Acknowledges the cursor up to what was written (if it acknowledges
    /// by itself and that moved).
    fn checkpoint(&mut self) -> Result<()> {
        self.since_ack = 0;
        let (Some(name), true, Some(pos)) = (self.cursor, self.acks.automatic(), self.safe) else {
            return Ok(());
        };
        if self.acked.is_some_and(|a| a >= pos) {
            return Ok(());
        }
        if let Acks::AfterSync(file) = &self.acks {
            // Everything up to `pos` was flushed to the file before.
            file.sync_data()?;
        }
        self.t.ack(name, pos)?;
        self.acked = Some(pos);
        Ok(())
    }
}

pub(crate) fn tail(cli: &Cli, out: &Out, a: &TailArgs<'_>) -> Result<u8> {
    if a.follow && cli.server.is_none() {
        return Err(Error::InvalidArgument(
            "--follow needs --server: nothing else can write to a data directory this process holds".into(),
        ));
    }
    let t = open(cli)?;
    let kinds = if a.kinds.is_empty() {
        None
    } else {
        Some(
            a.kinds
                .iter()
                .map(|k| parse_kind(k))
                .collect::<Result<Vec<_>>>()?,
        )
    };
    let start = match (a.from, a.snapshot) {
        (_, true) => StartFrom::Snapshot,
        (Some(n), _) => StartFrom::Seq(n),
        (None, false) if a.follow => StartFrom::Now,
        (None, false) => StartFrom::Seq(t.log_start()?),
    };
    let target = t.committed_seq()?;
    let mut sub = t.subscribe(SubscribeOptions {
        from: start,
        filter: Filter {
            prefix: a.prefix.clone(),
            kinds,
        },
        cursor: a.cursor.map(str::to_owned),
        // Unset keeps the default (resync iff starting from a snapshot).
        resync_on_move_in: a.resync.then_some(true),
    })?;
    let mut p = Written {
        t: &t,
        cursor: a.cursor,
        acks: match a.cursor {
            Some(_) => Acks::of(a.ack)?,
            None => Acks::Never,
        },
        safe: None,
        before_record: None,
        acked: None,
        since_ack: 0,
        in_snapshot: false,
        resync_prefix: match &a.prefix {
            Some(prefix) if a.resync || a.snapshot => {
                Some(crate::path::canonical(prefix)?).filter(|p| p != "/")
            }
            _ => None,
        },
    };
    let streamed = stream(out, a, &mut sub, target, &mut p);
    // Whatever ended the stream, what was written whole is acknowledged.
    let acked = p.checkpoint();
    match (streamed, acked) {
        (Ok(()), Ok(())) => {}
        (Err(e), Ok(())) | (Ok(()), Err(e)) => return Err(e),
        // A reader that went away is the usual end; a failed ack is news.
        (Err(e), Err(ack)) if is_broken_pipe(&e) => return Err(ack),
        (Err(e), Err(ack)) => {
            let name = a.cursor.unwrap_or_default();
            let _ = std::io::Write::write_fmt(
                &mut std::io::stderr(),
                format_args!("treelog: cursor {name} not acknowledged: {ack}\n"),
            );
            return Err(e);
        }
    }
    if let (Some(name), false) = (a.cursor, out.json) {
        match (&p.acks, p.acked, p.safe) {
            (Acks::AfterFlush | Acks::AfterSync(_), Some(pos), _) => {
                outln!(out, "cursor {name} acknowledged #{pos}")?
            }
            (Acks::Never, _, Some(pos)) => outln!(
                out,
                "cursor {name} not acknowledged (--no-ack); printed up to #{pos}"
            )?,
            // Not into the consumer's input: it is a program's.
            (Acks::ByConsumer, _, Some(pos)) => {
                let _ = std::io::Write::write_fmt(
                    &mut std::io::stderr(),
                    format_args!(
                        "treelog: cursor {name} not acknowledged: standard output is a pipe or a \
                         socket, so the consumer acknowledges (`treelog ack {name} SEQ`, or give \
                         --auto-ack); printed up to #{pos}\n"
                    ),
                );
            }
            _ => {}
        }
    }
    Ok(0)
}

fn stream(
    out: &Out,
    a: &TailArgs<'_>,
    sub: &mut Sub<'_>,
    target: u64,
    p: &mut Written<'_>,
) -> Result<()> {
    let wait = if a.follow {
        Duration::from_secs(3600)
    } else {
        Duration::from_secs(5)
    };
    let long = LongFormat::exact();
    let mut n = 0u64;
    loop {
        if a.limit.is_some_and(|l| n >= l) {
            return Ok(());
        }
        // Caught up with what was committed at the start (a snapshot being
        // streamed is finished first: its items are the positions' content).
        if !a.follow && !p.in_snapshot && sub.position().is_some_and(|pos| pos >= target) {
            return Ok(());
        }
        let item = match sub.try_next()? {
            Some(item) => item,
            None => {
                // Caught up (for now): a good moment to acknowledge.
                p.checkpoint()?;
                match sub.next_within(wait)? {
                    Some(item) => item,
                    None if a.follow => continue,
                    None => return Ok(()),
                }
            }
        };
        n += 1;
        let text = if out.json {
            let mut s = serde_json::to_string(&item)
                .map_err(|e| Error::InvalidArgument(format!("cannot encode JSON: {e}")))?;
            s.push('\n');
            s
        } else {
            render(&item, &long)
        };
        out.write_str(&text)?;
        out.flush()?;
        p.written(&item);
        if p.since_ack >= ACK_EVERY {
            p.checkpoint()?;
        }
    }
}

/// Whether a record calls for a resync snapshot of `prefix` (the rule of
/// docs/STREAMS.md §6, applied to the events as delivered; a record whose
/// triggering rename `--kinds` filtered out is caught at its
/// `SnapshotStart` instead).
fn triggers_resync(events: &[ScopedEvent], prefix: &[u8]) -> bool {
    events.iter().any(|e| match (e.scope, &*e.event) {
        (Scope::MoveIn, Event::Rename { attrs, .. }) => attrs.kind.is_dir(),
        (Scope::Ancestor, Event::Rename { new_path, .. }) => {
            crate::path::is_within(prefix, new_path)
        }
        _ => false,
    })
}

/// An item as text lines (paths quoted for humans).
fn render(item: &StreamItem, long: &LongFormat) -> String {
    match item {
        StreamItem::SnapshotStart {
            seq,
            prefix,
            resync,
        } => format!(
            "== snapshot of {} at #{seq}{}\n",
            quote(prefix),
            if *resync { " (resync)" } else { "" }
        ),
        StreamItem::SnapshotEntry { path, inode } => {
            format!("   {}\n", long_line(inode, path, long))
        }
        StreamItem::SnapshotEnd { seq } => format!("== end of snapshot at #{seq}\n"),
        StreamItem::Progress { seq } => format!("#{seq} (no matching events up to here)\n"),
        StreamItem::Record {
            seq,
            time_ms,
            events,
        } => {
            let mut s = format!("#{seq} t={time_ms}\n");
            for e in events.iter() {
                s.push_str(&format!(
                    "    [{:?}] {}\n",
                    e.scope,
                    describe_event(&e.event)
                ));
            }
            s
        }
    }
}

pub(crate) fn parse_kind(k: &str) -> Result<crate::event::EventKind> {
    use crate::event::EventKind as K;
    Ok(match k {
        "setsize" => K::SetSize,
        "setattr" => K::SetAttr,
        other => K::parse(other).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "unknown event kind {other:?} (one of {})",
                K::ALL.map(K::as_str).join(", ")
            ))
        })?,
    })
}

/// `treelog ack CURSOR SEQ`.
pub(crate) fn ack(cli: &Cli, out: &Out, cursor: &str, seq: u64) -> Result<u8> {
    let t = open(cli)?;
    t.ack(cursor, seq)?;
    if out.json {
        out.print_json(
            &serde_json::json!({"ok": true, "op": "ack", "cursor": cursor, "seq": seq}),
        )?;
    } else {
        outln!(out, "cursor {cursor} acknowledged #{seq}")?;
    }
    Ok(0)
}
