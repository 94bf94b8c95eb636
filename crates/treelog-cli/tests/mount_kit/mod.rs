//! The harness of the tests that mount the namespace with FUSE: a real
//! server process, a real mount process, and the helpers the tests drive
//! them with. Skips with a reason where /dev/fuse or fusermount3 is
//! missing, unless TREELOG_REQUIRE_FUSE=1.
#![allow(dead_code)]

use std::ffi::CString;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use treelog_testkit::cli;
use treelog_testkit::process::{free_addr, ServeProcess};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_treelog");

/// Why FUSE cannot be used here, if it cannot.
pub(crate) fn fuse_missing() -> Option<String> {
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        return Some(format!("/dev/fuse cannot be opened: {e}"));
    }
    match Command::new("fusermount3").arg("-V").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("fusermount3 -V failed: {:?}", o.status)),
        Err(e) => Some(format!("no fusermount3: {e}")),
    }
}

/// False (after saying why) when the test must be skipped.
pub(crate) fn fuse_available() -> bool {
    match fuse_missing() {
        None => true,
        Some(why) => {
            assert!(
                std::env::var("TREELOG_REQUIRE_FUSE").as_deref() != Ok("1"),
                "TREELOG_REQUIRE_FUSE=1 but {why}"
            );
            eprintln!("SKIP: {why} (TREELOG_REQUIRE_FUSE=1 makes this a failure)");
            false
        }
    }
}

/// Polls `cond` every millisecond until it holds; panics with `what`
/// after `secs` (a failure guard, not a timing assertion).
pub(crate) fn eventually(secs: u64, what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(secs), "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
    start.elapsed()
}

pub(crate) fn is_mounted(mnt: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = mnt.to_str().unwrap();
    info.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        // Type `fuse` with source `treelog` when mounted directly (as
        // root), `fuse.treelog` through fusermount3.
        f.get(4) == Some(&want)
            && (l.contains(" - fuse.treelog ") || l.contains(" - fuse treelog "))
    })
}

/// A server process, and the mount process on it. Dropping it unmounts
/// (lazily, so that a failed test never leaves a mount behind) and stops
/// both.
pub(crate) struct Mounted {
    pub(crate) _server: Option<ServeProcess>,
    pub(crate) addr: Option<SocketAddr>,
    pub(crate) http: Option<SocketAddr>,
    pub(crate) mount: Option<Child>,
    pub(crate) mnt: PathBuf,
    pub(crate) log: PathBuf,
    /// Global options of the mount's and `tl`'s command lines (a token
    /// file, say).
    pub(crate) global: Vec<String>,
    pub(crate) _dir: tempfile::TempDir,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .args(["-u", "-z", "--"])
            .arg(&self.mnt)
            .stderr(Stdio::null())
            .status();
        if let Some(mut c) = self.mount.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What a test adds to the server's and the clients' command lines.
#[derive(Default)]
pub(crate) struct Setup {
    pub(crate) serve: Vec<String>,
    pub(crate) global: Vec<String>,
}

impl Mounted {
    /// A server on a fresh data directory and a mount of it with `extra`
    /// options.
    pub(crate) fn new(extra: &[&str]) -> Mounted {
        Mounted::serving(|_| Setup::default(), extra)
    }

    /// [`Mounted::new`] with what `setup` makes in the test's directory
    /// before the server starts (a credentials file, say): more options
    /// for `serve`, and global options for the mount and `tl`.
    pub(crate) fn serving(setup: impl FnOnce(&Path) -> Setup, extra: &[&str]) -> Mounted {
        let dir = tempfile::tempdir().unwrap();
        let setup = setup(dir.path());
        let data = dir.path().join("db");
        let addr = free_addr();
        let http = free_addr();
        let mut args: Vec<String> = [
            "--data",
            data.to_str().unwrap(),
            "--durability",
            "none",
            "serve",
            "--listen",
            &addr.to_string(),
            "--http",
            &http.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(setup.serve);
        let mut server = ServeProcess::new(BIN, args, &dir.path().join("serve.log"));
        server.start();
        eventually(30, "the server listens", || {
            std::net::TcpStream::connect(addr).is_ok()
        });
        let mut m = Mounted {
            _server: Some(server),
            addr: Some(addr),
            http: Some(http),
            mount: None,
            mnt: dir.path().join("mnt"),
            log: dir.path().join("mount.log"),
            global: setup.global,
            _dir: dir,
        };
        let mut args = vec!["--server".to_owned(), addr.to_string()];
        args.extend(m.global.iter().cloned());
        args.extend(["mount".to_owned(), m.mnt.to_str().unwrap().to_owned()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        m.start(&args);
        m
    }

    /// A mount of its own server on a data directory (`--data`).
    pub(crate) fn local(extra: &[&str]) -> Mounted {
        let dir = tempfile::tempdir().unwrap();
        let mut m = Mounted {
            _server: None,
            addr: None,
            http: None,
            mount: None,
            mnt: dir.path().join("mnt"),
            log: dir.path().join("mount.log"),
            global: Vec::new(),
            _dir: dir,
        };
        let data = m._dir.path().join("db");
        let mut args = vec!["--data".to_owned(), data.to_str().unwrap().to_owned()];
        args.extend(["mount".to_owned(), m.mnt.to_str().unwrap().to_owned()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        m.start(&args);
        m
    }

    pub(crate) fn start(&mut self, args: &[String]) {
        std::fs::create_dir_all(&self.mnt).unwrap();
        let log = std::fs::File::create(&self.log).unwrap();
        self.mount = Some(
            Command::new(BIN)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start the mount"),
        );
        let mnt = self.mnt.clone();
        eventually(30, "the filesystem is mounted", || {
            if let Some(st) = self.mount.as_mut().unwrap().try_wait().unwrap() {
                panic!("the mount ended ({st}): {}", self.log_text());
            }
            is_mounted(&mnt)
        });
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub(crate) fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// `treelog --server ADDR ARGS`: another client of the same server.
    pub(crate) fn tl(&self, args: &[&str]) -> cli::Ran {
        let mut cmd = Command::new(BIN);
        cmd.arg("--server")
            .arg(self.addr.expect("a server process").to_string())
            .args(&self.global)
            .args(args)
            .stdin(Stdio::null());
        cli::output(&mut cmd)
    }

    /// The inode at `path` as the server has it (`treelog stat --json`).
    pub(crate) fn server_stat(&self, path: &str) -> Option<serde_json::Value> {
        let r = self.tl(&["stat", "--json", path]);
        match r.code() {
            0 => {
                Some(serde_json::from_str::<serde_json::Value>(&r.stdout).unwrap()["inode"].clone())
            }
            3 => None,
            c => panic!("stat {path}: exit {c}: {r:?}"),
        }
    }

    /// The stats (by path and by id) the server has answered.
    pub(crate) fn server_stats(&self) -> u64 {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(self.http.expect("a server process")).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        c.read_to_string(&mut body).unwrap();
        body.lines()
            .filter(|l| {
                l.starts_with("treelog_server_requests_total{")
                    && (l.contains("request=\"stat\"") || l.contains("request=\"stat_id\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    /// Ends the mount process and waits for it; its exit code.
    pub(crate) fn wait_mount(&mut self, secs: u64) -> i32 {
        let c = self.mount.as_mut().unwrap();
        let start = Instant::now();
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                self.mount = None;
                return st.code().unwrap_or(-1);
            }
            assert!(
                start.elapsed() < Duration::from_secs(secs),
                "the mount did not end: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Runs `prog ARGS` in `cwd`; must succeed; its standard output.
pub(crate) fn run_in(cwd: &Path, prog: &str, args: &[&str]) -> String {
    let out = Command::new(prog)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{prog}: {e}"));
    assert!(
        out.status.success(),
        "{prog} {args:?}: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The errno of a failed call.
pub(crate) fn err_of<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.expect_err("must fail").raw_os_error().expect("an errno")
}

pub(crate) fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

pub(crate) fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> std::io::Result<()> {
    let (f, t) = (cstr(from), cstr(to));
    // SAFETY: two NUL-terminated paths that outlive the call.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            flags,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
