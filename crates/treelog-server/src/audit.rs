//! The audit log (`serve --audit-log PATH`, or `-` for the tracing target
//! `treelog::audit`): one JSON line per mutation and per admin, membership
//! or node operation — who (credential, role, address, TLS identity), what
//! (request, paths), how it ended (outcome, sequence).
//!
//! Lines go through a bounded queue to a thread of their own, so the
//! writer (the apply loop) and readers never wait for the log's disk;
//! when the queue is full, the connection whose request is being recorded
//! waits (it stops reading requests: the client that mutates is held
//! back). A line that cannot be written is counted and logged, and the
//! server goes on.

use std::io::Write;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus::IntCounter;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use treelog::{ByteString, Command, Error, Result};
use treelog_proto::protocol::RequestBody;

use crate::roles::Identity;

/// Lines queued for the writing thread at most.
pub(crate) const QUEUE: usize = 4096;

/// Where the audit log goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditTarget {
    /// Appended to this file (made if missing, mode 0600).
    File(PathBuf),
    /// Events of the tracing target `treelog::audit` (the server's log).
    Tracing,
}

impl std::str::FromStr for AuditTarget {
    type Err = Error;

    fn from_str(s: &str) -> Result<AuditTarget> {
        match s {
            "" => Err(Error::InvalidArgument(
                "--audit-log: a file, or - for the server's log".into(),
            )),
            "-" => Ok(AuditTarget::Tracing),
            p => Ok(AuditTarget::File(p.into())),
        }
    }
}

/// The audit log's queue, and its counters.
pub(crate) struct Audit {
    tx: mpsc::Sender<String>,
    /// Lines that could not be written.
    pub(crate) failures: IntCounter,
    /// Times a connection waited for room in the queue.
    pub(crate) waits: IntCounter,
}

/// What a request's line says before its outcome is known.
pub(crate) struct Draft {
    request: &'static str,
    paths: Vec<ByteString>,
    detail: Option<String>,
    /// The user the request was made for (`RequestAs`, checked).
    user: Option<String>,
}

impl Draft {
    /// The draft of a request made for `caller` (a checked one).
    pub(crate) fn for_user(mut self, caller: Option<&treelog::Caller>) -> Draft {
        self.user = caller.map(|c| c.user.clone());
        self
    }

    pub(crate) fn of(request: &'static str, body: &RequestBody) -> Draft {
        let (paths, detail) = match body {
            RequestBody::Mutate(c) => (command_paths(c), None),
            RequestBody::DropCursor { cursor } => (vec![], Some(format!("cursor {cursor}"))),
            RequestBody::Cluster(req) => (vec![], Some(format!("{req:?}"))),
            RequestBody::Replicate(from) => (
                vec![],
                Some(format!(
                    "from {} namespace {} cursor {:?}",
                    from.from, from.namespace, from.cursor
                )),
            ),
            RequestBody::BackupBegin { resume } => (vec![], resume.map(|r| format!("resume {r}"))),
            _ => (vec![], None),
        };
        Draft {
            request,
            paths,
            detail,
            user: None,
        }
    }
}

fn command_paths(c: &Command) -> Vec<ByteString> {
    match c {
        Command::Rename { src, dst, .. } => vec![src.clone(), dst.clone()],
        Command::Mkdir { path, .. }
        | Command::Create { path, .. }
        | Command::Complete { path, .. }
        | Command::SetSize { path, .. }
        | Command::SetAttr { path, .. }
        | Command::Delete { path, .. }
        | Command::Symlink { path, .. }
        | Command::SetXattr { path, .. }
        | Command::RemoveXattr { path, .. }
        | Command::SetQuota { path, .. }
        | Command::ClearQuota { path }
        | Command::RecountQuota { path } => vec![path.clone()],
    }
}

/// Who sent a request, for its line.
pub(crate) struct Who<'a> {
    pub(crate) identity: &'a Identity,
    pub(crate) peer: std::net::SocketAddr,
    pub(crate) tls_identity: Option<&'a str>,
}

/// The line of `draft` sent by `who`, ended with `outcome` (`ok` or an
/// error kind) at sequence `seq` (a mutation's).
pub(crate) fn line(who: &Who<'_>, draft: Draft, outcome: &str, seq: Option<u64>) -> String {
    let time_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let mut v = json!({
        "time_ms": time_ms,
        "credential": who.identity.name,
        "role": who.identity.role.as_str(),
        "peer": who.peer.to_string(),
        "tls_identity": who.tls_identity,
        "request": draft.request,
        "paths": draft.paths,
        "outcome": outcome,
        "seq": seq,
    });
    if let (Some(d), Value::Object(m)) = (draft.detail, &mut v) {
        m.insert("detail".into(), Value::String(d));
    }
    if let (Some(u), Value::Object(m)) = (draft.user, &mut v) {
        m.insert("user".into(), Value::String(u));
    }
    v.to_string()
}

impl Audit {
    /// Opens `target` (a file that cannot be opened stops the start) and
    /// starts the thread that writes it.
    pub(crate) fn start(target: &AuditTarget) -> Result<Audit> {
        let failures = IntCounter::new(
            "treelog_server_audit_write_failures_total",
            "Audit log lines that could not be written",
        )
        .map_err(metric_error)?;
        let waits = IntCounter::new(
            "treelog_server_audit_queue_full_total",
            "Times a connection waited for room in the audit log's queue",
        )
        .map_err(metric_error)?;
        let mut sink: Box<dyn Write + Send> = match target {
            AuditTarget::Tracing => Box::new(TracingSink),
            AuditTarget::File(p) => {
                use std::os::unix::fs::OpenOptionsExt;
                let f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .open(p)
                    .map_err(|e| {
                        Error::InvalidArgument(format!("--audit-log {}: {e}", p.display()))
                    })?;
                Box::new(std::io::BufWriter::new(f))
            }
        };
        let (tx, mut rx) = mpsc::channel::<String>(QUEUE);
        let failed = failures.clone();
        std::thread::Builder::new()
            .name("treelog-audit".into())
            .spawn(move || {
                while let Some(first) = rx.blocking_recv() {
                    let mut next = Some(first);
                    // Write what is queued, then flush once.
                    while let Some(l) = next {
                        if let Err(e) = writeln!(sink, "{l}") {
                            failed_write(&failed, &e);
                        }
                        next = rx.try_recv().ok();
                    }
                    if let Err(e) = sink.flush() {
                        failed_write(&failed, &e);
                    }
                }
            })?;
        Ok(Audit {
            tx,
            failures,
            waits,
        })
    }

    /// Queues `line`, waiting while the queue is full.
    pub(crate) async fn record(&self, line: String) {
        let line = match self.tx.try_send(line) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(l)) => l,
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.failures.inc();
                return;
            }
        };
        self.waits.inc();
        if self.tx.send(line).await.is_err() {
            self.failures.inc();
        }
    }

    /// Puts the audit log's counters on the server's registry.
    pub(crate) fn register(&self, r: &prometheus::Registry) -> prometheus::Result<()> {
        r.register(Box::new(self.failures.clone()))?;
        r.register(Box::new(self.waits.clone()))
    }
}

fn metric_error(e: prometheus::Error) -> Error {
    Error::InvalidArgument(format!("audit log metrics: {e}"))
}

fn failed_write(failures: &IntCounter, e: &std::io::Error) {
    failures.inc();
    // Logged for the first failure and then one in a thousand: a full
    // disk fails every line.
    if failures.get() % 1000 == 1 {
        tracing::error!(error = %e, failures = failures.get(), "cannot write the audit log");
    }
}

/// The audit log as tracing events (`--audit-log -`): each line an event
/// of the target `treelog::audit`.
struct TracingSink;

impl Write for TracingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let line = text.trim_end_matches('\n');
        if !line.is_empty() {
            tracing::info!(target: "treelog::audit", audit = %line);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::Role;

    #[test]
    fn a_line_names_who_what_and_how_it_ended() {
        let id = Identity {
            name: "ci".into(),
            role: Role::Write,
            node: false,
        };
        let who = Who {
            identity: &id,
            peer: "10.0.0.1:5000".parse().unwrap(),
            tls_identity: None,
        };
        let body = RequestBody::Mutate(Command::Rename {
            src: "/a".into(),
            dst: "/b".into(),
            overwrite: false,
        });
        let l = line(&who, Draft::of("rename", &body), "ok", Some(7));
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["credential"], "ci");
        assert_eq!(v["role"], "write");
        assert_eq!(v["peer"], "10.0.0.1:5000");
        assert_eq!(v["tls_identity"], Value::Null);
        assert_eq!(v["request"], "rename");
        assert_eq!(v["paths"], json!(["/a", "/b"]));
        assert_eq!(v["outcome"], "ok");
        assert_eq!(v["seq"], 7);
        assert!(v["time_ms"].as_u64().unwrap() > 0);
    }

    /// A full queue holds the recording task back, and nothing is lost.
    #[test]
    fn a_full_queue_waits_and_keeps_every_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.log");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let n = QUEUE * 3;
        {
            let a = Audit::start(&AuditTarget::File(p.clone())).unwrap();
            rt.block_on(async {
                for i in 0..n {
                    a.record(format!("{{\"i\":{i}}}")).await;
                }
            });
            assert_eq!(a.failures.get(), 0);
        }
        // Dropping the queue ends the thread after the last line; wait for
        // the file to hold them all.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let lines = std::fs::read_to_string(&p).unwrap().lines().count();
            if lines == n {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{lines} of {n} lines");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
