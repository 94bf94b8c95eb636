//! Crash test: a real child process (the `treelog` binary) writes from
//! several threads and is killed with SIGKILL at random points, many times.
//! After each kill the store is reopened (replaying the log) and every
//! acknowledged operation must be there, the one operation per thread that
//! was in flight must be all-or-nothing, and `verify` must pass.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use treelog::{admin, Options, Treelog};

#[derive(Debug, Default)]
struct Expect {
    /// path -> must exist (true) / must not exist (false)
    paths: BTreeMap<String, bool>,
    /// operations that began but were not acknowledged: all-or-nothing
    uncertain: Vec<Vec<String>>,
}

fn apply_line(e: &mut Expect, in_flight: &mut BTreeMap<String, Vec<String>>, line: &str) {
    let parts: Vec<&str> = line.split(' ').collect();
    let thread_of = |p: &str| {
        p.rsplit_once('/')
            .map(|(d, _)| d.to_owned())
            .unwrap_or_default()
    };
    match parts.as_slice() {
        ["BEGIN", "create", p] => {
            in_flight.insert(thread_of(p), vec!["create".into(), p.to_string()]);
        }
        ["BEGIN", "delete", p] => {
            in_flight.insert(thread_of(p), vec!["delete".into(), p.to_string()]);
        }
        ["BEGIN", "rename", s, d] => {
            in_flight.insert(
                thread_of(s),
                vec!["rename".into(), s.to_string(), d.to_string()],
            );
        }
        ["ACK", "create", p, _] => {
            in_flight.remove(&thread_of(p));
            e.paths.insert(p.to_string(), true);
        }
        ["ACK", "delete", p, _] => {
            in_flight.remove(&thread_of(p));
            e.paths.insert(p.to_string(), false);
        }
        ["ACK", "rename", s, d, _] => {
            in_flight.remove(&thread_of(s));
            e.paths.insert(s.to_string(), false);
            e.paths.insert(d.to_string(), true);
        }
        ["READY", _] => {}
        _ => panic!("unexpected worker output {line:?}"),
    }
}

#[test]
fn kill_dash_nine_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let bin = env!("CARGO_BIN_EXE_treelog");
    let mut rng_state: u64 = 0x9E37_79B9_7F4A_7C15 ^ std::process::id() as u64;
    let mut rand = move || {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        rng_state
    };
    let rounds = 12;
    let mut total_acks = 0usize;
    // Accumulated over rounds: earlier rounds' acknowledged state is
    // re-checked after every later crash.
    let mut expect = Expect::default();
    let mut replayed = 0;
    for round in 0..rounds {
        // One worker thread every other round: the writer then commits
        // each group itself (nothing else in flight); with four, groups
        // also go through the syncer and applier threads.
        let threads = if round % 2 == 0 { "1" } else { "4" };
        let mut child = Command::new(bin)
            .args([
                "--data",
                data.to_str().unwrap(),
                "crash-worker",
                "--threads",
                threads,
                "--run",
                &format!("r{round}"),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn worker");
        let stdout = child.stdout.take().unwrap();
        let mut reader = BufReader::new(stdout);
        // Kill after a random number of acknowledgements (no timing guesses).
        let kill_after = 1 + (rand() % 400) as usize;
        let mut in_flight = BTreeMap::new();
        let mut acks = 0;
        let mut line = String::new();
        while acks < kill_after {
            line.clear();
            if reader.read_line(&mut line).unwrap() == 0 {
                panic!("worker exited early");
            }
            let l = line.trim_end();
            if l.starts_with("ACK") {
                acks += 1;
            }
            apply_line(&mut expect, &mut in_flight, l);
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Lines already written before the kill are acknowledgements too.
        for l in reader.lines() {
            let l = l.unwrap();
            // A line cut by the kill is incomplete; ignore it.
            if l.split(' ').count() >= 3 {
                apply_line(&mut expect, &mut in_flight, &l);
            }
        }
        expect.uncertain.extend(in_flight.into_values());
        let uncertain_paths: Vec<String> = expect
            .uncertain
            .iter()
            .flat_map(|u| u[1..].to_vec())
            .collect();
        total_acks += acks;

        let t = Treelog::open(&data, Options::default()).unwrap();
        // The index is written without the WAL and was never flushed by the
        // killed process: recovery has to come from replaying the log.
        replayed += t.open_report().replayed;
        for (p, must_exist) in &expect.paths {
            if uncertain_paths.contains(p) {
                continue;
            }
            let exists = t.stat(p).is_ok();
            assert_eq!(
                exists, *must_exist,
                "round {round}: {p} (acknowledged) exists={exists}"
            );
        }
        for u in &expect.uncertain {
            if u[0] == "rename" {
                let (s, d) = (t.stat(&u[1]).is_ok(), t.stat(&u[2]).is_ok());
                assert!(
                    s ^ d,
                    "round {round}: in-flight rename {} -> {} half-applied (src {s}, dst {d})",
                    u[1],
                    u[2]
                );
            }
        }
        let report = admin::verify(t.store()).unwrap();
        assert!(report.ok(), "round {round}: {report:?}");
        t.close().unwrap();
    }
    assert!(total_acks >= rounds, "too few acknowledgements observed");
    assert!(
        replayed > 0,
        "no round needed replay: the test did not exercise recovery"
    );
}
