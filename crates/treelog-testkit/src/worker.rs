//! The crash worker: the workload of the kill tests, run in a child
//! process that is this very test binary (see [`entry`]), so that the
//! production `treelog` binary carries no test-only subcommand; and the
//! test's side of it ([`Worker`]), with what its output implies about the
//! store ([`Expect`]).
//!
//! Each thread works in its own directory and prints, line by line and
//! flushed, `BEGIN <op> <paths>` before submitting an operation and
//! `ACK <op> <paths> <seq>` after it was acknowledged. The test kills the
//! process at a random point and checks every acknowledged operation. With
//! `--retain-records`, log retention passes run beside it.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command as Process, Stdio};
use std::sync::Arc;
use std::time::Duration;

use treelog_proto::types::{DEFAULT_BLOCK_SIZE, DEFAULT_FILE_MODE};
use treelog_proto::Command;

/// The environment variable that turns a test binary into a worker: the
/// worker's arguments, separated by `\x1f`.
pub const ENV: &str = "TREELOG_CRASH_WORKER";

/// The test a binary runs as a worker (`--exact`, `--ignored`). Every
/// test file that spawns workers defines it, opening the engine as the
/// task asks:
///
/// ```ignore
/// #[test]
/// #[ignore = "the crash worker's process entry: the kill tests run it"]
/// fn crash_worker_process() {
///     treelog_testkit::worker::entry(|task| {
///         let retention = RetentionPolicy {
///             max_records: task.retain_records,
///             interval: task.retention_interval,
///             ..Default::default()
///         };
///         let t = Treelog::open(&task.data, Options { retention, ..Default::default() })?;
///         Ok((t.committed_seq(), move |cmd: Command| t.submit(cmd)))
///     });
/// }
/// ```
pub const ENTRY_TEST: &str = "crash_worker_process";

/// What the test asked of a worker ([`Worker::spawn`]'s arguments).
#[derive(Debug)]
pub struct Task {
    /// The store's directory.
    pub data: PathBuf,
    /// How many threads write.
    pub threads: usize,
    /// Names this run's directories (`/crash/<run>/t<thread>`).
    pub run: String,
    /// `--retain-records`: log retention keeps at most this many records.
    pub retain_records: Option<u64>,
    /// How often retention passes run when `retain_records` is set
    /// (`--retention-interval-ms`, 10 ms unless given); `None` otherwise.
    pub retention_interval: Option<Duration>,
}

impl Task {
    /// The task [`ENV`] describes, if it is set.
    fn from_env() -> Option<Task> {
        let args = std::env::var(ENV).ok()?;
        let args: Vec<&str> = args.split('\x1f').collect();
        let [data, threads, run, rest @ ..] = args.as_slice() else {
            panic!("{ENV}: expected data, threads, run");
        };
        let mut retain_records = None;
        let mut interval_ms = 10;
        let mut it = rest.iter();
        while let Some(flag) = it.next() {
            let value = it.next().and_then(|v| v.parse::<u64>().ok());
            match (*flag, value) {
                ("--retain-records", Some(n)) => retain_records = Some(n),
                ("--retention-interval-ms", Some(ms)) => interval_ms = ms,
                _ => panic!("{ENV}: unknown worker argument {flag}"),
            }
        }
        Some(Task {
            data: PathBuf::from(data),
            threads: threads.parse().expect("threads"),
            run: run.to_string(),
            retain_records,
            retention_interval: retain_records.map(|_| Duration::from_millis(interval_ms)),
        })
    }
}

/// Runs the worker described by [`ENV`] and exits the process with its
/// status (never returns); without [`ENV`] the test does nothing.
///
/// `open` opens the store at `task.data` as `task` asks and returns its
/// committed sequence and how to submit a command (the engine's
/// `Treelog::submit`: the sequence of the record that acknowledged it).
/// The workload needs nothing else of the engine, so that this crate
/// does not depend on it.
pub fn entry<S, E>(open: impl FnOnce(&Task) -> Result<(u64, S), E>)
where
    S: Fn(Command) -> Result<u64, E> + Send + Sync + 'static,
    E: Display + Send + 'static,
{
    let Some(task) = Task::from_env() else {
        return;
    };
    let code = match open(&task) {
        Ok((committed, submit)) => run_workload(&task, committed, submit),
        Err(e) => {
            eprintln!("crash worker: {e}");
            2
        }
    };
    std::process::exit(code);
}

fn say(line: &str) {
    let stdout = std::io::stdout();
    let mut l = stdout.lock();
    // A closed pipe means the test is gone; nothing useful to do then.
    let _ = writeln!(l, "{line}");
    let _ = l.flush();
}

/// Writes from `task.threads` threads until killed (or an error: 1).
fn run_workload<S, E>(task: &Task, committed: u64, submit: S) -> i32
where
    S: Fn(Command) -> Result<u64, E> + Send + Sync + 'static,
    E: Display + Send + 'static,
{
    let submit = Arc::new(submit);
    say(&format!("READY {committed}"));
    let handles: Vec<_> = (0..task.threads)
        .map(|ti| {
            let submit = submit.clone();
            let base = format!("/crash/{}/t{ti}", task.run);
            std::thread::spawn(move || -> Result<(), E> {
                let mut live: Vec<String> = Vec::new();
                for n in 0u64.. {
                    if n % 5 == 4 && !live.is_empty() {
                        let src = live.remove(0);
                        let dst = format!("{base}/r{n}");
                        say(&format!("BEGIN rename {src} {dst}"));
                        let seq = submit(Command::Rename {
                            src: src.clone().into(),
                            dst: dst.clone().into(),
                            overwrite: false,
                        })?;
                        say(&format!("ACK rename {src} {dst} {seq}"));
                        live.push(dst);
                    } else if n % 7 == 6 && !live.is_empty() {
                        let p = live.remove(0);
                        say(&format!("BEGIN delete {p}"));
                        let seq = submit(Command::Delete {
                            path: p.clone().into(),
                            recursive: false,
                        })?;
                        say(&format!("ACK delete {p} {seq}"));
                    } else {
                        let p = format!("{base}/f{n}");
                        say(&format!("BEGIN create {p}"));
                        // A file as `CreateOptions { parents: true, .. }` makes it.
                        let seq = submit(Command::Create {
                            path: p.clone().into(),
                            parents: true,
                            mode: DEFAULT_FILE_MODE,
                            owner: String::new(),
                            group: String::new(),
                            block_size: DEFAULT_BLOCK_SIZE,
                        })?;
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
            return 1;
        }
    }
    0
}

/// What the worker's output says the store must hold.
#[derive(Debug, Default)]
pub struct Expect {
    /// path -> must exist (true) / must not exist (false), with the
    /// sequence of the record that decided it
    pub paths: BTreeMap<String, (bool, u64)>,
    /// operations that began but were not acknowledged: all-or-nothing
    pub uncertain: Vec<Vec<String>>,
    /// operations in flight, by worker thread
    in_flight: BTreeMap<String, Vec<String>>,
    pub acks: usize,
}

impl Expect {
    /// Takes one line of the worker's output.
    pub fn line(&mut self, line: &str) {
        let parts: Vec<&str> = line.split(' ').collect();
        let thread_of = |p: &str| {
            p.rsplit_once('/')
                .map(|(d, _)| d.to_owned())
                .unwrap_or_default()
        };
        let seq = |s: &str| s.parse::<u64>().expect("sequence");
        match parts.as_slice() {
            ["BEGIN", "create", p] | ["BEGIN", "delete", p] => {
                self.in_flight
                    .insert(thread_of(p), vec![parts[1].into(), p.to_string()]);
            }
            ["BEGIN", "rename", s, d] => {
                self.in_flight.insert(
                    thread_of(s),
                    vec!["rename".into(), s.to_string(), d.to_string()],
                );
            }
            ["ACK", "create", p, n] => {
                self.in_flight.remove(&thread_of(p));
                self.paths.insert(p.to_string(), (true, seq(n)));
                self.acks += 1;
            }
            ["ACK", "delete", p, n] => {
                self.in_flight.remove(&thread_of(p));
                self.paths.insert(p.to_string(), (false, seq(n)));
                self.acks += 1;
            }
            ["ACK", "rename", s, d, n] => {
                self.in_flight.remove(&thread_of(s));
                self.paths.insert(s.to_string(), (false, seq(n)));
                self.paths.insert(d.to_string(), (true, seq(n)));
                self.acks += 1;
            }
            ["READY", _] => {}
            _ => panic!("unexpected worker output {line:?}"),
        }
    }

    /// After the worker died: what was in flight stays uncertain.
    pub fn worker_died(&mut self) {
        let f = std::mem::take(&mut self.in_flight);
        self.uncertain.extend(f.into_values());
    }

    fn uncertain_paths(&self) -> Vec<String> {
        self.uncertain
            .iter()
            .flat_map(|u| u[1..].to_vec())
            .collect()
    }

    /// Every acknowledged operation decided by a record at or below
    /// `upto` is in the store whose paths `exists` looks up (a reopened
    /// `Treelog`'s `stat`); with the whole log (`upto` = `u64::MAX`),
    /// every in-flight rename is all-or-nothing.
    pub fn check(&self, exists: impl Fn(&str) -> bool, upto: u64, what: &str) {
        let uncertain = self.uncertain_paths();
        for (p, (must_exist, seq)) in &self.paths {
            if uncertain.contains(p) || *seq > upto {
                continue;
            }
            let exists = exists(p);
            assert_eq!(
                exists, *must_exist,
                "{what}: {p} (acknowledged at {seq}) exists={exists}"
            );
        }
        // With records lost after `upto`, the in-flight operations (all
        // after it) are simply absent.
        for u in self.uncertain.iter().filter(|_| upto == u64::MAX) {
            if u[0] == "rename" {
                let (s, d) = (exists(&u[1]), exists(&u[2]));
                assert!(
                    s ^ d,
                    "{what}: in-flight rename {} -> {} half-applied (src {s}, dst {d})",
                    u[1],
                    u[2]
                );
            }
        }
    }
}

/// A running crash worker (see [`entry`]).
pub struct Worker {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Worker {
    pub fn spawn(data: &Path, threads: usize, run: &str, extra: &[&str]) -> Worker {
        Self::spawn_env(data, threads, run, extra, &[])
    }

    /// With extra environment variables (e.g. `FAILPOINTS`).
    pub fn spawn_env(
        data: &Path,
        threads: usize,
        run: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Worker {
        let mut args = vec![
            data.to_str().unwrap().to_owned(),
            threads.to_string(),
            run.into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut child = Process::new(std::env::current_exe().unwrap())
            .args([ENTRY_TEST, "--exact", "--ignored", "--nocapture"])
            .args(["--test-threads", "1", "-q"])
            .env(ENV, args.join("\x1f"))
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn worker");
        let out = BufReader::new(child.stdout.take().unwrap());
        Worker { child, out }
    }

    /// Feeds `e` the worker's lines until `acks` more acknowledgements,
    /// then kills it with SIGKILL and feeds it what it had written.
    pub fn kill_after(mut self, e: &mut Expect, acks: usize) {
        let until = e.acks + acks;
        let mut line = String::new();
        while e.acks < until {
            line.clear();
            if self.out.read_line(&mut line).unwrap() == 0 {
                panic!("worker exited early");
            }
            if is_worker_line(&line) {
                e.line(line.trim_end());
            }
        }
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        // Lines written before the kill are acknowledgements too.
        for l in self.out.lines() {
            let l = l.unwrap();
            // A line cut by the kill is incomplete; ignore it.
            if is_worker_line(&l)
                && l.ends_with(|c: char| c.is_ascii_digit())
                && l.split(' ').count() >= 3
            {
                e.line(&l);
            }
        }
        e.worker_died();
    }

    /// Feeds `e` the worker's lines until it exits by itself (a crash
    /// point); returns how it ended.
    pub fn until_exit(mut self, e: &mut Expect) -> std::process::ExitStatus {
        let mut line = String::new();
        loop {
            line.clear();
            if self.out.read_line(&mut line).unwrap() == 0 {
                break;
            }
            let l = line.trim_end();
            if line.ends_with('\n') && is_worker_line(l) {
                e.line(l);
            }
        }
        e.worker_died();
        self.child.wait().unwrap()
    }
}

/// Whether a line of the worker's stdout is the worker's own (the test
/// harness running it prints a few lines of its own).
fn is_worker_line(l: &str) -> bool {
    ["BEGIN ", "ACK ", "READY "]
        .iter()
        .any(|p| l.starts_with(p))
}
