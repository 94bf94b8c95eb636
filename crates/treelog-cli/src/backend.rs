//! What the CLI talks to: the local data directory (embedded store) or a
//! server (`--server ADDR`), behind one set of blocking calls.

use std::time::Duration;

use crate::args::Cli;
use crate::client::{Client, ClientOptions, RemoteSubscription};
use crate::command::Command;
use crate::error::{Error, Result};
use crate::exit::naming;
use crate::format::ROOT_ID;
use crate::protocol::{RequestBody, ResponseBody, Role};
use crate::retention::CursorInfo;
use crate::stream::{StreamItem, SubscribeOptions, Subscription};
use crate::types::{ContentSummary, DirEntry, Inode, ListPage, Xattr};
use treelog::bytestr::BStr;
use treelog::{ByteString, Options, Treelog};
use treelog::{Read, ReadAt};

/// How long a server has to say its role (`Status`, answered at once by a
/// running one).
const ROLE_WAIT: Duration = Duration::from_secs(10);

pub(crate) enum Backend {
    Local(Treelog),
    Remote {
        rt: tokio::runtime::Runtime,
        client: Client,
    },
}

pub(crate) enum Sub<'a> {
    Local(Subscription),
    Remote {
        rt: &'a tokio::runtime::Runtime,
        sub: Box<RemoteSubscription>,
        /// An item arrived: the subscription is connected.
        started: bool,
    },
}

/// How long connecting to one address may take (etcdctl's --dial-timeout).
const DIAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

impl Backend {
    pub(crate) fn local(data: &std::path::Path, opts: Options) -> Result<Backend> {
        Ok(Backend::Local(Treelog::open(data, opts)?))
    }

    /// A client of the servers `endpoints` names (`host:port`, `[v6]:port`,
    /// or a comma-separated list), each request within `deadline` (none:
    /// as long as it takes).
    pub(crate) fn remote(
        endpoints: &str,
        token: Option<String>,
        tls: Option<std::sync::Arc<crate::client::ClientTls>>,
        deadline: Option<std::time::Duration>,
    ) -> Result<Backend> {
        // At least the dial timeout: a request can always (re)connect
        // once, even under `--timeout 0` (no wait for --min-seq).
        let deadline = deadline.map(|d| d.max(DIAL_TIMEOUT));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let client = rt.block_on(Client::connect_to(
            endpoints,
            ClientOptions {
                token,
                tls,
                // A write sent to a replica or a follower goes on to its
                // leader.
                follow_leader: true,
                connect_timeout: DIAL_TIMEOUT,
                request_timeout: deadline.unwrap_or(std::time::Duration::from_secs(30)),
                ..Default::default()
            },
        ))?;
        let client = match deadline {
            Some(d) => client.with_deadline(d),
            None => client.without_deadline(),
        };
        Ok(Backend::Remote { rt, client })
    }

    pub(crate) fn submit(&self, cmd: Command) -> Result<u64> {
        match self {
            Backend::Local(t) => t.submit(cmd),
            Backend::Remote { rt, client } => rt.block_on(client.submit(cmd)),
        }
    }

    pub(crate) fn stat_id_at(&self, id: u64, at: ReadAt) -> Result<Inode> {
        match self {
            Backend::Local(t) => t.stat_id_at(id, at).map(|r| r.value),
            Backend::Remote { rt, client } => {
                rt.block_on(client.stat_id_at(id, at)).map(|r| r.value)
            }
        }
    }

    pub(crate) fn readlink_at(&self, path: impl AsRef<[u8]>, at: ReadAt) -> Result<ByteString> {
        let path = path.as_ref();
        match self {
            Backend::Local(t) => t.readlink_at(path, at).map(|r| r.value),
            Backend::Remote { rt, client } => {
                let body = RequestBody::Readlink {
                    path: path.into(),
                    at,
                };
                match rt.block_on(client.call(body))? {
                    ResponseBody::Target { target, .. } => Ok(target),
                    other => Err(unexpected("Readlink", other)),
                }
            }
        }
    }

    /// The extended attribute `name` of `path`, or all of them.
    pub(crate) fn xattrs_at(
        &self,
        path: impl AsRef<[u8]>,
        name: Option<&str>,
        at: ReadAt,
    ) -> Result<Vec<Xattr>> {
        let path = path.as_ref();
        match self {
            Backend::Local(t) => t.xattrs_at(path, name, at).map(|r| r.value),
            Backend::Remote { rt, client } => {
                let body = RequestBody::GetXattrs {
                    path: path.into(),
                    name: name.map(str::to_owned),
                    at,
                };
                match rt.block_on(client.call(body))? {
                    ResponseBody::Xattrs { xattrs, .. } => Ok(xattrs),
                    other => Err(unexpected("GetXattrs", other)),
                }
            }
        }
    }

    pub(crate) fn count_at(&self, path: impl AsRef<[u8]>, at: ReadAt) -> Result<ContentSummary> {
        let path = path.as_ref();
        match self {
            Backend::Local(t) => t.count_at(path, at).map(|r| r.value),
            Backend::Remote { rt, client } => {
                let body = RequestBody::Count {
                    path: path.into(),
                    at,
                };
                match rt.block_on(client.call(body))? {
                    ResponseBody::Summary { summary, .. } => Ok(summary),
                    other => Err(unexpected("Count", other)),
                }
            }
        }
    }

    /// The server's role (a local data directory is its own leader),
    /// within [`ROLE_WAIT`]: a stopped node must not hang the command.
    pub(crate) fn role(&self) -> Result<Role> {
        match self {
            Backend::Local(_) => Ok(Role::Leader),
            Backend::Remote { rt, client } => {
                let status = rt.block_on(async {
                    tokio::time::timeout(ROLE_WAIT, client.call(RequestBody::Status)).await
                });
                match status {
                    Err(_) => Err(Error::Protocol(format!(
                        "the server did not say its role within {} s",
                        ROLE_WAIT.as_secs()
                    ))),
                    Ok(r) => match r? {
                        ResponseBody::Status(s) => Ok(s.role),
                        other => Err(unexpected("Status", other)),
                    },
                }
            }
        }
    }

    /// Waits up to `timeout` for the store to commit `seq`; returns its
    /// committed sequence then (lower than `seq` when it did not).
    pub(crate) fn wait_for(&self, seq: u64, timeout: Duration) -> Result<u64> {
        match self {
            Backend::Local(t) => Ok(t.committed_seq()),
            Backend::Remote { rt, client } => rt.block_on(async {
                // The server answers at its bound; a stopped one never
                // does, so the client keeps one too (a second more).
                let bound = timeout + Duration::from_secs(1);
                match tokio::time::timeout(bound, client.wait_for(seq, timeout)).await {
                    Ok(r) => r,
                    Err(_) => Err(crate::consistency::not_caught_up(None, seq, bound)),
                }
            }),
        }
    }

    /// The path of an inode at the state `at`, by walking parent ids.
    pub(crate) fn path_of(&self, id: u64, at: ReadAt) -> Result<ByteString> {
        let mut names = Vec::new();
        let mut cur = self.stat_id_at(id, at)?;
        while cur.id != ROOT_ID {
            names.push(cur.name.clone());
            if names.len() > 4096 {
                return Err(Error::corrupt("index", "parent chain loops"));
            }
            cur = self.stat_id_at(cur.parent, at)?;
        }
        names.reverse();
        Ok(crate::path::join_all(&names))
    }

    /// A listing page at a committed state.
    pub(crate) fn list_at(
        &self,
        path: impl AsRef<[u8]>,
        after: Option<&BStr>,
        limit: usize,
        at: ReadAt,
    ) -> Result<ListPage> {
        let path = path.as_ref();
        match self {
            Backend::Local(t) => t.list_at(path, after, limit, at).map(|r| r.value),
            Backend::Remote { rt, client } => rt
                .block_on(client.list_at(path, after, limit.min(u32::MAX as usize) as u32, at))
                .map(|r| r.value),
        }
    }

    /// A stat at a committed state, with that state's sequence.
    pub(crate) fn stat_at(&self, path: impl AsRef<[u8]>, at: ReadAt) -> Result<Read<Inode>> {
        let path = path.as_ref();
        match self {
            Backend::Local(t) => t.stat_at(path, at),
            Backend::Remote { rt, client } => rt.block_on(client.stat_at(path, at)),
        }
    }

    /// `at` as `Latest`: once one read at `at` has answered, the node's
    /// newest state is at least as new as that read's (its watermark only
    /// rises), so later reads of this command need not wait or ask the
    /// leader again, and a walk (`count`) takes the node's fast path.
    pub(crate) fn settle(&self, at: ReadAt) -> Result<ReadAt> {
        if at != ReadAt::Latest {
            self.stat_at(b"/", at)?;
        }
        Ok(ReadAt::Latest)
    }

    /// Pins a state that `at` allows (see [`Backend::settle`]).
    pub(crate) fn pin_view_at(&self, at: ReadAt) -> Result<u64> {
        self.settle(at)?;
        self.pin_view()
    }

    /// Pins the newest committed state (see `Treelog::pin_view`).
    pub(crate) fn pin_view(&self) -> Result<u64> {
        match self {
            Backend::Local(t) => t.pin_view(),
            Backend::Remote { rt, client } => rt.block_on(client.pin_view()),
        }
    }

    /// Releases a pin (best effort: pins also expire).
    pub(crate) fn unpin_view(&self, seq: u64) {
        match self {
            Backend::Local(t) => {
                t.unpin_view(seq);
            }
            Backend::Remote { rt, client } => {
                let _ = rt.block_on(client.unpin_view(seq));
            }
        }
    }

    /// Every entry of a directory, all pages at the state `at`.
    pub(crate) fn list_all_at(&self, path: impl AsRef<[u8]>, at: ReadAt) -> Result<Vec<DirEntry>> {
        let path = path.as_ref();
        let mut out = Vec::new();
        let mut after: Option<ByteString> = None;
        loop {
            let page = self.list_at(path, after.as_deref(), 1000, at)?;
            out.extend(page.entries);
            match page.next_start_after {
                Some(n) => after = Some(n),
                None => return Ok(out),
            }
        }
    }

    pub(crate) fn committed_seq(&self) -> Result<u64> {
        match self {
            Backend::Local(t) => Ok(t.committed_seq()),
            Backend::Remote { rt, client } => rt.block_on(client.ping()),
        }
    }

    pub(crate) fn log_start(&self) -> Result<u64> {
        match self {
            Backend::Local(t) => Ok(t.log_start()),
            Backend::Remote { rt, client } => rt.block_on(client.info()).map(|i| i.1),
        }
    }

    pub(crate) fn cursors(&self) -> Result<Vec<CursorInfo>> {
        match self {
            Backend::Local(t) => Ok(t.cursors()),
            Backend::Remote { rt, client } => rt.block_on(client.cursors()),
        }
    }

    pub(crate) fn drop_cursor(&self, name: &str) -> Result<()> {
        match self {
            Backend::Local(t) => t.drop_cursor(name),
            Backend::Remote { rt, client } => rt.block_on(client.drop_cursor(name)),
        }
    }

    pub(crate) fn ack(&self, name: &str, seq: u64) -> Result<()> {
        match self {
            Backend::Local(t) => t.ack(name, seq),
            Backend::Remote { rt, client } => rt.block_on(client.ack(name, seq)),
        }
    }

    pub(crate) fn subscribe(&self, o: SubscribeOptions) -> Result<Sub<'_>> {
        match self {
            Backend::Local(t) => Ok(Sub::Local(t.subscribe(o)?)),
            Backend::Remote { rt, client } => Ok(Sub::Remote {
                rt,
                sub: Box::new(rt.block_on(client.subscribe(o))?),
                started: false,
            }),
        }
    }
}

impl Sub<'_> {
    /// The next item within `wait`, or `None`.
    pub(crate) fn next_within(&mut self, wait: Duration) -> Result<Option<StreamItem>> {
        match self {
            Sub::Local(s) => s.next_timeout(wait),
            Sub::Remote { rt, sub, started } => {
                let r = rt.block_on(async {
                    match tokio::time::timeout(wait, sub.next()).await {
                        Ok(Some(r)) => r.map(Some),
                        Ok(None) | Err(_) => Ok(None),
                    }
                });
                *started |= matches!(r, Ok(Some(_)));
                r
            }
        }
    }

    /// The next item if one is ready now (`None` says nothing about the
    /// end of the stream).
    pub(crate) fn try_next(&mut self) -> Result<Option<StreamItem>> {
        match self {
            Sub::Local(s) => s.try_next(),
            // Not connected yet: one poll would start a connection only to
            // drop it.
            Sub::Remote { started: false, .. } => Ok(None),
            Sub::Remote { rt, sub, .. } => rt.block_on(async {
                // Receiving is cancel-safe; a reconnect this cuts short is
                // started again by the next call.
                match futures_util::FutureExt::now_or_never(sub.next()) {
                    Some(Some(r)) => r.map(Some),
                    Some(None) | None => Ok(None),
                }
            }),
        }
    }

    pub(crate) fn position(&self) -> Option<u64> {
        match self {
            Sub::Local(s) => (!s.is_snapshotting()).then(|| s.position()),
            Sub::Remote { sub, .. } => sub.position(),
        }
    }
}

fn unexpected(request: &str, reply: ResponseBody) -> Error {
    Error::Protocol(format!("unexpected reply to {request}: {reply:?}"))
}

/// The backend the command line names: `--server`, else `--data`.
pub(crate) fn open(cli: &Cli) -> Result<Backend> {
    match &cli.server {
        Some(addr) => Backend::remote(
            addr,
            read_token(cli.token_file.as_deref())?,
            crate::tls::client_tls(cli)?,
            Some(cli.timeout),
        ),
        None => Backend::local(
            &cli.data,
            Options::default().durability(cli.durability.into()),
        )
        .map_err(|e| naming(&cli.data, e)),
    }
}

/// The local data directory, for the commands that need it (`--server`
/// is refused).
pub(crate) fn open_local(cli: &Cli) -> Result<Treelog> {
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

/// Reads a token file (surrounding whitespace ignored).
pub(crate) fn read_token(path: Option<&std::path::Path>) -> Result<Option<String>> {
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
