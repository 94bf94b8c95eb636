//! Real TLS handshakes over in-memory pipes between [`ServerTls`] and
//! [`ClientTls`] configurations made from files written by `certs`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use treelog_tls::certs::{Ca, CertSpec};
use treelog_tls::{fingerprint, peer_identity, ClientAuth, ClientTls, ServerTls};

const ADDR: &str = "127.0.0.1:7400";

struct Pki {
    dir: tempfile::TempDir,
    ca: Ca,
}

impl Pki {
    fn new(ca_name: &str) -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::create(ca_name, 1).unwrap();
        ca.write(dir.path()).unwrap();
        Pki { dir, ca }
    }

    fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }

    /// Issues `spec` and writes it as `<name>.pem`, `<name>-key.pem`.
    fn issue(&self, spec: CertSpec) -> (PathBuf, PathBuf) {
        let name = spec.name.clone();
        self.ca
            .issue(&spec)
            .unwrap()
            .write(self.dir.path(), &name)
            .unwrap()
    }

    fn node(&self, name: &str) -> (PathBuf, PathBuf) {
        let mut spec = CertSpec::node(name);
        spec.ips = vec!["127.0.0.1".parse().unwrap()];
        spec.dns = vec![format!("{name}.example")];
        self.issue(spec)
    }

    fn ca_pem(&self) -> PathBuf {
        self.path("ca.pem")
    }
}

fn addr() -> SocketAddr {
    ADDR.parse().unwrap()
}

/// One exchange over a TLS connection between `server` and `client`: the
/// server's view of the client's identity, and the fingerprint of the
/// certificate the client was served; or both sides' errors.
async fn exchange(
    server: &ServerTls,
    client: &ClientTls,
) -> Result<(Option<String>, String), String> {
    let (c, s) = tokio::io::duplex(64 << 10);
    let server = server.clone();
    let serving = tokio::spawn(async move {
        let mut tls = server.accept(s).await.map_err(|e| format!("server: {e}"))?;
        let who = peer_identity(&tls);
        let mut b = [0u8; 4];
        tls.read_exact(&mut b)
            .await
            .map_err(|e| format!("server read: {e}"))?;
        tls.write_all(&b)
            .await
            .map_err(|e| format!("server write: {e}"))?;
        tls.flush().await.map_err(|e| e.to_string())?;
        Ok::<_, String>(who)
    });
    let client_side = async {
        let mut tls = client
            .connect(addr(), c)
            .await
            .map_err(|e| format!("client: {e}"))?;
        let served = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
        tls.write_all(b"ping")
            .await
            .map_err(|e| format!("client write: {e}"))?;
        let mut b = [0u8; 4];
        // TLS 1.3 reports a refused client certificate at the first read.
        tls.read_exact(&mut b)
            .await
            .map_err(|e| format!("client read: {e}"))?;
        assert_eq!(&b, b"ping");
        Ok::<_, String>(fingerprint(&served))
    };
    let client_result = client_side.await;
    let server_result = serving.await.unwrap();
    match (server_result, client_result) {
        (Ok(who), Ok(fp)) => Ok((who, fp)),
        (s, c) => Err(format!("{:?} / {:?}", s.err(), c.err())),
    }
}

fn server(pki: &Pki, node: &(PathBuf, PathBuf), auth: Option<ClientAuth>) -> ServerTls {
    let ca = pki.ca_pem();
    ServerTls::load(&node.0, &node.1, auth.map(|a| (ca.as_path(), a))).unwrap()
}

fn client(pki: &Pki, own: Option<&(PathBuf, PathBuf)>) -> ClientTls {
    ClientTls::load(&pki.ca_pem(), own.map(|(c, k)| (c.as_path(), k.as_path()))).unwrap()
}

#[tokio::test]
async fn a_client_verifies_the_server_by_ip_or_by_name() {
    let pki = Pki::new("test ca");
    let node = pki.node("node-1");
    let s = server(&pki, &node, None);
    let (who, fp) = exchange(&s, &client(&pki, None)).await.unwrap();
    assert_eq!(who, None);
    assert_eq!(fp, s.fingerprint());

    let named = client(&pki, None)
        .with_server_name("node-1.example")
        .unwrap();
    exchange(&s, &named).await.unwrap();
    let wrong = client(&pki, None)
        .with_server_name("node-2.example")
        .unwrap();
    let e = exchange(&s, &wrong).await.unwrap_err();
    assert!(e.contains("not valid for name"), "{e}");
}

#[tokio::test]
async fn a_client_refuses_a_server_of_another_ca() {
    let pki = Pki::new("test ca");
    let other = Pki::new("other ca");
    let s = server(&other, &other.node("node-1"), None);
    let e = exchange(&s, &client(&pki, None)).await.unwrap_err();
    assert!(e.contains("UnknownIssuer"), "{e}");
}

#[tokio::test]
async fn mutual_tls_names_the_client_and_refuses_the_others() {
    let pki = Pki::new("test ca");
    let node = pki.node("node-1");
    let alice = pki.issue(CertSpec::client("alice"));
    let mut old = CertSpec::client("old");
    old.expired = true;
    let old = pki.issue(old);
    let stranger_pki = Pki::new("stranger ca");
    let stranger = stranger_pki.issue(CertSpec::client("stranger"));
    // The stranger trusts the right CA for the server, but its own
    // certificate comes from another.
    let stranger = ClientTls::load(&pki.ca_pem(), Some((&stranger.0, &stranger.1))).unwrap();

    let required = server(&pki, &node, Some(ClientAuth::Required));
    let (who, _) = exchange(&required, &client(&pki, Some(&alice)))
        .await
        .unwrap();
    assert_eq!(who.as_deref(), Some("alice"));
    let e = exchange(&required, &client(&pki, None)).await.unwrap_err();
    assert!(
        e.contains("server") || e.contains("CertificateRequired"),
        "{e}"
    );
    let e = exchange(&required, &stranger).await.unwrap_err();
    assert!(
        e.contains("UnknownIssuer") || e.contains("BadCertificate"),
        "{e}"
    );
    let e = exchange(&required, &client(&pki, Some(&old)))
        .await
        .unwrap_err();
    assert!(e.contains("Expired"), "{e}");

    let optional = server(&pki, &node, Some(ClientAuth::Optional));
    let (who, _) = exchange(&optional, &client(&pki, None)).await.unwrap();
    assert_eq!(who, None);
    let (who, _) = exchange(&optional, &client(&pki, Some(&alice)))
        .await
        .unwrap();
    assert_eq!(who.as_deref(), Some("alice"));
    let e = exchange(&optional, &stranger).await.unwrap_err();
    assert!(
        e.contains("UnknownIssuer") || e.contains("BadCertificate"),
        "{e}"
    );
}

/// Replaces `dst` by `src`'s contents the way a rotation does: a new file
/// renamed into place.
fn replace(src: &Path, dst: &Path) {
    let tmp = dst.with_extension("new");
    std::fs::copy(src, &tmp).unwrap();
    std::fs::rename(&tmp, dst).unwrap();
}

#[tokio::test]
async fn a_rotated_certificate_is_served_from_the_next_connection_and_a_bad_one_is_not() {
    let pki = Pki::new("test ca");
    let (cert, key) = pki.node("served");
    let s = server(&pki, &(cert.clone(), key.clone()), None);
    let c = client(&pki, None);
    let first = s.fingerprint();
    assert_eq!(exchange(&s, &c).await.unwrap().1, first);
    assert!(!s.reload_if_changed().unwrap(), "nothing changed yet");

    // A new certificate and key.
    let (cert2, key2) = pki.node("next");
    replace(&cert2, &cert);
    replace(&key2, &key);
    assert!(s.reload_if_changed().unwrap());
    let second = s.fingerprint();
    assert_ne!(second, first);
    assert_eq!(
        second,
        fingerprint(&treelog_tls::load_certs(&cert2).unwrap()[0])
    );
    assert_eq!(exchange(&s, &c).await.unwrap().1, second);

    // A certificate whose key is not the one beside it: refused, the
    // second one stays, and the same broken files are not retried.
    let (cert3, _) = pki.node("mismatched");
    replace(&cert3, &cert);
    assert!(s.reload_if_changed().is_err());
    assert!(!s.reload_if_changed().unwrap());
    assert_eq!(s.fingerprint(), second);
    assert_eq!(exchange(&s, &c).await.unwrap().1, second);

    // A truncated key: refused too.
    std::fs::write(&key, b"-----BEGIN PRIVATE KEY-----\n").unwrap();
    assert!(s.reload().is_err());
    assert_eq!(exchange(&s, &c).await.unwrap().1, second);
}

#[tokio::test]
async fn the_client_ca_is_reloaded_with_the_certificate() {
    let pki = Pki::new("test ca");
    let node = pki.node("node-1");
    let alice = pki.issue(CertSpec::client("alice"));
    // The server trusts its own CA file for clients; replace that file by
    // another CA's: alice is refused from then on.
    let client_ca = pki.path("clients-ca.pem");
    std::fs::copy(pki.ca_pem(), &client_ca).unwrap();
    let s = ServerTls::load(&node.0, &node.1, Some((&client_ca, ClientAuth::Required))).unwrap();
    let alice = client(&pki, Some(&alice));
    exchange(&s, &alice).await.unwrap();
    let other = Pki::new("other ca");
    replace(&other.ca_pem(), &client_ca);
    assert!(s.reload_if_changed().unwrap());
    assert!(exchange(&s, &alice).await.is_err());
}

#[test]
fn missing_and_malformed_files_are_named() {
    let pki = Pki::new("test ca");
    let (cert, key) = pki.node("n");
    let missing = pki.path("nope.pem");
    let e = ServerTls::load(&missing, &key, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope.pem"), "{e}");
    let e = ServerTls::load(&cert, &cert, None).unwrap_err().to_string();
    assert!(e.contains("n.pem") && e.contains("PRIVATE KEY"), "{e}");
    let e = ClientTls::load(&key, None).unwrap_err().to_string();
    assert!(e.contains("n-key.pem") && e.contains("CERTIFICATE"), "{e}");
}
