//! Names are bytes: a name that is not UTF-8 (0xff, Latin-1 `é` as 0xe9)
//! is created, stated, listed, renamed, linked to, deleted and streamed
//! byte for byte, survives a reopen (replay) and `admin verify`, and is
//! refused only where a name is refused anyway (`/`, NUL, `.`, `..`).

use std::time::Duration;

use treelog::event::Event;
use treelog::stream::{StartFrom, StreamItem, SubscribeOptions};
use treelog::{admin, ByteString, CreateOptions, Durability, ErrorKind, MkdirOptions, Options};
use treelog::{Command, Treelog};

const WAIT: Duration = Duration::from_secs(10);

fn open(dir: &std::path::Path) -> Treelog {
    Treelog::open(dir, Options::default().durability(Durability::None)).unwrap()
}

/// Every event path of the records the subscription delivers up to `seq`.
fn streamed_paths(sub: &mut treelog::stream::Subscription, seq: u64) -> Vec<ByteString> {
    let mut out = Vec::new();
    loop {
        match sub.next_timeout(WAIT).unwrap().expect("stream stalled") {
            StreamItem::Record { seq: s, events, .. } => {
                for e in events.iter() {
                    match &*e.event {
                        Event::Rename {
                            old_path, new_path, ..
                        } => {
                            out.push(old_path.clone());
                            out.push(new_path.clone());
                        }
                        Event::Symlink { path, target, .. } => {
                            out.push(path.clone());
                            out.push(target.clone());
                        }
                        other => out.push(other.path().clone()),
                    }
                }
                if s >= seq {
                    return out;
                }
            }
            StreamItem::Progress { seq: s } if s >= seq => return out,
            _ => {}
        }
    }
}

#[test]
fn names_that_are_not_utf8_round_trip_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(dir.path());
    let mut sub = t
        .subscribe(SubscribeOptions {
            from: StartFrom::Seq(1),
            ..Default::default()
        })
        .unwrap();

    let q: &[u8] = b"/q\xe9";
    let bad: &[u8] = b"/q\xe9/bad\xff";
    let moved: &[u8] = b"/q\xe9/caf\xe9";
    let link: &[u8] = b"/q\xe9/l\xfe";
    let target: &[u8] = b"../t\xff\x01";
    t.mkdir(q, MkdirOptions::default()).unwrap();
    t.create(bad, CreateOptions::default()).unwrap();
    // Two names that decode to the same lossy text stay two names.
    t.create(b"/q\xe9/bad\xfe", CreateOptions::default())
        .unwrap();

    let st = t.stat(bad).unwrap();
    assert_eq!(st.name, *b"bad\xff".as_slice());
    assert_eq!(t.path_of(st.id).unwrap(), *bad);
    let names: Vec<ByteString> = t.list_all(q).unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, [&b"bad\xfe"[..], b"bad\xff"].map(ByteString::from));
    // Paging resumes after a name that is not UTF-8.
    let page = t.list(q, None, 1).unwrap();
    let after = page.next_start_after.unwrap();
    assert_eq!(after, *b"bad\xfe".as_slice());
    let page = t.list(q, Some(after.as_bstr()), 1).unwrap();
    assert_eq!(page.entries[0].name, *b"bad\xff".as_slice());

    t.rename(bad, moved, false).unwrap();
    assert_eq!(t.stat(bad).unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(t.stat(moved).unwrap().id, st.id);
    t.symlink(target, link, MkdirOptions::default()).unwrap();
    assert_eq!(t.readlink(link).unwrap(), *target);
    let mut walked = Vec::new();
    t.walk("/", |p, _| {
        walked.push(p.clone());
        Ok(())
    })
    .unwrap();
    assert!(walked.iter().any(|p| *p == *moved), "{walked:?}");
    let last = t.delete(b"/q\xe9/bad\xfe", false).unwrap();

    // The change stream carries every path and the target as they are.
    let paths = streamed_paths(&mut sub, last);
    let want: Vec<ByteString> = [
        q,
        bad,
        b"/q\xe9/bad\xfe",
        bad,
        moved,
        link,
        target,
        b"/q\xe9/bad\xfe",
    ]
    .map(ByteString::from)
    .to_vec();
    assert_eq!(paths, want);
    drop(sub);

    // Names are refused for what POSIX refuses, not for their encoding.
    for wrong in [&b"/q\xe9/a\x00\xff"[..], b"/q\xe9/\xff/..", b"/q\xe9//\xff"] {
        let e = t.create(wrong, CreateOptions::default()).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::InvalidName | ErrorKind::InvalidPath),
            "{wrong:?}: {e}"
        );
    }
    let long = [&b"/q\xe9/"[..], &[0xffu8; 256]].concat();
    assert_eq!(
        t.create(&long, CreateOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidName
    );

    // Replay rebuilds the same index from the log.
    let before = admin::verify(t.store()).unwrap();
    assert!(before.ok(), "{:?}", before.problems);
    t.close().unwrap();
    let t = open(dir.path());
    assert_eq!(t.stat(moved).unwrap().id, st.id);
    assert_eq!(t.readlink(link).unwrap(), *target);
    let after = admin::verify(t.store()).unwrap();
    assert!(after.ok(), "{:?}", after.problems);
    assert_eq!(after.live_digest, before.live_digest);
}

#[test]
fn a_command_naming_bytes_needs_the_byte_names_feature_level() {
    let plain = Command::Delete {
        path: "/a/é".into(),
        recursive: false,
    };
    assert_eq!(plain.feature_level(), 1);
    let bytes = Command::Rename {
        src: "/a".into(),
        dst: b"/b\xff".into(),
        overwrite: false,
    };
    assert_eq!(bytes.feature_level(), treelog::command::BYTE_NAMES_LEVEL);
    let target = Command::Symlink {
        target: b"\xe9".into(),
        path: "/l".into(),
        parents: false,
        owner: String::new(),
        group: String::new(),
    };
    assert_eq!(target.feature_level(), treelog::command::BYTE_NAMES_LEVEL);
}
