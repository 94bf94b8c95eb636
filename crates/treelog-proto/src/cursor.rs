//! Durable cursors as callers see them: the persisted state of a named
//! cursor and its listing. The store keeps them (`docs/STREAMS.md`).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The persisted state of a named cursor (`meta` key `cursor/<name>`,
/// postcard-encoded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CursorState {
    /// Highest sequence the consumer acknowledged (0: none yet).
    pub acked: u64,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// Set when retention expired the cursor: (time, log start then).
    pub expired: Option<(u64, u64)>,
}

impl CursorState {
    /// Decodes a `cursor/<name>` value of `meta`; `name` is for the error.
    pub fn decode(name: &str, b: &[u8]) -> Result<CursorState> {
        postcard::from_bytes(b).map_err(|e| Error::corrupt("cursor", format!("{name}: {e}")))
    }

    pub fn encode(&self) -> Result<Vec<u8>> {
        postcard::to_stdvec(self).map_err(|e| Error::corrupt("cursor", e.to_string()))
    }
}

/// A cursor as listed by `admin cursors`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CursorInfo {
    pub name: String,
    pub state: CursorState,
    /// Records between the acknowledged position and the log's end.
    pub lag: u64,
}

pub fn validate_cursor_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "cursor name {name:?}: use 1 to 128 of [A-Za-z0-9._-]"
        )))
    }
}
