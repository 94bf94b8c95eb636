//! Running a binary and collecting what it said. The binary's path is the
//! caller's (`env!("CARGO_BIN_EXE_treelog")`: only the crate that builds
//! it has it).

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};

/// How a finished process ended and what it wrote.
#[derive(Debug)]
pub struct Ran {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// The exit code; -1 when a signal ended the process.
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }
}

/// `bin --data DATA ARGS` with nothing on stdin, not yet started (the
/// arguments may be any bytes).
pub fn command<A: AsRef<std::ffi::OsStr>>(bin: &str, data: &Path, args: &[A]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.arg("--data").arg(data).args(args).stdin(Stdio::null());
    cmd
}

/// Runs `cmd` to its end.
pub fn output(cmd: &mut Command) -> Ran {
    let out = cmd.output().expect("run the binary");
    Ran {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `bin --data DATA ARGS` and kills it with SIGKILL after `after` (a
/// random crash point, not a wait for anything); returns whether it had
/// finished.
pub fn kill_during(bin: &str, data: &Path, args: &[&str], after: std::time::Duration) -> bool {
    let mut child = command(bin, data, args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the binary");
    std::thread::sleep(after);
    let finished = child.try_wait().unwrap().is_some();
    let _ = child.kill();
    child.wait().unwrap();
    finished
}

/// Runs `bin --data DATA ARGS` to its end.
pub fn run(bin: &str, data: &Path, args: &[&str]) -> Ran {
    output(&mut command(bin, data, args))
}

/// `bin admin credential add` of credential `name` with `role` to the
/// credentials file `file`: its secret, also written to `dir/NAME.secret`
/// (for `--credential-file`).
pub fn add_credential(bin: &str, dir: &Path, file: &Path, name: &str, role: &str) -> String {
    let f = file.to_str().expect("a UTF-8 path");
    let r = run(
        bin,
        &dir.join("unused"),
        &[
            "admin",
            "credential",
            "add",
            "--file",
            f,
            "--name",
            name,
            "--role",
            role,
        ],
    );
    assert_eq!(r.code(), 0, "{r:?}");
    let secret = r.stdout.trim().to_owned();
    assert!(secret.len() >= 32, "a short secret: {secret}");
    std::fs::write(dir.join(format!("{name}.secret")), &secret).expect("write the secret");
    secret
}

/// The RPC and HTTP addresses `treelog serve` logged in its "ready" line,
/// read from its standard error (piped; the rest is drained beside it and
/// echoed to the test's).
pub fn ready_addrs(child: &mut std::process::Child) -> (SocketAddr, SocketAddr) {
    use std::io::BufRead;
    let err = std::io::BufReader::new(child.stderr.take().expect("serve's stderr piped"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in err.lines().map_while(Result::ok) {
            eprintln!("serve: {line}");
            if line.contains(" ready ") {
                let addr = |key: &str| {
                    line.split_whitespace()
                        .find_map(|w| w.strip_prefix(key))
                        .map(|a| a.parse::<SocketAddr>().expect("an address"))
                };
                if let (Some(tx), Some(rpc), Some(http)) = (tx.take(), addr("rpc="), addr("http="))
                {
                    let _ = tx.send((rpc, http));
                }
            }
        }
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("serve did not log ready")
}

/// The RPC address of [`ready_addrs`].
pub fn ready_rpc(child: &mut std::process::Child) -> SocketAddr {
    ready_addrs(child).0
}
