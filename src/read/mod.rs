//! What readers see: the committed states the writer publishes
//! ([`publication`]), and the caches, pins and waits in front of them.

pub(crate) mod memo;
pub(crate) mod publication;
pub(crate) mod reader_cache;
pub(crate) mod retained;
pub(crate) mod tail_cache;
pub(crate) mod view;
pub(crate) mod walk;
pub(crate) mod watermark;

pub use treelog_proto::read::{Read, ReadAt};
