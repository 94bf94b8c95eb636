//! TLS on the RPC and HTTP ports, with real handshakes over TCP: the Rust
//! client over TLS, plaintext beside it or refused (`require_tls`),
//! mutual TLS naming and refusing clients, and a certificate rotated while
//! a connection stays open.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use treelog::{Durability, ErrorKind};
use treelog_client::{Client, ClientOptions, ClientTls};
use treelog_server::{ServerConfig, ServerHandle};
use treelog_testkit::commands::mkdir;
use treelog_tls::certs::{Ca, CertSpec};
use treelog_tls::{fingerprint, ClientAuth, ServerTls};

struct Pki {
    dir: tempfile::TempDir,
    ca: Ca,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::create(name, 1).unwrap();
        ca.write(dir.path()).unwrap();
        Pki { dir, ca }
    }

    fn issue(&self, mut spec: CertSpec) -> (PathBuf, PathBuf) {
        spec.ips = vec!["127.0.0.1".parse().unwrap()];
        let name = spec.name.clone();
        self.ca
            .issue(&spec)
            .unwrap()
            .write(self.dir.path(), &name)
            .unwrap()
    }

    fn ca_pem(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    fn client(&self, own: Option<&(PathBuf, PathBuf)>) -> Arc<ClientTls> {
        let own = own.map(|(c, k)| (c.as_path(), k.as_path()));
        Arc::new(ClientTls::load(&self.ca_pem(), own).unwrap())
    }
}

async fn start(data: &Path, tls: ServerTls, require_tls: bool) -> ServerHandle {
    let mut c = ServerConfig::new(data.to_path_buf());
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.http = "127.0.0.1:0".parse().unwrap();
    c.store = c.store.durability(Durability::None);
    c.tls = Some(tls);
    c.require_tls = require_tls;
    treelog_server::start(c).await.expect("start the server")
}

fn over(tls: Option<Arc<ClientTls>>) -> ClientOptions {
    ClientOptions {
        tls,
        ..Default::default()
    }
}

fn handshakes(h: &ServerHandle, outcome: &str) -> u64 {
    let m = h.server_metrics().expect("metrics");
    m.tls_handshakes.with_label_values(&[outcome]).get()
}

/// The fingerprint of the certificate the server at `addr` serves a new
/// connection now.
async fn served(addr: SocketAddr, tls: &ClientTls) -> String {
    let sock = TcpStream::connect(addr).await.unwrap();
    let s = tls.connect(addr, sock).await.unwrap();
    fingerprint(&s.get_ref().1.peer_certificates().unwrap()[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_plaintext_clients_share_the_port_unless_tls_is_required() {
    let pki = Pki::new("test ca");
    let (cert, key) = pki.issue(CertSpec::node("node-1"));
    let dir = tempfile::tempdir().unwrap();
    let tls = ServerTls::load(&cert, &key, None).unwrap();
    let h = start(dir.path(), tls.clone(), false).await;

    let secure = Client::connect(h.bound.rpc, over(Some(pki.client(None))))
        .await
        .unwrap();
    secure.submit(mkdir("/over-tls")).await.unwrap();
    let plain = Client::connect(h.bound.rpc, over(None)).await.unwrap();
    assert_eq!(plain.stat("/over-tls").await.unwrap().name, "over-tls");
    assert_eq!(handshakes(&h, "ok"), 1);

    // A client that trusts another CA fails its handshake, counted.
    let stranger = Pki::new("stranger ca");
    let e = Client::connect(h.bound.rpc, over(Some(stranger.client(None))))
        .await
        .err()
        .expect("refused");
    assert!(e.to_string().contains("TLS handshake"), "{e}");
    treelog_testkit::poll::eventually(10, "the failed handshake counted", || {
        handshakes(&h, "failed") == 1
    })
    .await;
    h.shutdown().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let h = start(dir.path(), tls, true).await;
    let e = Client::connect(h.bound.rpc, over(None))
        .await
        .err()
        .expect("refused");
    assert_eq!(e.kind(), ErrorKind::Unauthorized, "{e}");
    assert!(e.to_string().contains("requires TLS"), "{e}");
    let m = h.server_metrics().unwrap();
    assert_eq!(m.plaintext_refused.get(), 1);
    let secure = Client::connect(h.bound.rpc, over(Some(pki.client(None))))
        .await
        .unwrap();
    secure.ping().await.unwrap();
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_refuses_unknown_and_expired_client_certificates() {
    let pki = Pki::new("test ca");
    let (cert, key) = pki.issue(CertSpec::node("node-1"));
    let alice = pki.issue(CertSpec::client("alice"));
    let mut old = CertSpec::client("old");
    old.expired = true;
    let old = pki.issue(old);
    let stranger_pki = Pki::new("stranger ca");
    let stranger = stranger_pki.issue(CertSpec::client("stranger"));
    let stranger = Arc::new(
        ClientTls::load(
            &pki.ca_pem(),
            Some((stranger.0.as_path(), stranger.1.as_path())),
        )
        .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let ca = pki.ca_pem();
    let tls = ServerTls::load(&cert, &key, Some((ca.as_path(), ClientAuth::Required))).unwrap();
    let h = start(dir.path(), tls, true).await;

    let c = Client::connect(h.bound.rpc, over(Some(pki.client(Some(&alice)))))
        .await
        .unwrap();
    c.submit(mkdir("/alice")).await.unwrap();
    for (who, tls) in [
        ("no certificate", pki.client(None)),
        ("another CA's", stranger),
        ("expired", pki.client(Some(&old))),
    ] {
        // TLS 1.3: the client learns of the refusal at its first read,
        // the Welcome.
        let r = Client::connect(h.bound.rpc, over(Some(tls))).await;
        assert!(r.is_err(), "{who}: served");
    }
    treelog_testkit::poll::eventually(10, "three failed handshakes counted", || {
        handshakes(&h, "failed") == 3
    })
    .await;
    h.shutdown().await.unwrap();
}

fn replace(src: &Path, dst: &Path) {
    let tmp = dst.with_extension("new");
    std::fs::copy(src, &tmp).unwrap();
    std::fs::rename(&tmp, dst).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_serves_new_connections_and_spares_open_ones() {
    let pki = Pki::new("test ca");
    let (cert, key) = pki.issue(CertSpec::node("node-1"));
    let dir = tempfile::tempdir().unwrap();
    let tls = ServerTls::load(&cert, &key, None).unwrap();
    let h = start(dir.path(), tls.clone(), true).await;
    let client_tls = pki.client(None);
    let before = served(h.bound.rpc, &client_tls).await;
    assert_eq!(before, tls.fingerprint());
    let kept = Client::connect(h.bound.rpc, over(Some(client_tls.clone())))
        .await
        .unwrap();
    kept.submit(mkdir("/before")).await.unwrap();

    let (cert2, key2) = pki.issue(CertSpec::node("node-1b"));
    replace(&cert2, &cert);
    replace(&key2, &key);
    // What SIGHUP does (the file poll does it within seconds too).
    tls.reload().unwrap();
    let after = served(h.bound.rpc, &client_tls).await;
    assert_ne!(after, before);
    assert_eq!(
        after,
        fingerprint(&treelog_tls::load_certs(&cert2).unwrap()[0])
    );

    // The connection opened before goes on.
    kept.submit(mkdir("/after")).await.unwrap();
    assert_eq!(kept.stat("/before").await.unwrap().name, "before");
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_port_speaks_tls_with_http_tls() {
    let pki = Pki::new("test ca");
    let (cert, key) = pki.issue(CertSpec::node("node-1"));
    let dir = tempfile::tempdir().unwrap();
    let mut c = ServerConfig::new(dir.path().to_path_buf());
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.http = "127.0.0.1:0".parse().unwrap();
    c.store = c.store.durability(Durability::None);
    c.tls = Some(ServerTls::load(&cert, &key, None).unwrap());
    c.http_tls = true;
    let h = treelog_server::start(c).await.unwrap();
    let addr = h.bound.http;
    let sock = TcpStream::connect(addr).await.unwrap();
    let mut s = pki.client(None).connect(addr, sock).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    // Plaintext HTTP gets no HTTP answer (a TLS alert, or a reset).
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got).await;
    assert!(!got.starts_with(b"HTTP/"), "{got:?}");
    h.shutdown().await.unwrap();
}

#[test]
fn require_tls_and_http_tls_need_a_certificate() {
    for set in [
        |c: &mut ServerConfig| c.require_tls = true,
        |c: &mut ServerConfig| c.http_tls = true,
    ] {
        let mut c = ServerConfig::new("unused".into());
        set(&mut c);
        let e = c.validate().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("--tls-cert"), "{e}");
    }
}

/// A client certificate named by `peer_tls_names` gives node powers
/// whatever the connection's credential; another certificate of the same
/// CA with the same credential does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_certificate_gets_node_powers_and_no_other_certificate_does() {
    use treelog_proto::protocol::{RaftRpc, RequestBody};
    let pki = Pki::new("test ca");
    let (cert, key) = pki.issue(CertSpec::node("node-1"));
    let node2 = pki.issue(CertSpec::node("node-2"));
    let alice = pki.issue(CertSpec::client("alice"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    let secret =
        treelog_server::add_credential(&file, "reader", treelog_server::Role::Read).unwrap();
    let ca = pki.ca_pem();
    let mut c = ServerConfig::new(dir.path().join("data"));
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.http = "127.0.0.1:0".parse().unwrap();
    c.store = c.store.durability(Durability::None);
    c.tls = Some(ServerTls::load(&cert, &key, Some((ca.as_path(), ClientAuth::Required))).unwrap());
    c.require_tls = true;
    c.credentials = Some(file);
    c.peer_tls_names = vec!["node-2".into()];
    let h = treelog_server::start(c).await.expect("start the server");
    let as_ = |own| ClientOptions {
        tls: Some(pki.client(Some(own))),
        token: Some(secret.clone()),
        ..Default::default()
    };
    let vote = || RequestBody::Raft {
        rpc: RaftRpc::Vote,
        payload: vec![],
    };
    // Past the gate: this node is no cluster's, so InvalidArgument.
    let n2 = Client::connect(h.bound.rpc, as_(&node2)).await.unwrap();
    let e = n2.call(vote()).await.err().unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let a = Client::connect(h.bound.rpc, as_(&alice)).await.unwrap();
    let e = a.call(vote()).await.err().unwrap();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    // Both read as their credential allows, neither writes.
    for c in [&n2, &a] {
        c.stat("/").await.unwrap();
        let e = c.submit(mkdir("/x")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    }
    h.shutdown().await.unwrap();
}

/// A server named by host name must hold a certificate for that name: one
/// issued for its IP address alone is refused when reached as `localhost`,
/// and taken when reached by the address; one naming `localhost` too is
/// taken both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_named_by_host_is_verified_for_that_name() {
    let pki = Pki::new("test ca");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = pki.issue(CertSpec::node("by-ip"));
    let by_ip = start(
        &dir.path().join("a"),
        ServerTls::load(&cert, &key, None).unwrap(),
        true,
    )
    .await;
    let mut named = CertSpec::node("by-name");
    named.dns = vec!["localhost".into()];
    let (cert, key) = pki.issue(named);
    let by_name = start(
        &dir.path().join("b"),
        ServerTls::load(&cert, &key, None).unwrap(),
        true,
    )
    .await;
    let opts = || ClientOptions {
        request_timeout: std::time::Duration::from_secs(10),
        ..over(Some(pki.client(None)))
    };

    let e = Client::connect_to(&format!("localhost:{}", by_ip.bound.rpc.port()), opts())
        .await
        .err()
        .expect("a certificate without the name is refused");
    assert!(e.to_string().contains("TLS"), "{e}");
    Client::connect_to(&by_ip.bound.rpc.to_string(), opts())
        .await
        .expect("the certificate names the address");
    let c = Client::connect_to(&format!("localhost:{}", by_name.bound.rpc.port()), opts())
        .await
        .expect("the certificate names localhost");
    c.submit(mkdir("/named")).await.unwrap();
}
