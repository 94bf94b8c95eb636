//! `treelog mount`: a real server process, a real FUSE mount (another
//! process), driven by ordinary programs and system calls. Skipped with a
//! reason where /dev/fuse or fusermount3 is missing, unless
//! TREELOG_REQUIRE_FUSE=1.

use std::ffi::CString;
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use treelog_testkit::cli;
use treelog_testkit::process::{free_addr, ServeProcess};

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

/// Why FUSE cannot be used here, if it cannot.
fn fuse_missing() -> Option<String> {
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
fn fuse_available() -> bool {
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
fn eventually(secs: u64, what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < Duration::from_secs(secs), "never: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
    start.elapsed()
}

fn is_mounted(mnt: &Path) -> bool {
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
struct Mounted {
    _server: Option<ServeProcess>,
    addr: Option<SocketAddr>,
    http: Option<SocketAddr>,
    mount: Option<Child>,
    mnt: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
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

impl Mounted {
    /// A server on a fresh data directory and a mount of it with `extra`
    /// options.
    fn new(extra: &[&str]) -> Mounted {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("db");
        let addr = free_addr();
        let http = free_addr();
        let args = [
            "--data",
            data.to_str().unwrap(),
            "--durability",
            "none",
            "serve",
            "--listen",
            &addr.to_string(),
            "--http",
            &http.to_string(),
        ];
        let mut server = ServeProcess::new(
            BIN,
            args.iter().map(|s| s.to_string()).collect(),
            &dir.path().join("serve.log"),
        );
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
            _dir: dir,
        };
        let mut args = vec!["--server".to_owned(), addr.to_string()];
        args.extend(["mount".to_owned(), m.mnt.to_str().unwrap().to_owned()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        m.start(&args);
        m
    }

    /// A mount of its own server on a data directory (`--data`).
    fn local(extra: &[&str]) -> Mounted {
        let dir = tempfile::tempdir().unwrap();
        let mut m = Mounted {
            _server: None,
            addr: None,
            http: None,
            mount: None,
            mnt: dir.path().join("mnt"),
            log: dir.path().join("mount.log"),
            _dir: dir,
        };
        let data = m._dir.path().join("db");
        let mut args = vec!["--data".to_owned(), data.to_str().unwrap().to_owned()];
        args.extend(["mount".to_owned(), m.mnt.to_str().unwrap().to_owned()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        m.start(&args);
        m
    }

    fn start(&mut self, args: &[String]) {
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

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// `treelog --server ADDR ARGS`: another client of the same server.
    fn tl(&self, args: &[&str]) -> cli::Ran {
        let mut cmd = Command::new(BIN);
        cmd.arg("--server")
            .arg(self.addr.expect("a server process").to_string())
            .args(args)
            .stdin(Stdio::null());
        cli::output(&mut cmd)
    }

    /// The inode at `path` as the server has it (`treelog stat --json`).
    fn server_stat(&self, path: &str) -> Option<serde_json::Value> {
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
    fn server_stats(&self) -> u64 {
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
    fn wait_mount(&mut self, secs: u64) -> i32 {
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
fn run_in(cwd: &Path, prog: &str, args: &[&str]) -> String {
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
fn err_of<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.expect_err("must fail").raw_os_error().expect("an errno")
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> std::io::Result<()> {
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

#[test]
fn everyday_tools_work_through_the_mount() {
    if !fuse_available() {
        return;
    }
    let m = Mounted::new(&[]);
    let root = &m.mnt;
    run_in(root, "mkdir", &["-p", "a/b/c"]);
    run_in(root, "touch", &["a/b/f"]);
    assert!(m.server_stat("/a/b/c").unwrap()["attrs"]["kind"] == "Directory");
    // touch: created by open(O_CREAT), then its times set.
    let f = m.server_stat("/a/b/f").unwrap();
    assert_eq!(f["attrs"]["kind"], "File");
    assert_eq!(f["attrs"]["owner"], "root");
    assert_eq!(f["attrs"]["group"], "root");

    run_in(root, "mv", &["a/b/f", "a/g"]);
    assert!(m.server_stat("/a/b/f").is_none());
    assert!(m.server_stat("/a/g").is_some());
    assert!(!m.p("a/b/f").exists() && m.p("a/g").is_file());

    run_in(root, "ln", &["-s", "../somewhere/else", "a/link"]);
    assert_eq!(run_in(root, "readlink", &["a/link"]), "../somewhere/else\n");
    assert_eq!(
        run_in(root, "stat", &["-c", "%F %s", "a/link"]),
        "symbolic link 17\n"
    );

    run_in(root, "chmod", &["640", "a/g"]);
    assert_eq!(m.server_stat("/a/g").unwrap()["attrs"]["mode"], 0o640);
    assert_eq!(run_in(root, "stat", &["-c", "%a", "a/g"]), "640\n");

    // Owners by name both ways; an id without a name is kept as its number.
    run_in(root, "chown", &["nobody:nogroup", "a/g"]);
    let g = m.server_stat("/a/g").unwrap();
    assert_eq!(
        (g["attrs"]["owner"].as_str(), g["attrs"]["group"].as_str()),
        (Some("nobody"), Some("nogroup"))
    );
    assert_eq!(
        run_in(root, "stat", &["-c", "%U:%G %u", "a/g"]),
        "nobody:nogroup 65534\n"
    );
    run_in(root, "chown", &["4000123", "a/g"]);
    assert_eq!(m.server_stat("/a/g").unwrap()["attrs"]["owner"], "4000123");
    assert_eq!(run_in(root, "stat", &["-c", "%u", "a/g"]), "4000123\n");
    // A name this machine does not know shows as nobody.
    assert_eq!(m.tl(&["chown", "someone-elsewhere", "/a/g"]).code(), 0);
    eventually(10, "the new owner shows", || {
        std::fs::metadata(m.p("a/g")).unwrap().uid() == 65534
    });

    run_in(root, "truncate", &["-s", "1M", "a/g"]);
    assert_eq!(m.server_stat("/a/g").unwrap()["attrs"]["size"], 1 << 20);
    let content = std::fs::read(m.p("a/g")).unwrap();
    assert_eq!(content.len(), 1 << 20);
    assert!(content.iter().all(|b| *b == 0), "a file reads as zeros");
    assert_eq!(run_in(root, "du", &["-k", "a/g"]), "1024\ta/g\n");

    // touch -d: the modification time.
    run_in(
        root,
        "touch",
        &["-m", "-d", "2001-02-03 04:05:06 UTC", "a/g"],
    );
    assert_eq!(
        m.server_stat("/a/g").unwrap()["attrs"]["mtime_ms"],
        981_173_106_000u64
    );
    assert_eq!(run_in(root, "stat", &["-c", "%Y", "a/g"]), "981173106\n");

    // setfattr/getfattr come with the `attr` package.
    let have_attr = Command::new("setfattr")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_attr {
        assert!(
            std::env::var("TREELOG_REQUIRE_FUSE").as_deref() != Ok("1"),
            "TREELOG_REQUIRE_FUSE=1 but no setfattr (the attr package)"
        );
        eprintln!("SKIP the setfattr/getfattr part: no setfattr (the attr package)");
    } else {
        run_in(
            root,
            "setfattr",
            &["-n", "user.colour", "-v", "blue", "a/g"],
        );
        assert_eq!(
            run_in(
                root,
                "getfattr",
                &["-n", "user.colour", "--only-values", "a/g"]
            ),
            "blue"
        );
        let dump = run_in(root, "getfattr", &["-d", "a/g"]);
        assert!(dump.contains("user.colour=\"blue\""), "{dump}");
        assert_eq!(
            m.tl(&["getfattr", "-n", "user.colour", "/a/g"]).code(),
            0,
            "the server has it"
        );
        run_in(root, "setfattr", &["-x", "user.colour", "a/g"]);
        let gone = Command::new("getfattr")
            .args(["-n", "user.colour", "a/g"])
            .current_dir(root)
            .output()
            .unwrap();
        assert!(!gone.status.success());
        assert!(String::from_utf8_lossy(&gone.stderr).contains("No such attribute"));
    }

    let found = run_in(root, "find", &[".", "-printf", "%y %p\n"]);
    let mut found: Vec<&str> = found.lines().collect();
    found.sort();
    assert_eq!(
        found,
        [
            "d .",
            "d ./a",
            "d ./a/b",
            "d ./a/b/c",
            "f ./a/g",
            "l ./a/link"
        ]
    );
    let ls = run_in(root, "ls", &["-lR"]);
    for want in [
        "./a:",
        "./a/b:",
        "./a/b/c:",
        "link -> ../somewhere/else",
        "1048576",
    ] {
        assert!(ls.contains(want), "{want} in {ls}");
    }
    let du = run_in(root, "du", &["-sk", "--apparent-size", "a"]);
    assert!(du.starts_with("1") && du.ends_with("\ta\n"), "{du}");

    run_in(root, "rm", &["-r", "a"]);
    assert!(m.server_stat("/a").is_none());
    assert_eq!(std::fs::read_dir(root).unwrap().count(), 0);
}

#[test]
fn every_refusal_has_its_posix_errno() {
    if !fuse_available() {
        return;
    }
    // allow_other: other users reach the mount, and the kernel's mode
    // checks (default_permissions) decide.
    let m = Mounted::new(&["--allow-other"]);
    std::fs::create_dir_all(m.p("d/sub")).unwrap();
    std::fs::write(m.p("f"), b"").unwrap();
    std::fs::create_dir(m.p("empty")).unwrap();

    assert_eq!(err_of(std::fs::create_dir(m.p("d"))), libc::EEXIST);
    assert_eq!(err_of(std::fs::remove_dir(m.p("d"))), libc::ENOTEMPTY);
    assert_eq!(err_of(std::fs::remove_dir(m.p("f"))), libc::ENOTDIR);
    assert_eq!(err_of(std::fs::remove_file(m.p("d"))), libc::EISDIR);
    assert_eq!(err_of(std::fs::metadata(m.p("nope"))), libc::ENOENT);
    assert_eq!(err_of(std::fs::create_dir(m.p("nope/x"))), libc::ENOENT);
    assert_eq!(err_of(std::fs::create_dir(m.p("f/x"))), libc::ENOTDIR);
    let long = "x".repeat(256);
    assert_eq!(err_of(std::fs::create_dir(m.p(&long))), libc::ENAMETOOLONG);

    // Contents are not stored: writing fails, never silently discarded.
    {
        use std::io::Write;
        let mut w = std::fs::OpenOptions::new()
            .write(true)
            .open(m.p("f"))
            .unwrap();
        assert_eq!(
            err_of(w.write_all(b"data").and_then(|()| w.flush())),
            libc::EOPNOTSUPP
        );
    }
    assert_eq!(std::fs::metadata(m.p("f")).unwrap().len(), 0);
    assert_eq!(err_of(std::fs::write(m.p("f"), b"x")), libc::EOPNOTSUPP);

    // No hard links, FIFOs or devices.
    assert_eq!(err_of(std::fs::hard_link(m.p("f"), m.p("f2"))), libc::EPERM);
    let fifo = cstr(&m.p("fifo"));
    // SAFETY: a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EPERM)
    );

    // Renames: exchange refused, no-replace honoured, Linux's kind rules.
    assert_eq!(
        err_of(renameat2(&m.p("f"), &m.p("empty"), libc::RENAME_EXCHANGE)),
        libc::EINVAL
    );
    std::fs::write(m.p("f3"), b"").unwrap();
    assert_eq!(
        err_of(renameat2(&m.p("f"), &m.p("f3"), libc::RENAME_NOREPLACE)),
        libc::EEXIST
    );
    assert_eq!(
        err_of(std::fs::rename(m.p("f"), m.p("empty"))),
        libc::EISDIR
    );
    assert_eq!(
        err_of(std::fs::rename(m.p("empty"), m.p("f"))),
        libc::ENOTDIR
    );
    assert_eq!(
        err_of(std::fs::rename(m.p("empty"), m.p("d"))),
        libc::ENOTEMPTY
    );
    assert_eq!(
        err_of(std::fs::rename(m.p("d"), m.p("d/sub/in"))),
        libc::EINVAL
    );
    // A plain rename replaces a file and an empty directory.
    std::fs::rename(m.p("f3"), m.p("f")).unwrap();
    assert!(!m.p("f3").exists());
    std::fs::create_dir(m.p("e2")).unwrap();
    std::fs::rename(m.p("e2"), m.p("empty")).unwrap();
    assert!(m.server_stat("/e2").is_none() && m.server_stat("/empty").is_some());

    // Extended attributes: missing, too small a buffer, an unknown
    // namespace, create over an existing one.
    let f = cstr(&m.p("f"));
    let name = CString::new("user.k").unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: NUL-terminated strings and a buffer of the length passed.
    let r = unsafe {
        libc::getxattr(
            f.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::ENODATA))
    );
    // SAFETY: as above.
    let r = unsafe { libc::setxattr(f.as_ptr(), name.as_ptr(), b"value".as_ptr().cast(), 5, 0) };
    assert_eq!(r, 0);
    // SAFETY: as above.
    let r = unsafe {
        libc::setxattr(
            f.as_ptr(),
            name.as_ptr(),
            b"v".as_ptr().cast(),
            1,
            libc::XATTR_CREATE,
        )
    };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::EEXIST))
    );
    // SAFETY: as above; size 0 asks for the size.
    let r = unsafe { libc::getxattr(f.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    assert_eq!(r, 5);
    // SAFETY: as above, a buffer of 2 bytes.
    let r = unsafe { libc::getxattr(f.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 2) };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::ERANGE))
    );
    // SAFETY: as above.
    let r = unsafe {
        libc::getxattr(
            f.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    assert_eq!(&buf[..r as usize], b"value");
    // SAFETY: as above; the list's size, then the list.
    let n = unsafe { libc::listxattr(f.as_ptr(), std::ptr::null_mut(), 0) };
    assert_eq!(n, 7);
    // SAFETY: as above.
    let n = unsafe { libc::listxattr(f.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(&buf[..n as usize], b"user.k\0");
    let bad = CString::new("other.k").unwrap();
    // SAFETY: as above.
    let r = unsafe { libc::setxattr(f.as_ptr(), bad.as_ptr(), b"v".as_ptr().cast(), 1, 0) };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::EOPNOTSUPP))
    );
    // SAFETY: as above.
    let r = unsafe { libc::removexattr(f.as_ptr(), name.as_ptr()) };
    assert_eq!(r, 0);
    // SAFETY: as above.
    let r = unsafe { libc::removexattr(f.as_ptr(), name.as_ptr()) };
    assert_eq!(
        (r, std::io::Error::last_os_error().raw_os_error()),
        (-1, Some(libc::ENODATA))
    );

    // Permissions: the kernel checks mode bits (default_permissions).
    std::fs::set_permissions(m.p("d"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir(m.p("open")).unwrap();
    std::fs::set_permissions(m.p("open"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let as_nobody = |path: &Path| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "touch"])
            .arg(path)
            .output()
    };
    match as_nobody(&m.p("d/x")) {
        Ok(o) => {
            assert!(!o.status.success());
            assert!(
                String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
                "{o:?}"
            );
            assert!(m.server_stat("/d/x").is_none());
            let o = as_nobody(&m.p("open/y")).unwrap();
            assert!(o.status.success(), "{o:?}");
            let y = m.server_stat("/open/y").unwrap();
            assert_eq!(
                (y["attrs"]["owner"].as_str(), y["attrs"]["group"].as_str()),
                (Some("nobody"), Some("nogroup"))
            );
        }
        Err(e) => eprintln!("no setpriv ({e}): the permission checks are not exercised"),
    }
}

#[test]
fn a_large_directory_lists_completely() {
    if !fuse_available() {
        return;
    }
    let m = Mounted::new(&[]);
    const N: usize = 5_000;
    let names: Vec<String> = (0..N).map(|i| format!("/big/entry-{i:05}")).collect();
    assert_eq!(m.tl(&["mkdir", "/big"]).code(), 0);
    for chunk in names.chunks(1000) {
        let mut args = vec!["touch"];
        args.extend(chunk.iter().map(String::as_str));
        let r = m.tl(&args);
        assert_eq!(r.code(), 0, "{r:?}");
    }
    let mut seen: Vec<String> = std::fs::read_dir(m.p("big"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    seen.sort();
    let want: Vec<String> = (0..N).map(|i| format!("entry-{i:05}")).collect();
    assert_eq!(seen.len(), N, "every entry, once");
    assert_eq!(seen, want);
    // readdir without readdirplus's attributes, as ls -f does, and its
    // count with . and ..
    let ls = run_in(&m.p("big"), "ls", &["-f"]);
    assert_eq!(ls.lines().count(), N + 2);
    let find = run_in(&m.mnt, "find", &["big", "-type", "f"]);
    assert_eq!(find.lines().count(), N);
}

#[test]
fn another_clients_changes_show_through_the_mount_while_stats_stay_cached() {
    if !fuse_available() {
        return;
    }
    // Caches far longer than the waits below: what shows, the change
    // stream invalidated.
    let m = Mounted::new(&["--attr-ttl", "300", "--entry-ttl", "300"]);
    std::fs::create_dir(m.p("d")).unwrap();
    std::fs::write(m.p("d/f"), b"").unwrap();
    std::fs::set_permissions(m.p("d/f"), std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        std::fs::metadata(m.p("d/f")).unwrap().mode() & 0o7777,
        0o644
    );

    let mut lags = Vec::new();
    assert_eq!(m.tl(&["chmod", "600", "/d/f"]).code(), 0);
    lags.push((
        "chmod",
        eventually(10, "chmod shows", || {
            std::fs::metadata(m.p("d/f")).unwrap().mode() & 0o7777 == 0o600
        }),
    ));
    assert_eq!(m.tl(&["mv", "/d/f", "/d/g"]).code(), 0);
    lags.push((
        "rename",
        eventually(10, "rename shows", || {
            !m.p("d/f").exists() && m.p("d/g").exists()
        }),
    ));
    assert_eq!(m.tl(&["mv", "/d", "/e"]).code(), 0);
    lags.push((
        "directory rename",
        eventually(10, "directory rename shows", || {
            !m.p("d").exists() && m.p("e/g").exists()
        }),
    ));
    assert_eq!(m.tl(&["setsize", "/e/g", "4096"]).code(), 0);
    lags.push((
        "size",
        eventually(10, "size shows", || {
            std::fs::metadata(m.p("e/g")).unwrap().len() == 4096
        }),
    ));
    assert_eq!(m.tl(&["mkdir", "/e/new"]).code(), 0);
    lags.push((
        "mkdir",
        eventually(10, "mkdir shows", || m.p("e/new").is_dir()),
    ));
    assert_eq!(m.tl(&["rm", "/e/g"]).code(), 0);
    lags.push(("rm", eventually(10, "rm shows", || !m.p("e/g").exists())));
    // The path the mount holds for the moved directory is the new one:
    // a change through the mount lands on the right inode.
    std::fs::set_permissions(m.p("e/new"), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(m.server_stat("/e/new").unwrap()["attrs"]["mode"], 0o700);
    // Stats stay cached meanwhile: a thousand of them reach the server
    // (nearly) never.
    let before = m.server_stats();
    for _ in 0..1000 {
        std::fs::metadata(m.p("e/new")).unwrap();
    }
    let asked = m.server_stats() - before;
    assert!(asked < 10, "{asked} of 1000 stats reached the server");
    for (what, lag) in lags {
        eprintln!(
            "visible through the mount {:.1} ms after the other client's {what} returned",
            lag.as_secs_f64() * 1e3
        );
    }
    assert!(
        m.log_text().lines().all(|l| !l.contains("ERROR")),
        "{}",
        m.log_text()
    );
}

#[test]
fn unmounts_on_sigterm_and_fusermount_and_mounts_a_data_directory() {
    if !fuse_available() {
        return;
    }
    let mut m = Mounted::new(&[]);
    std::fs::create_dir(m.p("kept")).unwrap();
    let pid = m.mount.as_ref().unwrap().id();
    // SAFETY: a signal to the process this test started.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) }, 0);
    assert_eq!(m.wait_mount(30), 0, "{}", m.log_text());
    assert!(!is_mounted(&m.mnt));
    assert!(m.server_stat("/kept").is_some());

    let mut l = Mounted::local(&[]);
    std::fs::create_dir(l.p("here")).unwrap();
    std::fs::write(l.p("here/f"), b"").unwrap();
    let st = Command::new("fusermount3")
        .arg("-u")
        .arg(&l.mnt)
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(l.wait_mount(30), 0, "{}", l.log_text());
    assert!(!is_mounted(&l.mnt));
    // The data directory holds what was made through the mount.
    let data = l._dir.path().join("db");
    let r = cli::run(BIN, &data, &["stat", "--json", "/here/f"]);
    assert_eq!(r.code(), 0, "{r:?}");
}

/// Names are bytes through the mount: `touch` of a name that is not UTF-8
/// (and `ln -s` to a target that is not) creates it as it is; the server
/// (another client) sees the same bytes, and `ls` piped lists them raw.
#[test]
fn names_that_are_not_utf8_pass_through_the_mount() {
    use std::ffi::OsStr;
    if !fuse_available() {
        return;
    }
    let m = Mounted::new(&[]);
    let root = &m.mnt;
    run_in(root, "mkdir", &["q"]);
    let touched = Command::new("touch")
        .arg(OsStr::from_bytes(b"q/bad\xff"))
        .current_dir(root)
        .status()
        .unwrap();
    assert!(touched.success());
    std::os::unix::fs::symlink(
        OsStr::from_bytes(b"t\xe9"),
        root.join(OsStr::from_bytes(b"q/l\xfe")),
    )
    .unwrap();
    let listed = Command::new("ls")
        .arg("q")
        .current_dir(root)
        .output()
        .unwrap();
    assert!(listed.status.success());
    assert_eq!(listed.stdout, b"bad\xff\nl\xfe\n");
    let target = std::fs::read_link(root.join(OsStr::from_bytes(b"q/l\xfe"))).unwrap();
    assert_eq!(target.as_os_str().as_bytes(), b"t\xe9");

    // Another client sees the same bytes: the escape in --json.
    let r = m.tl(&["ls", "--json", "/q"]);
    assert_eq!(r.code(), 0, "{r:?}");
    let rows: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let names: Vec<&serde_json::Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["name"])
        .collect();
    assert_eq!(
        names,
        [
            &serde_json::json!({"base64": "YmFk/w=="}),
            &serde_json::json!({"base64": "bP4="}),
        ]
    );
    // And a rename by that client shows through the mount.
    let mut cmd = Command::new(BIN);
    cmd.arg("--server")
        .arg(m.addr.unwrap().to_string())
        .arg("mv")
        .arg(OsStr::from_bytes(b"/q/bad\xff"))
        .arg(OsStr::from_bytes(b"/q/caf\xe9"));
    assert!(cmd.status().unwrap().success());
    eventually(5, "the rename through the mount", || {
        root.join(OsStr::from_bytes(b"q/caf\xe9")).exists()
            && !root.join(OsStr::from_bytes(b"q/bad\xff")).exists()
    });
}
