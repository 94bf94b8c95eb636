//! Logs: the server's and the library's [`tracing`] events, written to
//! standard error as text lines or JSON lines (see docs/OPERATIONS.md,
//! "Logs", for the events and their fields).
//!
//! Libraries only emit events; a program chooses where they go. `treelog
//! serve` calls [`init_logging`] once, before [`crate::run`] (which installs
//! the text logger itself when no logger is installed). A program that
//! embeds the server ([`crate::start`]) may install its own subscriber
//! instead.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing_subscriber::filter::{EnvFilter, LevelFilter};

use treelog::{Error, Result};

/// How [`init_logging`] writes events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One human-readable line per event: time, level, target, message,
    /// then the fields as `name=value`. The default.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, and
    /// `fields` (the event's fields, with its `message`).
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(Error::InvalidArgument(format!(
                "log format {s:?}: expected `text` or `json`"
            ))),
        }
    }
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// Installs the process's logger: every `tracing` event at or above the
/// level `RUST_LOG` allows (`info` for every target when it is unset, e.g.
/// `RUST_LOG=treelog=debug,treelog_server=info`) is written to standard
/// error as `format` says. Text lines are colored only when standard
/// error is a terminal. A write that fails (standard error closed) is
/// dropped, never a panic.
///
/// Call it once, early in `main`. It fails, without changing anything,
/// when a logger is already installed in the process (a second call
/// included), or when `RUST_LOG` does not parse.
pub fn init_logging(format: LogFormat) -> Result<()> {
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env()
        .map_err(|e| Error::InvalidArgument(format!("RUST_LOG: {e}")))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    installed.map_err(|e| Error::InvalidArgument(format!("cannot install the logger: {e}")))
}

/// Rate limit for a repeated warning (refused connections): the first
/// event is logged, then at most one per `every`, which carries how many
/// were left out since the last one logged.
pub(crate) struct Throttle {
    every: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    pub(crate) const fn new(every: Duration) -> Throttle {
        Throttle {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// `Some(left out since the last one)` when this event is to be
    /// logged; `None` when it is left out (and counted).
    pub(crate) fn check(&self) -> Option<u64> {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match s.0 {
            Some(last) if now.saturating_duration_since(last) < self.every => {
                s.1 += 1;
                None
            }
            _ => {
                s.0 = Some(now);
                Some(std::mem::take(&mut s.1))
            }
        }
    }
}

/// The rate limits of the refused-connection warnings, one per kind.
pub(crate) struct Refusals {
    pub busy: Throttle,
    pub http_busy: Throttle,
    pub handshake: Throttle,
    pub unauthorized: Throttle,
    pub http_unauthorized: Throttle,
}

impl Default for Refusals {
    fn default() -> Refusals {
        const EVERY: Duration = Duration::from_secs(5);
        Refusals {
            busy: Throttle::new(EVERY),
            http_busy: Throttle::new(EVERY),
            handshake: Throttle::new(EVERY),
            unauthorized: Throttle::new(EVERY),
            http_unauthorized: Throttle::new(EVERY),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run in a child process by the test below: installs the logger as
    /// `TREELOG_TEST_LOG_FORMAT` says, and logs.
    #[test]
    #[ignore = "the child process of init_logging_writes_filtered_lines_to_standard_error"]
    fn init_logging_child() {
        let Ok(format) = std::env::var("TREELOG_TEST_LOG_FORMAT") else {
            return;
        };
        let format: LogFormat = format.parse().unwrap();
        if let Err(e) = init_logging(format) {
            // The parent reads standard error.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("init failed: {e}\n").as_bytes(),
            );
            return;
        }
        tracing::info!(answer = 42, "an info event");
        tracing::debug!("a debug event");
        let again = init_logging(format).expect_err("a second call must fail");
        tracing::info!(error = %again, "second init");
    }

    /// Standard error of [`init_logging_child`] with `format` and `rust_log`.
    fn child_stderr(format: &str, rust_log: Option<&str>) -> String {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--ignored",
            "--exact",
            "logging::tests::init_logging_child",
            "--nocapture",
        ])
        .env("TREELOG_TEST_LOG_FORMAT", format)
        .env_remove("RUST_LOG");
        if let Some(v) = rust_log {
            cmd.env("RUST_LOG", v);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stderr).unwrap()
    }

    /// JSON lines or text lines on standard error; `info` unless
    /// `RUST_LOG` says otherwise; a second call fails; a `RUST_LOG` that
    /// does not parse is refused.
    #[test]
    fn init_logging_writes_filtered_lines_to_standard_error() {
        let err = child_stderr("json", None);
        let events: Vec<serde_json::Value> = err
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let messages: Vec<&str> = events
            .iter()
            .map(|e| e["fields"]["message"].as_str().unwrap())
            .collect();
        assert_eq!(messages, ["an info event", "second init"], "{err}");
        assert_eq!(events[0]["fields"]["answer"], 42);
        assert_eq!(events[0]["level"], "INFO");
        assert!(events[0]["timestamp"].is_string());
        assert!(events[0]["target"]
            .as_str()
            .unwrap()
            .starts_with("treelog_server"));
        // RUST_LOG lowers the level.
        let err = child_stderr("json", Some("treelog_server=debug"));
        assert!(err.contains("a debug event"), "{err}");
        // Text: one plain line per event (standard error is a pipe here).
        let err = child_stderr("text", None);
        let line = err
            .lines()
            .find(|l| l.contains("an info event"))
            .unwrap_or_else(|| panic!("{err}"));
        assert!(
            line.contains("INFO") && line.contains("answer=42"),
            "{line}"
        );
        assert!(!line.contains('\u{1b}'), "{line:?}");
        assert!(!err.contains("a debug event"), "{err}");
        // A RUST_LOG that does not parse: refused.
        let err = child_stderr("json", Some("treelog_server=loud"));
        assert!(
            err.contains("init failed: invalid argument: RUST_LOG"),
            "{err}"
        );
    }

    #[test]
    fn parses_and_prints_log_formats() {
        for f in [LogFormat::Text, LogFormat::Json] {
            assert_eq!(f.to_string().parse::<LogFormat>().ok(), Some(f));
        }
        assert_eq!("json".parse::<LogFormat>().ok(), Some(LogFormat::Json));
        assert!("JSON".parse::<LogFormat>().is_err());
        assert!("logfmt".parse::<LogFormat>().is_err());
    }

    #[test]
    fn a_throttle_logs_the_first_then_one_per_period_with_the_count_left_out() {
        let t = Throttle::new(Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(t.check_at(t0), Some(0));
        assert_eq!(t.check_at(t0 + Duration::from_secs(1)), None);
        assert_eq!(t.check_at(t0 + Duration::from_secs(4)), None);
        assert_eq!(t.check_at(t0 + Duration::from_secs(5)), Some(2));
        assert_eq!(t.check_at(t0 + Duration::from_secs(6)), None);
        assert_eq!(t.check_at(t0 + Duration::from_secs(11)), Some(1));
        assert_eq!(t.check_at(t0 + Duration::from_secs(30)), Some(0));
    }
}
