//! The command line's grammar: every subcommand and option (clap).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use treelog::ByteString;

use crate::parse::{parse_host_port, parse_mode, parse_size};
use crate::timefmt::TimeStyle;
use crate::types::DEFAULT_BLOCK_SIZE;
use treelog::Durability;

/// Default data directory when `--data` is not given.
pub(crate) const DEFAULT_DATA_DIR: &str = "treelog-data";

/// The exit codes (as in the README), after `treelog --help`.
const EXIT_CODES_HELP: &str = "\
Exit codes: 0 success, 2 usage, 3 not found, 4 already exists, 5 not a
directory, 6 is a directory, 7 not empty, 8 invalid name/path/argument,
9 dictionary full, 10 corruption or incompatible database, 11 compacted or
cursor expired, 12 verify mismatch, 13 outcome unknown (read before
retrying), 14 quota exceeded, 15 permission denied, 16 not the leader (a
replica refused a linearizable read, or no leader took a write), 17 not
caught up (the node did not reach --min-seq in time), 1 anything else.

Read commands see the state --consistency and --min-seq ask for (default:
linearizable; on a replica, its newest state). Every mutation prints the
sequence of its log record (`(seq N)`, a `seq` field with --json): pass it as
--min-seq to read your write on any node.

Commands with several operands (mkdir, touch, rm, chmod, chown, touchtime,
mv SRC... DIR) run each operand on its own, in order; a failure is reported
for its operand (standard error, or a JSON line with --json) and the others
still run. The exit code is that of the first operand that failed, except
that 13 (outcome unknown) wins over any other.";

/// Said of each command that takes several operands.
const OPERANDS_HELP: &str = "\
Each operand is its own command (its own log record): one that fails is
reported and the others still run; the exit code is the first failure's
(see `treelog --help`).";

#[derive(Parser, Debug)]
#[command(
    name = "treelog",
    version,
    about = "Event-sourced filesystem-namespace metadata store on RocksDB",
    after_long_help = EXIT_CODES_HELP
)]
pub(crate) struct Cli {
    /// Data directory (created on first use).
    #[arg(long, global = true, env = "TREELOG_DATA", default_value = DEFAULT_DATA_DIR)]
    pub data: PathBuf,
    /// Machine-readable JSON output.
    #[arg(long, global = true)]
    pub json: bool,
    /// Talk to this server instead of opening the data directory: `host:port`,
    /// `[v6]:port`, or a comma-separated list of them (`a:7400,b:7400,c:7400`),
    /// tried in turn; names are resolved at every connect. A write reaching a
    /// follower or a replica goes on to the leader it names.
    #[arg(long, global = true, env = "TREELOG_SERVER", value_name = "ENDPOINTS")]
    pub server: Option<String>,
    /// File holding the shared token (client: sent in the handshake; serve:
    /// required from clients).
    #[arg(long, global = true, env = "TREELOG_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// The CA (PEM) a server's certificate must chain to: connect with TLS
    /// (serve: the CA client certificates are verified against, and that
    /// of its links to other nodes or its source).
    #[arg(long, global = true, env = "TREELOG_TLS_CA", value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// Certificate (PEM chain) presented to servers that ask for one
    /// (mutual TLS); serve: the server's certificate, also presented to
    /// its peers. Reloaded when the file changes or on SIGHUP.
    #[arg(long, global = true, env = "TREELOG_TLS_CERT", value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, global = true, env = "TREELOG_TLS_KEY", value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    /// The name the server's certificate must carry (default: the IP
    /// address connected to).
    #[arg(
        long,
        global = true,
        env = "TREELOG_TLS_SERVER_NAME",
        value_name = "NAME"
    )]
    pub tls_server_name: Option<String>,
    /// Which state the read commands (stat, ls, count, readlink,
    /// getfattr, quota show) see: `linearizable`, every write acknowledged
    /// before the command started; `latest`, the node's newest state. The
    /// default is linearizable, except on a replica (`serve --replica-of`),
    /// which cannot give it: there the default reads its newest state, and
    /// an explicit `linearizable` is refused (exit 16).
    #[arg(long, global = true, env = "TREELOG_CONSISTENCY", value_enum)]
    pub consistency: Option<crate::consistency::Consistency>,
    /// Read commands: wait (at most --timeout) until the node has
    /// committed SEQ (a mutation's `seq`), else fail with exit 17 (not
    /// caught up).
    #[arg(long, global = true, env = "TREELOG_MIN_SEQ", value_name = "SEQ")]
    pub min_seq: Option<u64>,
    /// The deadline of each request to a server, in seconds (a fraction
    /// allowed; at least 2 s, the time to connect), as etcdctl's
    /// --command-timeout: connecting (2 s per address), reconnecting,
    /// finding the leader and the reply; read
    /// commands also wait at most this long for --min-seq, and for a
    /// linearizable read while a Raft node is busy. A read past it exits 18
    /// (deadline exceeded, nothing changed); a write sent before it passed
    /// exits 13 (outcome unknown). `cluster` requests and backups wait as
    /// long as they take.
    #[arg(long, global = true, env = "TREELOG_TIMEOUT", value_name = "SECS",
          value_parser = crate::consistency::parse_timeout, default_value = "5")]
    pub timeout: std::time::Duration,
    /// fsync each group before acknowledging (`sync`) or not (`none`).
    #[arg(long, global = true, env = "TREELOG_DURABILITY", value_enum, default_value_t = DurabilityArg::Sync)]
    pub durability: DurabilityArg,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DurabilityArg {
    Sync,
    None,
}

impl From<DurabilityArg> for Durability {
    fn from(d: DurabilityArg) -> Durability {
        match d {
            DurabilityArg::Sync => Durability::Sync,
            DurabilityArg::None => Durability::None,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub(crate) struct OwnerArgs {
    /// Permission bits, octal.
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<u32>,
    #[arg(long, default_value = "")]
    pub owner: String,
    #[arg(long, default_value = "")]
    pub group: String,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Create directories.
    #[command(after_help = OPERANDS_HELP)]
    Mkdir {
        /// Create missing parents; an existing directory is not an error.
        #[arg(short, long)]
        parents: bool,
        #[command(flatten)]
        o: OwnerArgs,
        #[arg(required = true, value_name = "PATH")]
        #[arg(value_parser = BytesArg)]
        paths: Vec<ByteString>,
    },
    /// Create empty (incomplete) files; an existing path is an error
    /// (exit 4), not a new modification time (see touchtime).
    #[command(after_help = OPERANDS_HELP)]
    Touch {
        /// Create missing parent directories.
        #[arg(short, long)]
        parents: bool,
        #[command(flatten)]
        o: OwnerArgs,
        #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE)]
        block_size: u64,
        #[arg(required = true, value_name = "PATH")]
        #[arg(value_parser = BytesArg)]
        paths: Vec<ByteString>,
    },
    /// List a directory.
    Ls(LsArgs),
    /// Show inodes by path, or one by id with --id. Several paths are read
    /// at one committed state (its `seq` is in the --json lines); a path
    /// that does not exist is reported and the others are still shown,
    /// with exit 3.
    Stat {
        #[arg(long, conflicts_with = "paths")]
        id: Option<u64>,
        #[arg(value_name = "PATH", required_unless_present = "id")]
        #[arg(value_parser = BytesArg)]
        paths: Vec<ByteString>,
    },
    /// Rename (move) atomically: `mv SRC DST` renames SRC to exactly DST
    /// (an existing directory DST is not moved into, as with GNU `mv -T`);
    /// `mv SRC... DIR` with several sources, or `mv SRC DIR/`, moves each
    /// SRC into DIR under its own name.
    #[command(
        after_help = OPERANDS_HELP,
        override_usage = "treelog mv [OPTIONS] SRC DST\n       treelog mv [OPTIONS] SRC... DIR"
    )]
    Mv {
        /// Replace an existing destination (file over file, empty dir over dir).
        #[arg(short = 'f', long)]
        overwrite: bool,
        #[arg(num_args = 2.., required = true, value_name = "PATH")]
        #[arg(value_parser = BytesArg)]
        operands: Vec<ByteString>,
    },
    /// Delete files and directories (an empty directory needs no -r).
    #[command(
        after_help = OPERANDS_HELP,
        override_usage = "treelog rm [OPTIONS] PATH..."
    )]
    Rm {
        /// Delete directories with everything in them.
        #[arg(short, long)]
        recursive: bool,
        /// A path that does not exist is not an error (nor mentioned).
        #[arg(short, long)]
        force: bool,
        #[arg(required_unless_present = "force", value_name = "PATH")]
        #[arg(value_parser = BytesArg)]
        paths: Vec<ByteString>,
    },
    /// Change permission bits (octal).
    #[command(after_help = OPERANDS_HELP)]
    Chmod {
        #[arg(value_parser = parse_mode)]
        mode: u32,
        #[arg(required = true, value_name = "PATH")]
        #[arg(value_parser = BytesArg)]
        paths: Vec<ByteString>,
    },
    /// Change owner and/or group: OWNER, OWNER:GROUP or :GROUP (OWNER:
    /// also clears the group).
    #[command(after_help = OPERANDS_HELP)]
    Chown {
        #[arg(value_name = "OWNER[:GROUP]")]
        spec: String,
        #[arg(required = true, value_name = "PATH")]
        #[arg(value_parser = BytesArg)]
        paths: Vec<ByteString>,
    },
    /// Set the modification time (milliseconds since the epoch).
    #[command(after_help = OPERANDS_HELP)]
    Touchtime {
        mtime_ms: u64,
        #[arg(required = true, value_name = "PATH")]
        #[arg(value_parser = BytesArg)]
        paths: Vec<ByteString>,
    },
    /// Make a symbolic link: `ln -s TARGET LINK` (the target is stored as
    /// given, never resolved; paths are not followed through links).
    Ln {
        /// Symbolic (the only kind: treelog has no hard links).
        #[arg(short = 's', long, required = true)]
        symbolic: bool,
        /// Create missing parent directories of LINK.
        #[arg(short, long)]
        parents: bool,
        #[arg(long, default_value = "")]
        owner: String,
        #[arg(long, default_value = "")]
        group: String,
        #[arg(value_parser = BytesArg)]
        target: ByteString,
        #[arg(value_parser = BytesArg)]
        link: ByteString,
    },
    /// Print a symbolic link's target.
    Readlink {
        #[arg(value_parser = BytesArg)]
        path: ByteString,
    },
    /// Print extended attributes (as getfattr -d): all of them, or the one
    /// given with -n (exit 3 when it has none of that name).
    Getfattr {
        /// Only this attribute.
        #[arg(short = 'n', long)]
        name: Option<String>,
        /// Names only.
        #[arg(long, conflicts_with = "name")]
        names_only: bool,
        /// How values are printed: `text` ("…", with \ooo escapes for bytes
        /// that are not printable) or `hex` (0x…).
        #[arg(short = 'e', long, default_value = "text")]
        encoding: ValueEncoding,
        #[arg(required = true, value_name = "PATH")]
        #[arg(value_parser = BytesArg)]
        paths: Vec<ByteString>,
    },
    /// Set (-n NAME -v VALUE) or remove (-x NAME) an extended attribute
    /// (as setfattr). Names are `user.`, `trusted.`, `security.` or
    /// `system.` and at least one more byte, at most 255 bytes; values at
    /// most 64 KiB; an inode at most 128 attributes and 256 KiB of names
    /// and values. A VALUE starting 0x is hex; otherwise its bytes.
    #[command(after_help = OPERANDS_HELP)]
    Setfattr {
        #[arg(
            short = 'n',
            long,
            required_unless_present = "remove",
            conflicts_with = "remove"
        )]
        name: Option<String>,
        #[arg(short = 'v', long, default_value = "", requires = "name")]
        value: String,
        /// Remove this attribute.
        #[arg(short = 'x', long, value_name = "NAME")]
        remove: Option<String>,
        /// Fail (exit 4) if the attribute exists.
        #[arg(long, conflicts_with = "replace", requires = "name")]
        create: bool,
        /// Fail (exit 3) if the attribute does not exist.
        #[arg(long, requires = "name")]
        replace: bool,
        #[arg(required = true, value_name = "PATH")]
        #[arg(value_parser = BytesArg)]
        paths: Vec<ByteString>,
    },
    /// Directory quotas: at most so many inodes and bytes of files under a
    /// directory; a write that would pass one is refused (exit 14) and
    /// writes nothing. A directory with a quota keeps its usage counted.
    Quota {
        #[command(subcommand)]
        cmd: QuotaCmd,
    },
    /// Count what is under each path, the path itself included (du -s,
    /// HDFS count): directories, files, symbolic links, bytes of files.
    /// From a quota's counters where a directory has one; otherwise by a
    /// walk of at most 1,000,000 inodes (give a big tree a quota, even one
    /// without limits, to count it at once). `-h` is `--human-readable`,
    /// as in `du` (help is `--help` only).
    #[command(disable_help_flag = true)]
    Count {
        /// Also the path's quota: its limits and what remains.
        #[arg(short = 'q', long)]
        quota: bool,
        /// Sizes as 1.5K, 23M, 4.0G.
        #[arg(short = 'h', long)]
        human_readable: bool,
        #[arg(required = true, value_name = "PATH")]
        #[arg(value_parser = BytesArg)]
        paths: Vec<ByteString>,
        /// Print help.
        #[arg(long, action = clap::ArgAction::Help)]
        help: Option<bool>,
    },
    /// Mark a file complete with its final size.
    Complete {
        #[arg(value_parser = BytesArg)]
        path: ByteString,
        size: u64,
    },
    /// Change a file's size.
    Setsize {
        #[arg(value_parser = BytesArg)]
        path: ByteString,
        size: u64,
    },
    /// Print the change stream (records already committed; against a local
    /// data directory nothing else can write, so it stops when caught up).
    Tail {
        /// Start at this sequence number.
        #[arg(long, conflicts_with = "snapshot")]
        from: Option<u64>,
        /// Start with a consistent snapshot of the (filtered) tree.
        #[arg(long)]
        snapshot: bool,
        /// Only this subtree.
        #[arg(long)]
        #[arg(value_parser = BytesArg)]
        prefix: Option<ByteString>,
        /// Only these event kinds (create, complete, set_size, set_attr,
        /// delete, rename, symlink, set_xattr, remove_xattr, set_quota,
        /// clear_quota).
        #[arg(long, value_delimiter = ',')]
        kinds: Vec<String>,
        /// A durable cursor: resume after its acknowledged position. To a
        /// terminal, acknowledge what was written and flushed; to a regular
        /// file, what was written and fsynced; to a pipe or a socket,
        /// nothing: the consumer runs `treelog ack CURSOR SEQ` once it has
        /// processed up to SEQ (bytes in a pipe are not processed yet).
        #[arg(long)]
        cursor: Option<String>,
        /// With --cursor: never acknowledge; the consumer runs `treelog ack
        /// CURSOR SEQ` once it has processed the output up to SEQ.
        #[arg(long, requires = "cursor")]
        no_ack: bool,
        /// With --cursor to a pipe or a socket: acknowledge what the pipe
        /// took, as to a terminal. At-most-once: what the consumer had not
        /// processed when it stopped is skipped by the next run.
        #[arg(long, requires = "cursor", conflicts_with = "no_ack")]
        auto_ack: bool,
        /// Re-snapshot the subtree when a directory moves into it (the
        /// default with --snapshot; give it when resuming with --from or a
        /// cursor a consumer that started from a snapshot).
        #[arg(long)]
        resync: bool,
        /// Stop after this many items.
        #[arg(long)]
        limit: Option<u64>,
        /// Keep waiting for new records (with --server).
        #[arg(short, long)]
        follow: bool,
    },
    /// Acknowledge a durable cursor up to SEQ (after processing what `tail
    /// --cursor CURSOR --no-ack` printed up to there).
    Ack { cursor: String, seq: u64 },
    /// Mirror a local directory tree under DEST: directories, regular files
    /// (size, mode, owner, group, modification time) and symbolic links,
    /// with their extended attributes. Hard links become separate files;
    /// devices, sockets and FIFOs are skipped; both are counted. DIR's
    /// contents go under DEST (created if missing); an entry that exists
    /// already fails alone.
    Import(ImportArgs),
    /// Write a subtree to standard output (or -o FILE) as JSON Lines, read
    /// at one state: every entry's kind, attributes, link target and
    /// extended attributes (`treelog load` reads it back).
    Dump(crate::dump::DumpArgs),
    /// Recreate a subtree from a `treelog dump` (a file or - for standard
    /// input) under DEST.
    Load(crate::dump::LoadArgs),
    /// Run the server. Every option is also a config file key (--config)
    /// and an environment variable: TREELOG_ and the option's name in
    /// capitals with `_` for `-` (TREELOG_MAX_CONNECTIONS). A flag wins
    /// over the environment, which wins over the file.
    Serve(Box<ServeArgs>),
    /// Mount the namespace as a FUSE filesystem (file contents are not
    /// stored: files read as zeros, write fails with EOPNOTSUPP).
    Mount(Box<crate::mount_cmd::MountArgs>),
    /// Print a shell completion script (bash, zsh, fish, elvish,
    /// powershell) for `treelog`.
    Completions { shell: clap_complete::Shell },
    /// Print the man page treelog(1), in roff.
    Man,
    /// Build a small tree, print it, show the log and verify the index.
    Demo,
    /// Publish the server's committed change log into a bus, exactly once
    /// and in order (docs/BRIDGE.md). Needs --server.
    Bridge {
        #[command(subcommand)]
        cmd: BridgeCmd,
    },
    /// Operator commands.
    Admin {
        #[command(subcommand)]
        cmd: AdminCmd,
    },
    /// A Raft cluster's administration (docs/CLUSTER.md). Needs --server:
    /// a node started with `serve --node-id`.
    Cluster {
        #[command(subcommand)]
        cmd: ClusterCmd,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum ClusterCmd {
    /// The node's view of the cluster: its state, term, leader, members
    /// and how far behind each is (on the leader), log positions.
    Status,
    /// Make a cluster of this one node (its only voter), with what its log
    /// holds: an existing single node's namespace becomes the cluster's.
    Init,
    /// Add a node as a learner: it receives a snapshot and the log, serves
    /// reads and change streams, does not vote. Waits until it caught up.
    AddLearner {
        node: u64,
        /// Its RPC address, as the other nodes reach it (`host:port` or
        /// `[v6]:port`; a host name is resolved at every connect).
        #[arg(value_parser = parse_host_port)]
        addr: String,
        /// Answer at once instead of when it caught up.
        #[arg(long)]
        no_wait: bool,
    },
    /// Make learners voters.
    Promote {
        #[arg(required = true)]
        nodes: Vec<u64>,
    },
    /// Remove members (voters or learners).
    Remove {
        #[arg(required = true)]
        nodes: Vec<u64>,
    },
    /// Hand leadership to another voter (ask the leader).
    TransferLeader { node: u64 },
    /// Build a snapshot now.
    Snapshot,
}

/// Every option of `serve` (and the global ones it uses) is also a key of
/// its config file and a `TREELOG_*` environment variable (src/config.rs).
#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// Read settings from this TOML file: its keys are the long options
    /// below (`listen = "0.0.0.0:7400"`, `require-tls = true`, ...; see
    /// deploy/treelog.toml). An option given on the command line or in
    /// the environment wins over the file.
    #[arg(long, env = "TREELOG_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the effective settings as TOML, each with where it came from
    /// (flag, env, file; defaults commented out), and exit. Secrets are files: their
    /// paths are printed, never their contents.
    #[arg(long)]
    pub print_config: bool,
    /// Log events on standard error as text or as JSON lines (filter with
    /// RUST_LOG, default `info`; see docs/OPERATIONS.md, Logs).
    #[arg(long, default_value_t = crate::server::LogFormat::Text)]
    pub log_format: crate::server::LogFormat,
    /// RPC address.
    #[arg(long, default_value = "127.0.0.1:7400")]
    pub listen: std::net::SocketAddr,
    /// HTTP address (/metrics, /healthz, /readyz).
    #[arg(long, default_value = "127.0.0.1:7401")]
    pub http: std::net::SocketAddr,
    /// RPC connections at once (lowered, with a warning, to fit the
    /// open-file limit).
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Connections that may be waiting for their handshake at once
    /// (default: a quarter of --max-connections); the oldest is closed to
    /// admit a newer one.
    #[arg(long)]
    pub max_handshaking: Option<usize>,
    #[arg(long, default_value_t = 256)]
    pub max_in_flight: usize,
    /// Bytes of requests one connection may have being answered at once;
    /// past it the server reads no more of its requests until one ends.
    #[arg(long, default_value_t = crate::server::DEFAULT_MAX_IN_FLIGHT_BYTES)]
    pub max_in_flight_bytes: usize,
    /// Seconds a snapshot subscriber may hold its snapshot (which keeps
    /// old versions from compaction) before it is cut off (`Busy`).
    #[arg(long, default_value_t = 3600)]
    pub max_snapshot_age_secs: u64,
    /// Seconds a snapshot subscriber may hold its snapshot without reading
    /// before it is cut off.
    #[arg(long, default_value_t = 120)]
    pub snapshot_stall_secs: u64,
    /// Largest frame a client may send, 65536..=268435456 bytes.
    #[arg(long, default_value_t = crate::protocol::DEFAULT_MAX_FRAME)]
    pub max_frame: usize,
    /// Bytes of replies queued for one connection beyond which the server
    /// stops reading its requests until the client reads.
    #[arg(long, default_value_t = crate::server::DEFAULT_MAX_CONN_BUFFER_BYTES)]
    pub max_conn_buffer_bytes: usize,
    /// HTTP connections at once (more are answered 503).
    #[arg(long, default_value_t = 64)]
    pub max_http_connections: usize,
    /// Seconds an HTTP client has to send a request's headers.
    #[arg(long, default_value_t = 10)]
    pub http_header_timeout_secs: u64,
    /// HTTP connections from one address (an IPv6 /64) at once; past it
    /// probes are still answered, other requests get 503.
    #[arg(long, default_value_t = 16)]
    pub max_http_per_address: usize,
    /// Seconds after which an HTTP connection is closed (after its request
    /// in progress).
    #[arg(long, default_value_t = 300)]
    pub http_connection_age_secs: u64,
    /// Serve --listen on a non-loopback address without a token.
    #[arg(long)]
    pub allow_insecure_listen: bool,
    /// What serve does when its writer stops (a failed log write, fsync or
    /// index write): `exit` drains, closes the store and exits non-zero, for
    /// a service manager to restart it (the restart replays the log); `stay`
    /// keeps serving reads, writes refused and /readyz failing.
    #[arg(long, value_enum, default_value_t = OnWriterFailure::Exit)]
    pub on_writer_failure: OnWriterFailure,
    #[arg(long, default_value_t = 300)]
    pub idle_timeout_secs: u64,
    /// Log retention: keep at most this many records.
    #[arg(long)]
    pub retain_records: Option<u64>,
    /// Log retention: remove records older than this many seconds.
    #[arg(long)]
    pub retain_secs: Option<u64>,
    /// Log retention: keep at most about this many bytes.
    #[arg(long)]
    pub retain_bytes: Option<u64>,
    /// Expire cursors lagging more than this many records.
    #[arg(long)]
    pub max_cursor_lag: Option<u64>,
    /// Scheduling priority of change-stream delivery: `idle` (only CPU
    /// nothing else wants; subscribers never slow writes) or a niceness
    /// 0..19 (subscribers keep a share under full load).
    #[arg(long, default_value = "idle")]
    pub stream_priority: crate::server::DeliveryPriority,
    /// Scheduling policy of the request workers: `normal`, or `batch` (a
    /// woken worker waits for the running thread to block rather than
    /// preempting it, so the commit pipeline finishes its round first;
    /// Linux `SCHED_BATCH`; see docs/OPERATIONS.md).
    #[arg(long, default_value = "normal")]
    pub worker_policy: crate::server::WorkerPolicy,
    /// Most inodes one recursive delete removes (a bigger subtree is
    /// refused with InvalidArgument, to be deleted in parts): its record
    /// holds an event per inode.
    #[arg(long, default_value_t = treelog::DEFAULT_MAX_DELETE_INODES)]
    pub max_delete_inodes: usize,
    /// Most bytes of one command's log record (a recursive delete of many
    /// long paths beyond it is refused with InvalidArgument).
    #[arg(long, default_value_t = treelog::DEFAULT_MAX_RECORD_BYTES)]
    pub max_record_bytes: usize,
    /// Token file (also accepted as the global --token-file): one shared
    /// secret of at least 32 characters, an admin with the node powers
    /// (the single-token cluster; --credentials separates them).
    #[arg(long = "require-token-file")]
    pub token_file: Option<PathBuf>,
    /// The credentials file: a role and a hashed secret per credential
    /// (`admin credential add`; docs/SECURITY.md). Reloaded when it
    /// changes and on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub credentials: Option<PathBuf>,
    /// The secret this node presents to the other nodes of its Raft
    /// cluster (a `peer` credential of theirs); default: the token of
    /// --require-token-file.
    #[arg(long, value_name = "FILE", requires = "node_id")]
    pub peer_token_file: Option<PathBuf>,
    /// A TLS identity (client certificate name) of a node of the cluster:
    /// connections presenting it get node powers. Repeat for each node.
    #[arg(long = "peer-tls-name", value_name = "NAME")]
    pub peer_tls_names: Vec<String>,
    /// Append a JSON line per mutation and per admin, membership or node
    /// operation to this file (`-`: the log's `treelog::audit` target).
    #[arg(long, value_name = "PATH")]
    pub audit_log: Option<crate::server::AuditTarget>,
    /// Check requests with POSIX's permission rules (owners, groups, mode
    /// bits, sticky and setgid directories) as the user they are made for:
    /// the one a `proxy` credential names (a mount), else the user named
    /// after a non-admin credential (docs/SECURITY.md). Needs
    /// --credentials.
    #[arg(long)]
    pub enforce_permissions: bool,
    /// Refuse plaintext RPC connections (needs --tls-cert, --tls-key);
    /// without it the RPC port takes both, each connection's first byte
    /// telling TLS from plaintext.
    #[arg(long)]
    pub require_tls: bool,
    /// Serve the HTTP port over TLS only (same certificate).
    #[arg(long)]
    pub http_tls: bool,
    /// Refuse TLS clients without a certificate signed by --tls-ca
    /// (mutual TLS); without it, a certificate is verified when a client
    /// presents one.
    #[arg(long)]
    pub require_client_cert: bool,
    /// Run as a replica of the server at this RPC address: bootstrap the
    /// data directory from its checkpoint when it holds no database, then
    /// follow its log; writes are refused (NotLeader, naming it). See
    /// docs/REPLICATION.md. `host:port` or `[v6]:port`; a host name is
    /// resolved at every connect.
    #[arg(long, value_name = "ADDR", value_parser = parse_host_port)]
    pub replica_of: Option<String>,
    /// Migrate the data directory to this build's format first if it is of
    /// an older one (as `admin migrate`); without it, such a database is
    /// refused.
    #[arg(long, conflicts_with = "replica_of")]
    pub migrate: bool,
    /// The token file of the server given by --replica-of.
    #[arg(long, requires = "replica_of")]
    pub source_token_file: Option<PathBuf>,
    /// The durable cursor the source keeps at this replica's position, so
    /// that its retention keeps what the replica still needs (within its
    /// --max-cursor-lag). Default: replica-<--listen address> (the host
    /// name standing for 0.0.0.0); two replicas must not share one.
    #[arg(long, requires = "replica_of", value_name = "NAME")]
    pub replica_cursor: Option<String>,
    /// Records behind its source from which a starting replica catches up
    /// before it serves, at replay speed (docs/REPLICATION.md).
    #[arg(long, requires = "replica_of", default_value_t = 100_000)]
    pub replica_catch_up_min: u64,
    /// Most bytes of records per batch from the source.
    #[arg(long, requires = "replica_of", hide = true, default_value_t = 1 << 20)]
    pub replica_batch_bytes: u32,
    /// Run as node N of a Raft cluster (docs/CLUSTER.md): the log is the
    /// Raft log, writes are taken by the leader (others answer NotLeader,
    /// naming it). A new node waits to be added (`treelog cluster
    /// add-learner` on the leader); `treelog cluster init` makes a cluster
    /// of the first one.
    #[arg(long, value_name = "N", conflicts_with = "replica_of")]
    pub node_id: Option<u64>,
    /// The RPC address the other nodes and clients reach this node at
    /// (default: --listen): `host:port` or `[v6]:port`, kept as given in
    /// the membership (a host name is resolved at every connect).
    #[arg(long, value_name = "ADDR", requires = "node_id", value_parser = parse_host_port)]
    pub advertise: Option<String>,
    /// Raft heartbeat interval in ms; a follower starts an election after 3
    /// to 6 times it without one.
    #[arg(long, requires = "node_id", default_value_t = treelog_raft::node::DEFAULT_HEARTBEAT_MS)]
    pub raft_heartbeat_ms: u64,
    /// Build a Raft snapshot after this many entries (0: only when a node
    /// needs one).
    #[arg(long, requires = "node_id", default_value_t = 1_000_000)]
    pub raft_snapshot_every: u64,
    /// Entries Raft keeps in the log behind its last snapshot (durable
    /// cursors may keep more).
    #[arg(long, requires = "node_id", default_value_t = 100_000)]
    pub raft_keep_after_snapshot: u64,
    /// `/readyz` answers 503 while this node has applied more than this
    /// many entries fewer than the cluster committed (and while it knows no
    /// leader).
    #[arg(long, value_name = "ENTRIES", requires = "node_id", default_value_t = treelog_raft::node::DEFAULT_READY_MAX_LAG)]
    pub ready_max_lag: u64,
    /// Run a bridge that publishes this server's committed log into NATS
    /// JetStream at this URL (as `treelog bridge nats`; its metrics join
    /// the server's). See docs/BRIDGE.md.
    #[arg(
        long,
        value_name = "URL",
        requires = "bridge_stream",
        conflicts_with = "replica_of"
    )]
    pub bridge_nats: Option<String>,
    /// The stream of --bridge-nats.
    #[arg(long, value_name = "NAME", requires = "bridge_nats")]
    pub bridge_stream: Option<String>,
    /// The subject of --bridge-nats (default: treelog.<namespace id>.log).
    #[arg(long, value_name = "SUBJECT", requires = "bridge_nats")]
    pub bridge_subject: Option<String>,
    /// Replicas of the stream when the bridge creates it; 0: never create
    /// it.
    #[arg(long, requires = "bridge_nats", default_value_t = 1)]
    pub bridge_stream_replicas: usize,
    /// The secret the --bridge-nats bridge presents to this server: a
    /// `stream` credential of --credentials (default: the shared token).
    #[arg(long, value_name = "FILE", requires = "bridge_nats")]
    pub bridge_token_file: Option<std::path::PathBuf>,
}

/// `getfattr -e`.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub(crate) enum ValueEncoding {
    Text,
    Hex,
}

#[derive(Subcommand, Debug)]
pub(crate) enum QuotaCmd {
    /// Give a directory a quota, or change its limits (a quota without
    /// limits keeps its usage counted for `count`). Sizes take K, M, G, T
    /// (powers of 1024).
    Set {
        #[arg(value_parser = BytesArg)]
        path: ByteString,
        /// Most inodes under the directory (itself not counted).
        #[arg(long, value_parser = parse_size)]
        inodes: Option<u64>,
        /// Most bytes of files under the directory.
        #[arg(long, value_parser = parse_size)]
        bytes: Option<u64>,
    },
    /// Remove a directory's quota (a directory without one is left alone).
    Clear {
        #[arg(value_parser = BytesArg)]
        path: ByteString,
    },
    /// Count a quota's subtree again, entry by entry, and set its usage
    /// to what was found: the repair when `admin verify` reports a quota
    /// whose usage disagrees with its subtree. Logged by the server.
    Recount {
        #[arg(value_parser = BytesArg)]
        path: ByteString,
    },
    /// A directory's quota: limits, usage, what remains.
    Show {
        #[arg(value_parser = BytesArg)]
        path: ByteString,
    },
}

pub(crate) use crate::bridge_args::{BridgeCmd, BridgeNatsArgs, BridgeOpts};

#[derive(Subcommand, Debug)]
pub(crate) enum AdminCmd {
    /// Replay the whole log into a scratch index and compare digests.
    Verify,
    /// Make a CA (unless --out holds one) and node or client certificates
    /// signed by it, as PEM files, for a test or a small deployment
    /// (docs/SECURITY.md).
    Certs(crate::tls::CertsArgs),
    /// Move the database to this build's on-disk format (migrations/):
    /// in place, resumable (a run killed at any moment leaves the old
    /// format intact or a migration the next run finishes), then verified
    /// (exit 12 on a mismatch). Needs the database closed: a server or
    /// other command holding it is refused.
    Migrate {
        /// The format version to reach (this build's).
        #[arg(long, default_value_t = treelog::format::FORMAT_VERSION)]
        to: u64,
        /// Read everything and report what would be written; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Do not replay the log into a scratch index afterwards.
        #[arg(long)]
        no_verify: bool,
        /// No progress bar.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Drop the index and rebuild it from the whole log (crash-safe: an
    /// interrupted rebuild is finished by the next open).
    Rebuild,
    /// Open a database whose write-ahead log is corrupt before its end
    /// (which every other command refuses), keeping the log up to the
    /// corruption and discarding every record after it. Recorded in the
    /// database; `admin info` shows it.
    AcceptWalLoss,
    /// Write a backup of the database, at one committed sequence, into the
    /// new directory DEST: the database's files (copied, with a CRC-32C
    /// each) and a manifest, written last (docs/FORMAT.md, Backups). With
    /// --server, the server takes it while it serves (writes are not
    /// paused) and it is fetched in chunks with a checksum each; an
    /// interrupted fetch is resumed by running the same command again.
    /// Without, of a data directory no server has open.
    Backup {
        /// A directory that does not exist yet (or is empty).
        dest: PathBuf,
        /// Bytes per chunk fetched from a server.
        #[arg(long, hide = true, default_value_t = crate::protocol::MAX_BACKUP_CHUNK)]
        chunk_bytes: u32,
    },
    /// Make the new data directory DATA_DIR from the backup SRC: every file
    /// is checked against the manifest as it is copied, the database is
    /// opened and its sequence and index digest checked, and only then is
    /// DATA_DIR made. A damaged, truncated or missing file is refused
    /// (exit 10), naming it.
    Restore {
        /// The backup directory.
        src: PathBuf,
        /// A directory that does not exist yet (or is empty).
        data_dir: PathBuf,
    },
    /// Print log records and index entries.
    Dump {
        /// Only the log.
        #[arg(long)]
        log: bool,
        /// Only the index.
        #[arg(long)]
        index: bool,
        /// First log sequence to print.
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// Most log records to print.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Print watermarks, format version and writer state.
    Info,
    /// A server's role (leader or replica), its source, its applied and
    /// the leader's committed sequences, and its lag in records and
    /// milliseconds (needs --server).
    Status,
    /// List durable cursors, or drop one.
    Cursors {
        /// Drop this cursor.
        #[arg(long)]
        drop: Option<String>,
    },
    /// Manage the credentials file of `serve --credentials`.
    Credential {
        #[command(subcommand)]
        cmd: CredentialCmd,
    },
    /// Run one retention pass now.
    Retention {
        #[arg(long)]
        max_records: Option<u64>,
        /// Seconds.
        #[arg(long)]
        max_age: Option<u64>,
        #[arg(long)]
        max_bytes: Option<u64>,
        #[arg(long)]
        max_cursor_lag: Option<u64>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum CredentialCmd {
    /// Add a credential: generates its secret, prints it once on standard
    /// output, and writes its name, role and the secret's SHA-256 to FILE
    /// (made if missing, mode 0600). A running server picks it up.
    Add {
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
        #[arg(long)]
        name: String,
        /// admin, write, read, stream, peer or proxy.
        #[arg(long)]
        role: crate::server::Role,
    },
}

/// `treelog ls`. `-h` is `--human-readable`, as in GNU `ls` (help is
/// `--help` only).
#[derive(Args, Debug)]
#[command(disable_help_flag = true)]
pub(crate) struct LsArgs {
    /// Long format: mode, owner, group, size, modification time, name, id.
    #[arg(short, long)]
    pub long: bool,
    /// Recurse into subdirectories.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// With -l: sizes as 1.5K, 23M, 4.0G (powers of 1024, rounded up).
    #[arg(short = 'h', long)]
    pub human_readable: bool,
    /// With -l: how times are shown, in the local time zone (TZ): locale
    /// (`Nov 25 15:52`, `Nov 25  2025` when older than six months; the
    /// default), iso (`11-25 15:52`, `2025-11-25 `), long-iso (`2026-11-25
    /// 15:52`), full-iso (`2026-11-25 15:52:03.120000000 +0100`) or
    /// +FORMAT (strftime; `+OLD<newline>RECENT` for two). --json keeps the
    /// milliseconds.
    #[arg(long, env = "TIME_STYLE", value_name = "STYLE", value_parser = TimeStyle::parse)]
    pub time_style: Option<TimeStyle>,
    /// -l with --time-style=full-iso.
    #[arg(long)]
    pub full_time: bool,
    /// Start after this name (paging).
    #[arg(long)]
    #[arg(value_parser = BytesArg)]
    pub start_after: Option<ByteString>,
    /// At most this many entries (per directory).
    #[arg(long)]
    pub limit: Option<usize>,
    #[arg(default_value = "/")]
    #[arg(value_parser = BytesArg)]
    pub path: ByteString,
    /// Print help.
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

/// `treelog import`.
#[derive(Args, Debug)]
#[command(after_help = "\
Many entries are in flight at once (--jobs), locally and against --server;
use the global --durability none for a bulk load that may be lost with
power. A progress bar (entries and entries/s) is shown on standard error
when it is a terminal. Failures are counted and the first ten printed; the
exit code is then the first failure's (see `treelog --help`).")]
pub(crate) struct ImportArgs {
    /// The local directory whose contents are imported.
    pub dir: PathBuf,
    /// Where in the namespace.
    #[arg(default_value = "/")]
    #[arg(value_parser = BytesArg)]
    pub dest: ByteString,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
    /// Entries in flight at once.
    #[arg(long, default_value_t = 256)]
    pub jobs: usize,
    /// The block size recorded for each file.
    #[arg(long, default_value_t = DEFAULT_BLOCK_SIZE)]
    pub block_size: u64,
    /// Leave extended attributes out (by default every one the caller may
    /// read is imported).
    #[arg(long)]
    pub no_xattrs: bool,
}

/// See `serve --on-writer-failure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OnWriterFailure {
    Exit,
    Stay,
}

/// What `setfattr` was given (see [`Cmd::Setfattr`]).
pub(crate) struct SetfattrArgs<'a> {
    pub name: Option<&'a str>,
    pub value: &'a str,
    pub remove: Option<&'a str>,
    pub flag: crate::types::XattrFlag,
    pub paths: &'a [ByteString],
}

/// A path argument as the bytes the shell passed: a name need not be
/// UTF-8 (POSIX names are bytes).
#[derive(Clone)]
pub(crate) struct BytesArg;

impl clap::builder::TypedValueParser for BytesArg {
    type Value = ByteString;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<ByteString, clap::Error> {
        use std::os::unix::ffi::OsStrExt;
        Ok(value.as_bytes().into())
    }
}
