//! The crash worker: the workload of the kill tests, run in a child
//! process that is this very test binary (see [`entry`]), so that the
//! production `treelog` binary carries no test-only subcommand.
//!
//! Each thread works in its own directory and prints, line by line and
//! flushed, `BEGIN <op> <paths>` before submitting an operation and
//! `ACK <op> <paths> <seq>` after it was acknowledged. The test kills the
//! process at a random point and checks every acknowledged operation. With
//! `--retain-records`, log retention passes run beside it.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use treelog::retention::RetentionPolicy;
use treelog::{CreateOptions, Options, Result, Treelog};

/// The environment variable that turns a test binary into a worker: the
/// worker's arguments, separated by `\x1f`.
pub const ENV: &str = "TREELOG_CRASH_WORKER";

/// The test a binary runs as a worker (`--exact`, `--ignored`). Every
/// test file that spawns workers defines it:
///
/// ```ignore
/// #[test]
/// #[ignore = "the crash worker's process entry: the kill tests run it"]
/// fn crash_worker_process() {
///     common::worker::entry();
/// }
/// ```
pub const ENTRY_TEST: &str = "crash_worker_process";

/// Runs the worker described by [`ENV`] and exits the process with its
/// status (never returns); without [`ENV`] the test does nothing.
pub fn entry() {
    let Ok(args) = std::env::var(ENV) else {
        return;
    };
    let args: Vec<&str> = args.split('\x1f').collect();
    let [data, threads, run, rest @ ..] = args.as_slice() else {
        panic!("{ENV}: expected data, threads, run");
    };
    let mut retention = RetentionPolicy::default();
    let mut interval_ms = 10;
    let mut it = rest.iter();
    while let Some(flag) = it.next() {
        let value = it.next().and_then(|v| v.parse::<u64>().ok());
        match (*flag, value) {
            ("--retain-records", Some(n)) => retention.max_records = Some(n),
            ("--retention-interval-ms", Some(ms)) => interval_ms = ms,
            _ => panic!("{ENV}: unknown worker argument {flag}"),
        }
    }
    if retention.max_records.is_some() {
        retention.interval = Some(std::time::Duration::from_millis(interval_ms));
    }
    let code = match run_workload(
        Path::new(data),
        threads.parse().expect("threads"),
        run,
        retention,
    ) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("crash worker: {e}");
            2
        }
    };
    std::process::exit(code.into());
}

fn say(line: &str) {
    let stdout = std::io::stdout();
    let mut l = stdout.lock();
    // A closed pipe means the test is gone; nothing useful to do then.
    let _ = writeln!(l, "{line}");
    let _ = l.flush();
}

fn run_workload(data: &Path, threads: usize, run: &str, retention: RetentionPolicy) -> Result<u8> {
    let t = Arc::new(Treelog::open(
        data,
        Options {
            retention,
            ..Options::default()
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
            eprintln!("crash worker: {e}");
            return Ok(1);
        }
    }
    Ok(0)
}
