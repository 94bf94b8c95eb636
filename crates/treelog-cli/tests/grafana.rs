//! Observability: `/metrics` passes `promtool check metrics`, and every
//! metric name used by the Grafana dashboard is exported by a real server
//! after a workload (the replication row's by the same database served as
//! a replica, the bridge's row by the bridge's metrics, the Raft row by a
//! node's).

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command as Proc, Stdio};

use treelog::stream::{StartFrom, SubscribeOptions};
use treelog::Command;
use treelog_server::ServerHandle;
use treelog_testkit::{commands::mkdir_as, http};
use treelog_testkit_server::server;

/// The text of `/metrics`, which must answer 200.
async fn metrics_text(h: &ServerHandle) -> String {
    let (status, body) = http::get(h.bound.http, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    body
}

/// `/metrics` of a real replica of `leader` (its `treelog_replica_*`
/// series beside the store's), on a database of its own in `dir`.
async fn replica_metrics_text(leader: &ServerHandle, dir: &std::path::Path) -> String {
    let cfg = treelog_replica::ReplicaConfig::new(server::config(dir), leader.bound.rpc);
    let r = treelog_replica::start(cfg).await.unwrap();
    // Ready once it has bootstrapped and opened its store: /metrics
    // answers before that too, with nothing.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while http::get(r.bound.http, "/readyz").await.0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica never became ready"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (status, text) = http::get(r.bound.http, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    r.shutdown().await.unwrap();
    text
}

/// The bridge's series (`serve --bridge-nats` adds them to the server's
/// registry; here without a bus to publish to).
fn bridge_metrics_text() -> String {
    use prometheus::Encoder;
    let r = prometheus::Registry::new();
    let _m = treelog_bridge::BridgeMetrics::register(&r).unwrap();
    let mut buf = Vec::new();
    prometheus::TextEncoder::new()
        .encode(&r.gather(), &mut buf)
        .unwrap();
    String::from_utf8(buf).unwrap()
}

/// A Raft node's series (`serve --node-id` adds them to the server's
/// registry; here with one member's lag set, as a leader's are).
fn raft_metrics_text() -> String {
    use prometheus::Encoder;
    let r = prometheus::Registry::new();
    let m = treelog_raft::metrics::RaftMetrics::register(&r).unwrap();
    m.replication_lag.with_label_values(&["2"]).set(0);
    let mut buf = Vec::new();
    prometheus::TextEncoder::new()
        .encode(&r.gather(), &mut buf)
        .unwrap();
    String::from_utf8(buf).unwrap()
}

/// A server that has seen every kind of activity the dashboard shows.
async fn server_after_workload(dir: &std::path::Path) -> ServerHandle {
    let h = server::start(dir, |_| {}).await;
    let c = server::client(&h).await;
    for i in 0..50 {
        c.submit(mkdir_as(&format!("/m/d{i}"), "u", "g"))
            .await
            .unwrap();
    }
    assert!(c
        .submit(Command::Delete {
            path: "/m".into(),
            recursive: false
        })
        .await
        .is_err());
    c.stat("/m/d1").await.unwrap();
    assert!(c.stat("/nope").await.is_err());
    c.stat_id(2).await.unwrap();
    c.list("/m", None, 10).await.unwrap();
    let mut sub = c
        .subscribe(SubscribeOptions {
            from: StartFrom::Seq(1),
            cursor: Some("dash".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    treelog_testkit::client::next_records(&mut sub, 10).await;
    c.ack("dash", 10).await.unwrap();
    h
}

fn dashboard_metric_names() -> BTreeSet<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../grafana/dashboards/treelog.json"
    );
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut names = BTreeSet::new();
    let mut exprs = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().into_iter().flatten() {
            let e = t["expr"].as_str().unwrap();
            exprs += 1;
            // Datasource must come from the variable, never a fixed uid.
            assert_eq!(t["datasource"]["uid"], "${datasource}");
            for tok in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
                if tok.starts_with("treelog_") || tok.starts_with("process_") {
                    names.insert(tok.to_owned());
                }
            }
        }
    }
    assert!(exprs > 30, "only {exprs} expressions found");
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_metric_is_exported() {
    let dir = tempfile::tempdir().unwrap();
    let h = server_after_workload(&dir.path().join("leader")).await;
    let mut text = metrics_text(&h).await;
    text.push_str(&replica_metrics_text(&h, &dir.path().join("replica")).await);
    h.shutdown().await.unwrap();
    text.push_str(&bridge_metrics_text());
    text.push_str(&raft_metrics_text());
    let exported: BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let names = dashboard_metric_names();
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !exported.contains(n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "dashboard uses metrics the server does not export: {missing:?}"
    );
    println!("{} dashboard metric names, all exported", names.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_pass_promtool_check() {
    let dir = tempfile::tempdir().unwrap();
    let h = server_after_workload(&dir.path().join("leader")).await;
    let leader = metrics_text(&h).await;
    let replica = replica_metrics_text(&h, &dir.path().join("replica")).await;
    h.shutdown().await.unwrap();
    for text in [leader, replica, bridge_metrics_text(), raft_metrics_text()] {
        promtool_check(&text);
    }
}

fn promtool_check(text: &str) {
    let child = Proc::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            // .ci/run installs promtool and sets this, so CI cannot skip.
            if std::env::var("TREELOG_REQUIRE_PROMTOOL").is_ok() {
                panic!("promtool is required but cannot run: {e}");
            }
            eprintln!(
                "SKIPPED: promtool not installed ({e}); `apt-get install prometheus` provides it"
            );
            return;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{report}"
    );
    // promtool prints lint problems (e.g. missing units, counters without
    // _total) even when it exits 0; there must be none.
    assert!(
        report.trim().is_empty(),
        "promtool lint findings:\n{report}"
    );
}
