//! `treelog crash-worker` (hidden): the workload of the kill -9 test.
//!
//! Each thread works in its own directory and prints, line by line and
//! flushed, `BEGIN <op> <paths>` before submitting an operation and
//! `ACK <op> <paths> <seq>` after it was acknowledged. The test kills the
//! process at a random point and checks every acknowledged operation. With
//! `--retain-records`, log retention passes run beside it.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use crate::error::Result;
use crate::namespace::{CreateOptions, Options, Treelog};
use crate::retention::RetentionPolicy;
use crate::writer::Durability;

fn say(line: &str) {
    let stdout = std::io::stdout();
    let mut l = stdout.lock();
    // A closed pipe means the test is gone; nothing useful to do then.
    let _ = writeln!(l, "{line}");
    let _ = l.flush();
}

pub fn run(
    data: &Path,
    threads: usize,
    run: &str,
    durability: Durability,
    retention: RetentionPolicy,
) -> Result<u8> {
    let t = Arc::new(Treelog::open(
        data,
        Options {
            retention,
            ..Options::default().durability(durability)
        },
    )?);
    say(&format!("READY {}", t.committed_seq()));
    let handles: Vec<_> = (0..threads)
        .map(|ti| {
            let t = t.clone();
            let base = format!("/crash/{run}/t{ti}");
            std::thread::spawn(move || -> Result<()> {
                let mut live: Vec<String> = Vec::new();
                for n in 0u64.. {
                    if n % 5 == 4 && !live.is_empty() {
                        let src = live.remove(0);
                        let dst = format!("{base}/r{n}");
                        say(&format!("BEGIN rename {src} {dst}"));
                        let seq = t.rename(&src, &dst, false)?;
                        say(&format!("ACK rename {src} {dst} {seq}"));
                        live.push(dst);
                    } else if n % 7 == 6 && !live.is_empty() {
                        let p = live.remove(0);
                        say(&format!("BEGIN delete {p}"));
                        let seq = t.delete(&p, false)?;
                        say(&format!("ACK delete {p} {seq}"));
                    } else {
                        let p = format!("{base}/f{n}");
                        say(&format!("BEGIN create {p}"));
                        let seq = t.create(
                            &p,
                            CreateOptions {
                                parents: true,
                                ..Default::default()
                            },
                        )?;
                        say(&format!("ACK create {p} {seq}"));
                        live.push(p);
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        if let Ok(Err(e)) = h.join() {
            eprintln!("crash-worker: {e}");
            return Ok(1);
        }
    }
    Ok(0)
}
