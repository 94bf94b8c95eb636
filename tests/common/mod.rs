//! Helpers shared by the tests of every crate of the workspace (included
//! with `#[path]` from the crates' own `tests/`): the crash worker that is
//! killed (a child process running this test binary), its output protocol
//! and what it implies about the store, seeded randomness, and the rounds
//! of kill loops; and, by concern, a real server in the process
//! ([`server`]), its RPC port byte by byte ([`wire`]), its HTTP port
//! ([`http`]), commands ([`commands`]), running a binary ([`cli`]) and
//! waiting for conditions ([`poll`]). Every module compiles in every
//! including crate (each has the server, client and tokio among its
//! dependencies); a test uses what it needs.
#![allow(dead_code)]

pub mod cli;
pub mod commands;
pub mod history;
pub mod http;
pub mod poll;
pub mod server;
pub mod wire;
pub mod worker;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use treelog::Treelog;

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
    /// `upto` is in `t`; with the whole log (`upto` = `u64::MAX`), every
    /// in-flight rename is all-or-nothing.
    pub fn check(&self, t: &Treelog, upto: u64, what: &str) {
        let uncertain = self.uncertain_paths();
        for (p, (must_exist, seq)) in &self.paths {
            if uncertain.contains(p) || *seq > upto {
                continue;
            }
            let exists = t.stat(p).is_ok();
            assert_eq!(
                exists, *must_exist,
                "{what}: {p} (acknowledged at {seq}) exists={exists}"
            );
        }
        // With records lost after `upto`, the in-flight operations (all
        // after it) are simply absent.
        for u in self.uncertain.iter().filter(|_| upto == u64::MAX) {
            if u[0] == "rename" {
                let (s, d) = (t.stat(&u[1]).is_ok(), t.stat(&u[2]).is_ok());
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

/// A running crash worker (see [`worker`]).
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
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([worker::ENTRY_TEST, "--exact", "--ignored", "--nocapture"])
            .args(["--test-threads", "1", "-q"])
            .env(worker::ENV, args.join("\x1f"))
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

/// A small xorshift generator seeded from the process id (each run tries
/// other kill points; the seed is printed for a failing run).
pub struct Rng(u64);

impl Rng {
    pub fn new() -> Rng {
        let seed = std::env::var("TREELOG_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x9E37_79B9_7F4A_7C15 ^ std::process::id() as u64);
        eprintln!("random seed {seed} (TREELOG_TEST_SEED)");
        Rng(seed.max(1))
    }

    /// A generator of its own for each of several tasks: `new()`'s seed
    /// mixed with `n`.
    pub fn nth(n: u64) -> Rng {
        let mut r = Rng::new();
        r.0 ^= n.wrapping_mul(0x2545_F491_4F6C_DD1D);
        r.0 = r.0.max(1);
        r
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Rounds of a kill loop: `short` in CI, `TREELOG_KILL_ROUNDS` by hand.
/// The applied sequence, the index digest of `admin verify` and the log
/// as stored, record by record, of the closed database at `data`: what a
/// replica and its leader must agree on.
pub fn closed_state(data: &Path) -> (u64, String, Vec<(u64, Vec<u8>)>) {
    let so = treelog::store::StoreOptions {
        create_if_missing: false,
        ..Default::default()
    };
    let store = treelog::store::Store::open(data, &so).unwrap();
    let summary = treelog::admin::index_summary(&store).unwrap();
    let log = store
        .log_entries(1)
        .unwrap()
        .map(|e| e.map(|(s, v)| (s, v.to_vec())).unwrap())
        .collect();
    (store.applied_seq().unwrap(), summary.digest, log)
}

pub fn rounds(short: usize) -> usize {
    std::env::var("TREELOG_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(short)
}
