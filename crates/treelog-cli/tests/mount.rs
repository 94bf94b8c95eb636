//! `treelog mount`: a real server process, a real FUSE mount (another
//! process), driven by ordinary programs and system calls. Skipped with a
//! reason where /dev/fuse or fusermount3 is missing, unless
//! TREELOG_REQUIRE_FUSE=1.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use treelog_testkit::cli;

mod mount_kit;
use mount_kit::*;

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
