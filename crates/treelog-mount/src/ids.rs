//! Owners and groups: treelog stores names, the kernel wants numbers.
//! Names map to the local user and group database's ids (NFSv4's id
//! mapping); a name the database lacks maps to the configured nobody,
//! unless it is all digits (an id without a name, stored as its number).

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::Mutex;

/// Cached look-ups both ways. The database is read once per distinct name
/// or id: a mount lives as long as its users do not change.
pub(crate) struct IdMap {
    nobody_uid: u32,
    nobody_gid: u32,
    users: Mutex<Cache>,
    groups: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    by_name: HashMap<String, Option<u32>>,
    by_id: HashMap<u32, String>,
}

/// Bounds each cache: a namespace with more distinct owners than this is
/// looked up again rather than held.
const MAX_CACHED: usize = 65_536;

#[derive(Clone, Copy)]
enum Db {
    User,
    Group,
}

impl IdMap {
    pub(crate) fn new(nobody_uid: u32, nobody_gid: u32) -> IdMap {
        IdMap {
            nobody_uid,
            nobody_gid,
            users: Mutex::new(Cache::default()),
            groups: Mutex::new(Cache::default()),
        }
    }

    pub(crate) fn uid(&self, owner: &str) -> u32 {
        self.id(Db::User, owner).unwrap_or(self.nobody_uid)
    }

    pub(crate) fn gid(&self, group: &str) -> u32 {
        self.id(Db::Group, group).unwrap_or(self.nobody_gid)
    }

    /// The name a new inode or a chown records for `uid`.
    pub(crate) fn owner_name(&self, uid: u32) -> String {
        self.name(Db::User, uid)
    }

    pub(crate) fn group_name(&self, gid: u32) -> String {
        self.name(Db::Group, gid)
    }

    fn cache(&self, db: Db) -> &Mutex<Cache> {
        match db {
            Db::User => &self.users,
            Db::Group => &self.groups,
        }
    }

    fn id(&self, db: Db, name: &str) -> Option<u32> {
        if name.is_empty() {
            return None;
        }
        if let Some(hit) = self.cache(db).lock().unwrap().by_name.get(name) {
            return *hit;
        }
        let found = lookup_name(db, name).or_else(|| numeric(name));
        let mut c = self.cache(db).lock().unwrap();
        if c.by_name.len() < MAX_CACHED {
            c.by_name.insert(name.to_owned(), found);
        }
        found
    }

    fn name(&self, db: Db, id: u32) -> String {
        if let Some(hit) = self.cache(db).lock().unwrap().by_id.get(&id) {
            return hit.clone();
        }
        let name = lookup_id(db, id).unwrap_or_else(|| id.to_string());
        let mut c = self.cache(db).lock().unwrap();
        if c.by_id.len() < MAX_CACHED {
            c.by_id.insert(id, name.clone());
        }
        name
    }
}

/// An all-digit name is the id itself (what `owner_name` records for an id
/// the database does not name).
fn numeric(name: &str) -> Option<u32> {
    if name.bytes().all(|b| b.is_ascii_digit()) {
        name.parse().ok()
    } else {
        None
    }
}

/// Buffer for the `_r` calls; grown on ERANGE up to this.
const MAX_BUF: usize = 1 << 20;

fn lookup_name(db: Db, name: &str) -> Option<u32> {
    let cname = CString::new(name).ok()?;
    let mut buf = vec![0u8; 1024];
    loop {
        let (rc, id) = match db {
            Db::User => {
                // SAFETY: every pointer is to a live local of the right type;
                // `buf` outlives the call and its length is passed.
                unsafe {
                    let mut pw: libc::passwd = std::mem::zeroed();
                    let mut out: *mut libc::passwd = std::ptr::null_mut();
                    let rc = libc::getpwnam_r(
                        cname.as_ptr(),
                        &mut pw,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        &mut out,
                    );
                    (rc, (!out.is_null()).then_some(pw.pw_uid))
                }
            }
            Db::Group => {
                // SAFETY: as above.
                unsafe {
                    let mut gr: libc::group = std::mem::zeroed();
                    let mut out: *mut libc::group = std::ptr::null_mut();
                    let rc = libc::getgrnam_r(
                        cname.as_ptr(),
                        &mut gr,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        &mut out,
                    );
                    (rc, (!out.is_null()).then_some(gr.gr_gid))
                }
            }
        };
        if rc == libc::ERANGE && buf.len() < MAX_BUF {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        return id;
    }
}

fn lookup_id(db: Db, id: u32) -> Option<String> {
    let mut buf = vec![0u8; 1024];
    loop {
        let (rc, name) = match db {
            Db::User => {
                // SAFETY: as in `lookup_name`; the name is copied out of
                // `buf` before it is dropped.
                unsafe {
                    let mut pw: libc::passwd = std::mem::zeroed();
                    let mut out: *mut libc::passwd = std::ptr::null_mut();
                    let rc =
                        libc::getpwuid_r(id, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out);
                    let name = (!out.is_null())
                        .then(|| CStr::from_ptr(pw.pw_name).to_string_lossy().into_owned());
                    (rc, name)
                }
            }
            Db::Group => {
                // SAFETY: as above.
                unsafe {
                    let mut gr: libc::group = std::mem::zeroed();
                    let mut out: *mut libc::group = std::ptr::null_mut();
                    let rc =
                        libc::getgrgid_r(id, &mut gr, buf.as_mut_ptr().cast(), buf.len(), &mut out);
                    let name = (!out.is_null())
                        .then(|| CStr::from_ptr(gr.gr_name).to_string_lossy().into_owned());
                    (rc, name)
                }
            }
        };
        if rc == libc::ERANGE && buf.len() < MAX_BUF {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        return name;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_both_ways_and_unknown_names_to_nobody() {
        let m = IdMap::new(65534, 65533);
        assert_eq!(m.uid("root"), 0);
        assert_eq!(m.gid("root"), 0);
        assert_eq!(m.owner_name(0), "root");
        assert_eq!(m.group_name(0), "root");
        assert_eq!(m.uid("no-such-user-anywhere"), 65534);
        assert_eq!(m.gid("no-such-group-anywhere"), 65533);
        assert_eq!(m.uid(""), 65534);
        // An id without a name is recorded as its number and maps back.
        assert_eq!(m.owner_name(4_000_000_123), "4000000123");
        assert_eq!(m.uid("4000000123"), 4_000_000_123);
    }
}
