//! Beside the layers: the store's threads, their scheduling classes, and
//! the failpoints of the reliability tests.

pub mod failpoint;
pub(crate) mod sched;
pub(crate) mod supervisor;
