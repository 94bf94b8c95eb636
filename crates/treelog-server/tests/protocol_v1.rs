//! Protocol 1, still served (docs/PROTOCOL.md, "Protocol 1, still
//! served"). The golden frames below were encoded by the protocol crate of
//! the last release that spoke protocol 1 (its types, its postcard), not by
//! this one; they are sent byte for byte to a real server over TCP and its
//! replies compared with the golden replies, byte for byte, once the fields
//! no request can fix are masked: an inode's `ctime_ms` and `mtime_ms`
//! (the clock at the create; the golden ones say 1,700,000,000,000) and
//! the Welcome's `server` text (the release's version).

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use treelog::stream::StartFrom;
use treelog::{Command, ErrorKind};
use treelog_proto::protocol::{self, ReplicateFrom};
use treelog_proto::types::{Bytes, XattrFlag};
use treelog_proto::v1;
use treelog_testkit::wire;

mod support;
use support::server;

/// Frames of protocol 1 as its last release encoded them: (what, request,
/// reply), in the order a client sends them on one connection to a new,
/// empty server.
const GOLDEN: &[(&str, &str, &str)] = &[
    (
        "hello",
        "00 00 00 0e 00 54 4c 4f 47 01 00 06 67 6f 6c 64 65 6e",
        "00 00 00 14 00 01 0d 74 72 65 65 6c 6f 67 20 30 2e 31 2e 30 00 80 80 40",
    ),
    (
        "mkdir /g",
        "00 00 00 16 01 01 00 00 02 2f 67 00 ed 03 05 61 6c 69 63 65 05 73 74 61 66 66",
        "00 00 00 04 01 01 00 01",
    ),
    (
        "create /g/f",
        "00 00 00 1c 01 02 00 01 04 2f 67 2f 66 00 a4 03 05 61 6c 69 63 65 05 73 74 61 66 66 \
         80 80 80 40",
        "00 00 00 04 01 02 00 02",
    ),
    (
        "stat /g/f",
        "00 00 00 08 01 03 01 04 2f 67 2f 66",
        "00 00 00 28 01 03 01 03 02 01 66 00 00 80 80 80 40 80 d0 95 ff bc 31 80 d0 95 ff bc \
         31 a4 03 00 05 61 6c 69 63 65 05 73 74 61 66 66",
    ),
    (
        "list /g",
        "00 00 00 08 01 04 03 02 2f 67 00 0a",
        "00 00 00 2c 01 04 02 01 01 66 03 02 01 66 00 00 80 80 80 40 80 d0 95 ff bc 31 80 d0 \
         95 ff bc 31 a4 03 00 05 61 6c 69 63 65 05 73 74 61 66 66 00",
    ),
    (
        "stat /missing",
        "00 00 00 0c 01 05 01 08 2f 6d 69 73 73 69 6e 67",
        "00 00 00 28 01 05 07 00 23 6e 6f 20 73 75 63 68 20 66 69 6c 65 20 6f 72 20 64 69 72 \
         65 63 74 6f 72 79 3a 20 2f 6d 69 73 73 69 6e 67",
    ),
];

/// The times the golden inode carries.
const GOLDEN_MS: u64 = 1_700_000_000_000;
const GUARD: Duration = Duration::from_secs(30);

fn bytes(hex: &str) -> Vec<u8> {
    hex.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The payload of a whole frame (its length checked).
fn payload(frame: &[u8]) -> &[u8] {
    let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(len, frame.len() - 4, "the frame's length prefix");
    &frame[4..]
}

/// The next frame from the server, whole (length prefix included).
async fn recv_frame(s: &mut TcpStream) -> Vec<u8> {
    let p = tokio::time::timeout(GUARD, protocol::read_frame(s, 1 << 20))
        .await
        .expect("a reply within the guard")
        .expect("read a frame")
        .expect("the server closed the connection");
    let mut f = (p.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(&p);
    f
}

/// The next message, decoded as protocol 1 (no bytes left over).
async fn recv_v1(s: &mut TcpStream) -> v1::ServerMsg {
    let f = recv_frame(s).await;
    protocol::decode::<v1::ServerMsg>(payload(&f))
        .unwrap_or_else(|e| panic!("not a protocol-1 message ({e}): {}", hex(&f)))
}

fn mask_attrs(a: &mut v1::Attrs) {
    assert!(a.ctime_ms > 0 && a.mtime_ms >= a.ctime_ms, "{a:?}");
    a.ctime_ms = GOLDEN_MS;
    a.mtime_ms = GOLDEN_MS;
}

/// `msg` with the fields no request fixes set to the golden ones.
fn masked(mut msg: v1::ServerMsg) -> v1::ServerMsg {
    match &mut msg {
        v1::ServerMsg::Welcome { server, .. } => {
            assert!(server.starts_with("treelog "), "{server}");
            *server = "treelog 0.1.0".into();
        }
        v1::ServerMsg::Response { body, .. } => match body {
            v1::ResponseBody::Inode(i) => mask_attrs(&mut i.attrs),
            v1::ResponseBody::Page(p) => {
                for e in &mut p.entries {
                    mask_attrs(&mut e.inode.attrs);
                }
            }
            _ => {}
        },
        v1::ServerMsg::Fatal { .. } => {}
    }
    msg
}

/// The golden frames are protocol 1's messages as this build defines them
/// (`treelog_proto::v1`): each decodes, with nothing left over, and
/// encodes back to the same bytes.
#[test]
fn the_golden_frames_are_protocol_1_as_v1_defines_it() {
    for (what, req, reply) in GOLDEN {
        let req = bytes(req);
        let m: v1::ClientMsg = protocol::decode(payload(&req)).unwrap();
        assert_eq!(protocol::encode(&m).unwrap(), req, "{what}: request");
        let reply = bytes(reply);
        let m: v1::ServerMsg = protocol::decode(payload(&reply)).unwrap();
        assert_eq!(protocol::encode(&m).unwrap(), reply, "{what}: reply");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_1_client_gets_the_golden_replies() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |_| {}).await;
    let mut s = TcpStream::connect(h.bound.rpc).await.unwrap();
    for (what, req, reply) in GOLDEN {
        s.write_all(&bytes(req)).await.unwrap();
        let got = masked(recv_v1(&mut s).await);
        assert_eq!(
            hex(&protocol::encode(&got).unwrap()),
            hex(&bytes(reply)),
            "{what}: {got:?}"
        );
    }
    // The connection still speaks protocol 1, and a protocol-2 client
    // on another one sees what it wrote.
    let c = server::client(&h).await;
    assert_eq!(c.stat("/g/f").await.unwrap().attrs.owner, "alice");
    h.shutdown().await.unwrap();
}

/// A protocol-1 connection after its handshake.
async fn v1_connection(h: &treelog_server::ServerHandle) -> TcpStream {
    let mut s = TcpStream::connect(h.bound.rpc).await.unwrap();
    s.write_all(&wire::hello(v1::VERSION, None)).await.unwrap();
    match recv_v1(&mut s).await {
        v1::ServerMsg::Welcome { version, .. } => assert_eq!(version, v1::VERSION),
        other => panic!("expected Welcome, got {other:?}"),
    }
    s
}

async fn ask_v1(s: &mut TcpStream, id: u64, body: v1::RequestBody) -> v1::ResponseBody {
    let f = protocol::encode(&v1::ClientMsg::Request { id, body }).unwrap();
    s.write_all(&f).await.unwrap();
    match recv_v1(s).await {
        v1::ServerMsg::Response { id: got, body } if got == id => body,
        other => panic!("expected the reply to {id}, got {other:?}"),
    }
}

fn v1_error(b: &v1::ResponseBody) -> (v1::ErrorKind, &str) {
    match b {
        v1::ResponseBody::Error { kind, message } => (*kind, message),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn v1_stat(path: &str) -> v1::RequestBody {
    v1::RequestBody::Stat { path: path.into() }
}

fn v1_mkdir(path: &str) -> v1::RequestBody {
    v1::RequestBody::Mutate(v1::Command::Mkdir {
        path: path.into(),
        parents: false,
        mode: 0o755,
        owner: String::new(),
        group: String::new(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_protocol_1_cannot_express_is_answered_with_an_error_it_has() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |_| {}).await;
    let c = server::client(&h).await;
    c.submit(Command::Symlink {
        target: "elsewhere".into(),
        path: "/l".into(),
        parents: false,
        owner: String::new(),
        group: String::new(),
    })
    .await
    .unwrap();
    let mut s = v1_connection(&h).await;

    // A symbolic link, alone or in a listing.
    let r = ask_v1(&mut s, 1, v1_stat("/l")).await;
    let (kind, msg) = v1_error(&r);
    assert_eq!(kind, v1::ErrorKind::Incompatible, "{msg}");
    assert!(msg.contains("symbolic link"), "{msg}");
    let r = ask_v1(
        &mut s,
        2,
        v1::RequestBody::List {
            path: "/".into(),
            start_after: None,
            limit: 10,
        },
    )
    .await;
    assert_eq!(v1_error(&r).0, v1::ErrorKind::Incompatible);

    // A quota's refusal: an invalid argument in protocol 1.
    c.submit(Command::Mkdir {
        path: "/q".into(),
        parents: false,
        mode: 0o755,
        owner: String::new(),
        group: String::new(),
    })
    .await
    .unwrap();
    c.submit(Command::SetQuota {
        path: "/q".into(),
        inodes: Some(1),
        bytes: None,
    })
    .await
    .unwrap();
    assert!(matches!(
        ask_v1(&mut s, 3, v1_mkdir("/q/a")).await,
        v1::ResponseBody::Seq(_)
    ));
    let r = ask_v1(&mut s, 4, v1_mkdir("/q/b")).await;
    let (kind, msg) = v1_error(&r);
    assert_eq!(kind, v1::ErrorKind::InvalidArgument, "{msg}");
    assert!(msg.contains("quota"), "{msg}");

    // Format 2's records and files.
    let r = ask_v1(
        &mut s,
        5,
        v1::RequestBody::Replicate(ReplicateFrom {
            from: 1,
            namespace: String::new(),
            prev_crc: None,
            max_batch_bytes: 1 << 16,
            cursor: None,
        }),
    )
    .await;
    assert_eq!(v1_error(&r).0, v1::ErrorKind::Incompatible);
    let r = ask_v1(&mut s, 6, v1::RequestBody::BackupBegin { resume: None }).await;
    assert_eq!(v1_error(&r).0, v1::ErrorKind::Incompatible);

    // The connection goes on.
    assert!(matches!(
        ask_v1(&mut s, 7, v1_stat("/q/a")).await,
        v1::ResponseBody::Inode(i) if i.attrs.kind == v1::FileType::Directory
    ));

    // A request protocol 1 lacks does not decode: the connection ends.
    let count = protocol::encode(&protocol::ClientMsg::Request {
        id: 8,
        body: protocol::RequestBody::Count {
            path: "/".into(),
            at: treelog::ReadAt::Latest,
        },
    })
    .unwrap();
    s.write_all(&count).await.unwrap();
    match recv_v1(&mut s).await {
        v1::ServerMsg::Fatal { kind, .. } => assert_eq!(kind, v1::ErrorKind::Protocol),
        other => panic!("expected Fatal, got {other:?}"),
    }

    // A version neither 1 nor 2.
    let mut s = TcpStream::connect(h.bound.rpc).await.unwrap();
    s.write_all(&wire::hello(3, None)).await.unwrap();
    let (kind, msg) = wire::recv_fatal(&mut s, GUARD).await;
    assert_eq!(kind, ErrorKind::Protocol);
    assert!(msg.contains("speaks 1 and 2"), "{msg}");
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_1_subscription_skips_attributes_and_ends_at_a_symbolic_link() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |_| {}).await;
    let c = server::client(&h).await;
    let mut s = v1_connection(&h).await;
    let sub = protocol::encode(&v1::ClientMsg::Request {
        id: 1,
        body: v1::RequestBody::Subscribe(v1::SubscribeOptions {
            from: StartFrom::Seq(1),
            filter: v1::Filter {
                prefix: None,
                kinds: None,
            },
            cursor: None,
            resync_on_move_in: None,
        }),
    })
    .unwrap();
    s.write_all(&sub).await.unwrap();
    let d = c
        .submit(Command::Mkdir {
            path: "/d".into(),
            parents: false,
            mode: 0o755,
            owner: String::new(),
            group: String::new(),
        })
        .await
        .unwrap();
    let x = c
        .submit(Command::SetXattr {
            path: "/d".into(),
            name: "user.a".into(),
            value: Bytes(b"v".to_vec()),
            flag: XattrFlag::Either,
        })
        .await
        .unwrap();
    c.submit(Command::Symlink {
        target: "t".into(),
        path: "/d/l".into(),
        parents: false,
        owner: String::new(),
        group: String::new(),
    })
    .await
    .unwrap();
    let mut seen = Vec::new();
    let (kind, message) = loop {
        match recv_v1(&mut s).await {
            v1::ServerMsg::Response {
                id: 1,
                body: v1::ResponseBody::Item(item),
            } => seen.push(item),
            v1::ServerMsg::Response {
                id: 1,
                body: v1::ResponseBody::Error { kind, message },
            } => break (kind, message),
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(kind, v1::ErrorKind::Incompatible, "{message}");
    assert!(message.contains("/d/l"), "{message}");
    let create = seen.iter().any(|i| {
        matches!(i, v1::StreamItem::Record { seq, events, .. }
            if *seq == d && matches!(&events[0].event, v1::Event::Create { path, .. } if path == "/d"))
    });
    assert!(create, "{seen:?}");
    // The extended attribute's record reached the client as its position
    // alone.
    assert!(
        seen.iter()
            .all(|i| !matches!(i, v1::StreamItem::Record { seq, .. } if *seq == x)),
        "{seen:?}"
    );
    assert!(
        seen.contains(&v1::StreamItem::Progress { seq: x }),
        "{seen:?}"
    );
    h.shutdown().await.unwrap();
}
