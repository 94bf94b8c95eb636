//! How to open a [`Treelog`](crate::Treelog), and the options of its
//! commands.

use std::time::Duration;

use crate::commit::{Durability, WriterConfig};
use crate::replication::NodeRole;
use crate::retention::RetentionPolicy;
use crate::store::StoreOptions;
use crate::types::{DEFAULT_BLOCK_SIZE, DEFAULT_DIR_MODE, DEFAULT_FILE_MODE};

/// How to open a [`Treelog`](crate::Treelog).
#[derive(Debug, Clone)]
pub struct Options {
    pub store: StoreOptions,
    pub writer: WriterConfig,
    /// Capacity of the bounded command queue in front of the writer.
    pub queue_capacity: usize,
    /// Log retention; passes run in the background every
    /// `retention.interval` (default 10 s) when any bound is set.
    pub retention: RetentionPolicy,
    /// Recent records kept decoded in memory for caught-up subscribers.
    pub tail_cache_records: usize,
    /// Collect Prometheus metrics (see [`crate::metrics`]).
    pub metrics: bool,
    /// Subscribers and watermark waiters are woken by a notifier thread at
    /// most once per this interval (zero: the writer wakes them directly on
    /// every group).
    pub wake_interval: Duration,
    /// Index entries (inodes and edges) kept in memory for readers (see
    /// [`crate::read::reader_cache`]); about 130 bytes each. Zero disables it.
    pub read_cache_entries: usize,
    /// What kind of node the store is: standalone (the default), a
    /// replica of a source, or a node of a consensus cluster (see
    /// [`crate::replication`]).
    pub role: NodeRole,
    /// How long a read at `ReadAt::AtLeast(seq)` waits for this node to
    /// commit `seq` before it fails (`Lagging` on a replica).
    pub min_seq_wait: Duration,
    /// Most inodes a content summary ([`Treelog::count`](crate::Treelog::count)) reads where no
    /// quota keeps the usage (`InvalidArgument` beyond).
    pub max_count_inodes: usize,
    /// Migrate a database of an older format version before opening it,
    /// as `treelog admin migrate` does ([`crate::migrate`]); without it,
    /// such a database is refused.
    pub migrate: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            store: StoreOptions::default(),
            writer: WriterConfig::default(),
            queue_capacity: 4096,
            retention: RetentionPolicy::default(),
            tail_cache_records: 8192,
            metrics: true,
            wake_interval: Duration::from_micros(500),
            read_cache_entries: 1 << 19,
            role: NodeRole::Standalone,
            min_seq_wait: Duration::from_secs(5),
            max_count_inodes: DEFAULT_MAX_COUNT_INODES,
            migrate: false,
        }
    }
}

/// The default of [`Options::max_count_inodes`].
pub const DEFAULT_MAX_COUNT_INODES: usize = 1_000_000;

impl Options {
    pub fn durability(mut self, d: Durability) -> Self {
        self.writer.durability = d;
        self
    }
}

/// What happened while opening.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct OpenReport {
    /// Records replayed into the index.
    pub replayed: u64,
    pub applied_seq: u64,
    pub log_start: u64,
}

/// Options of a directory creation.
#[derive(Debug, Clone)]
pub struct MkdirOptions {
    pub parents: bool,
    pub mode: u32,
    pub owner: String,
    pub group: String,
}

impl Default for MkdirOptions {
    fn default() -> Self {
        MkdirOptions {
            parents: false,
            mode: DEFAULT_DIR_MODE,
            owner: String::new(),
            group: String::new(),
        }
    }
}

/// Options of a file creation.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    pub parents: bool,
    pub mode: u32,
    pub owner: String,
    pub group: String,
    pub block_size: u64,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            parents: false,
            mode: DEFAULT_FILE_MODE,
            owner: String::new(),
            group: String::new(),
            block_size: DEFAULT_BLOCK_SIZE,
        }
    }
}

/// Attribute changes; `None` leaves a field as it is.
#[derive(Debug, Clone, Default)]
pub struct SetAttrs {
    pub mode: Option<u32>,
    pub owner: Option<String>,
    pub group: Option<String>,
    pub mtime_ms: Option<u64>,
}
