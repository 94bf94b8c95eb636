//! Replicas as real processes (`treelog serve --replica-of`) killed with
//! SIGKILL: during their bootstrap (after a chunk of the checkpoint, and
//! between the two renames that put it in place), while they stream, and
//! the leader while it streams to them, all under a steady load of
//! acknowledged writes, and while it catches up from far behind before it
//! serves. Every case resumes; at the end the replica's log is
//! the leader's record for record (no gap, no duplicate) and their index
//! digests are equal. `TREELOG_KILL_ROUNDS=N` kills each side N times
//! while streaming (3 and 2 by default).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use treelog_client::{Client, ClientOptions};
use treelog_proto::protocol::{NodeStatus, RequestBody, ResponseBody};
use treelog_testkit::process::free_addr;
use treelog_testkit::{cli, commands, rounds};
use treelog_testkit_server::closed_state;

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

struct Node {
    data: PathBuf,
    rpc: SocketAddr,
    http: SocketAddr,
    log: PathBuf,
    source: Option<SocketAddr>,
    child: Option<Child>,
}

impl Node {
    fn new(dir: &Path, name: &str, source: Option<SocketAddr>) -> Node {
        Node {
            data: dir.join(name),
            rpc: free_addr(),
            http: free_addr(),
            log: dir.join(format!("{name}.log")),
            source,
            child: None,
        }
    }

    /// Starts `treelog serve` (a replica when it has a source) with
    /// `FAILPOINTS` set to `failpoints`, if any; its log is appended to
    /// `<name>.log`.
    fn start(&mut self, failpoints: Option<&str>) {
        self.start_with(failpoints, &[]);
    }

    fn start_with(&mut self, failpoints: Option<&str>, extra: &[&str]) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let (rpc, http) = (self.rpc.to_string(), self.http.to_string());
        let mut args = vec!["serve", "--listen", &rpc, "--http", &http];
        let source = self.source.map(|s| s.to_string());
        if let Some(s) = &source {
            // Small batches: a catch-up takes many.
            args.extend(["--replica-of", s.as_str(), "--replica-batch-bytes", "4096"]);
        }
        args.extend(extra);
        let mut cmd = cli::command(BIN, &self.data, &args);
        cmd.stdout(Stdio::null()).stderr(log);
        if let Some(f) = failpoints {
            cmd.env("FAILPOINTS", f);
        }
        self.child = Some(cmd.spawn().expect("start treelog serve"));
    }

    fn kill9(&mut self) {
        let mut c = self.child.take().expect("running");
        c.kill().unwrap();
        c.wait().unwrap();
    }

    /// Waits for the process to end by itself (a crash point); panics
    /// after a minute.
    fn wait_killed(&mut self, what: &str) {
        let mut c = self.child.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                use std::os::unix::process::ExitStatusExt;
                assert_eq!(st.signal(), Some(libc::SIGKILL), "{what}: {st:?}");
                return;
            }
            assert!(Instant::now() < deadline, "never reached: {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, and waits for a clean exit.
    fn stop(&mut self) {
        let mut c = self.child.take().expect("running");
        unsafe {
            libc::kill(c.id() as i32, libc::SIGTERM);
        }
        let st = c.wait().unwrap();
        assert!(st.success(), "{}: {st:?}", self.data.display());
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn status(rt: &tokio::runtime::Runtime, addr: SocketAddr) -> Option<NodeStatus> {
    rt.block_on(async {
        let c = tokio::time::timeout(
            Duration::from_secs(2),
            Client::connect(addr, ClientOptions::default()),
        )
        .await
        .ok()?
        .ok()?;
        match c.call(RequestBody::Status).await.ok()? {
            ResponseBody::Status(s) => Some(s),
            _ => None,
        }
    })
}

/// Waits until `node` has applied at least `seq` (and returns its status).
fn applied(rt: &tokio::runtime::Runtime, node: &Node, seq: u64) -> NodeStatus {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(s) = status(rt, node.rpc) {
            if s.applied_seq >= seq {
                return s;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} never applied {seq}; its log:\n{}",
            node.data.display(),
            std::fs::read_to_string(&node.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Creates files on the leader, reconnecting whenever it is gone, until
/// `stop`; counts the acknowledged ones and keeps the highest sequence.
fn writer(
    leader: SocketAddr,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicU64>,
    top: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut n = 0u64;
            let mut client: Option<Client> = None;
            while !stop.load(Ordering::Relaxed) {
                let c = match &client {
                    Some(c) => c.clone(),
                    None => match Client::connect(leader, ClientOptions::default()).await {
                        Ok(c) => {
                            let _ = c.submit(commands::mkdir("/w")).await;
                            client = Some(c.clone());
                            c
                        }
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                    },
                };
                match c.submit(commands::create(&format!("/w/f{n}"))).await {
                    Ok(seq) => {
                        acked.fetch_add(1, Ordering::Relaxed);
                        top.fetch_max(seq, Ordering::Relaxed);
                    }
                    Err(_) => client = None,
                }
                n += 1;
            }
        })
    })
}

#[test]
fn replicas_resume_after_sigkill_of_either_side_at_any_stage() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut leader = Node::new(dir.path(), "leader", None);
    leader.start(None);
    let (stop, acked, top) = Default::default();
    let (stop, acked, top): (Arc<AtomicBool>, Arc<AtomicU64>, Arc<AtomicU64>) = (stop, acked, top);
    let w = writer(leader.rpc, stop.clone(), acked.clone(), top.clone());
    applied(&rt, &leader, 200);
    let mut replica = Node::new(dir.path(), "replica", Some(leader.rpc));

    // Killed during the bootstrap: after the fourth chunk of the
    // checkpoint, then (resuming the fetch) between the renames that
    // install it.
    replica.start(Some("fetch::after_chunk=3*off->return"));
    replica.wait_killed("fetch::after_chunk");
    replica.start(Some("bootstrap::between_renames=return"));
    replica.wait_killed("bootstrap::between_renames");
    replica.start(None);
    let mut at = applied(&rt, &replica, 1).applied_seq;

    // Killed while streaming, under load.
    for _ in 0..rounds(3) {
        let want = top.load(Ordering::Relaxed).max(at + 1);
        at = applied(&rt, &replica, want).applied_seq;
        replica.kill9();
        replica.start(None);
    }
    // Far behind, it catches up before serving (appending to its log and
    // replaying): killed during that, after a few batches, then again.
    replica.kill9();
    let want = top.load(Ordering::Relaxed) + 1500;
    applied(&rt, &leader, want);
    let catch_up = ["--replica-catch-up-min", "1000"];
    replica.start_with(Some("catch_up::append=3*off->return"), &catch_up);
    replica.wait_killed("catch_up::append");
    replica.start_with(None, &catch_up);
    at = applied(&rt, &replica, want).applied_seq;

    // The leader killed while it streams; it comes back on its ports.
    for _ in 0..rounds(2) {
        let want = top.load(Ordering::Relaxed).max(at + 1);
        at = applied(&rt, &replica, want).applied_seq;
        leader.kill9();
        leader.start(None);
    }
    let want = top.load(Ordering::Relaxed) + 200;
    applied(&rt, &leader, want);
    stop.store(true, Ordering::Relaxed);
    w.join().unwrap();
    assert!(acked.load(Ordering::Relaxed) > 200);
    // The CLI pointed at the replica: its write goes on to the leader.
    let r = cli::output(std::process::Command::new(BIN).args([
        "--server",
        &replica.rpc.to_string(),
        "mkdir",
        "-p",
        "/via-replica",
    ]));
    assert_eq!(r.code(), 0, "{r:?}");
    let end = status(&rt, leader.rpc)
        .expect("the leader's status")
        .applied_seq;
    let s = applied(&rt, &replica, end);
    assert_eq!(s.applied_seq, end);
    assert!(s.connected);
    replica.stop();
    leader.stop();
    let (la, ld, llog) = closed_state(&leader.data);
    let (ra, rd, rlog) = closed_state(&replica.data);
    assert_eq!(ra, la);
    assert_eq!(rd, ld, "index digests");
    assert_eq!(rlog.len(), llog.len(), "records in the logs");
    assert!(rlog == llog, "the logs differ");
    let log = std::fs::read_to_string(&replica.log).unwrap();
    assert!(
        log.contains("resuming backup"),
        "the second start resumed the interrupted fetch:\n{log}"
    );
    assert!(
        log.contains("finishing an interrupted bootstrap's swap"),
        "{log}"
    );
    assert!(log.contains("caught up"), "{log}");
    let r = cli::run(BIN, &leader.data, &["stat", "/via-replica"]);
    assert_eq!(r.code(), 0, "{r:?}");
}
