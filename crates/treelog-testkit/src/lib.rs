//! What the tests of every crate of the workspace share, the engine's own
//! included: the crash worker (a child process running the test binary)
//! and what its output implies about the store ([`worker`]), seeded
//! randomness and the rounds of randomized loops ([`random`]), waiting
//! for conditions ([`poll`]), running a binary ([`cli`]), commands
//! ([`commands`]), clients of a server ([`client`]), its RPC port byte by
//! byte ([`wire`]), its HTTP port ([`http`]), server processes started,
//! killed, paused and stopped ([`process`]), and a linearizability
//! checker ([`history`]).
//!
//! Nothing here depends on the engine: the helpers that start a server in
//! the process or read a store are `treelog-testkit-server`'s, those of
//! NATS `treelog-testkit-nats`'s.

pub mod cli;
pub mod client;
pub mod commands;
pub mod history;
pub mod http;
pub mod poll;
pub mod process;
pub mod random;
pub mod wire;
pub mod worker;

pub use random::{rounds, Rng};
pub use worker::{Expect, Worker};
