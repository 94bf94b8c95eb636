//! Prometheus metrics (`treelog_*`, base units in the names), one struct
//! per owner: the write path ([`WriteMetrics`]), reads ([`ReadMetrics`]),
//! the log's watermarks, retention and cursors ([`LogMetrics`]), change
//! streams ([`StreamMetrics`]) and RocksDB ([`RocksDbMetrics`]). Each
//! registers its own series on the store's [`Registry`], where the
//! server, replicas and Raft register theirs.
//!
//! The write path records one histogram per stage (queue wait, validate,
//! log write + fsync, index apply, end to end) and the group size; every
//! command is counted by kind and outcome. RocksDB properties and process
//! figures are collected on scrape, never on the hot path. Metrics can be
//! turned off (`Options::metrics = false`) to measure their cost.

use prometheus::{exponential_buckets, Histogram, HistogramOpts, Registry};

mod log;
mod read;
mod rocksdb;
mod stream;
mod write;

pub use log::LogMetrics;
pub use read::{ReadMetrics, READ_OPS};
pub use rocksdb::RocksDbMetrics;
pub use stream::StreamMetrics;
pub use write::{GroupStages, WriteMetrics};

fn hist(name: &str, help: &str, buckets: Vec<f64>) -> prometheus::Result<Histogram> {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
}

/// Buckets from 5 µs to ~1.3 s: fsyncs are ~75 µs here, slow disks take ms.
pub fn latency_buckets() -> Vec<f64> {
    exponential_buckets(5e-6, 2.0, 19).unwrap_or_default()
}

/// Registers `c` on `r`, returning it.
fn registered<C: prometheus::core::Collector + Clone + 'static>(
    r: &Registry,
    c: C,
) -> prometheus::Result<C> {
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

/// A store's metrics: the registry and its owners' series.
pub struct Metrics {
    registry: Registry,
    pub(crate) write: WriteMetrics,
    pub(crate) read: ReadMetrics,
    pub(crate) log: LogMetrics,
    stream: StreamMetrics,
    pub(crate) rocksdb: RocksDbMetrics,
}

impl Metrics {
    pub fn new() -> prometheus::Result<Metrics> {
        let r = Registry::new();
        #[cfg(target_os = "linux")]
        r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(Metrics {
            write: WriteMetrics::new(&r)?,
            read: ReadMetrics::new(&r)?,
            log: LogMetrics::new(&r)?,
            stream: StreamMetrics::new(&r)?,
            rocksdb: RocksDbMetrics::new(&r)?,
            registry: r,
        })
    }

    /// The registry every series of this store is on; the server, replicas
    /// and Raft register theirs here too.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The write path's series: the writer's groups and stages.
    pub fn writes(&self) -> &WriteMetrics {
        &self.write
    }

    /// Reads and their latencies, for those who serve them.
    pub fn reads(&self) -> &ReadMetrics {
        &self.read
    }

    /// Change-stream deliveries, for those who deliver them.
    pub fn streams(&self) -> &StreamMetrics {
        &self.stream
    }

    /// Prometheus text exposition of everything on the registry.
    pub fn render(&self) -> String {
        use prometheus::Encoder;
        let mut buf = Vec::new();
        let enc = prometheus::TextEncoder::new();
        if enc.encode(&self.registry.gather(), &mut buf).is_err() {
            return String::new();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}
