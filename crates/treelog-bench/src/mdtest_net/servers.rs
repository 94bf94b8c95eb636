//! The treelog servers `treelog-bench mdtest` measures: a single node and a
//! three-node Raft cluster, on loopback. Real `treelog serve` processes
//! when a `treelog` binary is at hand (`--treelog-bin`, `TREELOG_BIN`, or
//! beside this executable); otherwise in this (the coordinating) process,
//! as `bench network` and `bench cluster` run them, which is said.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{admin, loopback, server_config, start_cluster};
use crate::error::{Error, ErrorKind, Result};
use treelog_proto::protocol::ClusterRequest;

/// The `treelog` binary to run servers with: `given`, else one beside this
/// executable; `None` runs them in process.
pub(crate) fn treelog_bin(given: Option<&Path>) -> Option<PathBuf> {
    if let Some(g) = given {
        return Some(g.to_owned());
    }
    let exe = std::env::current_exe().ok()?;
    // A test binary lives in deps/, the binaries one level up.
    [
        exe.parent()?.join("treelog"),
        exe.parent()?.parent()?.join("treelog"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

enum InProc {
    Server(crate::server::ServerHandle),
    Node(treelog_raft::ClusterHandle),
}

/// A running single node or cluster.
pub(crate) struct Running {
    /// Where clients connect (the cluster's leader).
    pub addr: SocketAddr,
    /// How it runs, for the report.
    pub how: String,
    /// Each server process's HTTP address (metrics), in node order.
    pub http: Vec<SocketAddr>,
    children: Vec<Child>,
    inproc: Vec<InProc>,
}

impl Running {
    /// The server processes' ids (for a profiler).
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Stops every node: SIGTERM and a clean exit for processes.
    pub(crate) async fn stop(mut self) -> Result<()> {
        for h in std::mem::take(&mut self.inproc) {
            match h {
                InProc::Server(h) => h.shutdown().await?,
                InProc::Node(h) => h.shutdown().await?,
            }
        }
        for mut c in std::mem::take(&mut self.children) {
            // SAFETY: a plain signal to a child of this process.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if c.try_wait()?.is_some() {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Has the child get SIGTERM when this process ends, however it ends (a
/// benchmark stopped with ^C leaves no server or client behind).
pub(crate) fn end_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe; nothing else runs in the child
    // before exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
}

fn free_addr() -> Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Starts `treelog serve` on fresh loopback ports and waits until it
/// listens. The ports are found free just before; a process that loses
/// one to another program exits, and is started again on new ones.
async fn serve(
    bin: &Path,
    data: &Path,
    node: Option<u64>,
) -> Result<(Child, SocketAddr, SocketAddr)> {
    std::fs::create_dir_all(data)?;
    let log_path = data.with_extension("log");
    for _attempt in 0..3 {
        let (rpc, http) = (free_addr()?, free_addr()?);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let mut cmd = std::process::Command::new(bin);
        cmd.arg("--data").arg(data.join("db")).arg("serve");
        cmd.args(["--listen", &rpc.to_string(), "--http", &http.to_string()]);
        cmd.args(["--durability", "sync"]);
        if let Some(id) = node {
            cmd.args(["--node-id", &id.to_string()]);
        }
        cmd.env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        end_with_parent(&mut cmd);
        let mut child = cmd.spawn()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if std::net::TcpStream::connect(rpc).is_ok() {
                return Ok((child, rpc, http));
            }
            if child.try_wait()?.is_some() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::InvalidArgument(format!(
                    "treelog serve did not listen on {rpc} within 60 s (log: {})",
                    log_path.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Err(Error::InvalidArgument(format!(
        "treelog serve exited three times at start (log: {})",
        log_path.display()
    )))
}

/// `admin`, again while the node answers that it is not ready (a node
/// listens before its Raft runs), for at most 60 s.
async fn admin_retrying(addr: SocketAddr, req: ClusterRequest) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match admin(addr, req.clone()).await {
            Err(e) if Instant::now() < deadline && e.kind() == ErrorKind::Busy => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => return r,
        }
    }
}

/// A single node with its store under `dir`.
pub(crate) async fn single(bin: Option<&Path>, dir: &Path) -> Result<Running> {
    match bin {
        Some(bin) => {
            let (child, addr, http) = serve(bin, &dir.join("node"), None).await?;
            Ok(Running {
                addr,
                how: format!("`treelog serve` process (pid {})", child.id()),
                http: vec![http],
                children: vec![child],
                inproc: Vec::new(),
            })
        }
        None => {
            let h = crate::server::start_on(server_config(&dir.join("node")), loopback()?).await?;
            Ok(Running {
                addr: h.bound.rpc,
                how: "in the coordinating process (no `treelog` binary found)".into(),
                http: vec![h.bound.http],
                children: Vec::new(),
                inproc: vec![InProc::Server(h)],
            })
        }
    }
}

/// A three-node cluster with its stores under `dir`; clients go to node 1,
/// its leader.
pub(crate) async fn cluster(bin: Option<&Path>, dir: &Path) -> Result<Running> {
    let Some(bin) = bin else {
        let (addr, nodes) = start_cluster(dir).await?;
        return Ok(Running {
            addr,
            how: "3 nodes in the coordinating process (no `treelog` binary found)".into(),
            http: Vec::new(),
            children: Vec::new(),
            inproc: nodes.into_iter().map(InProc::Node).collect(),
        });
    };
    let mut r = Running {
        addr: free_addr()?,
        how: String::new(),
        http: Vec::new(),
        children: Vec::new(),
        inproc: Vec::new(),
    };
    let mut addrs = Vec::new();
    for id in 1..=3u64 {
        let (child, addr, http) = serve(bin, &dir.join(format!("node{id}")), Some(id)).await?;
        r.children.push(child);
        r.http.push(http);
        addrs.push(addr);
    }
    admin_retrying(addrs[0], ClusterRequest::Init).await?;
    for (i, addr) in addrs.iter().enumerate().skip(1) {
        admin_retrying(
            addrs[0],
            ClusterRequest::AddLearner {
                node: i as u64 + 1,
                addr: addr.to_string(),
                wait: true,
            },
        )
        .await?;
    }
    admin_retrying(addrs[0], ClusterRequest::Promote { nodes: vec![2, 3] }).await?;
    r.addr = addrs[0];
    r.how = format!(
        "3 `treelog serve --node-id` processes (pids {:?}), clients at node 1, the leader",
        r.pids()
    );
    Ok(r)
}
