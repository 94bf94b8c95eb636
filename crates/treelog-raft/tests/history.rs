//! The linearizability checker the failover tests use (tests/common/
//! history.rs), on histories whose answer is known.

use std::time::{Duration, Instant};

use treelog_testkit::history::{check, Entry, Op, Outcome};

/// An operation on `/p` between `call` and `ret` (ms after `t0`; `None`:
/// it never returned).
fn op(t0: Instant, op: Op, outcome: Outcome, call: u64, ret: Option<u64>) -> Entry {
    Entry {
        path: "/p".into(),
        op,
        outcome,
        call: t0 + Duration::from_millis(call),
        ret: ret.map(|r| t0 + Duration::from_millis(r)),
    }
}

#[test]
fn sequential_histories() {
    let t = Instant::now();
    let ok = [
        op(t, Op::Create, Outcome::Done, 0, Some(1)),
        op(t, Op::Stat, Outcome::Size(0), 2, Some(3)),
        op(t, Op::SetSize(7), Outcome::Done, 4, Some(5)),
        op(t, Op::Stat, Outcome::Size(7), 6, Some(7)),
        op(t, Op::Delete, Outcome::Done, 8, Some(9)),
        op(t, Op::Stat, Outcome::Missing, 10, Some(11)),
        op(t, Op::Delete, Outcome::Missing, 12, Some(13)),
    ];
    assert!(check(&ok).is_ok());
    // A create acknowledged, then not seen by a read that began after it.
    let stale = [
        op(t, Op::Create, Outcome::Done, 0, Some(1)),
        op(t, Op::Stat, Outcome::Missing, 2, Some(3)),
    ];
    assert!(check(&stale).is_err());
    // Two creates both succeed with nothing deleting between them.
    let twice = [
        op(t, Op::Create, Outcome::Done, 0, Some(1)),
        op(t, Op::Create, Outcome::Done, 2, Some(3)),
    ];
    assert!(check(&twice).is_err());
    // A size nobody wrote.
    let invented = [
        op(t, Op::Create, Outcome::Done, 0, Some(1)),
        op(t, Op::Stat, Outcome::Size(5), 2, Some(3)),
    ];
    assert!(check(&invented).is_err());
}

#[test]
fn concurrent_operations_may_take_effect_in_either_order() {
    let t = Instant::now();
    // The read overlaps the create: it may see either state.
    for seen in [Outcome::Missing, Outcome::Size(0)] {
        let h = [
            op(t, Op::Create, Outcome::Done, 0, Some(10)),
            op(t, Op::Stat, seen, 5, Some(6)),
        ];
        assert!(check(&h).is_ok(), "{seen:?}");
    }
    // Two overlapping creates: exactly one wins.
    let h = [
        op(t, Op::Create, Outcome::Done, 0, Some(10)),
        op(t, Op::Create, Outcome::Exists, 1, Some(9)),
    ];
    assert!(check(&h).is_ok());
    // But a read that saw the file cannot be followed by one that does
    // not, with nothing deleting it.
    let h = [
        op(t, Op::Create, Outcome::Done, 0, Some(10)),
        op(t, Op::Stat, Outcome::Size(0), 1, Some(2)),
        op(t, Op::Stat, Outcome::Missing, 3, Some(4)),
    ];
    assert!(check(&h).is_err());
}

#[test]
fn an_unknown_outcome_may_or_may_not_have_happened() {
    let t = Instant::now();
    for seen in [Outcome::Missing, Outcome::Size(0)] {
        let h = [
            op(t, Op::Create, Outcome::Done, 0, Some(1)),
            op(t, Op::Delete, Outcome::Unknown, 2, None),
            op(t, Op::Stat, seen, 10, Some(11)),
        ];
        assert!(check(&h).is_ok(), "{seen:?}");
    }
    // Once a read saw it happen, a later read cannot see it undone.
    let h = [
        op(t, Op::Create, Outcome::Done, 0, Some(1)),
        op(t, Op::Delete, Outcome::Unknown, 2, None),
        op(t, Op::Stat, Outcome::Missing, 10, Some(11)),
        op(t, Op::Stat, Outcome::Size(0), 12, Some(13)),
    ];
    assert!(check(&h).is_err());
    // An unknown operation cannot take effect before it began.
    let h = [
        op(t, Op::Stat, Outcome::Size(0), 0, Some(1)),
        op(t, Op::Create, Outcome::Unknown, 2, None),
    ];
    assert!(check(&h).is_err());
}

#[test]
fn paths_are_checked_apart_and_a_long_history_is_quick() {
    let t = Instant::now();
    let mut h = Vec::new();
    // 40 writers' worth of overlapping operations on 20 paths.
    for k in 0..2000u64 {
        let path = format!("/p{}", k % 20);
        let (o, out) = match (k / 20) % 4 {
            0 => (Op::Create, Outcome::Done),
            1 => (Op::SetSize(k), Outcome::Done),
            2 => (Op::Stat, Outcome::Size(k - 20)),
            _ => (Op::Delete, Outcome::Done),
        };
        h.push(Entry {
            path,
            op: o,
            outcome: out,
            call: t + Duration::from_millis(k),
            ret: Some(t + Duration::from_millis(k + 5)),
        });
    }
    assert_eq!(check(&h).unwrap(), 20);
}
