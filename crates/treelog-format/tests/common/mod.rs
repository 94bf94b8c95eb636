//! What the format crate's tests share.

use treelog_proto::event::{Event, Record};
use treelog_proto::types::{Attrs, FileType};

/// `create /a` at time 2 on a new database, as schema 2 has it.
pub(crate) fn tiny_record() -> Record {
    Record {
        seq: 1,
        time_ms: 2,
        events: vec![Event::Create {
            id: 2,
            parent: 1,
            name: "a".into(),
            path: "/a".into(),
            attrs: Attrs {
                kind: FileType::File,
                size: 0,
                block_size: 0,
                ctime_ms: 2,
                mtime_ms: 2,
                change_ms: 2,
                mode: 0o644,
                complete: false,
                owner: String::new(),
                group: String::new(),
            },
            parent_mtime_ms: Some(2),
            quotas: vec![],
        }],
    }
}
