//! The namespace as a FUSE filesystem (`treelog mount`, docs/MOUNT.md).
//!
//! A client of a server: every operation is a request, and the kernel's
//! caches of entries and attributes are kept coherent with the change
//! stream (see `coherence`). File contents are not treelog's: a regular
//! file reads as zeros of its size and `write` fails with EOPNOTSUPP.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fuser::{Config, MountOption, SessionACL};
use treelog_client::Client;

mod attr;
mod callers;
mod coherence;
mod dir;
mod errno;
mod fs;
mod ids;
mod inodes;
mod own;

/// How a mount behaves.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// How long the kernel may keep an inode's attributes.
    pub attr_ttl: Duration,
    /// How long the kernel may keep a name's entry.
    pub entry_ttl: Duration,
    /// The uid and gid of owners and groups the local databases do not
    /// know.
    pub nobody_uid: u32,
    pub nobody_gid: u32,
    /// Let users other than the one mounting in (`allow_other`).
    pub allow_other: bool,
    /// The kernel checks mode bits, owners and groups
    /// (`default_permissions`).
    pub default_permissions: bool,
    /// Send each request with the user it is made for (the requesting
    /// process's user and groups), which a server with
    /// `--enforce-permissions` checks; ignored by one without.
    pub send_callers: bool,
    /// The mount's source name (`fsname=`) and type suffix (`subtype=`).
    pub fsname: String,
    pub subtype: String,
    /// Threads reading the kernel's requests (they only hand them over).
    pub threads: usize,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            attr_ttl: Duration::from_secs(10),
            entry_ttl: Duration::from_secs(10),
            nobody_uid: 65534,
            nobody_gid: 65534,
            allow_other: false,
            default_permissions: true,
            send_callers: true,
            fsname: "treelog".into(),
            subtype: "treelog".into(),
            threads: 1,
        }
    }
}

/// Mounts the namespace of `client`'s server at `mountpoint` and serves it
/// until it is unmounted (`fusermount3 -u`, `umount`) or `stop` resolves
/// (then it unmounts itself). Its requests run on `rt`.
pub fn run(
    rt: &tokio::runtime::Runtime,
    client: Client,
    mountpoint: &Path,
    opts: MountOptions,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let mut mount_options = vec![
        MountOption::FSName(opts.fsname.clone()),
        MountOption::Subtype(opts.subtype.clone()),
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::RW,
        MountOption::NoAtime,
    ];
    if opts.default_permissions {
        mount_options.push(MountOption::DefaultPermissions);
    }
    let mut config = Config::default();
    config.mount_options = mount_options;
    config.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(opts.threads.max(1));
    let shared = Arc::new(fs::Shared::new(client, opts));
    let sub = rt
        .block_on(coherence::subscribe(&shared))
        .map_err(|e| io::Error::other(format!("subscribing to the change stream: {e}")))?;
    let fs = fs::TreelogFs {
        shared: shared.clone(),
        rt: rt.handle().clone(),
    };
    let mut session = fuser::Session::new(fs, mountpoint, &config)?;
    coherence::start(rt.handle(), shared, sub, session.notifier());
    let mut unmounter = session.unmount_callable();
    let mountpoint = mountpoint.to_owned();
    rt.spawn(async move {
        stop.await;
        tracing::info!(mountpoint = %mountpoint.display(), "unmounting");
        if let Err(e) = unmounter.unmount() {
            // Busy (a process inside): detach it, as `umount -l`; it goes
            // when the last user leaves.
            tracing::warn!(error = %e, "unmount failed; detaching lazily");
            let _ = std::process::Command::new("fusermount3")
                .args(["-u", "-z", "--"])
                .arg(&mountpoint)
                .status();
        }
    });
    tracing::info!("mounted");
    // Returns when the kernel ends the session: unmounted, by us or not.
    session.run()
}
