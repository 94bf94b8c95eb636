//! Redis as the peer of `treelog-bench network`: a real `redis-server`
//! (Debian's, found on PATH) started by the bench, durable
//! (`appendonly yes`, `appendfsync always`), over loopback like treelog's
//! server, holding a namespace in JuiceFS's Redis metadata layout
//! (`pkg/meta/redis.go`), simplified as docs/BENCHMARKS.md (Network) says:
//!
//! - `i<ino>`: an inode's attributes (a 70-byte string, JuiceFS's binary
//!   `Attr` size);
//! - `d<ino>`: a directory, a hash `name -> entry` (the child's type and
//!   inode, here as the text `f:<ino>` / `d:<ino>` rather than packed
//!   bytes, so that the Lua scripts read it with string functions);
//! - `totalInodes`, `usedSpace`: counters every create updates.
//!
//! Workloads, beside treelog's in the same run:
//! - create: one Lua script (JuiceFS runs a WATCH/MULTI transaction; a
//!   script does the same writes atomically in one round trip): the entry
//!   must not exist, `HSET d<parent>`, `SET i<ino>`, the parent's
//!   attributes rewritten (its mtime), the two counters. Inode numbers
//!   come from a client-side counter (JuiceFS hands them out in batches).
//! - stat by path: JuiceFS's `resolve` script, which walks the path's
//!   components server-side (`HGET d<ino> name` each) and returns the
//!   last inode's attributes; and a plain `GET i<ino>`, Redis's floor.
//! - list a directory with attributes: `HGETALL d<ino>`, then `MGET` of
//!   every child's `i<ino>` (JuiceFS's readdir with attributes).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::load::drive;

const ATTR: [u8; 70] = [7; 70];

const CREATE: &str = r#"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[3])
redis.call('SET', KEYS[3], ARGV[3])
redis.call('INCRBY', 'usedSpace', 4096)
redis.call('INCR', 'totalInodes')
return 1
"#;

const RESOLVE: &str = r#"
local ino = '1'
for name in string.gmatch(ARGV[1], '[^/]+') do
  local e = redis.call('HGET', 'd' .. ino, name)
  if not e then return false end
  ino = string.sub(e, 3)
end
return redis.call('GET', 'i' .. ino)
"#;

/// A redis-server process, killed on drop.
pub struct Redis {
    child: Child,
    pub port: u16,
}

impl Redis {
    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Finds `redis-server`, or says why the peer is skipped.
pub fn find() -> std::result::Result<PathBuf, String> {
    let bin = std::env::var_os("TREELOG_REDIS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-server"));
    match Command::new(&bin).arg("--version").output() {
        Ok(o) if o.status.success() => Ok(bin),
        _ => Err(format!(
            "{} not found (Debian: apt-get install redis-server): the Redis rows are skipped",
            bin.display()
        )),
    }
}

pub fn start(bin: &Path, dir: &Path) -> Result<Redis> {
    std::fs::create_dir_all(dir)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = Command::new(bin)
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let r = Redis { child, port };
    for _ in 0..500 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(r);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(Error::InvalidArgument("redis-server never listened".into()))
}

/// `redis-benchmark -t get -P 64 -c 1` against the server: Redis's own C
/// client, pipelining 64 GETs over one connection (the floor the issue
/// names); `None` when redis-benchmark is not on PATH.
pub fn redis_benchmark_get(port: u16, n: u64) -> Option<f64> {
    redis_benchmark(port, "get", 64, n)
}

/// `redis-benchmark -t TEST -P depth -c 1 -n n`: its requests per second.
pub fn redis_benchmark(port: u16, test: &str, depth: usize, n: u64) -> Option<f64> {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-t", test, "-P", &depth.to_string(), "-c", "1"])
        .args(["-n", &n.to_string(), "-q"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "GET: 709219.88 requests per second, p50=..." (after \r progress).
    let prefix = format!("{}: ", test.to_uppercase());
    text.split(['\r', '\n'])
        .filter_map(|l| l.trim().strip_prefix(prefix.as_str()))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .next_back()
}

pub(crate) fn rerr(e: redis::RedisError) -> Error {
    Error::Protocol(format!("redis: {e}"))
}

/// A connection through `client` that waits for a reply as long as
/// treelog's clients do: the client's default (500 ms) is shorter than an
/// fsync of `appendfsync always` on a busy disk.
pub(crate) async fn connect(client: &redis::Client) -> Result<redis::aio::MultiplexedConnection> {
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .map_err(rerr)?;
    con.set_response_timeout(Duration::from_secs(60));
    Ok(con)
}

/// The client of the Redis on `port`.
pub(crate) fn client(port: u16) -> Result<redis::Client> {
    redis::Client::open(format!("redis://127.0.0.1:{port}/")).map_err(rerr)
}

/// The peer's figures, named as treelog's rows.
#[derive(Debug, Default)]
pub struct RedisFigures {
    pub creates_1x64: f64,
    pub creates_16x4: f64,
    pub creates_1x1: f64,
    pub stats_resolve_1x64: f64,
    pub gets_1x64: f64,
    pub lists_10k: f64,
}

/// Creates entries with the create script, numbering inodes from a
/// client-side counter. Cheap to clone: the clones share the counter.
#[derive(Clone)]
struct Creator {
    script: Arc<redis::Script>,
    next_ino: Arc<AtomicU64>,
}

impl Creator {
    /// Creates `name` in directory `parent` (`dir`: a directory, else a
    /// file); returns its inode.
    async fn create(
        &self,
        mut con: redis::aio::MultiplexedConnection,
        parent: u64,
        name: String,
        dir: bool,
    ) -> Result<u64> {
        let ino = self.next_ino.fetch_add(1, Ordering::Relaxed);
        let kind = if dir { 'd' } else { 'f' };
        let created: i64 = self
            .script
            .key(format!("d{parent}"))
            .key(format!("i{ino}"))
            .key(format!("i{parent}"))
            .arg(&name)
            .arg(format!("{kind}:{ino}"))
            .arg(&ATTR[..])
            .invoke_async(&mut con)
            .await
            .map_err(rerr)?;
        if created != 1 {
            return Err(Error::InvalidArgument(format!("{name} exists")));
        }
        Ok(ino)
    }

    /// `total` files `f<i>` in the directory `parent(i)`, `lanes` at a
    /// time, lane `l` on connection `conns[l % conns.len()]`; creates/s.
    async fn files(
        &self,
        conns: Arc<Vec<redis::aio::MultiplexedConnection>>,
        lanes: usize,
        total: usize,
        parent: impl Fn(usize) -> u64 + Send + Sync + 'static,
        name: fn(usize) -> String,
    ) -> Result<f64> {
        let me = self.clone();
        drive(lanes, total, move |lane, i| {
            let (me, con, dir) = (
                me.clone(),
                conns[lane % conns.len()].clone(),
                parent(i as usize),
            );
            async move {
                me.create(con, dir, name(i as usize), false)
                    .await
                    .map(|_| ())
            }
        })
        .await
    }
}

pub async fn run(
    port: u16,
    ops: usize,
    list_entries: usize,
    list_rounds: usize,
) -> Result<RedisFigures> {
    let client = client(port)?;
    let con = connect(&client).await?;
    let creator = Creator {
        script: Arc::new(redis::Script::new(CREATE)),
        next_ino: Arc::new(AtomicU64::new(2)),
    };
    let resolve = Arc::new(redis::Script::new(RESOLVE));
    let mut c = con.clone();
    redis::cmd("SET")
        .arg("i1")
        .arg(&ATTR[..])
        .query_async::<()>(&mut c)
        .await
        .map_err(rerr)?;
    // /r1, /r16, /rone, /big, and 1000 directories under each of the first two.
    let mut tops = Vec::new();
    for top in ["r1", "r16", "rone", "big"] {
        tops.push(creator.create(con.clone(), 1, top.into(), true).await?);
    }
    let mut dirs = vec![Vec::new(), Vec::new()];
    for (k, top) in tops[..2].iter().enumerate() {
        for d in 0..1000 {
            dirs[k].push(
                creator
                    .create(con.clone(), *top, format!("d{d}"), true)
                    .await?,
            );
        }
    }
    let dirs = Arc::new(dirs);
    let one = Arc::new(vec![con.clone()]);
    let mut sixteen = Vec::new();
    for _ in 0..16 {
        sixteen.push(connect(&client).await?);
    }
    let sixteen = Arc::new(sixteen);
    let name = |i: usize| format!("f{i}");
    let in_dirs = |k: usize| {
        let dirs = dirs.clone();
        move |i: usize| dirs[k][i % 1000]
    };
    let (rone, big) = (tops[2], tops[3]);
    let mut f = RedisFigures {
        creates_1x64: creator
            .files(one.clone(), 64, ops, in_dirs(0), name)
            .await?,
        creates_16x4: creator.files(sixteen, 64, ops, in_dirs(1), name).await?,
        creates_1x1: creator
            .files(one.clone(), 1, ops / 8, move |_| rone, name)
            .await?,
        ..Default::default()
    };
    // Stats by path (/r1/d<k>/f<i>), resolved server-side; and plain GETs.
    {
        let (rcon, resolve) = (con.clone(), resolve.clone());
        f.stats_resolve_1x64 = drive(64, ops * 4, move |_, i| {
            let (mut con, resolve) = (rcon.clone(), resolve.clone());
            async move {
                let path = format!("/r1/d{}/f{}", i % 1000, i % ops as u64);
                let attr: Option<Vec<u8>> = resolve
                    .arg(path.clone())
                    .invoke_async(&mut con)
                    .await
                    .map_err(rerr)?;
                match attr {
                    Some(a) if a.len() == ATTR.len() => Ok(()),
                    _ => Err(Error::NotFound(path)),
                }
            }
        })
        .await?;
        let con = con.clone();
        f.gets_1x64 = drive(64, ops * 4, move |_, i| {
            let mut con = con.clone();
            async move {
                let attr: Option<Vec<u8>> = redis::cmd("GET")
                    .arg(format!("i{}", 2 + i % 1000))
                    .query_async(&mut con)
                    .await
                    .map_err(rerr)?;
                attr.map(|_| ())
                    .ok_or_else(|| Error::NotFound("inode".into()))
            }
        })
        .await?;
    }
    // A directory of `list_entries` files, listed with attributes.
    {
        creator
            .files(one, 64, list_entries, move |_| big, |i| format!("f{i:05}"))
            .await?;
        let mut c = con.clone();
        let t0 = Instant::now();
        for _ in 0..list_rounds {
            let entries: Vec<(String, String)> = redis::cmd("HGETALL")
                .arg(format!("d{big}"))
                .query_async(&mut c)
                .await
                .map_err(rerr)?;
            let keys: Vec<String> = entries
                .iter()
                .map(|(_, e)| format!("i{}", &e[2..]))
                .collect();
            let attrs: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
                .arg(&keys)
                .query_async(&mut c)
                .await
                .map_err(rerr)?;
            if attrs.len() != list_entries || attrs.iter().any(Option::is_none) {
                return Err(Error::InvalidArgument(format!(
                    "listed {} of {list_entries}",
                    attrs.len()
                )));
            }
        }
        f.lists_10k = list_rounds as f64 / t0.elapsed().as_secs_f64();
    }
    Ok(f)
}
