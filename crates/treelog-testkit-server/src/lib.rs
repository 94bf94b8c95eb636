//! What the tests of the crates built on the server share beyond
//! `treelog-testkit`: a real server in the process ([`server`]) and the
//! state of a closed store ([`store`]). Both need the engine, so neither
//! the engine's tests nor the server's can use this crate (it would be a
//! dev-dependency cycle).

pub mod server;
pub mod store;

pub use store::closed_state;
