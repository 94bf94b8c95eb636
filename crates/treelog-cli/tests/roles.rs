//! Credentials and roles with the real binary: `admin credential add`,
//! `serve --credentials --audit-log`, the exit code of a refused request,
//! secrets kept out of the server's log, short token files refused.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use treelog_testkit::cli;

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

/// `serve` with `args`, its log in `log`; its RPC address once ready.
fn serve(data: &Path, log: &Path, args: &[&str]) -> (Child, SocketAddr) {
    let mut all = vec!["serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let mut child = cli::command(BIN, data, &all)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("spawn treelog serve");
    let rpc = ready_rpc(&mut child, log);
    (child, rpc)
}

/// The RPC address in the "ready" line of `log`, once `child` wrote it.
fn ready_rpc(child: &mut Child, log: &Path) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let rpc = text
            .lines()
            .find(|l| l.contains(" ready "))
            .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("rpc=")))
            .and_then(|a| a.parse().ok());
        if let Some(rpc) = rpc {
            return rpc;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve did not log ready: {text}");
        }
        // Polling the log file for the line that says it is ready.
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn as_cred(dir: &Path, rpc: SocketAddr, name: &str, args: &[&str]) -> cli::Ran {
    let tok = dir.join(format!("{name}.secret"));
    let mut all = vec![
        "--server".to_string(),
        rpc.to_string(),
        "--token-file".into(),
        tok.to_str().unwrap().into(),
    ];
    all.extend(args.iter().map(|s| s.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    cli::run(BIN, &dir.join("unused"), &all)
}

#[test]
fn roles_refuse_with_exit_15_and_the_audit_log_says_who_did_what() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let creds = dir.join("credentials");
    let secrets: Vec<String> = [("r", "read"), ("w", "write"), ("ops", "admin")]
        .iter()
        .map(|(n, role)| cli::add_credential(BIN, dir, &creds, n, role))
        .collect();
    let text = std::fs::read_to_string(&creds).unwrap();
    for s in &secrets {
        assert!(!text.contains(s.as_str()), "the file keeps hashes only");
    }
    let audit = dir.join("audit.log");
    let log = dir.join("serve.log");
    let (mut child, rpc) = serve(
        &dir.join("data"),
        &log,
        &[
            "--credentials",
            creds.to_str().unwrap(),
            "--audit-log",
            audit.to_str().unwrap(),
        ],
    );
    // A reader reads, and may not write.
    assert_eq!(as_cred(dir, rpc, "r", &["ls", "/"]).code(), 0);
    let r = as_cred(dir, rpc, "r", &["mkdir", "/x"]);
    assert_eq!(r.code(), 15, "{r:?}");
    assert!(r.stderr.contains("permission denied"), "{r:?}");
    // A writer writes, and may not set quotas; an admin may.
    assert_eq!(as_cred(dir, rpc, "w", &["mkdir", "/x"]).code(), 0);
    let q = ["quota", "set", "/x", "--inodes", "5"];
    assert_eq!(as_cred(dir, rpc, "w", &q).code(), 15);
    assert_eq!(as_cred(dir, rpc, "ops", &q).code(), 0);
    // Cursors are dropped by an admin only.
    let d = ["admin", "cursors", "--drop", "c"];
    assert_eq!(as_cred(dir, rpc, "w", &d).code(), 15);

    // The lines are written by a thread of their own, after the replies:
    // wait for the five.
    let deadline = Instant::now() + Duration::from_secs(30);
    let lines: Vec<serde_json::Value> = loop {
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        if text.lines().count() >= 5 {
            break text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
        }
        assert!(Instant::now() < deadline, "audit log: {text}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    let got: Vec<(String, String, String)> = lines
        .iter()
        .map(|l| {
            (
                l["credential"].as_str().unwrap().to_owned(),
                l["request"].as_str().unwrap().to_owned(),
                l["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want = [
        ("r", "mkdir", "permission_denied"),
        ("w", "mkdir", "ok"),
        ("w", "set_quota", "permission_denied"),
        ("ops", "set_quota", "ok"),
        ("w", "drop_cursor", "permission_denied"),
    ];
    let want: Vec<(String, String, String)> = want
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(got, want);
    // No secret in the server's log or the audit log.
    let logged = std::fs::read_to_string(&log).unwrap() + &std::fs::read_to_string(&audit).unwrap();
    for s in &secrets {
        assert!(!logged.contains(s.as_str()));
    }
}

#[test]
fn a_short_shared_token_is_refused_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let tok = tmp.path().join("tok");
    std::fs::write(&tok, "short\n").unwrap();
    let r = cli::run(
        BIN,
        &tmp.path().join("data"),
        &["serve", "--require-token-file", tok.to_str().unwrap()],
    );
    assert_eq!(r.code(), 8, "{r:?}");
    assert!(r.stderr.contains("at least 32 characters"), "{r:?}");
    assert!(!r.stderr.contains("short"), "{r:?}");
}
