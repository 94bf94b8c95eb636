//! A tiny `treelog-bench mdtest` (2 client processes, 20 items, 1
//! iteration, one and four operations in flight, easy and hard): every
//! phase did all its operations, each checked by the client that made it
//! (a create that fails, a stat that finds nothing, a listing short of an
//! entry fail the run), and the namespace is empty at the end. Rates are
//! not looked at.

use treelog_bench::mdtest_net::{run, MdtestArgs, Phase, PHASES};

const PROCS: usize = 2;
const ITEMS: usize = 20;
/// A root, 2 children, 4 grandchildren.
const TREE: usize = 7;

fn args(backend: &str, dir: &std::path::Path) -> MdtestArgs {
    MdtestArgs {
        procs: vec![PROCS],
        items: ITEMS,
        iterations: 1,
        depth: vec![1, 4],
        tree_depth: 2,
        branch: 2,
        modes: vec!["easy".into(), "hard".into()],
        backends: vec![backend.into()],
        mount: None,
        treelog_bin: None,
        dir: Some(dir.to_owned()),
        worker_exe: Some(env!("CARGO_BIN_EXE_treelog-bench").into()),
    }
}

fn check(backend: &str) {
    let dir = tempfile::tempdir().unwrap();
    let r = run(&args(backend, dir.path())).unwrap();
    // Two depths, two modes.
    assert_eq!(r.tables.len(), 4);
    for t in &r.tables {
        assert_eq!(t.phases.len(), PHASES.len());
        for (f, (phase, name)) in t.phases.iter().zip(PHASES) {
            assert_eq!(f.name, name);
            let want = match phase {
                // Each process lists its directory: its own 20, or the
                // shared one's 40.
                Phase::Readdir if t.mode == "hard" => PROCS * PROCS * ITEMS,
                Phase::TreeCreate | Phase::TreeRemove => PROCS * TREE,
                _ => PROCS * ITEMS,
            };
            assert_eq!(f.ops, vec![want], "{} {} {name}", t.backend, t.mode);
            assert!(f.rates[0] > 0.0);
        }
    }
    assert_eq!(r.left.len(), 1);
    assert_eq!(r.left[0].1, 0, "left behind: {:?}", r.left);
}

#[test]
fn tiny_mdtest_against_a_single_node() {
    check("single");
}

/// The Redis peer's scripts (JuiceFS's layout) through the same phases:
/// skipped without redis-server unless TREELOG_REQUIRE_REDIS=1.
#[test]
fn tiny_mdtest_against_redis() {
    if let Err(why) = treelog_bench::redis_peer::find() {
        if std::env::var("TREELOG_REQUIRE_REDIS").as_deref() == Ok("1") {
            panic!("TREELOG_REQUIRE_REDIS=1: {why}");
        }
        eprintln!("SKIPPED: {why}");
        return;
    }
    check("redis");
}
