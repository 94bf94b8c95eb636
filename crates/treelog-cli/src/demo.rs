//! `treelog demo`: builds a small tree, prints it, shows the log records it
//! wrote, and verifies the index against a replay of the whole log.

use std::path::Path;

use crate::admin;
use crate::describe::{describe_event, long_line, LongFormat};
use crate::error::{ErrorKind, Result};
use crate::exit::EXIT_VERIFY_MISMATCH;
use crate::timefmt::TimeStyle;
use treelog::{CreateOptions, MkdirOptions, Options, SetAttrs, Treelog};

fn print_tree(t: &Treelog, dir: &[u8], depth: usize, long: &LongFormat) -> Result<()> {
    for e in t.list_all(dir)? {
        println!(
            "  {}{}",
            "  ".repeat(depth),
            long_line(&e.inode, &e.name, long)
        );
        if e.inode.attrs.kind.is_dir() {
            print_tree(t, &crate::path::join(dir, &e.name), depth + 1, long)?;
        }
    }
    Ok(())
}

pub(crate) fn run(data: &Path, json: bool) -> Result<u8> {
    let t = Treelog::open(data, Options::default())?;
    let r = t.open_report();
    println!(
        "opened {} (replayed {} records; log starts at {})",
        data.display(),
        r.replayed,
        r.log_start
    );
    // Start from a clean /demo so the demo can run again on the same data.
    match t.delete("/demo", true) {
        Ok(seq) => println!("removed the previous /demo (seq {seq})"),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let first = t.committed_seq() + 1;
    let who = |o: &str, g: &str| CreateOptions {
        parents: true,
        owner: o.into(),
        group: g.into(),
        ..Default::default()
    };
    t.mkdir(
        "/demo/datasets/imagenet",
        MkdirOptions {
            parents: true,
            owner: "alice".into(),
            group: "ml".into(),
            ..Default::default()
        },
    )?;
    t.create("/demo/datasets/imagenet/train.tar", who("alice", "ml"))?;
    t.complete("/demo/datasets/imagenet/train.tar", 147_897_477_120)?;
    t.create("/demo/datasets/imagenet/val.tar", who("alice", "ml"))?;
    t.complete("/demo/datasets/imagenet/val.tar", 6_744_924_160)?;
    t.create("/demo/logs/2026/11/21/app.log", who("svc", "ops"))?;
    t.set_size("/demo/logs/2026/11/21/app.log", 4096)?;
    t.create("/demo/tmp/scratch.bin", who("bob", "ml"))?;
    t.rename("/demo/tmp/scratch.bin", "/demo/datasets/scratch.bin", false)?;
    t.set_attrs(
        "/demo/datasets/scratch.bin",
        SetAttrs {
            mode: Some(0o600),
            ..Default::default()
        },
    )?;
    t.delete("/demo/tmp", true)?;
    // A refused command is a typed error and writes nothing.
    let refused = t
        .mkdir("/demo/datasets", MkdirOptions::default())
        .unwrap_err();
    println!(
        "mkdir /demo/datasets again -> {} ({})",
        refused.kind(),
        refused
    );

    println!("\ntree /demo:");
    print_tree(&t, b"/demo", 0, &LongFormat::new(TimeStyle::locale(), true))?;

    let last = t.committed_seq();
    println!("\nlog records {first}..={last}:");
    for rec in t.store().log_iter(first)? {
        let rec = rec?;
        if json {
            println!("{}", serde_json::to_string(&rec).unwrap_or_default());
        } else {
            println!("  #{} t={}", rec.seq, rec.time_ms);
            for ev in &rec.events {
                println!("      {}", describe_event(ev));
            }
        }
    }

    println!("\nverifying: replaying the whole log into a scratch index...");
    let v = admin::verify(t.store())?;
    println!("  live index digest:   {}", v.live_digest);
    println!("  replayed digest:     {}", v.replay_digest);
    println!("  records replayed:    {}", v.records);
    for p in &v.problems {
        println!("  problem: {p}");
    }
    let ok = v.ok();
    println!(
        "{}",
        if ok {
            "OK: the index is exactly a replay of the log"
        } else {
            "MISMATCH"
        }
    );
    t.close()?;
    Ok(if ok { 0 } else { EXIT_VERIFY_MISMATCH })
}
