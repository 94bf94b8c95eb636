//! A real tree of this machine imported (`treelog import`, symbolic links
//! and extended attributes included) and compared with its source through
//! a real FUSE mount, with the tools an operator would use: `find -printf`
//! listings (kind, mode, owner, group, link target, file size, mtime to
//! the millisecond) and `getfattr -R` dumps, diffed.
//!
//! The tree is `/usr/share/zoneinfo` (hundreds of symbolic links) where it
//! exists, else `/usr/lib/x86_64-linux-gnu`; `TREELOG_MIRROR_SRC` names
//! another (the whole of `/usr`, by hand: docs/MOUNT.md).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

mod mount_kit;
use mount_kit::*;

fn source() -> Option<PathBuf> {
    if let Ok(s) = std::env::var("TREELOG_MIRROR_SRC") {
        return Some(PathBuf::from(s));
    }
    ["/usr/share/zoneinfo", "/usr/lib/x86_64-linux-gnu"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_dir())
}

/// `find ROOT -printf` of every entry below `root`, sorted: path, kind,
/// mode, owner, group, link target, size (files only: a directory's size
/// is its filesystem's), mtime truncated to milliseconds (treelog's
/// resolution).
fn listing(root: &Path) -> Vec<String> {
    let out = Command::new("find")
        .arg(root)
        .args([
            "-mindepth",
            "1",
            "-printf",
            "%P\\t%y\\t%m\\t%u\\t%g\\t%l\\t%s\\t%T@\\n",
        ])
        .output()
        .expect("find");
    assert!(out.status.success(), "find {root:?}: {out:?}");
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let mut f: Vec<String> = l.split('\t').map(str::to_owned).collect();
            assert_eq!(f.len(), 8, "{l}");
            if f[1] != "f" {
                f[6] = "-".into();
            }
            // seconds.fraction → seconds.milliseconds (truncated)
            let (s, frac) = f[7].split_once('.').unwrap_or((&f[7], ""));
            f[7] = format!("{s}.{:0<3.3}", frac);
            f.join("\t")
        })
        .collect();
    lines.sort();
    lines
}

/// `getfattr -R -d -m -` below `root`, with paths made relative.
fn xattr_dump(root: &Path) -> String {
    let out = Command::new("getfattr")
        .args(["-R", "-d", "-m", "-", "--absolute-names", "-e", "hex"])
        .arg(root)
        .output()
        .expect("getfattr");
    String::from_utf8_lossy(&out.stdout).replace(&format!("{}/", root.display()), "")
}

#[test]
fn an_imported_tree_of_this_machine_matches_its_source_through_the_mount() {
    if !fuse_available() {
        return;
    }
    let Some(src) = source() else {
        eprintln!("SKIP: no source tree (set TREELOG_MIRROR_SRC)");
        return;
    };
    let m = Mounted::new(&["--attr-ttl", "300", "--entry-ttl", "300"]);
    let r = m.tl(&["import", src.to_str().unwrap(), "/mirror"]);
    assert_eq!(r.code(), 0, "{r:?}");
    let want = listing(&src);
    let got = listing(&m.p("mirror"));
    assert!(want.len() > 100, "a tree worth comparing: {}", want.len());
    // Entries the import could not copy (sockets, FIFOs, devices) are
    // counted by it and missing here; a tree of this machine has none.
    let (w, g): (HashSet<&String>, HashSet<&String>) =
        (want.iter().collect(), got.iter().collect());
    let missing: Vec<&&String> = w.difference(&g).take(10).collect();
    let extra: Vec<&&String> = g.difference(&w).take(10).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{} source entries, {} mirrored; differing:\nsource: {missing:#?}\nmirror: {extra:#?}",
        want.len(),
        got.len()
    );
    let links = want
        .iter()
        .filter(|l| l.split('\t').nth(1) == Some("l"))
        .count();
    eprintln!("{} entries, {links} symbolic links, identical", want.len());
    match Command::new("getfattr").arg("--version").output() {
        Ok(o) if o.status.success() => {
            assert_eq!(xattr_dump(&m.p("mirror")), xattr_dump(&src));
        }
        _ => eprintln!("no getfattr: extended attributes not compared"),
    }
}
