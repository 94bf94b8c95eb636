//! POSIX permission semantics, enforced by the server (`serve
//! --credentials --enforce-permissions`) for the users a mount's requests
//! are made for (its `proxy` credential names them): driven through a real
//! FUSE mount by ordinary programs run as other users (`setpriv`), with the
//! kernel's own checks off (`--no-default-permissions`) so that every
//! verdict is the server's. Each refusal is checked by its errno's text as
//! coreutils prints it ("Permission denied" is EACCES, "Operation not
//! permitted" EPERM).
//!
//! The users are the system's `daemon` (uid 1) and `bin` (uid 2), which
//! every Debian system has; the test skips with a reason without them or
//! without setpriv, unless TREELOG_REQUIRE_FUSE=1.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

use treelog_testkit::cli;

mod mount_kit;
use mount_kit::*;

/// `admin credential add` to `dir/credentials`, the secret in
/// `dir/NAME.secret`.
fn add_credential(dir: &Path, name: &str, role: &str) {
    cli::add_credential(BIN, dir, &dir.join("credentials"), name, role);
}

/// An enforcing server with credentials `mount` (proxy), `ops` (admin)
/// and `w` (write), mounted with the mount's credential, the kernel's
/// checks off and no entries cached.
fn enforcing() -> Mounted {
    Mounted::serving(
        |dir| {
            add_credential(dir, "mount", "proxy");
            add_credential(dir, "ops", "admin");
            add_credential(dir, "w", "write");
            Setup {
                serve: vec![
                    "--credentials".into(),
                    dir.join("credentials").to_str().unwrap().into(),
                    "--enforce-permissions".into(),
                ],
                global: vec![
                    "--token-file".into(),
                    dir.join("mount.secret").to_str().unwrap().into(),
                ],
            }
        },
        // Without the kernel's checks, a path walk through entries the
        // kernel cached is not asked of the server: entries are not cached.
        &[
            "--allow-other",
            "--no-default-permissions",
            "--entry-ttl",
            "0",
        ],
    )
}

/// Why the users or setpriv are missing, if they are.
fn users_missing() -> Option<String> {
    for u in ["daemon", "bin"] {
        match Command::new("getent").args(["passwd", u]).output() {
            Ok(o) if o.status.success() => {}
            other => return Some(format!("no user {u}: {other:?}")),
        }
    }
    match Command::new("setpriv").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        other => Some(format!("no setpriv: {other:?}")),
    }
}

/// `prog ARGS` as uid `uid` with group `gid` and supplementary `groups`:
/// Ok with its standard output, or Err with its standard error.
fn as_user(
    uid: u32,
    gid: u32,
    groups: &[u32],
    prog: &str,
    args: &[&str],
) -> Result<String, String> {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"));
    if groups.is_empty() {
        cmd.arg("--clear-groups");
    } else {
        let g: Vec<String> = groups.iter().map(u32::to_string).collect();
        cmd.arg(format!("--groups={}", g.join(",")));
    }
    let out = cmd
        .arg("--")
        .arg(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("setpriv");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

const DAEMON: (u32, u32) = (1, 1);
const BIN_USER: (u32, u32) = (2, 2);

fn daemon(prog: &str, args: &[&str]) -> Result<String, String> {
    as_user(DAEMON.0, DAEMON.1, &[], prog, args)
}

fn bin(prog: &str, args: &[&str]) -> Result<String, String> {
    as_user(BIN_USER.0, BIN_USER.1, &[], prog, args)
}

#[track_caller]
fn eacces(r: Result<String, String>) {
    let e = r.expect_err("must be refused");
    assert!(e.contains("Permission denied"), "not EACCES: {e}");
}

#[track_caller]
fn eperm(r: Result<String, String>) {
    let e = r.expect_err("must be refused");
    assert!(e.contains("Operation not permitted"), "not EPERM: {e}");
}

#[track_caller]
fn ok(r: Result<String, String>) -> String {
    r.unwrap_or_else(|e| panic!("refused: {e}"))
}

fn skip() -> bool {
    if !fuse_available() {
        return true;
    }
    if let Some(why) = users_missing() {
        assert!(
            std::env::var("TREELOG_REQUIRE_FUSE").as_deref() != Ok("1"),
            "TREELOG_REQUIRE_FUSE=1 but {why}"
        );
        eprintln!("SKIP: {why}");
        return true;
    }
    false
}

#[test]
fn the_server_enforces_posix_permissions_for_the_mounts_users() {
    if skip() {
        return;
    }
    let m = enforcing();
    let p = |rel: &str| m.p(rel).to_str().unwrap().to_owned();
    // Root (this test) sets the house up through the mount.
    ok(as_user(0, 0, &[], "mkdir", &["-m", "755", &p("home")]));
    ok(as_user(0, 0, &[], "mkdir", &["-m", "750", &p("home/d")]));
    ok(as_user(
        0,
        0,
        &[],
        "chown",
        &["daemon:daemon", &p("home/d")],
    ));
    ok(as_user(0, 0, &[], "mkdir", &["-m", "1777", &p("tmp")]));
    ok(as_user(0, 0, &[], "mkdir", &["-m", "2777", &p("proj")]));
    ok(as_user(0, 0, &[], "chgrp", &["bin", &p("proj")]));

    // Write and search on the parent.
    eacces(daemon("touch", &[&p("home/x")]));
    eacces(daemon("mkdir", &[&p("home/x")]));
    ok(daemon("touch", &[&p("home/d/f")]));
    let md = std::fs::metadata(m.p("home/d/f")).unwrap();
    assert_eq!((md.uid(), md.gid()), DAEMON, "a new file is its creator's");
    // bin may not search /home/d (0750, not in group daemon), nor list it.
    eacces(bin("stat", &[&p("home/d/f")]));
    eacces(bin("ls", &[&p("home/d")]));
    eacces(bin("touch", &[&p("home/d/g")]));
    // With the group daemon as a supplementary group, it may search and
    // list but still not write.
    ok(as_user(2, 2, &[1], "stat", &[&p("home/d/f")]));
    ok(as_user(2, 2, &[1], "ls", &[&p("home/d")]));
    eacces(as_user(2, 2, &[1], "touch", &[&p("home/d/g")]));
    // `..` leads to /home, which daemon may not write.
    eacces(daemon("touch", &[&p("home/d/../y")]));
    let (dotdot, home) = (
        std::fs::metadata(m.p("home/d/..")).unwrap(),
        std::fs::metadata(m.p("home")).unwrap(),
    );
    assert_eq!(dotdot.ino(), home.ino());

    // The sticky bit: daemon's file in /tmp stays daemon's.
    ok(daemon("touch", &[&p("tmp/a")]));
    eperm(bin("rm", &["-f", &p("tmp/a")]));
    eperm(bin("mv", &[&p("tmp/a"), &p("tmp/b")]));
    ok(bin("touch", &[&p("tmp/mine")]));
    eperm(bin("mv", &["-f", &p("tmp/mine"), &p("tmp/a")]));
    ok(bin("mv", &[&p("tmp/mine"), &p("tmp/mine2")]));
    ok(bin("rm", &[&p("tmp/mine2")]));

    // chmod, chown, chgrp: the owner's (within her groups) and root's.
    eperm(bin("chmod", &["600", &p("tmp/a")]));
    eperm(bin("chown", &["bin", &p("tmp/a")]));
    eperm(daemon("chown", &["bin", &p("tmp/a")]));
    eperm(daemon("chgrp", &["bin", &p("tmp/a")]));
    ok(as_user(1, 1, &[2], "chgrp", &["bin", &p("tmp/a")]));
    ok(daemon("chmod", &["640", &p("tmp/a")]));
    let md = std::fs::metadata(m.p("tmp/a")).unwrap();
    assert_eq!((md.mode() & 0o7777, md.gid()), (0o640, 2));
    ok(as_user(0, 0, &[], "chown", &["bin", &p("tmp/a")]));
    assert_eq!(std::fs::metadata(m.p("tmp/a")).unwrap().uid(), 2);

    // Times: the owner sets any; others need write ("now" only).
    ok(daemon("touch", &[&p("tmp/t")]));
    ok(daemon(
        "touch",
        &["-d", "2001-02-03 04:05:06Z", &p("tmp/t")],
    ));
    let md = std::fs::metadata(m.p("tmp/t")).unwrap();
    assert_eq!(md.mtime(), 981_173_106);
    eacces(bin("touch", &[&p("tmp/t")]));
    // Contents' size needs write.
    eacces(bin("truncate", &["-s", "10", &p("tmp/t")]));
    ok(daemon("truncate", &["-s", "10", &p("tmp/t")]));
    // Attributes of the user namespace need write; others are root's.
    eacces(bin("setfattr", &["-n", "user.k", "-v", "v", &p("tmp/t")]));
    ok(daemon(
        "setfattr",
        &["-n", "user.k", "-v", "v", &p("tmp/t")],
    ));
    eperm(daemon(
        "setfattr",
        &["-n", "trusted.k", "-v", "v", &p("tmp/t")],
    ));

    // A setgid directory gives its group to what is made in it, and its
    // bit to directories.
    ok(daemon("mkdir", &[&p("proj/sub")]));
    ok(daemon("touch", &[&p("proj/f")]));
    let sub = std::fs::metadata(m.p("proj/sub")).unwrap();
    assert_eq!(sub.gid(), 2, "the directory's group");
    assert_eq!(sub.mode() & 0o2000, 0o2000, "setgid: {:o}", sub.mode());
    assert_eq!(std::fs::metadata(m.p("proj/f")).unwrap().gid(), 2);

    // Rename over an existing entry replaces it, within what may be
    // written.
    ok(daemon("touch", &[&p("home/d/r1"), &p("home/d/r2")]));
    let r1 = std::fs::metadata(m.p("home/d/r1")).unwrap().ino();
    ok(daemon("mv", &["-f", &p("home/d/r1"), &p("home/d/r2")]));
    assert_eq!(std::fs::metadata(m.p("home/d/r2")).unwrap().ino(), r1);
    assert!(!m.p("home/d/r1").exists());

    // Removing: write on the parent, and the directory must be empty.
    eacces(bin("rmdir", &[&p("home/d")]));
    ok(daemon("rmdir", &[&p("proj/sub")]));
    assert!(!m.p("proj/sub").exists());

    // A client that is neither admin nor proxy is checked as the user
    // named after its credential: `w` owns nothing and may not write in
    // /home.
    let tok = m._dir.path().join("w.secret");
    let mut cmd = Command::new(BIN);
    cmd.arg("--server")
        .arg(m.addr.unwrap().to_string())
        .arg("--token-file")
        .arg(&tok)
        .args(["mkdir", "/home/w"]);
    let r = cli::output(&mut cmd);
    assert_eq!(r.code(), 15, "{r:?}");
    let mut cmd = Command::new(BIN);
    cmd.arg("--server")
        .arg(m.addr.unwrap().to_string())
        .arg("--token-file")
        .arg(&tok)
        .args(["touch", "/tmp/w"]);
    assert_eq!(cli::output(&mut cmd).code(), 0);
    let owner = m.server_stat("/tmp/w").unwrap()["attrs"]["owner"].clone();
    assert_eq!(owner, "w");
}
