//! Protocol 1's translation: what a protocol-1 client is sent of replies
//! it has no words for, and what it may not send.

use std::sync::Arc;

use treelog_proto::event::{Event, Update};
use treelog_proto::protocol::{self, ClientMsg, NodeStatus, RequestBody, ResponseBody, Role};
use treelog_proto::stream::{Scope, ScopedEvent, StreamItem};
use treelog_proto::types::{Attrs, Bytes, FileType, Inode};
use treelog_proto::{v1, ErrorKind, ReadAt};

fn inode(kind: FileType) -> Inode {
    Inode {
        id: 7,
        parent: 1,
        name: "x".into(),
        attrs: Attrs {
            kind,
            change_ms: 5,
            ..Attrs::default()
        },
    }
}

fn error_kind(b: &v1::ResponseBody) -> v1::ErrorKind {
    match b {
        v1::ResponseBody::Error { kind, .. } => *kind,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn a_file_translates_and_a_symbolic_link_is_incompatible() {
    match v1::response(&ResponseBody::Inode(inode(FileType::File))) {
        v1::ResponseBody::Inode(i) => {
            assert_eq!((i.id, i.attrs.kind), (7, v1::FileType::File));
        }
        other => panic!("{other:?}"),
    }
    let r = v1::response(&ResponseBody::Inode(inode(FileType::Symlink)));
    assert_eq!(error_kind(&r), v1::ErrorKind::Incompatible, "{r:?}");
}

#[test]
fn error_kinds_protocol_1_lacks_become_their_nearest() {
    let r = v1::response(&ResponseBody::Error {
        kind: ErrorKind::QuotaExceeded,
        message: "quota exceeded: /q".into(),
    });
    assert_eq!(error_kind(&r), v1::ErrorKind::InvalidArgument);
    let r = v1::response(&ResponseBody::Error {
        kind: ErrorKind::PermissionDenied,
        message: "permission denied".into(),
    });
    assert_eq!(error_kind(&r), v1::ErrorKind::Unauthorized);
    // The kinds they share keep their wire index.
    let r = v1::response(&ResponseBody::Error {
        kind: ErrorKind::Lagging,
        message: String::new(),
    });
    assert_eq!(error_kind(&r), v1::ErrorKind::Lagging);
    assert_eq!(
        protocol::encode(&ErrorKind::Lagging).unwrap(),
        protocol::encode(&v1::ErrorKind::Lagging).unwrap()
    );
}

#[test]
fn a_followers_status_is_incompatible() {
    let st = NodeStatus {
        role: Role::Follower,
        leader: None,
        namespace: "n".into(),
        applied_seq: 1,
        leader_committed_seq: 1,
        lag_records: 0,
        lag_ms: 0,
        connected: true,
        log_start: 1,
        log_bytes: 0,
    };
    let r = v1::response(&ResponseBody::Status(st.clone()));
    assert_eq!(error_kind(&r), v1::ErrorKind::Incompatible);
    let r = v1::response(&ResponseBody::Status(NodeStatus {
        role: Role::Leader,
        ..st
    }));
    assert!(matches!(r, v1::ResponseBody::Status(s) if s.role == v1::Role::Leader));
}

fn record(events: Vec<Event>) -> StreamItem {
    StreamItem::Record {
        seq: 9,
        time_ms: 1,
        events: events
            .into_iter()
            .map(|e| ScopedEvent {
                scope: Scope::Inside,
                event: Arc::new(e),
            })
            .collect(),
    }
}

fn set_attr() -> Event {
    Event::SetAttr(Update {
        id: 7,
        parent: 1,
        name: "x".into(),
        path: "/x".into(),
        old: Attrs::default(),
        new: Attrs::default(),
        quotas: vec![3],
    })
}

fn set_xattr() -> Event {
    Event::SetXattr {
        id: 7,
        path: "/x".into(),
        name: "user.a".into(),
        value: Bytes(b"v".to_vec()),
        old: None,
        change_ms: 2,
    }
}

#[test]
fn stream_events_outside_protocol_1s_namespace_are_left_out() {
    match v1::stream_item(&record(vec![set_xattr(), set_attr()])).unwrap() {
        v1::StreamItem::Record { seq, events, .. } => {
            assert_eq!(seq, 9);
            assert_eq!(events.len(), 1);
            assert!(matches!(events[0].event, v1::Event::SetAttr(_)));
        }
        other => panic!("{other:?}"),
    }
    // Nothing left of a record: its position still reaches the client.
    assert_eq!(
        v1::stream_item(&record(vec![set_xattr()])).unwrap(),
        v1::StreamItem::Progress { seq: 9 }
    );
    let link = Event::Symlink {
        id: 8,
        parent: 1,
        name: "l".into(),
        path: "/l".into(),
        target: "x".into(),
        attrs: Attrs {
            kind: FileType::Symlink,
            ..Attrs::default()
        },
        parent_mtime_ms: 0,
        quotas: vec![],
    };
    let e = v1::stream_item(&record(vec![set_attr(), link])).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Incompatible, "{e}");
}

#[test]
fn requests_protocol_1_lacks_do_not_decode_and_the_rest_translate() {
    let count = protocol::encode(&ClientMsg::Request {
        id: 1,
        body: RequestBody::Count {
            path: "/".into(),
            at: ReadAt::Latest,
        },
    })
    .unwrap();
    let e = v1::decode_client(&count[4..]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
    let stat_at = protocol::encode(&ClientMsg::Request {
        id: 2,
        body: RequestBody::StatAt {
            path: "/a".into(),
            at: ReadAt::Exactly(4),
        },
    })
    .unwrap();
    assert_eq!(
        v1::decode_client(&stat_at[4..]).unwrap(),
        ClientMsg::Request {
            id: 2,
            body: RequestBody::StatAt {
                path: "/a".into(),
                at: ReadAt::Exactly(4)
            }
        }
    );
    let linearizable = protocol::encode(&ClientMsg::Request {
        id: 3,
        body: RequestBody::StatAt {
            path: "/a".into(),
            at: ReadAt::Linearizable,
        },
    })
    .unwrap();
    assert!(v1::decode_client(&linearizable[4..]).is_err());
    let replicate = v1::refusal(&RequestBody::BackupBegin { resume: None }).unwrap();
    assert_eq!(replicate.kind(), ErrorKind::Incompatible);
    assert!(v1::refusal(&RequestBody::Ping).is_none());
}
