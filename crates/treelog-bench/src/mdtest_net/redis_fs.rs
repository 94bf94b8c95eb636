//! The Redis peer of `treelog-bench mdtest`: a namespace in JuiceFS's Redis
//! metadata layout (`pkg/meta/redis.go`), each operation one Lua script
//! (JuiceFS runs a WATCH/MULTI transaction; a script makes the same reads
//! and writes atomically in one round trip):
//!
//! - `i<ino>`: an inode's attributes, 70 bytes (JuiceFS's binary `Attr`
//!   size), the first byte its type (`d`/`f`) so that the scripts can check
//!   it;
//! - `d<ino>`: a directory's entries, a hash `name -> "<type>:<ino>"` (JuiceFS
//!   packs type and inode in 9 bytes; text here, for the scripts' string
//!   functions);
//! - `nextinode`: the inode counter (JuiceFS's clients take blocks of 1,000
//!   from it; the create script takes one at a time);
//! - `totalInodes`, `usedSpace`: the counters every create and remove updates.
//!
//! As JuiceFS does, every create, remove and rename also rewrites the
//! parent's attributes (its mtime and ctime, and nlink for directories) in
//! the same transaction, and a rename rewrites the moved inode's (its ctime).
//! A lookup is JuiceFS's `lookup` script (the entry, then the inode's
//! attributes); a listing with attributes is `HGETALL d<ino>` and an `MGET`
//! of the children's `i<ino>` (JuiceFS's readdir-plus). Left out: sessions,
//! open-file tracking, trash, quotas, hard links' parent sets (`p<ino>`).
//!
//! The client resolves a directory's inode once (as a mount's dentry cache
//! holds it) and then addresses entries by parent inode and name, as a
//! JuiceFS mount does; treelog's clients send whole paths, resolved by the
//! server on every operation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use redis::aio::MultiplexedConnection;

use crate::error::{Error, Result};
use crate::redis_peer::rerr;

/// JuiceFS's `Attr` size.
const ATTR_LEN: usize = 70;

fn attr(kind: u8) -> Vec<u8> {
    let mut a = vec![7u8; ATTR_LEN];
    a[0] = kind;
    a
}

/// An entry of `d<parent>` (KEYS[1]) named ARGV[1], of type ARGV[2]; the
/// parent's attributes (KEYS[2]) must be a directory's and are rewritten
/// (ARGV[4]); the new inode's are ARGV[3]. Returns the inode, or a negative
/// errno-like code.
const MKNOD: &str = r#"
local pa = redis.call('GET', KEYS[2])
if not pa or string.sub(pa, 1, 1) ~= 'd' then return -20 end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return -17 end
local ino = redis.call('INCR', 'nextinode')
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ino)
redis.call('SET', 'i' .. ino, ARGV[3])
redis.call('SET', KEYS[2], ARGV[4])
redis.call('INCR', 'totalInodes')
if ARGV[2] == 'd' then redis.call('INCRBY', 'usedSpace', 4096) end
return ino
"#;

/// Removes entry ARGV[1] of type ARGV[2] from `d<parent>` (KEYS[1]): a
/// directory only when empty; its inode's keys go, the parent's
/// attributes (KEYS[2]) are rewritten (ARGV[3]).
const REMOVE: &str = r#"
local e = redis.call('HGET', KEYS[1], ARGV[1])
if not e then return -2 end
local kind = string.sub(e, 1, 1)
if kind ~= ARGV[2] then return -21 end
local ino = string.sub(e, 3)
if kind == 'd' then
  if redis.call('HLEN', 'd' .. ino) > 0 then return -39 end
  redis.call('DEL', 'd' .. ino)
  redis.call('DECRBY', 'usedSpace', 4096)
end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('DEL', 'i' .. ino)
redis.call('SET', KEYS[2], ARGV[3])
redis.call('DECR', 'totalInodes')
return 1
"#;

/// Renames ARGV[1] to ARGV[2] (which must not exist) within `d<parent>`
/// (KEYS[1]); the moved inode's attributes are rewritten (its ctime), and
/// the parent's (KEYS[2], to ARGV[3]).
const RENAME: &str = r#"
local e = redis.call('HGET', KEYS[1], ARGV[1])
if not e then return -2 end
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then return -17 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[2], e)
local ik = 'i' .. string.sub(e, 3)
local a = redis.call('GET', ik)
redis.call('SET', ik, a)
redis.call('SET', KEYS[2], ARGV[3])
return 1
"#;

/// JuiceFS's lookup: entry ARGV[1] of `d<parent>` (KEYS[1]), then its
/// inode's attributes; `{ino, attr}` or nil.
const LOOKUP: &str = r#"
local e = redis.call('HGET', KEYS[1], ARGV[1])
if not e then return false end
local ino = string.sub(e, 3)
local a = redis.call('GET', 'i' .. ino)
if not a then return false end
return {ino, a}
"#;

fn code(path: &str, c: i64) -> Result<i64> {
    match c {
        c if c > 0 => Ok(c),
        -2 => Err(Error::NotFound(path.to_owned())),
        -17 => Err(Error::AlreadyExists(path.to_owned())),
        c => Err(Error::InvalidArgument(format!(
            "{path}: redis script said {c}"
        ))),
    }
}

/// `(parent, name)` of an absolute path.
fn split(path: &str) -> Result<(&str, &str)> {
    match path.rsplit_once('/') {
        Some((p, n)) if !n.is_empty() => Ok((if p.is_empty() { "/" } else { p }, n)),
        _ => Err(Error::InvalidArgument(format!("bad path {path:?}"))),
    }
}

struct Scripts {
    mknod: redis::Script,
    remove: redis::Script,
    rename: redis::Script,
    lookup: redis::Script,
}

/// One connection (multiplexed: its clones pipeline over it) and the
/// directory inodes this client has resolved.
#[derive(Clone)]
pub(crate) struct RedisFs {
    con: MultiplexedConnection,
    scripts: Arc<Scripts>,
    dirs: Arc<Mutex<HashMap<String, u64>>>,
}

impl RedisFs {
    pub(crate) async fn connect(port: u16) -> Result<RedisFs> {
        let con = crate::redis_peer::connect(&crate::redis_peer::client(port)?).await?;
        Ok(RedisFs {
            con,
            scripts: Arc::new(Scripts {
                mknod: redis::Script::new(MKNOD),
                remove: redis::Script::new(REMOVE),
                rename: redis::Script::new(RENAME),
                lookup: redis::Script::new(LOOKUP),
            }),
            dirs: Arc::new(Mutex::new(HashMap::from([("/".to_owned(), 1)]))),
        })
    }

    /// The root's attributes and the inode counter, in an empty database.
    pub(crate) async fn format(&self) -> Result<()> {
        let mut c = self.con.clone();
        redis::pipe()
            .cmd("SET")
            .arg("i1")
            .arg(attr(b'd'))
            .ignore()
            .cmd("SET")
            .arg("nextinode")
            .arg(1)
            .ignore()
            .query_async::<()>(&mut c)
            .await
            .map_err(rerr)
    }

    async fn lookup(&self, parent: u64, name: &str) -> Result<Option<(u64, Vec<u8>)>> {
        let r: Option<(String, Vec<u8>)> = self
            .scripts
            .lookup
            .key(format!("d{parent}"))
            .arg(name)
            .invoke_async(&mut self.con.clone())
            .await
            .map_err(rerr)?;
        match r {
            None => Ok(None),
            Some((ino, a)) => {
                let ino = ino
                    .parse()
                    .map_err(|_| Error::Protocol(format!("bad inode {ino:?}")))?;
                Ok(Some((ino, a)))
            }
        }
    }

    /// A directory's inode, resolved component by component the first time
    /// and cached.
    pub(crate) async fn dir_ino(&self, path: &str) -> Result<u64> {
        if let Some(i) = self.dirs.lock().expect("dir cache").get(path) {
            return Ok(*i);
        }
        let (parent, name) = split(path)?;
        let p = Box::pin(self.dir_ino(parent)).await?;
        match self.lookup(p, name).await? {
            Some((ino, a)) if a.first() == Some(&b'd') => {
                self.dirs
                    .lock()
                    .expect("dir cache")
                    .insert(path.to_owned(), ino);
                Ok(ino)
            }
            Some(_) => Err(Error::NotADirectory(path.to_owned())),
            None => Err(Error::NotFound(path.to_owned())),
        }
    }

    pub(crate) async fn mknod(&self, path: &str, dir: bool) -> Result<()> {
        let (parent, name) = split(path)?;
        let p = self.dir_ino(parent).await?;
        let kind = if dir { "d" } else { "f" };
        let r: i64 = self
            .scripts
            .mknod
            .key(format!("d{p}"))
            .key(format!("i{p}"))
            .arg(name)
            .arg(kind)
            .arg(attr(kind.as_bytes()[0]))
            .arg(attr(b'd'))
            .invoke_async(&mut self.con.clone())
            .await
            .map_err(rerr)?;
        let ino = code(path, r)?;
        if dir {
            self.dirs
                .lock()
                .expect("dir cache")
                .insert(path.to_owned(), ino as u64);
        }
        Ok(())
    }

    pub(crate) async fn remove(&self, path: &str, dir: bool) -> Result<()> {
        let (parent, name) = split(path)?;
        let p = self.dir_ino(parent).await?;
        let r: i64 = self
            .scripts
            .remove
            .key(format!("d{p}"))
            .key(format!("i{p}"))
            .arg(name)
            .arg(if dir { "d" } else { "f" })
            .arg(attr(b'd'))
            .invoke_async(&mut self.con.clone())
            .await
            .map_err(rerr)?;
        code(path, r)?;
        if dir {
            self.dirs.lock().expect("dir cache").remove(path);
        }
        Ok(())
    }

    /// A rename within one directory (what the benchmark does).
    pub(crate) async fn rename(&self, from: &str, to: &str) -> Result<()> {
        let ((pa, a), (pb, b)) = (split(from)?, split(to)?);
        if pa != pb {
            return Err(Error::InvalidArgument(format!(
                "{from} -> {to}: only renames within a directory"
            )));
        }
        let p = self.dir_ino(pa).await?;
        let r: i64 = self
            .scripts
            .rename
            .key(format!("d{p}"))
            .key(format!("i{p}"))
            .arg(a)
            .arg(b)
            .arg(attr(b'd'))
            .invoke_async(&mut self.con.clone())
            .await
            .map_err(rerr)?;
        code(from, r)?;
        // A renamed directory's cached path is stale.
        self.dirs.lock().expect("dir cache").remove(from);
        Ok(())
    }

    /// Looks `path` up in its (cached) parent; its inode.
    pub(crate) async fn stat(&self, path: &str) -> Result<u64> {
        let (parent, name) = split(path)?;
        let p = self.dir_ino(parent).await?;
        match self.lookup(p, name).await? {
            Some((ino, a)) if a.len() == ATTR_LEN => Ok(ino),
            Some(_) => Err(Error::Protocol(format!("{path}: bad attributes"))),
            None => Err(Error::NotFound(path.to_owned())),
        }
    }

    /// The attributes by inode (an open file's handle).
    pub(crate) async fn stat_id(&self, ino: u64) -> Result<()> {
        let a: Option<Vec<u8>> = redis::cmd("GET")
            .arg(format!("i{ino}"))
            .query_async(&mut self.con.clone())
            .await
            .map_err(rerr)?;
        match a {
            Some(a) if a.len() == ATTR_LEN => Ok(()),
            _ => Err(Error::InodeNotFound(ino)),
        }
    }

    /// Every entry of a directory with its attributes; their number.
    pub(crate) async fn list(&self, path: &str) -> Result<usize> {
        let d = self.dir_ino(path).await?;
        let mut c = self.con.clone();
        let entries: Vec<(Vec<u8>, String)> = redis::cmd("HGETALL")
            .arg(format!("d{d}"))
            .query_async(&mut c)
            .await
            .map_err(rerr)?;
        if entries.is_empty() {
            return Ok(0);
        }
        let keys: Vec<String> = entries
            .iter()
            .map(|(_, e)| format!("i{}", e.get(2..).unwrap_or("")))
            .collect();
        let attrs: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
            .arg(&keys)
            .query_async(&mut c)
            .await
            .map_err(rerr)?;
        if attrs.iter().any(Option::is_none) {
            return Err(Error::Protocol(format!(
                "{path}: an entry without attributes"
            )));
        }
        Ok(attrs.len())
    }

    /// Inodes the counter says exist beside the root (0 when the namespace
    /// is empty again).
    pub(crate) async fn total_inodes(&self) -> Result<i64> {
        let n: Option<i64> = redis::cmd("GET")
            .arg("totalInodes")
            .query_async(&mut self.con.clone())
            .await
            .map_err(rerr)?;
        Ok(n.unwrap_or(0))
    }
}
