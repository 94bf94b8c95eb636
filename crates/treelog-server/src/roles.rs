//! Roles: what each credential's role grants, and the one map from a
//! request to the power it needs ([`need`], an exhaustive match: a new
//! request does not compile until it is given one).
//!
//! For clients the roles are a hierarchy, admin ⊇ write ⊇ read, and admin
//! ⊇ stream; `stream` is beside `read` and `write` (a consumer of change
//! streams needs neither), and `peer` holds the node powers (Raft, the
//! replica stream, backup fetches) and only those: no client role has them.

use std::fmt;

use treelog::{Command, Error, Result};
use treelog_proto::protocol::{ClusterRequest, RequestBody};

/// A credential's role (docs/SECURITY.md, "Roles").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Admin,
    Write,
    Read,
    Stream,
    Peer,
    /// A mount's or a gateway's: reads, writes and change streams, made
    /// for the users it serves (`RequestAs`), whom a server with
    /// `--enforce-permissions` checks.
    Proxy,
}

impl Role {
    pub const ALL: [Role; 6] = [
        Role::Admin,
        Role::Write,
        Role::Read,
        Role::Stream,
        Role::Peer,
        Role::Proxy,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Write => "write",
            Role::Read => "read",
            Role::Stream => "stream",
            Role::Peer => "peer",
            Role::Proxy => "proxy",
        }
    }

    /// Whether the role itself grants `need` (node powers aside: see
    /// [`Identity::node`]).
    fn grants(self, need: Need) -> bool {
        use Need::*;
        match self {
            Role::Admin => matches!(need, Session | Read | Write | Stream | Ack | Admin | Backup),
            Role::Write => matches!(need, Session | Read | Write),
            Role::Read => matches!(need, Session | Read),
            Role::Stream => matches!(need, Session | Stream | Ack),
            Role::Peer => matches!(need, Session | Node | Backup | Ack),
            Role::Proxy => matches!(need, Session | Read | Write | Stream | Ack),
        }
    }

    /// Whether the role may make requests for users (`RequestAs`) on a
    /// server that enforces permissions.
    pub(crate) fn acts_for_users(self) -> bool {
        matches!(self, Role::Admin | Role::Proxy)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = Error;

    fn from_str(s: &str) -> Result<Role> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "role {s:?}: expected admin, write, read, stream, peer or proxy"
                ))
            })
    }
}

/// The power a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Harmless to anyone authenticated: ping, info, status, waiting for a
    /// sequence, cancelling one's own stream.
    Session,
    /// Reads of the namespace (stat, list, walk, count, attributes, pinned
    /// views).
    Read,
    /// Namespace mutations.
    Write,
    /// Change streams and their durable cursors (subscribe, ack, list).
    Stream,
    /// Acknowledging a cursor: a stream's, or the one a replica keeps on
    /// its source (a peer may do this, and nothing else of `Stream`).
    Ack,
    /// Membership, quotas, dropping cursors, `trusted.`/`security.`/
    /// `system.` attributes.
    Admin,
    /// Fetching a full backup: an admin's, or a replica's bootstrap.
    Backup,
    /// Raft messages and the replica stream: nodes only.
    Node,
}

/// Who a connection is, once its handshake checked its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The credential's name (`token` for `--require-token-file`,
    /// `anonymous` on a server that requires none).
    pub(crate) name: String,
    pub(crate) role: Role,
    /// Node powers beside the role's: the legacy shared token and a server
    /// without authentication have them, and so does a connection whose
    /// TLS identity is one of the cluster's node names.
    pub(crate) node: bool,
}

impl Identity {
    /// The identity of every connection to a server that requires no
    /// secret: everything, as before roles existed.
    pub(crate) fn anonymous() -> Identity {
        Identity {
            name: "anonymous".into(),
            role: Role::Admin,
            node: true,
        }
    }

    fn grants(&self, need: Need) -> bool {
        self.role.grants(need)
            || (self.node && matches!(need, Need::Node | Need::Backup | Need::Ack))
    }

    /// Whether the connection may send `body`: `PermissionDenied`
    /// otherwise, naming the credential, its role and what was refused.
    pub(crate) fn check(&self, body: &RequestBody) -> Result<()> {
        let need = need(body);
        if !self.grants(need) {
            return Err(Error::PermissionDenied(format!(
                "credential {} (role {}) may not send {}",
                self.name,
                self.role,
                crate::dispatch::request_name(body)
            )));
        }
        if matches!(self.role, Role::Stream | Role::Proxy) && !self.node {
            if let Some(cursor) = cursor_named(body) {
                if !self.owns_cursor(cursor) {
                    return Err(Error::PermissionDenied(format!(
                        "credential {} (role stream) may use only cursors named {0} or {0}.*, \
                         not {cursor:?}",
                        self.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// A stream credential's cursors are its own: named after it (`name`,
    /// or `name.` followed by anything).
    fn owns_cursor(&self, cursor: &str) -> bool {
        cursor
            .strip_prefix(self.name.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    }
}

/// The durable cursor a request names, if any.
fn cursor_named(body: &RequestBody) -> Option<&str> {
    match body {
        RequestBody::Subscribe(o) | RequestBody::SubscribeAt { opts: o, .. } => o.cursor.as_deref(),
        RequestBody::Ack { cursor, .. } | RequestBody::DropCursor { cursor } => Some(cursor),
        _ => None,
    }
}

/// Extended attribute namespaces only an admin may change (as Linux keeps
/// them to privileged processes).
const PRIVILEGED_XATTRS: [&str; 3] = ["trusted.", "security.", "system."];

fn privileged_xattr(name: &str) -> bool {
    PRIVILEGED_XATTRS.iter().any(|p| name.starts_with(p))
}

/// The power request `body` needs.
pub(crate) fn need(body: &RequestBody) -> Need {
    match body {
        RequestBody::Mutate(c) => match c {
            Command::SetQuota { .. }
            | Command::ClearQuota { .. }
            | Command::RecountQuota { .. } => Need::Admin,
            Command::SetXattr { name, .. } | Command::RemoveXattr { name, .. }
                if privileged_xattr(name) =>
            {
                Need::Admin
            }
            Command::Mkdir { .. }
            | Command::Create { .. }
            | Command::Complete { .. }
            | Command::SetSize { .. }
            | Command::SetAttr { .. }
            | Command::Delete { .. }
            | Command::Rename { .. }
            | Command::Symlink { .. }
            | Command::SetXattr { .. }
            | Command::RemoveXattr { .. } => Need::Write,
        },
        RequestBody::Stat { .. }
        | RequestBody::StatId { .. }
        | RequestBody::List { .. }
        | RequestBody::StatAt { .. }
        | RequestBody::StatIdAt { .. }
        | RequestBody::ListAt { .. }
        | RequestBody::Readlink { .. }
        | RequestBody::GetXattrs { .. }
        | RequestBody::Count { .. }
        | RequestBody::PinView
        | RequestBody::UnpinView { .. } => Need::Read,
        RequestBody::Subscribe(_) | RequestBody::SubscribeAt { .. } | RequestBody::ListCursors => {
            Need::Stream
        }
        RequestBody::Ack { .. } => Need::Ack,
        RequestBody::DropCursor { .. } => Need::Admin,
        RequestBody::Ping
        | RequestBody::Info
        | RequestBody::Status
        | RequestBody::WaitFor { .. }
        | RequestBody::Cancel { .. } => Need::Session,
        RequestBody::BackupBegin { .. }
        | RequestBody::BackupChunk { .. }
        | RequestBody::BackupEnd { .. } => Need::Backup,
        RequestBody::Replicate(_) | RequestBody::Raft { .. } => Need::Node,
        RequestBody::Cluster(req) => match req {
            ClusterRequest::Status => Need::Read,
            ClusterRequest::Init
            | ClusterRequest::AddLearner { .. }
            | ClusterRequest::Promote { .. }
            | ClusterRequest::Remove { .. }
            | ClusterRequest::TransferLeader { .. }
            | ClusterRequest::Snapshot => Need::Admin,
        },
    }
}

/// Whether request `body` is recorded in the audit log: every mutation,
/// and every admin or node operation that changes something or takes the
/// data away (cluster changes, cursor drops, backups, replica streams).
pub(crate) fn audited(body: &RequestBody) -> bool {
    match need(body) {
        Need::Write | Need::Admin | Need::Node => {
            // Raft's own traffic (a message per heartbeat) would drown the
            // log; the membership changes it carries are audited where an
            // operator asks for them (`Cluster`).
            !matches!(
                body,
                RequestBody::Raft { .. } | RequestBody::Cluster(ClusterRequest::Status)
            )
        }
        Need::Backup => matches!(body, RequestBody::BackupBegin { .. }),
        Need::Session | Need::Read | Need::Stream | Need::Ack => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use treelog_proto::protocol::{RaftRpc, ReplicateFrom};
    use treelog_proto::stream::SubscribeOptions;
    use treelog_proto::types::XattrFlag;
    use treelog_proto::ErrorKind;

    fn who(role: Role) -> Identity {
        Identity {
            name: "c".into(),
            role,
            node: false,
        }
    }

    fn one_of_each() -> Vec<(Need, RequestBody)> {
        let mkdir = Command::Mkdir {
            path: "/a".into(),
            parents: false,
            mode: 0o755,
            owner: String::new(),
            group: String::new(),
        };
        let xattr = |name: &str| Command::SetXattr {
            path: "/a".into(),
            name: name.into(),
            value: Default::default(),
            flag: XattrFlag::Either,
        };
        vec![
            (Need::Session, RequestBody::Ping),
            (Need::Read, RequestBody::Stat { path: "/".into() }),
            (Need::Write, RequestBody::Mutate(mkdir)),
            (Need::Write, RequestBody::Mutate(xattr("user.x"))),
            (Need::Admin, RequestBody::Mutate(xattr("trusted.x"))),
            (
                Need::Admin,
                RequestBody::Mutate(Command::ClearQuota { path: "/".into() }),
            ),
            (
                Need::Stream,
                RequestBody::Subscribe(SubscribeOptions::default()),
            ),
            (
                Need::Ack,
                RequestBody::Ack {
                    cursor: "c".into(),
                    seq: 1,
                },
            ),
            (Need::Admin, RequestBody::DropCursor { cursor: "c".into() }),
            (Need::Backup, RequestBody::BackupBegin { resume: None }),
            (
                Need::Node,
                RequestBody::Raft {
                    rpc: RaftRpc::Vote,
                    payload: vec![],
                },
            ),
            (
                Need::Node,
                RequestBody::Replicate(ReplicateFrom {
                    from: 1,
                    namespace: String::new(),
                    prev_crc: None,
                    max_batch_bytes: 1,
                    cursor: None,
                }),
            ),
            (Need::Admin, RequestBody::Cluster(ClusterRequest::Init)),
        ]
    }

    /// Each role against a request of each class.
    #[test]
    fn each_role_grants_its_classes_only() {
        use Need::*;
        let grants: [(Role, &[Need]); 6] = [
            (
                Role::Admin,
                &[Session, Read, Write, Stream, Ack, Admin, Backup],
            ),
            (Role::Write, &[Session, Read, Write]),
            (Role::Read, &[Session, Read]),
            (Role::Stream, &[Session, Stream, Ack]),
            (Role::Peer, &[Session, Node, Backup, Ack]),
            (Role::Proxy, &[Session, Read, Write, Stream, Ack]),
        ];
        for (role, allowed) in grants {
            for (n, body) in one_of_each() {
                assert_eq!(need(&body), n, "{body:?}");
                let want = allowed.contains(&n);
                let got = who(role).check(&body);
                assert_eq!(got.is_ok(), want, "{role} {body:?}: {got:?}");
                if let Err(e) = got {
                    assert_eq!(e.kind(), ErrorKind::PermissionDenied);
                }
            }
        }
    }

    #[test]
    fn node_powers_come_with_the_legacy_token_only() {
        let legacy = Identity {
            name: "token".into(),
            role: Role::Admin,
            node: true,
        };
        for (_, body) in one_of_each() {
            assert!(legacy.check(&body).is_ok(), "{body:?}");
        }
        let raft = RequestBody::Raft {
            rpc: RaftRpc::SnapshotBegin,
            payload: vec![],
        };
        assert!(who(Role::Admin).check(&raft).is_err());
    }

    #[test]
    fn a_stream_credential_uses_only_its_own_cursors() {
        let s = Identity {
            name: "indexer".into(),
            role: Role::Stream,
            node: false,
        };
        let sub = |c: &str| {
            RequestBody::Subscribe(SubscribeOptions {
                cursor: Some(c.into()),
                ..Default::default()
            })
        };
        let ack = |c: &str| RequestBody::Ack {
            cursor: c.into(),
            seq: 1,
        };
        for ok in ["indexer", "indexer.a", "indexer.b.c"] {
            assert!(s.check(&sub(ok)).is_ok(), "{ok}");
            assert!(s.check(&ack(ok)).is_ok(), "{ok}");
        }
        for bad in ["other", "indexerx", "indexe", ""] {
            assert!(s.check(&sub(bad)).is_err(), "{bad}");
            assert!(s.check(&ack(bad)).is_err(), "{bad}");
        }
        // An admin uses any cursor.
        assert!(who(Role::Admin).check(&ack("other")).is_ok());
    }
}
