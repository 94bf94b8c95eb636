//! No client command stops the writer: random command sequences over the
//! wire to a real server — any sizes and times (the counters' edges
//! included), quotas set, cleared and recounted, deep paths, long names,
//! renames across quota roots, recursive deletes — and every answer is a
//! result or an error the client caused, never a writer fault; the server
//! stays ready and `verify` passes afterwards (the quotas' counters equal
//! their subtrees).
//!
//! CI runs a short mode; the long one runs by hand:
//! `TREELOG_FAULT_CASES=2000 cargo test --release -p treelog-server --test no_writer_fault`.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use treelog::{admin, Command, ErrorKind, XattrFlag};

mod support;
use support::server;

/// A few names, one of them as long as a name may be, so that paths run
/// deep and long.
fn arb_path() -> impl Strategy<Value = String> {
    let long = "L".repeat(255);
    let name = prop::sample::select(vec![
        "a".to_string(),
        "b".to_string(),
        "q".to_string(),
        long,
    ]);
    prop::collection::vec(name, 1..6).prop_map(|c| format!("/{}", c.join("/")))
}

/// Sizes and times at the counters' edges as often as ordinary ones.
fn arb_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => 0u64..4096,
        1 => Just(i64::MAX as u64),
        1 => Just(i64::MAX as u64 + 1),
        1 => Just(u64::MAX),
        1 => Just(u64::MAX / 3),
        1 => any::<u64>(),
    ]
}

fn arb_limit() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        Just(None),
        (0u64..8).prop_map(Some),
        arb_u64().prop_map(Some)
    ]
}

fn arb_cmd() -> impl Strategy<Value = Command> {
    let owner = || prop::sample::select(vec!["u".to_string(), "v".repeat(255)]);
    prop_oneof![
        (arb_path(), any::<bool>()).prop_map(|(path, parents)| Command::Mkdir {
            path: path.into(),
            parents,
            mode: 0o755,
            owner: "u".into(),
            group: "g".into(),
        }),
        (arb_path(), any::<bool>(), owner(), arb_u64()).prop_map(
            |(path, parents, owner, block_size)| Command::Create {
                path: path.into(),
                parents,
                mode: 0o644,
                owner,
                group: "g".into(),
                block_size,
            }
        ),
        (arb_path(), arb_u64()).prop_map(|(path, size)| Command::Complete {
            path: path.into(),
            size
        }),
        (arb_path(), arb_u64()).prop_map(|(path, size)| Command::SetSize {
            path: path.into(),
            size
        }),
        (arb_path(), any::<u32>(), prop::option::of(arb_u64())).prop_map(
            |(path, mode, mtime_ms)| Command::SetAttr {
                path: path.into(),
                mode: Some(mode),
                owner: None,
                group: None,
                mtime_ms,
            }
        ),
        (arb_path(), any::<bool>()).prop_map(|(path, recursive)| Command::Delete {
            path: path.into(),
            recursive
        }),
        (arb_path(), arb_path(), any::<bool>()).prop_map(|(src, dst, overwrite)| Command::Rename {
            src: src.into(),
            dst: dst.into(),
            overwrite
        }),
        (arb_path(), prop::collection::vec(any::<u8>(), 0..300)).prop_map(|(path, v)| {
            Command::SetXattr {
                path: path.into(),
                name: "user.k".into(),
                value: v.into(),
                flag: XattrFlag::Either,
            }
        }),
        (arb_path(), arb_limit(), arb_limit()).prop_map(|(path, inodes, bytes)| {
            Command::SetQuota {
                path: path.into(),
                inodes,
                bytes,
            }
        }),
        arb_path().prop_map(|path| Command::ClearQuota { path: path.into() }),
        arb_path().prop_map(|path| Command::RecountQuota { path: path.into() }),
    ]
}

/// Errors a command may cause by itself; anything else is the server's.
fn clients_fault(k: ErrorKind) -> bool {
    use ErrorKind::*;
    matches!(
        k,
        NotFound
            | AlreadyExists
            | NotADirectory
            | IsADirectory
            | NotEmpty
            | InvalidName
            | InvalidPath
            | InvalidArgument
            | QuotaExceeded
    )
}

#[test]
fn no_command_sequence_stops_the_writer() {
    let cases = std::env::var("TREELOG_FAULT_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let seqs = prop::collection::vec(arb_cmd(), 1..120);
    runner
        .run(&seqs, |cmds| {
            rt.block_on(run_case(cmds));
            Ok(())
        })
        .unwrap();
}

async fn run_case(cmds: Vec<Command>) {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |_| {}).await;
    let c = server::client(&h).await;
    // Quota roots to move across, some files to size.
    for p in ["/q", "/a", "/q/a"] {
        let _ = c.submit(treelog_testkit::commands::mkdir(p)).await;
    }
    let _ = c.set_quota("/q", None, None).await;
    let _ = c.set_quota("/q/a", Some(6), None).await;
    for cmd in cmds {
        let shown = format!("{cmd:?}");
        if let Err(e) = c.submit(cmd).await {
            assert!(
                clients_fault(e.kind()),
                "{} after {}: {e}",
                e.kind().as_str(),
                &shown[..shown.len().min(300)]
            );
        }
    }
    assert!(h.store().expect("open").writer_failure().is_none());
    drop(c);
    h.shutdown().await.unwrap();
    let report = admin::verify_path(dir.path(), &Default::default()).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}
