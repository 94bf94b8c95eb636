//! `treelog mount MOUNTPOINT`: the namespace as a FUSE filesystem
//! (docs/MOUNT.md), against `--server` or, without it, a server of its
//! own on `--data` on a loopback port.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::args::Cli;
use crate::backend::read_token;
use crate::client::{Client, ClientOptions};
use crate::error::{Error, Result};

/// What `treelog mount --help` says after the options.
const MOUNT_HELP: &str = "\
treelog stores a namespace, not contents: through the mount, a regular file
reads as zeros of its recorded size; write(2) fails with EOPNOTSUPP (nothing
is ever silently discarded); truncate/ftruncate set the size. There are no
hard links (link: EPERM), FIFOs, sockets or device nodes (mknod: EPERM), and
no RENAME_EXCHANGE (EINVAL). Owners and groups are stored as names and map to
local uids and gids through the user and group databases; unknown names show
as --nobody-uid/--nobody-gid.

The kernel caches entries and attributes for --entry-ttl/--attr-ttl seconds;
the mount follows the server's change stream and invalidates exactly what
each committed change touched, so that changes made elsewhere show within
milliseconds. It unmounts on SIGINT, SIGTERM and `fusermount3 -u MOUNTPOINT`.
See docs/MOUNT.md.";

#[derive(Args, Debug)]
#[command(after_help = MOUNT_HELP)]
pub(crate) struct MountArgs {
    /// An existing empty directory to mount on.
    pub mountpoint: PathBuf,
    /// Seconds the kernel may cache an inode's attributes (the change
    /// stream invalidates them sooner when they change).
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub attr_ttl: f64,
    /// Seconds the kernel may cache a name's entry.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub entry_ttl: f64,
    /// The uid shown for owners the local user database does not know.
    #[arg(long, default_value_t = 65534)]
    pub nobody_uid: u32,
    /// The gid shown for groups the local group database does not know.
    #[arg(long, default_value_t = 65534)]
    pub nobody_gid: u32,
    /// Let other users than the one mounting in (FUSE's allow_other;
    /// needs user_allow_other in /etc/fuse.conf unless root).
    #[arg(long)]
    pub allow_other: bool,
    /// Do not let the kernel check permission bits (default_permissions
    /// off): every caller may do everything the server allows.
    #[arg(long)]
    pub no_default_permissions: bool,
    /// Send requests without the user they are made for. By default each
    /// carries the requesting process's user and groups, which a server
    /// with --enforce-permissions checks (the mount's credential then
    /// needs the proxy role).
    #[arg(long)]
    pub no_callers: bool,
    /// The mount's source name, as mount(8) and df show it.
    #[arg(long, default_value = "treelog")]
    pub fsname: String,
    /// Threads reading the kernel's requests.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Log events on standard error as text or as JSON lines.
    #[arg(long, default_value_t = crate::server::LogFormat::Text)]
    pub log_format: crate::server::LogFormat,
}

fn seconds(what: &str, s: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| Error::InvalidArgument(format!("--{what} must be a number of seconds ≥ 0")))
}

pub(crate) fn run(cli: &Cli, a: &MountArgs) -> Result<u8> {
    crate::server::init_logging(a.log_format)?;
    let opts = treelog_mount::MountOptions {
        attr_ttl: seconds("attr-ttl", a.attr_ttl)?,
        entry_ttl: seconds("entry-ttl", a.entry_ttl)?,
        nobody_uid: a.nobody_uid,
        nobody_gid: a.nobody_gid,
        allow_other: a.allow_other,
        default_permissions: !a.no_default_permissions,
        send_callers: !a.no_callers,
        fsname: a.fsname.clone(),
        subtype: "treelog".into(),
        threads: a.threads,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("treelog-mount")
        .build()?;
    // Without --server: a server of the mount's own on the data
    // directory, reachable on loopback only (and by nothing else).
    let server = match &cli.server {
        Some(_) => None,
        None => {
            let mut cfg = crate::server::ServerConfig::new(cli.data.clone());
            cfg.listen = "127.0.0.1:0".parse().expect("a loopback address");
            cfg.http = "127.0.0.1:0".parse().expect("a loopback address");
            cfg.store = treelog::Options::default().durability(cli.durability.into());
            Some(rt.block_on(crate::server::start(cfg))?)
        }
    };
    let copts = ClientOptions {
        token: read_token(cli.token_file.as_deref())?,
        tls: crate::tls::client_tls(cli)?,
        follow_leader: true,
        request_timeout: cli.timeout.max(Duration::from_secs(2)),
        ..Default::default()
    };
    let client = rt.block_on(async {
        match (&cli.server, &server) {
            (Some(endpoints), _) => Client::connect_to(endpoints, copts).await,
            (None, Some(h)) => Client::connect(h.bound.rpc, copts).await,
            (None, None) => unreachable!("a server was started"),
        }
    })?;
    // Registered before mounting: a signal that comes as soon as the
    // mount shows must unmount, not kill the process.
    let (mut int, mut term) = {
        use tokio::signal::unix::{signal, SignalKind};
        let _rt = rt.enter();
        (
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        )
    };
    let stop = async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    };
    let r = treelog_mount::run(&rt, client, &a.mountpoint, opts, stop);
    if let Some(h) = server {
        rt.block_on(h.shutdown())?;
    }
    r.map_err(|e| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("mount on {}: {e}", a.mountpoint.display()),
        ))
    })?;
    Ok(0)
}
