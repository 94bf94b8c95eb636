//! The commit this build is of, for the `treelog_build_info` metric
//! (`unknown` outside a git checkout, e.g. a source tarball).

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TREELOG_GIT_COMMIT={commit}");
    // Built again when HEAD moves (a commit, a checkout), not on every
    // change of the working tree.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!(
            "cargo:rerun-if-changed={}",
            PathBuf::from(&dir).join("HEAD").display()
        );
    }
    if let (Some(common), Some(head)) = (
        git(&["rev-parse", "--git-common-dir"]),
        git(&["symbolic-ref", "-q", "HEAD"]),
    ) {
        let common = PathBuf::from(common);
        println!("cargo:rerun-if-changed={}", common.join(&head).display());
        println!(
            "cargo:rerun-if-changed={}",
            common.join("packed-refs").display()
        );
    }
}
