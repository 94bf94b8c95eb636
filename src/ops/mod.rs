//! Operations on a whole store: backups and restores, replay and rebuilds,
//! verification and dumps.

pub mod admin;
pub mod backup;
pub mod catch_up;
pub mod recovery;
pub(crate) mod replay_progress;
