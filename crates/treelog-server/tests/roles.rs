//! Credentials and roles over real TCP: each role's allowed and refused
//! requests, client credentials refused on every node request, the
//! credentials file reloaded while the server runs, and the audit log's
//! lines.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use treelog::{Command, Durability, ErrorKind};
use treelog_client::{Client, ClientOptions};
use treelog_proto::protocol::{ClusterRequest, RaftRpc, ReplicateFrom, RequestBody};
use treelog_server::{add_credential, AuditTarget, Role, ServerConfig, ServerHandle};
use treelog_testkit::commands::{create, mkdir};
use treelog_testkit::poll;

fn config(data: &Path) -> ServerConfig {
    let mut c = ServerConfig::new(data.to_path_buf());
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.http = "127.0.0.1:0".parse().unwrap();
    c.store = c.store.durability(Durability::None);
    c
}

async fn connect(h: &ServerHandle, secret: &str) -> treelog::Result<Client> {
    Client::connect(
        h.bound.rpc,
        ClientOptions {
            token: Some(secret.to_owned()),
            ..Default::default()
        },
    )
    .await
}

/// A credential of each role in `file`: (role, its name, its secret).
fn one_of_each_role(file: &Path) -> Vec<(Role, String, String)> {
    Role::ALL
        .into_iter()
        .map(|r| {
            let name = format!("{r}-cred");
            let secret = add_credential(file, &name, r).unwrap();
            (r, name, secret)
        })
        .collect()
}

fn replicate() -> RequestBody {
    RequestBody::Replicate(ReplicateFrom {
        from: 1,
        namespace: "x".into(),
        prev_crc: None,
        max_batch_bytes: 1 << 16,
        cursor: None,
    })
}

/// A request of each class, and the roles that may send it.
fn matrix(cred: &str) -> Vec<(&'static str, RequestBody, &'static [Role])> {
    use Role::*;
    vec![
        (
            "ping",
            RequestBody::Ping,
            &[Admin, Write, Read, Stream, Peer, Proxy],
        ),
        (
            "stat",
            RequestBody::Stat { path: "/".into() },
            &[Admin, Write, Read, Proxy],
        ),
        (
            "mkdir",
            RequestBody::Mutate(mkdir(&format!("/{cred}"))),
            &[Admin, Write, Proxy],
        ),
        (
            "trusted xattr",
            RequestBody::Mutate(Command::SetXattr {
                path: "/".into(),
                name: "trusted.x".into(),
                value: Default::default(),
                flag: treelog::types::XattrFlag::Either,
            }),
            &[Admin],
        ),
        (
            "set quota",
            RequestBody::Mutate(Command::SetQuota {
                path: "/".into(),
                inodes: None,
                bytes: None,
            }),
            &[Admin],
        ),
        (
            "list cursors",
            RequestBody::ListCursors,
            &[Admin, Stream, Proxy],
        ),
        (
            "ack",
            RequestBody::Ack {
                cursor: cred.into(),
                seq: 0,
            },
            &[Admin, Stream, Peer, Proxy],
        ),
        (
            "drop cursor",
            RequestBody::DropCursor {
                cursor: cred.into(),
            },
            &[Admin],
        ),
        (
            "cluster",
            RequestBody::Cluster(ClusterRequest::Init),
            &[Admin],
        ),
        (
            "backup",
            RequestBody::BackupEnd { id: u64::MAX },
            &[Admin, Peer],
        ),
        (
            "raft",
            RequestBody::Raft {
                rpc: RaftRpc::Vote,
                payload: vec![],
            },
            &[Peer],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_is_granted_its_requests_and_refused_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    let creds = one_of_each_role(&file);
    let h = treelog_server::start({
        let mut c = config(&dir.path().join("data"));
        c.credentials = Some(file.clone());
        c
    })
    .await
    .unwrap();
    let mut refused = std::collections::HashMap::new();
    for (role, name, secret) in &creds {
        let c = connect(&h, secret).await.unwrap();
        for (what, body, allowed) in matrix(name) {
            let got = c.call(body).await;
            let denied = matches!(&got, Err(e) if e.kind() == ErrorKind::PermissionDenied);
            assert_eq!(
                !denied,
                allowed.contains(role),
                "{role} sending {what}: {got:?}"
            );
            if denied {
                *refused.entry(role.as_str()).or_insert(0u64) += 1;
            }
        }
    }
    // The refusals are counted by role.
    let m = h.server_metrics().unwrap();
    for (role, n) in refused {
        assert_eq!(
            m.permission_denied.with_label_values(&[role]).get(),
            n,
            "{role}"
        );
    }
    // A wrong secret does not connect at all.
    let e = connect(&h, &"0".repeat(64)).await.err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Unauthorized);
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_credentials_are_refused_every_node_request() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    let creds = one_of_each_role(&file);
    let h = treelog_server::start({
        let mut c = config(&dir.path().join("data"));
        c.credentials = Some(file.clone());
        c
    })
    .await
    .unwrap();
    let mut node_requests: Vec<RequestBody> = [
        RaftRpc::AppendEntries,
        RaftRpc::Vote,
        RaftRpc::PreVote,
        RaftRpc::SnapshotBegin,
        RaftRpc::SnapshotChunk,
        RaftRpc::SnapshotEnd,
        RaftRpc::TransferLeader,
        RaftRpc::ReadIndex,
    ]
    .into_iter()
    .map(|rpc| RequestBody::Raft {
        rpc,
        payload: vec![1, 2, 3],
    })
    .collect();
    node_requests.push(replicate());
    for (role, _, secret) in creds.iter().filter(|(r, ..)| *r != Role::Peer) {
        let c = connect(&h, secret).await.unwrap();
        let mut refused = node_requests.clone();
        if *role != Role::Admin {
            // An admin fetches backups; the other client roles do not.
            refused.extend([
                RequestBody::BackupBegin { resume: None },
                RequestBody::BackupChunk {
                    id: 1,
                    file: "CURRENT".into(),
                    offset: 0,
                    len: 10,
                },
                RequestBody::BackupEnd { id: 1 },
            ]);
        }
        for body in refused {
            let what = format!("{body:?}");
            let e = c.call(body).await.err().unwrap();
            assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{role} {what}: {e}");
        }
    }
    // The peer credential gets past the gate (this node is no cluster's:
    // InvalidArgument, not PermissionDenied).
    let peer = &creds.iter().find(|(r, ..)| *r == Role::Peer).unwrap().2;
    let c = connect(&h, peer).await.unwrap();
    let e = c
        .call(RequestBody::Raft {
            rpc: RaftRpc::Vote,
            payload: vec![],
        })
        .await
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // ... and it may not read or write the namespace.
    let e = c.stat("/").await.err().unwrap();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    h.shutdown().await.unwrap();

    // The legacy shared token is an admin with node powers.
    let token = "a-shared-token-of-at-least-32-chars";
    let h = treelog_server::start({
        let mut c = config(&dir.path().join("data"));
        c.token = Some(token.into());
        c
    })
    .await
    .unwrap();
    let c = connect(&h, token).await.unwrap();
    c.submit(mkdir("/legacy")).await.unwrap();
    let e = c
        .call(RequestBody::Raft {
            rpc: RaftRpc::Vote,
            payload: vec![],
        })
        .await
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_credentials_file_reloads_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    let old = add_credential(&file, "old", Role::Write).unwrap();
    let h = treelog_server::start({
        let mut c = config(&dir.path().join("data"));
        c.credentials = Some(file.clone());
        c
    })
    .await
    .unwrap();
    let kept = connect(&h, &old).await.unwrap();
    // A credential added to the file works without a restart.
    let new = add_credential(&file, "new", Role::Read).unwrap();
    let mut connected = None;
    for _ in 0..100 {
        if let Ok(c) = connect(&h, &new).await {
            connected = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c = connected.expect("the new credential is accepted within 10 s");
    c.stat("/").await.unwrap();
    // (A file that does not parse keeps the credentials loaded before:
    // the credentials module's unit test.)
    let good = std::fs::read_to_string(&file).unwrap();
    // A credential removed stops working for new connections.
    let without_old: String = good
        .lines()
        .filter(|l| !l.starts_with("old "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&file, without_old).unwrap();
    let mut gone = false;
    for _ in 0..100 {
        if connect(&h, &old).await.is_err() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the removed credential is refused within 10 s");
    // The connection it opened before keeps its identity.
    kept.submit(mkdir("/still")).await.unwrap();
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_has_a_line_per_mutation_and_admin_operation() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    let log = dir.path().join("audit.log");
    let writer = add_credential(&file, "ci", Role::Write).unwrap();
    let admin = add_credential(&file, "ops", Role::Admin).unwrap();
    let h = treelog_server::start({
        let mut c = config(&dir.path().join("data"));
        c.credentials = Some(file.clone());
        c.audit_log = Some(AuditTarget::File(log.clone()));
        c
    })
    .await
    .unwrap();
    let w = connect(&h, &writer).await.unwrap();
    let seq = w.submit(mkdir("/a")).await.unwrap();
    w.submit(Command::Rename {
        src: "/a".into(),
        dst: "/b".into(),
        overwrite: false,
    })
    .await
    .unwrap();
    let e = w.submit(create("/b")).await.err().unwrap();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists);
    let quota = Command::SetQuota {
        path: "/b".into(),
        inodes: Some(10),
        bytes: None,
    };
    let e = w.submit(quota.clone()).await.err().unwrap();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied);
    // Reads are not audited.
    w.stat("/b").await.unwrap();
    let a = connect(&h, &admin).await.unwrap();
    a.submit(quota).await.unwrap();
    let lines = {
        let mut lines = Vec::new();
        poll::eventually(10, "five audit lines", || {
            lines = std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .collect();
            lines.len() >= 5
        })
        .await;
        lines
    };
    assert_eq!(lines.len(), 5, "{lines:?}");
    let field = |i: usize, k: &str| lines[i][k].clone();
    let want = [
        ("ci", "write", "mkdir", "ok", vec!["/a"]),
        ("ci", "write", "rename", "ok", vec!["/a", "/b"]),
        ("ci", "write", "create", "already_exists", vec!["/b"]),
        ("ci", "write", "set_quota", "permission_denied", vec!["/b"]),
        ("ops", "admin", "set_quota", "ok", vec!["/b"]),
    ];
    for (i, (cred, role, request, outcome, paths)) in want.into_iter().enumerate() {
        assert_eq!(field(i, "credential"), cred, "{}", lines[i]);
        assert_eq!(field(i, "role"), role, "{}", lines[i]);
        assert_eq!(field(i, "request"), request, "{}", lines[i]);
        assert_eq!(field(i, "outcome"), outcome, "{}", lines[i]);
        assert_eq!(field(i, "paths"), serde_json::json!(paths), "{}", lines[i]);
        assert!(field(i, "peer").as_str().unwrap().starts_with("127.0.0.1:"));
        assert_eq!(field(i, "tls_identity"), Value::Null);
        assert!(field(i, "time_ms").as_u64().unwrap() > 0);
    }
    assert_eq!(field(0, "seq"), seq);
    assert!(field(1, "seq").as_u64().unwrap() > seq);
    assert_eq!(field(2, "seq"), Value::Null);
    // No secret in the log.
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(&writer) && !text.contains(&admin));
    h.shutdown().await.unwrap();
}

/// `--enforce-permissions`: a proxy's requests are checked as the user
/// they name; a credential that may not act for users cannot name one; a
/// write credential's own requests are its name's; an admin's are not
/// checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enforcing_server_checks_each_request_as_its_user() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    let creds = one_of_each_role(&file);
    let secret = |r: Role| creds.iter().find(|c| c.0 == r).unwrap().2.clone();
    let h = treelog_server::start({
        let mut c = config(&dir.path().join("data"));
        c.credentials = Some(file.clone());
        c.enforce_permissions = true;
        c
    })
    .await
    .unwrap();
    let kind = |r: treelog::Result<u64>| r.map_err(|e| e.kind()).err();
    let admin = connect(&h, &secret(Role::Admin)).await.unwrap();
    let dir_as = |path: &str, mode, owner: &str, group: &str| Command::Mkdir {
        path: path.into(),
        parents: false,
        mode,
        owner: owner.into(),
        group: group.into(),
    };
    admin
        .submit(dir_as("/home", 0o755, "root", "root"))
        .await
        .unwrap();
    admin
        .submit(dir_as("/home/alice", 0o700, "alice", "staff"))
        .await
        .unwrap();
    let proxy = connect(&h, &secret(Role::Proxy)).await.unwrap();
    let alice = proxy.for_caller(treelog::Caller::new("alice", vec!["staff".into()]));
    let bob = proxy.for_caller(treelog::Caller::new("bob", vec!["users".into()]));
    alice.submit(create("/home/alice/f")).await.unwrap();
    let f = admin.stat("/home/alice/f").await.unwrap();
    assert_eq!(
        (f.attrs.owner.as_str(), f.attrs.group.as_str()),
        ("alice", "staff")
    );
    assert_eq!(
        kind(bob.submit(create("/home/alice/g")).await),
        Some(ErrorKind::PermissionDenied)
    );
    assert_eq!(
        bob.stat("/home/alice/f").await.map_err(|e| e.kind()).err(),
        Some(ErrorKind::PermissionDenied)
    );
    // A write credential may not name a user; its own requests are its
    // name's ("write-cred", in no group).
    let write = connect(&h, &secret(Role::Write)).await.unwrap();
    let as_root = write.for_caller(treelog::Caller::new("root", vec![]));
    assert_eq!(
        kind(as_root.submit(mkdir("/w")).await),
        Some(ErrorKind::PermissionDenied)
    );
    assert_eq!(
        kind(write.submit(mkdir("/home/w")).await),
        Some(ErrorKind::PermissionDenied)
    );
    // The proxy itself, naming no one, is checked as its own name too.
    assert_eq!(
        kind(proxy.submit(mkdir("/home/p")).await),
        Some(ErrorKind::PermissionDenied)
    );
    // Root, named by the proxy, and the admin are let through.
    let root = proxy.for_caller(treelog::Caller::new("root", vec!["root".into()]));
    root.submit(mkdir("/home/r")).await.unwrap();
    admin.submit(mkdir("/home/a")).await.unwrap();
    h.shutdown().await.unwrap();
}
