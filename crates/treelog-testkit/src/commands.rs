//! Commands with the attributes the tests do not care about filled in.

use treelog_proto::Command;

/// `mkdir -p path` (mode 755) owned by `owner:group`.
pub fn mkdir_as(path: &str, owner: &str, group: &str) -> Command {
    Command::Mkdir {
        path: path.into(),
        parents: true,
        mode: 0o755,
        owner: owner.into(),
        group: group.into(),
    }
}

/// `mkdir -p path` (mode 755) with no owner or group.
pub fn mkdir(path: &str) -> Command {
    mkdir_as(path, "", "")
}

/// An empty file at `path` (mode 644, 4 KiB blocks, no owner or group)
/// in a directory that exists.
pub fn create(path: &str) -> Command {
    Command::Create {
        path: path.into(),
        parents: false,
        mode: 0o644,
        owner: String::new(),
        group: String::new(),
        block_size: 4096,
    }
}
