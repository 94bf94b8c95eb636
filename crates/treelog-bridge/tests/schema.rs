//! docs/stream-item.schema.json describes what `treelog tail --json`
//! prints and the bridge publishes: every item a real server streams
//! (snapshot, every event kind and scope, progress) validates, and items
//! with a field missing, misspelt or of the wrong type do not.

use treelog::stream::{Filter, StartFrom, StreamItem, SubscribeOptions};
use treelog::Command;
use treelog_testkit::commands;
use treelog_testkit_server::server;

fn schema() -> jsonschema::Validator {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/stream-item.schema.json"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::validator_for(&v).expect("a valid JSON Schema")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_item_a_server_streams_validates_and_broken_ones_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let h = server::start(dir.path(), |_| {}).await;
    let c = server::client(&h).await;
    let cmds = vec![
        commands::mkdir_as("/s/d", "alice", "staff"),
        commands::create("/s/d/f"),
        Command::Complete {
            path: "/s/d/f".into(),
            size: 10,
        },
        Command::SetSize {
            path: "/s/d/f".into(),
            size: 20,
        },
        Command::SetAttr {
            path: "/s/d/f".into(),
            mode: Some(0o600),
            owner: Some("bob".into()),
            group: None,
            mtime_ms: Some(1),
        },
        commands::mkdir("/out/x"),
        Command::Rename {
            src: "/out/x".into(),
            dst: "/s/x".into(),
            overwrite: false,
        },
        Command::Rename {
            src: "/s/d/f".into(),
            dst: "/out/f".into(),
            overwrite: false,
        },
        Command::Delete {
            path: "/s/d".into(),
            recursive: true,
        },
        Command::Symlink {
            target: "../elsewhere".into(),
            path: "/s/l".into(),
            parents: false,
            owner: String::new(),
            group: String::new(),
        },
        Command::SetXattr {
            path: "/s/l".into(),
            name: "user.k".into(),
            value: vec![0, 0xff].into(),
            flag: treelog::XattrFlag::Either,
        },
        Command::SetXattr {
            path: "/s/l".into(),
            name: "user.k".into(),
            value: b"v".to_vec().into(),
            flag: treelog::XattrFlag::Replace,
        },
        Command::RemoveXattr {
            path: "/s/l".into(),
            name: "user.k".into(),
        },
        Command::SetQuota {
            path: "/s".into(),
            inodes: Some(100),
            bytes: None,
        },
        commands::create("/s/q"),
        Command::ClearQuota { path: "/s".into() },
        // Last, outside /s: the prefixed subscriptions end with a Progress.
        commands::mkdir("/elsewhere"),
    ];
    for cmd in cmds {
        c.submit(cmd).await.unwrap();
    }
    let last = c.info().await.unwrap().0;
    let v = schema();
    let mut kinds = std::collections::BTreeSet::new();
    let subs = [
        (None, StartFrom::Seq(1)),
        (Some("/s"), StartFrom::Seq(1)),
        (Some("/s"), StartFrom::Snapshot),
    ];
    for (prefix, from) in subs {
        let mut sub = c
            .subscribe(SubscribeOptions {
                from,
                filter: Filter {
                    prefix: prefix.map(Into::into),
                    kinds: None,
                },
                cursor: None,
                resync_on_move_in: Some(false),
            })
            .await
            .unwrap();
        loop {
            let item = sub.next().await.unwrap().unwrap();
            let json = serde_json::to_value(&item).unwrap();
            if let Err(e) = v.validate(&json) {
                panic!("{json} does not validate: {e}");
            }
            kinds.insert(json.as_object().unwrap().keys().next().unwrap().clone());
            if let StreamItem::Record { events, .. } = &item {
                for e in events.iter() {
                    kinds.insert(format!("{:?}", e.scope));
                    let ev = serde_json::to_value(&*e.event).unwrap();
                    kinds.insert(ev.as_object().unwrap().keys().next().unwrap().clone());
                }
            }
            if item.position().is_some_and(|p| p >= last) {
                break;
            }
        }
    }
    for k in [
        "SnapshotStart",
        "SnapshotEntry",
        "SnapshotEnd",
        "Record",
        "Progress",
        "Create",
        "Complete",
        "SetSize",
        "SetAttr",
        "Delete",
        "Rename",
        "Symlink",
        "SetXattr",
        "RemoveXattr",
        "SetQuota",
        "ClearQuota",
        "Inside",
        "MoveIn",
        "MoveOut",
    ] {
        assert!(kinds.contains(k), "no {k} was streamed: {kinds:?}");
    }
    let good = serde_json::json!({"Record": {"seq": 1, "time_ms": 2, "events": [{"scope": "Inside",
        "event": {"Delete": {"id": 2, "parent": 1, "name": "a", "path": "/a", "attrs": {
            "kind": "File", "size": 0, "block_size": 0, "ctime_ms": 0, "mtime_ms": 0,
            "change_ms": 0, "mode": 420, "complete": true, "owner": "", "group": ""},
            "parent_mtime_ms": null, "quotas": [3]}}}]}});
    assert!(v.is_valid(&good));
    let broken = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut b = good.clone();
        f(&mut b);
        assert!(!v.is_valid(&b), "{b} validates");
    };
    broken(&|b| drop(b["Record"].as_object_mut().unwrap().remove("seq")));
    broken(&|b| b["Record"]["seq"] = "1".into());
    broken(&|b| b["Record"]["events"] = serde_json::json!([]));
    broken(&|b| b["Record"]["events"][0]["scope"] = "Outside".into());
    broken(&|b| b["Record"]["events"][0]["event"]["Delete"]["attrs"]["kind"] = "Socket".into());
    broken(&|b| {
        drop(
            b["Record"]["events"][0]["event"]["Delete"]["attrs"]
                .as_object_mut()
                .unwrap()
                .remove("change_ms"),
        )
    });
    broken(&|b| b["Record"]["events"][0]["event"]["Delete"]["quotas"] = "3".into());
    broken(&|b| b["Record"]["events"][0]["event"]["Delete"]["path"] = "a".into());
    broken(&|b| b["Record"]["events"][0]["event"]["Delete"]["extra"] = 1.into());
    h.shutdown().await.unwrap();
}
