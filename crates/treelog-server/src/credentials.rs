//! The credentials file (`serve --credentials FILE`): each credential's
//! name, role and the SHA-256 of its secret; reloaded when it changes.
//!
//! The format, one credential a line (blank lines and `#` comments
//! ignored):
//!
//! ```text
//! # name   role    hash
//! indexer  stream  sha256:9f86d08188...
//! ```
//!
//! Secrets are random tokens of [`SECRET_BYTES`] bytes that the tool makes
//! (`treelog admin credential add`), not passwords a person chose: a
//! guess has 2^256 possibilities, so a fast hash protects them as well as
//! a slow one would, and lets the server check a Hello without spending a
//! core on it (the way API tokens are stored).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use treelog::{Error, Result};

use crate::roles::{Identity, Role};

/// The shortest secret the server takes (a token file's, a credential's).
pub const MIN_SECRET_LEN: usize = 32;
/// Random bytes of a generated secret (written as hex: twice as many
/// characters).
pub(crate) const SECRET_BYTES: usize = 32;
/// How often the server looks at the file's modification time.
pub(crate) const POLL: Duration = Duration::from_secs(1);

/// A credential's stored form: `sha256:<hex>` of its secret.
pub fn hash_secret(secret: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(secret.as_bytes())))
}

/// A new secret: [`SECRET_BYTES`] bytes from the kernel's random source,
/// in hex.
pub fn generate_secret() -> Result<String> {
    let mut b = [0u8; SECRET_BYTES];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut b)?;
    Ok(hex::encode(b))
}

/// Refuses a secret shorter than [`MIN_SECRET_LEN`] (`what` names where
/// it came from).
pub fn check_secret_len(what: &str, secret: &str) -> Result<()> {
    if secret.chars().count() < MIN_SECRET_LEN {
        return Err(Error::InvalidArgument(format!(
            "{what}: a secret must be at least {MIN_SECRET_LEN} characters \
             (`treelog admin credential add` makes one)"
        )));
    }
    Ok(())
}

/// The credentials of one version of the file, by the hash of their
/// secret.
#[derive(Default)]
pub(crate) struct Table {
    by_hash: HashMap<[u8; 32], (String, Role)>,
}

fn valid_name(n: &str) -> bool {
    (1..=64).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'))
}

fn parse_hash(h: &str) -> Option<[u8; 32]> {
    let hex = h.strip_prefix("sha256:")?;
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex, &mut out).ok()?;
    Some(out)
}

impl Table {
    /// Parses the file's text (`path` for messages).
    pub(crate) fn parse(path: &Path, text: &str) -> Result<Table> {
        let mut t = Table::default();
        let mut names = std::collections::HashSet::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |why: String| {
                Error::InvalidArgument(format!(
                    "credentials file {} line {}: {why}",
                    path.display(),
                    i + 1
                ))
            };
            let f: Vec<&str> = line.split_whitespace().collect();
            let [name, role, hash] = f[..] else {
                return Err(bad("expected `name role sha256:<hex>`".into()));
            };
            if !valid_name(name) {
                return Err(bad(format!(
                    "credential name {name:?}: 1-64 of letters, digits, - _ . @"
                )));
            }
            let role: Role = role.parse().map_err(|e: Error| bad(e.to_string()))?;
            let hash = parse_hash(hash)
                .ok_or_else(|| bad("the hash must be sha256: and 64 hex digits".into()))?;
            if !names.insert(name.to_owned()) {
                return Err(bad(format!("credential {name} is given twice")));
            }
            if t.by_hash.insert(hash, (name.to_owned(), role)).is_some() {
                return Err(bad(format!("credential {name} has another's secret")));
            }
        }
        Ok(t)
    }

    /// The credential whose secret is `secret`. (Looked up by its hash: a
    /// lookup's timing tells nothing an attacker can use, as they cannot
    /// choose a hash's bytes.)
    fn find(&self, secret: &str) -> Option<Identity> {
        let h: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        self.by_hash.get(&h).map(|(name, role)| Identity {
            name: name.clone(),
            role: *role,
            node: false,
        })
    }

    fn len(&self) -> usize {
        self.by_hash.len()
    }
}

/// The file's identity for change detection: modification time and size.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// The credentials file, reloaded when it changes: a file that does not
/// parse keeps the credentials loaded before (and logs why).
pub(crate) struct Credentials {
    path: PathBuf,
    table: ArcSwap<Table>,
    stamp: Mutex<Option<(SystemTime, u64)>>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("path", &self.path)
            .field("count", &self.table.load().len())
            .finish()
    }
}

impl Credentials {
    /// Loads `path`; an error when it cannot be read or parsed (the server
    /// then does not start).
    pub(crate) fn load(path: &Path) -> Result<Credentials> {
        let stamp = stamp(path);
        let table = Self::read(path)?;
        tracing::info!(path = %path.display(), credentials = table.len(), "loaded the credentials file");
        Ok(Credentials {
            path: path.to_owned(),
            table: ArcSwap::from_pointee(table),
            stamp: Mutex::new(stamp),
        })
    }

    fn read(path: &Path) -> Result<Table> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::InvalidArgument(format!("credentials file {}: {e}", path.display()))
        })?;
        Table::parse(path, &text)
    }

    pub(crate) fn find(&self, secret: &str) -> Option<Identity> {
        self.table.load().find(secret)
    }

    /// Reloads the file if its modification time or size changed (or
    /// `force`); true when the credentials were replaced.
    pub(crate) fn reload(&self, force: bool) -> bool {
        let now = stamp(&self.path);
        {
            let mut last = self.stamp.lock().unwrap_or_else(|e| e.into_inner());
            if !force && *last == now {
                return false;
            }
            *last = now;
        }
        match Self::read(&self.path) {
            Ok(t) => {
                tracing::info!(
                    path = %self.path.display(),
                    credentials = t.len(),
                    "reloaded the credentials file"
                );
                self.table.store(Arc::new(t));
                true
            }
            Err(e) => {
                tracing::error!(
                    path = %self.path.display(),
                    error = %e,
                    "the credentials file does not load; keeping the credentials loaded before"
                );
                false
            }
        }
    }

    /// Reloads the file when it changes (polled every [`POLL`]) and on
    /// SIGHUP, until `shutdown`.
    pub(crate) fn spawn_watch(self: &Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut hup =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
            let mut tick = tokio::time::interval(POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let force = tokio::select! {
                    _ = shutdown.changed() => return,
                    _ = tick.tick() => false,
                    Some(()) = async {
                        match hup.as_mut() {
                            Some(h) => h.recv().await,
                            None => std::future::pending().await,
                        }
                    } => true,
                };
                let me = me.clone();
                let _ = tokio::task::spawn_blocking(move || me.reload(force)).await;
            }
        });
    }
}

/// Adds credential `name` with `role` to the file at `path` (made if
/// missing, mode 0600; replaced whole, atomically): the new secret, to be
/// shown once. Refuses a name the file already has.
pub fn add_credential(path: &Path, name: &str, role: Role) -> Result<String> {
    if !valid_name(name) {
        return Err(Error::InvalidArgument(format!(
            "credential name {name:?}: 1-64 of letters, digits, - _ . @"
        )));
    }
    let old = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e.into()),
    };
    let table = Table::parse(path, &old)?;
    if table.by_hash.values().any(|(n, _)| n == name) {
        return Err(Error::AlreadyExists(format!(
            "credential {name} in {}",
            path.display()
        )));
    }
    let secret = generate_secret()?;
    let mut text = old;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!("{name} {role} {}\n", hash_secret(&secret)));
    let tmp = path.with_extension("tmp");
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_and_refuses_bad_ones() {
        let p = Path::new("creds");
        let h = hash_secret("x".repeat(40).as_str());
        let t = Table::parse(p, &format!("# c\n\nalice admin {h} # trailing\n")).unwrap();
        let who = t.find(&"x".repeat(40)).unwrap();
        assert_eq!(
            (who.name.as_str(), who.role, who.node),
            ("alice", Role::Admin, false)
        );
        assert!(t.find("y").is_none());
        for bad in [
            format!("alice {h}"),
            format!("alice root {h}"),
            "alice admin sha256:12".to_string(),
            format!("alice admin md5:{}", &h[7..]),
            format!("al/ice admin {h}"),
            format!("a admin {h}\na read {}", hash_secret("z")),
            format!("a admin {h}\nb read {h}"),
        ] {
            let e = Table::parse(p, &bad)
                .err()
                .unwrap_or_else(|| panic!("{bad}"));
            assert!(e.to_string().contains("creds line"), "{e}");
        }
    }

    #[test]
    fn added_credentials_verify_and_the_file_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("creds");
        let s1 = add_credential(&p, "one", Role::Read).unwrap();
        assert_eq!(s1.len(), 2 * SECRET_BYTES);
        check_secret_len("generated", &s1).unwrap();
        assert!(check_secret_len("short", "abc").is_err());
        let c = Credentials::load(&p).unwrap();
        assert_eq!(c.find(&s1).unwrap().role, Role::Read);
        // The file holds the hash, never the secret.
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(!text.contains(&s1));
        assert!(add_credential(&p, "one", Role::Admin).is_err());
        let s2 = add_credential(&p, "two", Role::Stream).unwrap();
        assert!(c.find(&s2).is_none());
        assert!(c.reload(true));
        assert_eq!(c.find(&s2).unwrap().name, "two");
        // A broken file keeps the credentials loaded before.
        std::fs::write(&p, "garbage\n").unwrap();
        assert!(!c.reload(true));
        assert!(c.find(&s1).is_some() && c.find(&s2).is_some());
        // Debug shows neither secrets nor hashes.
        let d = format!("{c:?}");
        assert!(!d.contains(&s1) && !d.contains("sha256"), "{d}");
    }
}
