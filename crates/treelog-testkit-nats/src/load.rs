//! A writer's load for the bridge to publish.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use treelog_client::Client;
use treelog_proto::Command;

/// A writer's load: directories of files under `root`, renames between
/// them, and now and then a recursive delete of a directory of `fat`
/// files with long names (one big record: it is cut into parts when
/// `fat` is large for the bus's max_payload). Runs until `stop`; returns
/// how many commands were acknowledged.
pub async fn write_load(client: Client, root: String, fat: usize, stop: Arc<AtomicBool>) -> u64 {
    let mkdir = |p: String| Command::Mkdir {
        path: p.into(),
        parents: true,
        mode: 0o755,
        owner: "bridge".into(),
        group: "test".into(),
    };
    let create = |p: String| Command::Create {
        path: p.into(),
        parents: false,
        mode: 0o644,
        owner: "bridge".into(),
        group: "test".into(),
        block_size: 4096,
    };
    let mut n = 0u64;
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let d = format!("{root}/d{round}");
        client.submit(mkdir(d.clone())).await.unwrap();
        n += 1;
        for i in 0..20 {
            client.submit(create(format!("{d}/f{i}"))).await.unwrap();
            n += 1;
        }
        client
            .submit(Command::Rename {
                src: format!("{d}/f0").into(),
                dst: format!("{d}/renamed").into(),
                overwrite: false,
            })
            .await
            .unwrap();
        n += 1;
        if fat > 0 && round % 5 == 4 {
            let big = format!("{root}/big{round}");
            client.submit(mkdir(big.clone())).await.unwrap();
            n += 1;
            for i in 0..fat {
                let name = format!("{big}/{}-{i}", "long-name-".repeat(8));
                client.submit(create(name)).await.unwrap();
                n += 1;
            }
            client
                .submit(Command::Delete {
                    path: big.into(),
                    recursive: true,
                })
                .await
                .unwrap();
            n += 1;
        }
        round += 1;
    }
    n
}
