//! `treelog bench stream`: change-stream figures.
//!
//! - writer throughput (durable creates, 64 callers) with 0 and with 100
//!   subscribers attached and consuming (as async tasks on a one-worker
//!   runtime, the way the server runs them);
//! - commit-to-delivery latency with 1 and 100 subscribers at a steady write
//!   load: for each delivered record that was the newest committed one, the
//!   time from the writer publishing it to the subscriber holding it;
//! - catch-up rate of a subscriber starting at sequence 1 on a long log.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::server::{DeliveryPriority, DeliveryRuntime};
use crate::stream::{StartFrom, StreamItem, SubscribeOptions};
use treelog::Durability;
use treelog::{Options, Treelog};

use super::{median, percentile, run_creates, Creator, Figure};

/// Subscribers as tasks on a one-worker tokio runtime, as a server runs
/// them: they share one core instead of 100 threads preempting the writer.
fn spawn_subscribers(
    rt: &tokio::runtime::Handle,
    t: &Arc<Treelog>,
    n: usize,
    stop: &Arc<AtomicBool>,
) -> Result<Vec<tokio::task::JoinHandle<Vec<Duration>>>> {
    let mut hs = Vec::new();
    for _ in 0..n {
        let mut sub = t.subscribe(SubscribeOptions::default())?;
        let t = t.clone();
        let stop = stop.clone();
        hs.push(rt.spawn(async move {
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                // No timer per item: after `stop`, one more commit wakes
                // every subscriber so that it sees the flag.
                match sub.next_async().await {
                    Ok(StreamItem::Record { seq, .. }) => {
                        let (newest, at) = t.watermark().last_published();
                        if newest == seq {
                            lat.push(at.elapsed());
                        }
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            lat
        }));
    }
    Ok(hs)
}

fn join_all(
    rt: &tokio::runtime::Handle,
    hs: Vec<tokio::task::JoinHandle<Vec<Duration>>>,
) -> Vec<Duration> {
    rt.block_on(async {
        let mut out = Vec::new();
        for h in hs {
            out.extend(h.await.unwrap_or_default());
        }
        out
    })
}

pub fn run(
    base: &std::path::Path,
    ops: usize,
    catchup_records: u64,
    priority: DeliveryPriority,
) -> Result<Vec<Figure>> {
    let mut figures = Vec::new();
    // Subscribers run where the server runs them: on the delivery runtime.
    let delivery = DeliveryRuntime::new(priority)?;
    let rt = delivery.handle().clone();
    println!("== writer throughput with subscribers (durable creates, 64 callers, {ops} creates; 3 alternating rounds; delivery priority {priority})");
    super::warm_up(base, ops)?;
    let (mut none, mut hundred) = (Vec::new(), Vec::new());
    for round in 0..3 {
        for subs in super::in_turn(round, [0usize, 100]) {
            let path = base.join(format!("stream-tput-{subs}-{round}"));
            let _ = std::fs::remove_dir_all(&path);
            let t = Arc::new(Treelog::open(&path, Options::default())?);
            let stop = Arc::new(AtomicBool::new(false));
            let hs = spawn_subscribers(&rt, &t, subs, &stop)?;
            let f = run_creates("treelog", t.clone() as Arc<dyn Creator>, 64, ops, 1000, "s")?;
            stop.store(true, Ordering::Relaxed);
            t.mkdir_p("/stop")?;
            join_all(&rt, hs);
            println!(
                "  round {round}, {subs:>3} subscribers: {:>10.0} creates/s",
                f.ops_per_sec
            );
            if subs == 0 {
                none.push(f.ops_per_sec)
            } else {
                hundred.push(f.ops_per_sec)
            }
            drop(t);
            let _ = std::fs::remove_dir_all(&path);
        }
    }
    let (a, b) = (median(none), median(hundred));
    println!(
        "  median: none {a:.0}, 100 subscribers {b:.0}; ratio {:.3}",
        b / a
    );
    for (subs, rate) in [(0, a), (100, b)] {
        figures.push(Figure::rate(
            format!("treelog-creates-{subs}-subscribers"),
            64,
            ops,
            ops as f64 / rate,
        ));
    }

    println!("== commit-to-delivery latency (steady load: 8 callers creating)");
    for subs in [1usize, 100] {
        let path = base.join(format!("stream-lat-{subs}"));
        let _ = std::fs::remove_dir_all(&path);
        let t = Arc::new(Treelog::open(&path, Options::default())?);
        let stop = Arc::new(AtomicBool::new(false));
        let hs = spawn_subscribers(&rt, &t, subs, &stop)?;
        run_creates(
            "treelog",
            t.clone() as Arc<dyn Creator>,
            8,
            ops / 4,
            100,
            "l",
        )?;
        stop.store(true, Ordering::Relaxed);
        t.mkdir_p("/stop")?;
        let mut lat = join_all(&rt, hs);
        lat.sort_unstable();
        let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
        println!(
            "  {subs:>3} subscribers: p50 {p50:>7.0} us  p99 {p99:>7.0} us  ({} samples)",
            lat.len()
        );
        figures.push(Figure {
            system: format!("treelog-delivery-latency-{subs}-subscribers"),
            callers: 8,
            ops: lat.len(),
            seconds: 0.0,
            ops_per_sec: 0.0,
            p50_us: p50,
            p99_us: p99,
        });
        drop(t);
        let _ = std::fs::remove_dir_all(&path);
    }

    println!("== catch-up read rate from sequence 1 ({catchup_records} records)");
    let path = base.join("stream-catchup");
    let _ = std::fs::remove_dir_all(&path);
    let t = Treelog::open(&path, Options::default().durability(Durability::None))?;
    let t0 = Instant::now();
    super::bulk_load(
        &t,
        catchup_records,
        2048,
        |i| treelog::Command::Mkdir {
            path: format!("/c{}/d{i}", i % 1000).into(),
            parents: true,
            mode: 0o755,
            owner: String::new(),
            group: String::new(),
        },
        None,
    )?;
    println!(
        "  (log built in {:.1} s; last seq {})",
        t0.elapsed().as_secs_f64(),
        t.committed_seq()
    );
    let mut sub = t.subscribe(SubscribeOptions {
        from: StartFrom::Seq(1),
        ..Default::default()
    })?;
    let last = t.committed_seq();
    let t0 = Instant::now();
    let mut n = 0u64;
    while sub.position() < last {
        if let Some(StreamItem::Record { .. }) = sub.next_timeout(Duration::from_secs(5))? {
            n += 1;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "  read {n} records in {secs:.2} s: {:.0} records/s",
        n as f64 / secs
    );
    figures.push(Figure::rate("treelog-stream-catchup", 1, n as usize, secs));
    drop(t);
    let _ = std::fs::remove_dir_all(&path);
    Ok(figures)
}
