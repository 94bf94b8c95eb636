//! Running a binary and collecting what it said. The binary's path is the
//! caller's (`env!("CARGO_BIN_EXE_treelog")`: only the crate that builds
//! it has it).

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

/// `bin --data DATA ARGS` with nothing on stdin, not yet started.
pub fn command(bin: &str, data: &Path, args: &[&str]) -> Command {
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

/// Runs `bin --data DATA ARGS` to its end.
pub fn run(bin: &str, data: &Path, args: &[&str]) -> Ran {
    output(&mut command(bin, data, args))
}
