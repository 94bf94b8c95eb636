//! The suite's report and the targets judged against its own figures.

use super::*;

/// Everything one suite run measured, as `--json-out` writes it.
#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub figures: Vec<Figure>,
    pub ratios: Vec<Ratio>,
    pub scale: Vec<ScalePoint>,
    pub targets: Vec<Target>,
}

/// `system`'s rate over `over`'s in one workload (`create` or a namespace
/// workload's slug), taken side by side: the median of the repetitions'
/// ratios and their range.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Ratio {
    pub workload: String,
    pub callers: usize,
    pub system: String,
    pub over: String,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Ratio {
    pub(super) fn of(workload: &str, callers: usize, system: &str, over: &str, r: &[f64]) -> Ratio {
        let (min, max) = range(r);
        Ratio {
            workload: workload.into(),
            callers,
            system: system.into(),
            over: over.into(),
            median: median(r.to_vec()),
            min,
            max,
        }
    }
}

/// One checkpoint of `--scale`: the figures measured once the namespace
/// held `inodes` inodes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScalePoint {
    pub inodes: u64,
    pub grown_creates_per_sec: f64,
    pub settle_seconds: f64,
    pub creates_per_sec: f64,
    pub stats_per_sec: f64,
    pub rss_mib: f64,
    pub index_bytes_per_inode: f64,
    pub log_bytes_per_record: f64,
    /// Stat latency (one thread, random grown files) right after the
    /// store is opened, its caches empty: p50 and p99 in microseconds.
    pub cold_stat_us: (f64, f64),
    /// The same stats again, the caches now holding them.
    pub warm_stat_us: (f64, f64),
    /// Records per second of a rebuild of the whole index from the log.
    pub replay_records_per_sec: f64,
    /// Seconds from a new replica's start until it serves this state
    /// (its bootstrap from the node, then the records since).
    pub replica_serve_seconds: f64,
}

/// Creates per scale measurement (each checkpoint measures twice).
pub(super) const SCALE_MEASURE: usize = 100_000;

/// One of the targets, judged against this run's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Target {
    pub figure: String,
    pub target: String,
    pub measured: f64,
    pub met: bool,
}

/// The targets this run has figures for: creates at 64 callers against the
/// serialized seed, SQLite and the raw limit (median ratios, for each way
/// of calling treelog), a lone caller against the serialized seed, a
/// 10,000-entry listing against SQLite, stat at depth 6, replay, and the
/// scale checkpoints.
pub fn targets(r: &Report) -> Vec<Target> {
    let mut out = Vec::new();
    let mut at_least = |figure: String, target: &str, min: f64, measured: f64| {
        out.push(Target {
            figure,
            target: format!(">= {target}"),
            measured,
            met: measured >= min,
        })
    };
    for x in r
        .ratios
        .iter()
        .filter(|x| x.workload == "create" && x.callers == 64)
    {
        let min = match x.over.as_str() {
            "seed-serialized" | "sqlite" => 20.0,
            "raw-rocksdb" => 0.5,
            _ => continue,
        };
        at_least(
            format!("creates, 64 callers: {} / {}", x.system, x.over),
            &format!("{min}x"),
            min,
            x.median,
        );
    }
    // A lone caller gets at least the serialized seed's rate.
    for x in r
        .ratios
        .iter()
        .filter(|x| x.workload == "create" && x.callers == 1 && x.over == "seed-serialized")
    {
        at_least(
            format!("creates, 1 caller: {} / {}", x.system, x.over),
            "1x",
            1.0,
            x.median,
        );
    }
    let figure = |name: &str| r.figures.iter().find(|f| f.system == name);
    if let (Some(t), Some(q)) = (figure("treelog-list-10k"), figure("sqlite-list-10k")) {
        at_least(
            "list a 10,000-entry directory: treelog / sqlite".into(),
            "2x",
            2.0,
            t.ops_per_sec / q.ops_per_sec,
        );
    }
    // The server against in-process creates, and its stats against
    // Redis's pipelined GET (`network`).
    let ratio = |a: &str, b: &str| Some(figure(a)?.ops_per_sec / figure(b)?.ops_per_sec);
    for (what, num, den, min) in [
        (
            "creates over 1 connection x 64 / in-process",
            "network-creates-1x64",
            "inproc-creates-64",
            0.8,
        ),
        (
            "creates over 16 connections x 4 / in-process",
            "network-creates-16x4",
            "inproc-creates-64",
            0.7,
        ),
        (
            "stats over 1 connection x 64 / redis-benchmark GET -P 64",
            "network-stats-1x64",
            "redis-benchmark-get-p64",
            0.7,
        ),
        (
            "stats pipelined by 64 / redis-benchmark GET -P 64",
            "network-stats-pipelined-64",
            "redis-benchmark-get-p64",
            0.7,
        ),
    ] {
        if let Some(x) = ratio(num, den) {
            at_least(what.into(), &format!("{min}x"), min, x);
        }
    }
    if let Some(f) = figure("treelog-stat-depth6") {
        at_least(
            "stat by path, depth 6, 2 threads (/s)".into(),
            "1000000",
            1e6,
            f.ops_per_sec,
        );
    }
    if let Some(f) = figure("treelog-replay") {
        at_least("replay (records/s)".into(), "1000000", 1e6, f.ops_per_sec);
    }
    if let (Some(first), Some(last)) = (r.scale.first(), r.scale.last()) {
        if last.inodes > first.inodes {
            let name = |what: &str| {
                format!(
                    "creates at {} / at {} inodes, {what}",
                    last.inodes, first.inodes
                )
            };
            at_least(
                name("as grown"),
                "0.8x",
                0.8,
                last.grown_creates_per_sec / first.grown_creates_per_sec,
            );
            at_least(
                name("settled"),
                "0.8x",
                0.8,
                last.creates_per_sec / first.creates_per_sec,
            );
        }
        out.extend(scale_targets(&r.scale));
    }
    out
}

/// The goals of a namespace grown to 10^8 inodes, for the checkpoints a
/// run reached: creates at the largest against creates at 10^6, index
/// bytes per inode, resident memory and replay rate at the largest.
pub fn scale_targets(points: &[ScalePoint]) -> Vec<Target> {
    let mut out = Vec::new();
    let Some(last) = points.last() else {
        return out;
    };
    let mut push = |figure: String, target: &str, met: bool, measured: f64| {
        out.push(Target {
            figure,
            target: target.into(),
            measured,
            met,
        })
    };
    if let Some(million) = points.iter().find(|p| p.inodes == 1_000_000) {
        if last.inodes > million.inodes {
            let x = last.creates_per_sec / million.creates_per_sec;
            push(
                format!("creates at {} / at 1000000 inodes, settled", last.inodes),
                ">= 0.8x",
                x >= 0.8,
                x,
            );
        }
    }
    let at = last.inodes;
    let b = last.index_bytes_per_inode;
    push(
        format!("index bytes per inode at {at}"),
        "<= 30",
        b <= 30.0,
        b,
    );
    let m = last.rss_mib;
    push(format!("RSS MiB at {at}"), "<= 4096", m <= 4096.0, m);
    let r = last.replay_records_per_sec;
    push(
        format!("replay records/s at {at}"),
        ">= 2000000",
        r >= 2e6,
        r,
    );
    out
}

/// Prints the targets as a closing table.
pub fn print_targets(ts: &[Target]) {
    println!("== targets");
    for t in ts {
        println!(
            "  {:<58} {:>10} {:>12.2}  {}",
            t.figure,
            t.target,
            t.measured,
            if t.met { "met" } else { "MISSED" }
        );
    }
}
