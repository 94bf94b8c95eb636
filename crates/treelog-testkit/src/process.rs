//! `treelog serve` as a real process: started, killed with SIGKILL,
//! stopped with SIGTERM, paused with SIGSTOP and resumed, its output in a
//! log file of its own. The binary's path is the caller's
//! (`env!("CARGO_BIN_EXE_treelog")`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A loopback address no one listens on now (the OS's choice of a free
/// port; a process started right after binds it).
pub fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("its address")
}

/// Sends `sig` to `pid`.
fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: a plain signal to a process this test started.
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(
        r,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// One server process. Dropping it kills the process (resuming it first
/// if paused, so that nothing is left stopped).
pub struct ServeProcess {
    bin: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
    paused: bool,
    /// A command that runs the binary in place of `bin` itself (`setpriv
    /// --reuid ...`: a node of its own user).
    wrapper: Vec<String>,
}

impl ServeProcess {
    /// A process of `bin ARGS` (not started) whose standard error goes to
    /// `log`, appended across restarts.
    pub fn new(bin: &str, args: Vec<String>, log: &Path) -> ServeProcess {
        ServeProcess {
            bin: bin.into(),
            args,
            envs: Vec::new(),
            log: log.to_owned(),
            child: None,
            paused: false,
            wrapper: Vec::new(),
        }
    }

    /// Sets an environment variable of the process (from its next start).
    pub fn env(mut self, key: &str, value: &str) -> ServeProcess {
        self.envs.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Runs the binary through `wrapper` (its program and arguments).
    pub fn wrapped(mut self, wrapper: &[&str]) -> ServeProcess {
        self.wrapper = wrapper.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// Replaces the binary (an upgrade: the next start runs `bin`).
    pub fn set_binary(&mut self, bin: &str) {
        self.bin = bin.into();
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts it (it must not be running).
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the process's log");
        let mut cmd = match self.wrapper.split_first() {
            Some((prog, rest)) => {
                let mut c = Command::new(prog);
                c.args(rest).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        cmd.args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        self.child = Some(cmd.spawn().expect("start the server process"));
        self.paused = false;
    }

    /// SIGKILL, and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused = false;
    }

    /// SIGTERM, and waits (up to `within`) for it to end; its exit status.
    pub fn stop(&mut self, within: Duration) -> ExitStatus {
        let mut c = self.child.take().expect("running");
        if self.paused {
            signal(c.id(), libc::SIGCONT);
            self.paused = false;
        }
        signal(c.id(), libc::SIGTERM);
        let deadline = Instant::now() + within;
        loop {
            if let Some(st) = c.try_wait().expect("wait for the process") {
                return st;
            }
            if Instant::now() >= deadline {
                let _ = c.kill();
                let _ = c.wait();
                panic!(
                    "{} did not end within {within:?} of SIGTERM",
                    self.bin.display()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGSTOP: the process stays, its sockets open, and answers nothing.
    pub fn pause(&mut self) {
        let pid = self.pid().expect("running");
        signal(pid, libc::SIGSTOP);
        self.paused = true;
    }

    /// SIGCONT after [`ServeProcess::pause`].
    pub fn resume(&mut self) {
        let pid = self.pid().expect("running");
        signal(pid, libc::SIGCONT);
        self.paused = false;
    }

    /// The log's text so far (for a failure's message).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            if self.paused {
                // SAFETY: as `signal`; errors are moot while dropping.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGCONT);
                }
            }
        }
        self.kill();
    }
}
