//! What the blocking and the asyncio client share: the connection (made
//! once, by the first request of a lazily connected client), the options,
//! and every operation as a future that owns its arguments (so that it
//! can run on the runtime while Python goes on).

use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;

use treelog_client::ClientOptions;
use treelog_proto::command::Command;
use treelog_proto::error::Error;
use treelog_proto::protocol::{RequestBody, ResponseBody};
use treelog_proto::read::ReadAt;
use treelog_proto::types::{XattrFlag, DEFAULT_BLOCK_SIZE};

use crate::errors::{err, value_error};
use crate::types::{Cursor, DirEntry, Page, Stat, Summary};

type Rc = treelog_client::Client;

struct Conn {
    endpoints: String,
    opts: ClientOptions,
    client: tokio::sync::OnceCell<Rc>,
}

/// A handle on one client's connections, with its own request deadline
/// (`None`: none).
#[derive(Clone)]
pub(crate) struct Core {
    conn: Arc<Conn>,
    timeout: Option<Duration>,
}

/// Which committed state a read sees (`consistency=`, `min_seq=`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Consistency {
    /// Read-your-writes: at least the newest state this client has seen
    /// (and at least `min_seq`).
    Session(u64),
    /// The node's newest state (at least `min_seq`).
    Latest(u64),
    /// Linearizable: every write acknowledged before the read began.
    Linearizable,
}

impl Consistency {
    pub(crate) fn parse(consistency: Option<&str>, min_seq: Option<u64>) -> PyResult<Consistency> {
        let m = min_seq.unwrap_or(0);
        match consistency.unwrap_or("session") {
            "session" => Ok(Consistency::Session(m)),
            "latest" => Ok(Consistency::Latest(m)),
            "linearizable" if min_seq.is_none() => Ok(Consistency::Linearizable),
            "linearizable" => Err(value_error(
                "min_seq= has no meaning with consistency=\"linearizable\"",
            )),
            other => Err(value_error(format!(
                "consistency={other:?}: use \"session\", \"latest\" or \"linearizable\""
            ))),
        }
    }

    fn at(self, c: &Rc) -> ReadAt {
        match self {
            Consistency::Session(m) => match c.seen_seq().max(m) {
                0 => ReadAt::Latest,
                s => ReadAt::AtLeast(s),
            },
            Consistency::Latest(0) => ReadAt::Latest,
            Consistency::Latest(m) => ReadAt::AtLeast(m),
            Consistency::Linearizable => ReadAt::Linearizable,
        }
    }
}

fn unexpected(b: ResponseBody) -> PyErr {
    err(Error::Protocol(format!("unexpected reply {b:?}")))
}

pub(crate) fn flag(s: &str) -> PyResult<XattrFlag> {
    match s {
        "either" => Ok(XattrFlag::Either),
        "create" => Ok(XattrFlag::Create),
        "replace" => Ok(XattrFlag::Replace),
        other => Err(value_error(format!(
            "flag={other:?}: use \"either\", \"create\" or \"replace\""
        ))),
    }
}

/// Options of a mkdir/create/symlink.
pub(crate) struct NewInode {
    pub(crate) parents: bool,
    pub(crate) mode: Option<u32>,
    pub(crate) owner: String,
    pub(crate) group: String,
    pub(crate) block_size: Option<u64>,
}

impl Core {
    pub(crate) fn new(endpoints: String, opts: ClientOptions) -> Core {
        let timeout = Some(opts.request_timeout);
        Core {
            conn: Arc::new(Conn {
                endpoints,
                opts,
                client: tokio::sync::OnceCell::new(),
            }),
            timeout,
        }
    }

    /// A handle sharing these connections whose requests end within `t`
    /// (`None`: wait as long as it takes).
    pub(crate) fn with_timeout(&self, t: Option<Duration>) -> Core {
        Core {
            conn: self.conn.clone(),
            timeout: t,
        }
    }

    pub(crate) fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    pub(crate) fn endpoints(&self) -> &str {
        &self.conn.endpoints
    }

    pub(crate) fn connected(&self) -> Option<Rc> {
        self.conn.client.get().cloned()
    }

    /// The client, connected now if it was not yet.
    pub(crate) async fn client(&self) -> PyResult<Rc> {
        let c = self
            .conn
            .client
            .get_or_try_init(|| Rc::connect_to(&self.conn.endpoints, self.conn.opts.clone()))
            .await
            .map_err(err)?;
        Ok(match self.timeout {
            Some(t) => c.with_deadline(t),
            None => c.without_deadline(),
        })
    }

    pub(crate) async fn connect(self) -> PyResult<()> {
        self.client().await.map(|_| ())
    }

    pub(crate) async fn submit(self, cmd: Command) -> PyResult<u64> {
        self.client().await?.submit(cmd).await.map_err(err)
    }

    pub(crate) async fn stat(self, path: String, c: Consistency) -> PyResult<Stat> {
        let cl = self.client().await?;
        let r = cl.stat_at(&path, c.at(&cl)).await.map_err(err)?;
        Ok(Stat::of(&r.value))
    }

    /// Stats pipelined in one write; `None` for a path that does not exist.
    pub(crate) async fn stat_many(self, paths: Vec<String>) -> PyResult<Vec<Option<Stat>>> {
        let cl = self.client().await?;
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        let rs = cl.stat_many(&refs).await.map_err(err)?;
        rs.into_iter()
            .map(|r| match r {
                Ok(i) => Ok(Some(Stat::of(&i))),
                Err(e) if e.kind() == treelog_proto::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(err(e)),
            })
            .collect()
    }

    pub(crate) async fn list_page(
        self,
        path: String,
        start_after: Option<String>,
        limit: u32,
        c: Consistency,
    ) -> PyResult<Page> {
        let cl = self.client().await?;
        self.list_page_at(&cl, path, start_after, limit, c.at(&cl))
            .await
    }

    pub(crate) async fn list_page_at(
        &self,
        cl: &Rc,
        path: String,
        start_after: Option<String>,
        limit: u32,
        at: ReadAt,
    ) -> PyResult<Page> {
        if limit == 0 {
            return Err(value_error("a page holds at least one entry"));
        }
        let dir = treelog_proto::path::canonical(&path).map_err(err)?;
        let r = cl
            .list_at(
                &dir,
                start_after.as_deref().map(|s| s.as_bytes().into()),
                limit,
                at,
            )
            .await
            .map_err(err)?;
        Ok(Page {
            entries: r
                .value
                .entries
                .iter()
                .map(|e| DirEntry::new(&dir.to_str_lossy(), e))
                .collect(),
            next_start_after: r.value.next_start_after.map(|n| n.to_string()),
            seq: r.seq,
        })
    }

    pub(crate) async fn pin_view(&self) -> PyResult<u64> {
        self.client().await?.pin_view().await.map_err(err)
    }

    pub(crate) async fn unpin_view(&self, seq: u64) -> PyResult<()> {
        self.client().await?.unpin_view(seq).await.map_err(err)
    }

    async fn read(
        self,
        body: impl FnOnce(ReadAt) -> RequestBody,
        c: Consistency,
    ) -> PyResult<ResponseBody> {
        let cl = self.client().await?;
        cl.call(body(c.at(&cl))).await.map_err(err)
    }

    pub(crate) async fn readlink(self, path: String, c: Consistency) -> PyResult<String> {
        match self
            .read(
                |at| RequestBody::Readlink {
                    path: path.into(),
                    at,
                },
                c,
            )
            .await?
        {
            ResponseBody::Target { target, .. } => Ok(target.to_string()),
            other => Err(unexpected(other)),
        }
    }

    pub(crate) async fn xattrs(
        self,
        path: String,
        name: Option<String>,
        c: Consistency,
    ) -> PyResult<Vec<(String, Vec<u8>)>> {
        let body = |at| RequestBody::GetXattrs {
            path: path.into(),
            name,
            at,
        };
        match self.read(body, c).await? {
            ResponseBody::Xattrs { xattrs, .. } => {
                Ok(xattrs.into_iter().map(|x| (x.name, x.value.0)).collect())
            }
            other => Err(unexpected(other)),
        }
    }

    pub(crate) async fn getxattr(
        self,
        path: String,
        name: String,
        c: Consistency,
    ) -> PyResult<Vec<u8>> {
        let mut xs = self.xattrs(path, Some(name), c).await?;
        // The server answers `NotFound` for a missing attribute.
        match xs.pop() {
            Some((_, v)) => Ok(v),
            None => Err(err(Error::Protocol("no attribute in the reply".into()))),
        }
    }

    pub(crate) async fn count(self, path: String, c: Consistency) -> PyResult<Summary> {
        match self
            .read(
                |at| RequestBody::Count {
                    path: path.into(),
                    at,
                },
                c,
            )
            .await?
        {
            ResponseBody::Summary { summary, .. } => Ok(Summary::of(&summary)),
            other => Err(unexpected(other)),
        }
    }

    pub(crate) async fn mkdir(self, path: String, o: NewInode) -> PyResult<u64> {
        self.submit(Command::Mkdir {
            path: path.into(),
            parents: o.parents,
            mode: o.mode.unwrap_or(treelog_proto::types::DEFAULT_DIR_MODE),
            owner: o.owner,
            group: o.group,
        })
        .await
    }

    pub(crate) async fn create(self, path: String, o: NewInode) -> PyResult<u64> {
        self.submit(Command::Create {
            path: path.into(),
            parents: o.parents,
            mode: o.mode.unwrap_or(treelog_proto::types::DEFAULT_FILE_MODE),
            owner: o.owner,
            group: o.group,
            block_size: o.block_size.unwrap_or(DEFAULT_BLOCK_SIZE),
        })
        .await
    }

    pub(crate) async fn symlink(self, target: String, path: String, o: NewInode) -> PyResult<u64> {
        self.submit(Command::Symlink {
            target: target.into(),
            path: path.into(),
            parents: o.parents,
            owner: o.owner,
            group: o.group,
        })
        .await
    }

    pub(crate) async fn ack(self, cursor: String, seq: u64) -> PyResult<()> {
        self.client().await?.ack(&cursor, seq).await.map_err(err)
    }

    pub(crate) async fn cursors(self) -> PyResult<Vec<Cursor>> {
        let cs = self.client().await?.cursors().await.map_err(err)?;
        Ok(cs.iter().map(Cursor::of).collect())
    }

    pub(crate) async fn drop_cursor(self, cursor: String) -> PyResult<()> {
        self.client().await?.drop_cursor(&cursor).await.map_err(err)
    }

    pub(crate) async fn ping(self) -> PyResult<u64> {
        self.client().await?.ping().await.map_err(err)
    }

    pub(crate) async fn info(self) -> PyResult<(u64, u64)> {
        self.client().await?.info().await.map_err(err)
    }

    pub(crate) async fn wait_for(self, seq: u64, timeout: Duration) -> PyResult<u64> {
        self.client()
            .await?
            .wait_for(seq, timeout)
            .await
            .map_err(err)
    }
}

/// The argument of `utime`: seconds since the epoch, `None` for now.
pub(crate) fn mtime_ms(mtime: Option<f64>) -> PyResult<u64> {
    match mtime {
        None => Ok(treelog_proto::now_ms()),
        Some(s) if s.is_finite() && s >= 0.0 => Ok((s * 1000.0).round() as u64),
        Some(s) => Err(value_error(format!(
            "mtime={s}: seconds since the epoch, not negative"
        ))),
    }
}

/// A duration in seconds from Python (`None` stays `None`).
pub(crate) fn seconds(name: &str, s: Option<f64>) -> PyResult<Option<Duration>> {
    match s {
        None => Ok(None),
        Some(s) if s.is_finite() && s >= 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(value_error(format!("{name}={s}: seconds, not negative"))),
    }
}

/// Extended attributes as a `dict` in name order (`xattrs()`).
pub(crate) struct XattrMap(pub(crate) Vec<(String, Vec<u8>)>);

impl<'py> IntoPyObject<'py> for XattrMap {
    type Target = pyo3::types::PyDict;
    type Output = Bound<'py, pyo3::types::PyDict>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        let d = pyo3::types::PyDict::new(py);
        for (k, v) in self.0 {
            d.set_item(k, pyo3::types::PyBytes::new(py, &v))?;
        }
        Ok(d)
    }
}

/// The client's options from the constructor's keywords.
#[allow(clippy::too_many_arguments)]
pub(crate) fn options(
    token: Option<String>,
    tls: Option<Arc<treelog_client::ClientTls>>,
    timeout: Option<f64>,
    connect_timeout: f64,
    follow_leader: bool,
    leader_wait: f64,
    resume_for: f64,
) -> PyResult<ClientOptions> {
    let d = ClientOptions::default();
    Ok(ClientOptions {
        token,
        tls,
        // `timeout=None`: requests without a deadline (the handle's
        // `timeout` says so; this only bounds the first connect).
        request_timeout: seconds("timeout", timeout)?.unwrap_or(d.request_timeout),
        connect_timeout: seconds("connect_timeout", Some(connect_timeout))?
            .unwrap_or(d.connect_timeout),
        follow_leader,
        leader_wait: seconds("leader_wait", Some(leader_wait))?.unwrap_or(d.leader_wait),
        resume_for: seconds("resume_for", Some(resume_for))?.unwrap_or(d.resume_for),
        ..d
    })
}

/// `endpoints` as the client parses it: a string ("a:7400,b:7400") or a
/// sequence of strings.
pub(crate) fn endpoints(e: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = e.extract::<String>() {
        return Ok(s);
    }
    let list: Vec<String> = e.extract().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(
            "endpoints: a string \"host:port,host:port\" or a sequence of \"host:port\" strings",
        )
    })?;
    Ok(list.join(","))
}

impl Core {
    /// A stat that answers `None` for a missing path (`exists`).
    pub(crate) async fn stat_many_one(
        self,
        path: String,
        c: Consistency,
    ) -> PyResult<Option<Stat>> {
        match self.stat(path, c).await {
            Ok(s) => Ok(Some(s)),
            Err(e)
                if Python::attach(|py| {
                    e.is_instance_of::<pyo3::exceptions::PyFileNotFoundError>(py)
                }) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}
