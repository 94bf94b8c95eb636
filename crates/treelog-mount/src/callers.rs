//! Who each kernel request is made for: the requesting process's user,
//! its group and its supplementary groups, as names (`Caller`), sent with
//! the request so that a server with `--enforce-permissions` checks it as
//! that user.
//!
//! The supplementary groups are the process's own (`/proc/PID/status`,
//! the `Groups:` line), as the kernel's own checks use them, not the
//! user's groups in `/etc/group`. They are cached per process for a few
//! seconds: a process that changes its groups is seen with the new ones
//! after that.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use treelog_client::{Caller, Client};

use crate::ids::IdMap;

/// How long a process's groups are taken as read.
const TTL: Duration = Duration::from_secs(5);
/// Bounds the cache: past it, it starts again empty.
const MAX_CACHED: usize = 4_096;

/// A requesting process: its pid, uid and gid.
type Process = (u32, u32, u32);

/// Client handles per requesting process (`None`: requests are sent
/// without a caller).
pub(crate) struct Callers {
    send: bool,
    cache: Mutex<HashMap<Process, (Instant, Client)>>,
}

impl Callers {
    pub(crate) fn new(send: bool) -> Callers {
        Callers {
            send,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The client handle for requests of process `pid` running as `uid`
    /// and `gid`.
    pub(crate) fn client(
        &self,
        base: &Client,
        ids: &IdMap,
        pid: u32,
        uid: u32,
        gid: u32,
    ) -> Client {
        if !self.send {
            return base.clone();
        }
        let key = (pid, uid, gid);
        let now = Instant::now();
        if let Some((at, c)) = self.cache.lock().unwrap().get(&key) {
            if now.duration_since(*at) < TTL {
                return c.clone();
            }
        }
        let c = base.for_caller(caller(ids, pid, uid, gid));
        let mut cache = self.cache.lock().unwrap();
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(key, (now, c.clone()));
        c
    }
}

/// The caller of a request: `uid`'s name, `gid`'s first, then the
/// process's supplementary groups (those it has at the moment: none when
/// it is gone).
fn caller(ids: &IdMap, pid: u32, uid: u32, gid: u32) -> Caller {
    let mut groups = vec![ids.group_name(gid)];
    for g in supplementary_groups(pid) {
        let name = ids.group_name(g);
        if !groups.contains(&name) {
            groups.push(name);
        }
        if groups.len() >= treelog_proto::caller::MAX_CALLER_GROUPS {
            break;
        }
    }
    Caller::new(ids.owner_name(uid), groups)
}

fn supplementary_groups(pid: u32) -> Vec<u32> {
    if pid == 0 {
        return Vec::new();
    }
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| parse_groups(&s))
        .unwrap_or_default()
}

/// The ids of a `/proc/PID/status` text's `Groups:` line.
fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_groups_line_is_read() {
        let s = "Name:\tx\nUid:\t0\t0\t0\t0\nGroups:\t4 24 27 \nNgid:\t0\n";
        assert_eq!(parse_groups(s), vec![4, 24, 27]);
        assert_eq!(parse_groups("Groups:\t\n"), Vec::<u32>::new());
        assert_eq!(parse_groups("Name:\tx\n"), Vec::<u32>::new());
    }

    #[test]
    fn this_process_is_its_user_with_its_group_first() {
        let ids = IdMap::new(65534, 65534);
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let c = caller(&ids, std::process::id(), uid, gid);
        assert_eq!(c.user, ids.owner_name(uid));
        assert_eq!(c.groups[0], ids.group_name(gid));
        let n = c.groups.len();
        let mut dedup = c.groups.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), n, "{:?}", c.groups);
    }
}
