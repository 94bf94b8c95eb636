//! TLS with the real binary: `admin certs` makes the PKI; `serve` with
//! `--require-tls --require-client-cert` serves the CLI and the Rust client
//! presenting its certificates (flags or environment), refuses plaintext,
//! clients without a certificate, with one of another CA or an expired
//! one; `openssl s_client` completes a handshake with it; and a certificate
//! rotated by replacing its files and SIGHUP is served to new connections
//! while an open one goes on.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use treelog_client::{Client, ClientOptions, ClientTls};
use treelog_testkit::{cli, commands};
use treelog_tls::fingerprint;

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

fn certs(dir: &Path, args: &[&str]) {
    let out = dir.to_str().unwrap();
    let mut all = vec!["admin", "certs", "--out", out];
    all.extend_from_slice(args);
    let r = cli::run(BIN, dir, &all);
    assert_eq!(r.code(), 0, "admin certs {args:?}: {}", r.stderr);
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn pem(dir: &Path, f: &str) -> String {
    dir.join(f).to_str().unwrap().to_owned()
}

/// `treelog --server RPC ARGS` with the TLS flags `tls`.
fn client(rpc: SocketAddr, data: &Path, tls: &[String], args: &[&str]) -> cli::Ran {
    let rpc = rpc.to_string();
    let mut all: Vec<&str> = vec!["--server", &rpc];
    all.extend(tls.iter().map(String::as_str));
    all.extend_from_slice(args);
    cli::run(BIN, data, &all)
}

fn tls_flags(dir: &Path, who: Option<&str>) -> Vec<String> {
    let mut f = vec!["--tls-ca".to_owned(), pem(dir, "ca.pem")];
    if let Some(who) = who {
        f.extend([
            "--tls-cert".to_owned(),
            pem(dir, &format!("{who}.pem")),
            "--tls-key".to_owned(),
            pem(dir, &format!("{who}-key.pem")),
        ]);
    }
    f
}

/// The fingerprint of the certificate the server at `rpc` serves a new
/// connection now.
fn served(rt: &tokio::runtime::Runtime, rpc: SocketAddr, tls: &ClientTls) -> String {
    rt.block_on(async {
        let sock = tokio::net::TcpStream::connect(rpc).await.unwrap();
        let s = tls.connect(rpc, sock).await.unwrap();
        fingerprint(&s.get_ref().1.peer_certificates().unwrap()[0])
    })
}

fn replace(src: &Path, dst: &Path) {
    let tmp = dst.with_extension("new");
    std::fs::copy(src, &tmp).unwrap();
    std::fs::rename(&tmp, dst).unwrap();
}

#[test]
fn serve_with_mutual_tls_serves_its_clients_refuses_the_rest_and_rotates() {
    let pki = tempfile::tempdir().unwrap();
    let p = pki.path();
    certs(p, &["--node", "node-1", "--client", "alice"]);
    certs(p, &["--client", "old", "--expired"]);
    for f in [
        "ca.pem",
        "ca-key.pem",
        "node-1.pem",
        "node-1-key.pem",
        "alice.pem",
        "old.pem",
    ] {
        assert!(p.join(f).exists(), "{f}");
    }
    let stranger = tempfile::tempdir().unwrap();
    certs(
        stranger.path(),
        &["--ca-name", "stranger CA", "--client", "mallory"],
    );

    let data = tempfile::tempdir().unwrap();
    let mut child = cli::command(
        BIN,
        data.path(),
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--tls-cert",
            &pem(p, "node-1.pem"),
            "--tls-key",
            &pem(p, "node-1-key.pem"),
            "--tls-ca",
            &pem(p, "ca.pem"),
            "--require-tls",
            "--require-client-cert",
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let (rpc, _) = cli::ready_addrs(&mut child);
    let serve = Serve(child);
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();

    let alice = tls_flags(p, Some("alice"));
    let r = client(rpc, s, &alice, &["mkdir", "/a"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    // The same settings from the environment.
    let r = cli::output(
        cli::command(BIN, s, &["--server", &rpc.to_string(), "stat", "/a"])
            .env("TREELOG_TLS_CA", pem(p, "ca.pem"))
            .env("TREELOG_TLS_CERT", pem(p, "alice.pem"))
            .env("TREELOG_TLS_KEY", pem(p, "alice-key.pem")),
    );
    assert_eq!(r.code(), 0, "{}", r.stderr);

    let r = client(rpc, s, &[], &["stat", "/a"]);
    assert_ne!(r.code(), 0);
    assert!(r.stderr.contains("requires TLS"), "{}", r.stderr);
    let mallory = vec![
        "--tls-ca".to_owned(),
        pem(p, "ca.pem"),
        "--tls-cert".to_owned(),
        pem(stranger.path(), "mallory.pem"),
        "--tls-key".to_owned(),
        pem(stranger.path(), "mallory-key.pem"),
    ];
    for (who, flags) in [
        ("no certificate", tls_flags(p, None)),
        ("another CA's", mallory),
        ("expired", tls_flags(p, Some("old"))),
    ] {
        let r = client(rpc, s, &flags, &["stat", "/a"]);
        assert_ne!(r.code(), 0, "{who}: served");
    }
    // A wrong server name.
    let mut wrong = tls_flags(p, Some("alice"));
    wrong.extend([
        "--tls-server-name".to_owned(),
        "elsewhere.example".to_owned(),
    ]);
    let r = client(rpc, s, &wrong, &["stat", "/a"]);
    assert_ne!(r.code(), 0);
    assert!(r.stderr.contains("not valid for name"), "{}", r.stderr);

    openssl_handshake(rpc, p);

    // Rotation: a connection opened before it keeps working; new ones get
    // the new certificate once the SIGHUP is handled.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let alice_tls = Arc::new(
        ClientTls::load(
            &p.join("ca.pem"),
            Some((&p.join("alice.pem"), &p.join("alice-key.pem"))),
        )
        .unwrap(),
    );
    let before = served(&rt, rpc, &alice_tls);
    let kept = rt
        .block_on(Client::connect(
            rpc,
            ClientOptions {
                tls: Some(alice_tls.clone()),
                ..Default::default()
            },
        ))
        .unwrap();
    rt.block_on(kept.submit(commands::mkdir("/before")))
        .unwrap();
    certs(p, &["--node", "node-1b"]);
    let next = fingerprint(&treelog_tls::load_certs(&p.join("node-1b.pem")).unwrap()[0]);
    assert_ne!(next, before);
    replace(&p.join("node-1b.pem"), &p.join("node-1.pem"));
    replace(&p.join("node-1b-key.pem"), &p.join("node-1-key.pem"));
    // SAFETY: signals the server this test started.
    assert_eq!(unsafe { libc::kill(serve.0.id() as i32, libc::SIGHUP) }, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while served(&rt, rpc, &alice_tls) != next {
        assert!(
            Instant::now() < deadline,
            "the new certificate is not served"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    rt.block_on(kept.submit(commands::mkdir("/after"))).unwrap();
    let r = client(rpc, s, &alice, &["stat", "/before"]);
    assert_eq!(r.code(), 0, "{}", r.stderr);
    drop(serve);
}

/// `openssl s_client` completes a verified mutual-TLS handshake with the
/// server (skipped without openssl, unless TREELOG_REQUIRE_OPENSSL is set).
fn openssl_handshake(rpc: SocketAddr, p: &Path) {
    let found = std::process::Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("TREELOG_REQUIRE_OPENSSL").is_err(),
            "openssl is required (TREELOG_REQUIRE_OPENSSL) but not found"
        );
        eprintln!("skipping the openssl s_client handshake: openssl not found");
        return;
    }
    let path = |f: &str| -> PathBuf { p.join(f) };
    let out = std::process::Command::new("openssl")
        .arg("s_client")
        .arg("-connect")
        .arg(rpc.to_string())
        .arg("-CAfile")
        .arg(path("ca.pem"))
        .arg("-cert")
        .arg(path("alice.pem"))
        .arg("-key")
        .arg(path("alice-key.pem"))
        .args(["-verify_return_error", "-verify_ip", &rpc.ip().to_string()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Verify return code: 0 (ok)"), "{text}");
    assert!(
        text.contains("CN=node-1") || text.contains("CN = node-1"),
        "{text}"
    );
}
