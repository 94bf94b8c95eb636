//! `treelog-bench`'s command line: one subcommand per benchmark.

use clap::{Args, Subcommand};

use crate::mdtest;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub cmd: BenchCmd,
}

#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// Durable creates per second, treelog vs the seeds' design.
    Create {
        /// Concurrent callers, comma separated.
        #[arg(long, default_value = "1,8,64", value_delimiter = ',')]
        callers: Vec<usize>,
        /// Creates per system and caller count.
        #[arg(long, default_value_t = 20_000)]
        ops: usize,
        /// Directories the files are spread over.
        #[arg(long, default_value_t = 1000)]
        dirs: usize,
        /// Systems to run, comma separated. `treelog` is driven by caller
        /// threads, `treelog-async` by tokio tasks (as the server drives it).
        #[arg(
            long,
            default_value = "treelog,treelog-async,seed-serialized,seed-unserialized",
            value_delimiter = ','
        )]
        systems: Vec<String>,
        /// Where to put the scratch databases (default: a temp directory).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
        /// Also write the results as JSON to this file.
        #[arg(long)]
        json_out: Option<std::path::PathBuf>,
    },
    /// treelog beside the seeds' design, the raw RocksDB limit and SQLite:
    /// creates, replay, then mkdir, rename, delete, stat at depth 6, list
    /// and a mixed load on treelog, seed-serialized and SQLite (see
    /// docs/BENCHMARKS.md).
    Suite {
        /// Creates per create run of treelog and the raw limit, and write
        /// operations per namespace workload on treelog (the systems that
        /// sync once per operation run at most 5,000).
        #[arg(long, default_value_t = 20_000)]
        ops: usize,
        /// Caller counts of the create comparison, comma separated.
        #[arg(long, default_value = "1,8,64", value_delimiter = ',')]
        callers: Vec<usize>,
        /// Create runs per system and caller count, alternating the order
        /// of the systems; medians are reported.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Records in the replay log.
        #[arg(long, default_value_t = 1_000_000)]
        replay_records: u64,
        /// Creates per round of the change-stream throughput figure (as
        /// `bench stream --ops`); 0 leaves the change-stream figures out.
        #[arg(long, default_value_t = 100_000)]
        stream_ops: usize,
        /// Records in the change stream's catch-up log.
        #[arg(long, default_value_t = 1_000_000)]
        catchup_records: u64,
        /// Also grow a namespace to this many inodes and report rates at
        /// 100k, 1M and 10M (long; not run in CI).
        #[arg(long)]
        scale: Option<u64>,
        /// Creates per run of the network comparison (as `bench network
        /// --ops`: the server over loopback against in-process, and Redis
        /// when it is on PATH); 0 leaves it out.
        #[arg(long, default_value_t = 60_000)]
        network_ops: usize,
        /// Also write the figures, ratios, scale points and targets as
        /// JSON to this file.
        #[arg(long)]
        json_out: Option<std::path::PathBuf>,
        /// Where to put the scratch databases (default: a temp directory).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// The FUSE mount: visibility lag of another client's changes under
    /// load, and mdtest-shaped create/stat/remove beside tmpfs (needs
    /// /dev/fuse and fusermount3; docs/MOUNT.md).
    Mount {
        /// Lag samples of each kind (chmod, rename).
        #[arg(long, default_value_t = 200)]
        samples: usize,
        /// mdtest's processes (threads here).
        #[arg(long, default_value_t = 4)]
        procs: usize,
        /// Files per process.
        #[arg(long, default_value_t = 2_000)]
        files: usize,
        /// Where to put the scratch database and mount point.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Durable creates through a three-node Raft cluster on loopback
    /// beside a single node, in one run (docs/CLUSTER.md).
    Cluster {
        /// Creates per run.
        #[arg(long, default_value_t = 60_000)]
        ops: usize,
        /// Rounds, alternating which goes first; medians are reported.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Where to put the scratch databases (default: a temp directory).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
        /// Run the nodes as `treelog serve` processes and report each
        /// one's CPU per create, the followers' batches, and a projection
        /// for three machines.
        #[arg(long)]
        processes: bool,
        /// The `treelog` binary of `--processes` (default: the one beside
        /// this executable).
        #[arg(long, env = "TREELOG_BIN")]
        treelog_bin: Option<std::path::PathBuf>,
    },
    /// One namespace grown to `--inodes` (long; by hand, not CI): at
    /// 100k, 1M, 10M and 100M, creates/s, stats, bytes per inode, RSS,
    /// replay and a new replica's time to serve (docs/BENCHMARKS.md
    /// "Scale").
    Scale {
        /// Inodes to grow the namespace to.
        #[arg(long, default_value_t = 100_000_000)]
        inodes: u64,
        /// Also write the scale points and targets as JSON to this file.
        #[arg(long)]
        json_out: Option<std::path::PathBuf>,
        /// Where to put the scratch databases (default: a temp directory).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Replay alone: a log built, then the index rebuilt from it
    /// `--rounds` times (docs/BENCHMARKS.md "Replay").
    Replay {
        /// Records in the log.
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        /// What the log records.
        #[arg(long, value_enum, default_value = "mkdirs")]
        log: crate::replay::ReplayLog,
        /// Rebuilds of the index from the log.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Keep the database in this directory (for a profiler's
        /// `treelog admin rebuild --data DIR/replay`).
        #[arg(long)]
        keep: Option<std::path::PathBuf>,
    },
    /// The server over loopback beside in-process figures.
    Network {
        /// Creates per run.
        #[arg(long, default_value_t = 40_000)]
        ops: usize,
        /// Where to put the scratch databases (default: a temp directory).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
        /// Also run creates and pipelined stats over one TLS connection,
        /// beside the plaintext one.
        #[arg(long)]
        tls: bool,
    },
    /// The server's request path in its own process beside Redis's:
    /// pipelined stats (and the CPU each side spends on one), stats
    /// through the Rust client, creates over one connection beside in
    /// process (docs/BENCHMARKS.md, "The request path").
    Pipeline(crate::pipeline::PipelineArgs),
    /// A backup of a large namespace: its time and size, the creates per
    /// second of writers during it beside right after it, and the restore.
    Backup {
        /// Inodes in the namespace backed up.
        #[arg(long, default_value_t = 1_000_000)]
        inodes: u64,
        /// Writer threads (one synced create at a time each).
        #[arg(long, default_value_t = 8)]
        callers: usize,
        /// Where to put the scratch databases (default: a temp directory).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Durable creates at full speed without and with a bridge publishing
    /// the log into NATS JetStream (a nats-server this starts): the
    /// writers' rate both ways, records published per second, lag and
    /// commit-to-ack latency.
    Bridge {
        /// Writer threads (one synced create at a time each).
        #[arg(long, default_value_t = 64)]
        callers: usize,
        /// Seconds per run.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Runs each way, alternating.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// The nats-server binary.
        #[arg(long, env = "TREELOG_NATS_SERVER", default_value = "nats-server")]
        nats_server: std::path::PathBuf,
        /// JetStream with `sync_interval: always` (an fsync per message).
        #[arg(long)]
        sync_always: bool,
        /// Run nats-server at this niceness (19: it gets only the CPU the
        /// writers leave, as if it ran on another machine).
        #[arg(long, default_value_t = 0)]
        nats_nice: i32,
        /// The server's --stream-priority: `idle` (subscribers, the
        /// bridge's among them, get only the CPU the writers leave) or a
        /// niceness 0..19.
        #[arg(long, default_value = "idle")]
        stream_priority: crate::server::DeliveryPriority,
        /// Where to put the scratch databases (default: a temp directory).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// A replica of a large namespace: its bootstrap, its lag while
    /// writers run the leader at full speed, and its catch-up rate.
    Replica {
        /// Inodes in the leader's namespace.
        #[arg(long, default_value_t = 1_000_000)]
        inodes: u64,
        /// Writer threads on the leader (one synced create at a time each).
        #[arg(long, default_value_t = 64)]
        callers: usize,
        /// Seconds the lag is sampled.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Records the replica is behind when it starts again.
        #[arg(long, default_value_t = 1_000_000)]
        behind: u64,
        /// Where to put the scratch databases (default: a temp directory).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Create throughput with metrics on and off, side by side.
    Metrics {
        /// Creates per round.
        #[arg(long, default_value_t = 40_000)]
        ops: usize,
        /// Alternating rounds per setting.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Where to put the scratch databases (default: a temp directory).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Durable creates into directories under a quota beside the same
    /// creates without one (format 2's counters on every create).
    Quota {
        /// Creates per run.
        #[arg(long, default_value_t = 20_000)]
        ops: usize,
        /// Concurrent callers, comma separated.
        #[arg(long, default_value = "1,8,64", value_delimiter = ',')]
        callers: Vec<usize>,
        /// Alternating rounds per setting.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Where to put the scratch databases (default: a temp directory).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Writes a format-1 database (as format-1 code did: schema-1 records
    /// and their index) for `treelog admin migrate` to be measured on:
    /// DIRS directories of FILES files.
    Format1 {
        /// The new database's directory (must not hold one).
        out: std::path::PathBuf,
        #[arg(long, default_value_t = 10_000)]
        dirs: u64,
        #[arg(long, default_value_t = 1_000)]
        files: u64,
        /// Distinct owners (at most 255, format 1's limit).
        #[arg(long, default_value_t = 200)]
        owners: u8,
        #[arg(long, default_value_t = 50)]
        groups: u8,
    },
    /// Change-stream figures: throughput with subscribers, delivery
    /// latency, catch-up rate.
    Stream {
        /// Creates per throughput round (rounds under a second are noise).
        #[arg(long, default_value_t = 100_000)]
        ops: usize,
        /// Records in the catch-up log.
        #[arg(long, default_value_t = 1_000_000)]
        catchup_records: u64,
        /// Priority of the delivery thread, as `treelog serve
        /// --stream-priority`.
        #[arg(long, default_value = "idle")]
        stream_priority: crate::server::DeliveryPriority,
        /// Where to put the scratch databases (default: a temp directory).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// mdtest's phases over the network by client processes, against a
    /// single node, a 3-node cluster and Redis with JuiceFS's layout, in
    /// one run (docs/BENCHMARKS.md, "mdtest over the network").
    Mdtest(crate::mdtest_net::MdtestArgs),
    /// One client process of `mdtest` (started by it).
    #[command(hide = true)]
    MdtestWorker {
        /// The backends, as JSON.
        #[arg(long)]
        targets: String,
    },
    /// mdtest's phases through the kernel on directories of any file
    /// system (a `treelog mount`, tmpfs, ext4), side by side.
    MdtestFs {
        /// LABEL=DIR, one per target (each an existing directory).
        #[arg(long = "target", required = true, value_parser = mdtest::parse_target)]
        targets: Vec<(String, std::path::PathBuf)>,
        /// Concurrent tasks.
        #[arg(long, default_value_t = 2)]
        tasks: usize,
        /// Items (directories, then files) per task and phase.
        #[arg(long, default_value_t = 2000)]
        items: usize,
        #[arg(long, default_value_t = 3)]
        iterations: usize,
        /// All tasks in one shared directory (mdtest "hard") instead of a
        /// directory each ("easy", `mdtest -u`).
        #[arg(long)]
        shared: bool,
    },
}
