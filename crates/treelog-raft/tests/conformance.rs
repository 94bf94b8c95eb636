//! openraft's storage conformance suite against treelog's log storage and
//! state machine: each case on a new store (a temporary directory opened as
//! a cluster's node).

use std::sync::Arc;

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;
use treelog::replication::{ConsensusNode, NodeRole};
use treelog::{Durability, Options, Treelog};
use treelog_raft::log_store::LogStore;
use treelog_raft::state_machine::{Snapshots, StateMachine};
use treelog_raft::types::{StoreRef, TypeConfig};

struct Builder;

/// What a case's store lives on: dropped after the case.
struct Guard {
    _t: Arc<Treelog>,
    _dir: tempfile::TempDir,
}

impl StoreBuilder<TypeConfig, LogStore, StateMachine, Guard> for Builder {
    async fn build(&self) -> Result<(Guard, LogStore, StateMachine), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let opts = Options {
            role: NodeRole::Consensus(ConsensusNode { node_id: 1 }),
            metrics: false,
            ..Options::default().durability(Durability::None)
        };
        let t = Arc::new(Treelog::open(dir.path(), opts).expect("open the store"));
        let store = StoreRef::new(t.clone());
        let log = LogStore::new(store.clone(), Durability::None, None).expect("the log storage");
        let sm = StateMachine::new(store, Arc::new(Snapshots::default()), None);
        Ok((Guard { _t: t, _dir: dir }, log, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    Suite::test_all(Builder).await.expect("the suite passes");
}
