//! Which committed state the read commands see: the global flags
//! `--consistency linearizable|latest`, `--min-seq SEQ` and `--timeout`
//! (how long to wait for either) turned into one `ReadAt` (docs/READS.md), the only place that mapping
//! is made.
//!
//! The default is linearizable where the node can give it: a standalone
//! server, a Raft cluster's node (its leader's read index), a local data
//! directory (this process is its only writer). A replica (`serve
//! --replica-of`) cannot: it only knows what its source has sent. Asked
//! explicitly, it is refused (exit 16); by default the read degrades to
//! the replica's newest state, as reads always did there.

use std::time::Duration;

use clap::ValueEnum;

use crate::args::Cli;
use crate::backend::Backend;
use crate::error::{Error, ErrorKind, Result};
use crate::protocol::Role;
use treelog::ReadAt;

/// `--consistency`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Consistency {
    /// Every write acknowledged before the command started is seen.
    Linearizable,
    /// The node's newest committed state, however far behind it is.
    Latest,
}

/// The longest single wait a server grants (`WaitFor` is capped there).
const SERVER_WAIT_CAP: Duration = Duration::from_secs(60);

/// The state a read asks for, given the flags (`requested`: `None` is the
/// default), the node's role (`None`: a local data directory) and
/// `--min-seq` (already reached when this is called).
pub(crate) fn read_at(
    requested: Option<Consistency>,
    role: Option<Role>,
    min_seq: Option<u64>,
) -> Result<ReadAt> {
    let linearizable = match (requested, role) {
        (Some(Consistency::Linearizable), Some(Role::Replica)) => {
            return Err(Error::Remote {
                kind: ErrorKind::NotLeader,
                message: "a replica cannot give a linearizable read (it only knows what its \
                          source has sent): read on the leader (`treelog admin status` names \
                          it), or give --consistency latest, with --min-seq SEQ for a state at \
                          least that new"
                    .into(),
            })
        }
        (Some(Consistency::Latest), _) | (None, Some(Role::Replica)) => false,
        (Some(Consistency::Linearizable) | None, _) => true,
    };
    Ok(match (linearizable, role, min_seq) {
        // Alone, the newest committed state is linearizable, and it is at
        // least `min_seq` once that was reached.
        (true, None, _) => ReadAt::Latest,
        (true, Some(_), _) => ReadAt::Linearizable,
        (false, _, Some(seq)) => ReadAt::AtLeast(seq),
        (false, _, None) => ReadAt::Latest,
    })
}

/// The error of a node that did not reach `wanted` in time (exit 17);
/// `committed`: what it said it had (`None`: it did not answer).
pub(crate) fn not_caught_up(committed: Option<u64>, wanted: u64, waited: Duration) -> Error {
    let has = match committed {
        Some(c) => format!("the node has committed up to sequence {c}, not {wanted}"),
        None => format!("the node did not answer whether it has committed {wanted}"),
    };
    Error::Remote {
        kind: ErrorKind::Lagging,
        message: format!(
            "not caught up: {has} (waited {} ms; --timeout sets the bound)",
            waited.as_millis()
        ),
    }
}

/// Prepares the reads of one command against `t`: asks the node its role
/// when the consistency depends on it, waits (at most `--timeout`) for it
/// to reach `--min-seq` and, for a linearizable read, for the leader's read
/// index, and returns what every read of the command asks for.
pub(crate) fn prepare(cli: &Cli, t: &Backend) -> Result<ReadAt> {
    let role = match t {
        // Nothing else writes to a data directory this process holds:
        // waiting could not help.
        Backend::Local(db) => {
            if let Some(seq) = cli.min_seq {
                let committed = db.committed_seq();
                if committed < seq {
                    return Err(Error::Remote {
                        kind: ErrorKind::Lagging,
                        message: format!(
                            "not caught up: the data directory has committed up to sequence \
                             {committed}, not {seq} (nothing else writes to it while this \
                             command holds it: there is nothing to wait for)"
                        ),
                    });
                }
            }
            None
        }
        Backend::Remote { .. } => {
            let role = match cli.consistency {
                // Not asked: the newest state does not depend on it.
                Some(Consistency::Latest) => Role::Leader,
                Some(Consistency::Linearizable) | None => t.role()?,
            };
            if let Some(seq) = cli.min_seq {
                wait(t, seq, cli.timeout)?;
            }
            Some(role)
        }
    };
    match read_at(cli.consistency, role, cli.min_seq)? {
        ReadAt::Linearizable => {
            barrier(t, cli.timeout)?;
            // This node's newest state now holds every write acknowledged
            // before the command started (its watermark only rises): the
            // command's reads need not ask the leader again, and a walk
            // (`count`) takes the node's fast path.
            Ok(ReadAt::Latest)
        }
        at => Ok(at),
    }
}

/// One linearizable read, tried again while the node answers `Busy` (a
/// Raft node just restarted, or not yet knowing its leader's address),
/// for at most `timeout`.
fn barrier(t: &Backend, timeout: Duration) -> Result<()> {
    let start = std::time::Instant::now();
    let mut pause = Duration::from_millis(10);
    loop {
        match t.stat_at("/", ReadAt::Linearizable) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Busy && start.elapsed() + pause < timeout => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Waits until the server has committed `seq`, at most `timeout`.
fn wait(t: &Backend, seq: u64, timeout: Duration) -> Result<()> {
    let start = std::time::Instant::now();
    loop {
        let left = timeout.saturating_sub(start.elapsed());
        let committed = t.wait_for(seq, left.min(SERVER_WAIT_CAP))?;
        if committed >= seq {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            return Err(not_caught_up(Some(committed), seq, start.elapsed()));
        }
    }
}

/// `--timeout`: seconds, with a fraction (`0.5`).
pub(crate) fn parse_timeout(s: &str) -> std::result::Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|e| format!("{s:?} is not a number of seconds: {e}"))?;
    if !(0.0..=86_400.0).contains(&secs) {
        return Err(format!("{s} is not between 0 and 86400 seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_linearizable_except_on_a_replica() {
        assert_eq!(read_at(None, None, None).unwrap(), ReadAt::Latest);
        assert_eq!(
            read_at(None, Some(Role::Leader), None).unwrap(),
            ReadAt::Linearizable
        );
        assert_eq!(
            read_at(None, Some(Role::Follower), Some(9)).unwrap(),
            ReadAt::Linearizable
        );
        assert_eq!(
            read_at(None, Some(Role::Replica), None).unwrap(),
            ReadAt::Latest
        );
        assert_eq!(
            read_at(None, Some(Role::Replica), Some(9)).unwrap(),
            ReadAt::AtLeast(9)
        );
    }

    #[test]
    fn an_explicit_linearizable_read_is_refused_by_a_replica_only() {
        let e = read_at(Some(Consistency::Linearizable), Some(Role::Replica), None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotLeader);
        assert_eq!(crate::exit::exit_code(e.kind()), 16);
        for role in [Role::Leader, Role::Follower] {
            assert_eq!(
                read_at(Some(Consistency::Linearizable), Some(role), None).unwrap(),
                ReadAt::Linearizable
            );
        }
        assert_eq!(
            read_at(Some(Consistency::Latest), Some(Role::Replica), Some(3)).unwrap(),
            ReadAt::AtLeast(3)
        );
        assert_eq!(
            read_at(Some(Consistency::Latest), None, None).unwrap(),
            ReadAt::Latest
        );
    }

    #[test]
    fn timeouts_parse_as_seconds() {
        assert_eq!(parse_timeout("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_timeout("3").unwrap(), Duration::from_secs(3));
        assert!(parse_timeout("-1").is_err());
        assert!(parse_timeout("NaN").is_err());
        assert!(parse_timeout("5s").is_err());
    }

    #[test]
    fn not_caught_up_has_its_own_exit_code() {
        let e = not_caught_up(Some(3), 9, Duration::from_millis(5));
        assert_eq!(crate::exit::exit_code(e.kind()), 17);
        assert!(e.to_string().contains("not caught up"), "{e}");
    }
}
