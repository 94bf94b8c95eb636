//! A Raft node's metrics (`treelog_raft_*`, docs/OPERATIONS.md), in the
//! registry of its store (the server's `/metrics`).

use std::time::Duration;

use prometheus::{
    exponential_buckets, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

use crate::types::TypeConfig;

pub struct RaftMetrics {
    pub term: IntGauge,
    /// The leader's node id (0: none known).
    pub leader: IntGauge,
    /// One per state, 1 for the node's.
    pub state: IntGaugeVec,
    pub last_log_index: IntGauge,
    pub committed_index: IntGauge,
    pub applied_index: IntGauge,
    pub snapshot_index: IntGauge,
    pub purged_index: IntGauge,
    /// On the leader: entries each member lacks.
    pub replication_lag: IntGaugeVec,
    /// The members `replication_lag` has a series for.
    lag_members: std::sync::Mutex<Vec<String>>,
    /// Terms this node saw begin.
    pub elections: IntCounter,
    /// Times the leader this node knows changed.
    pub leader_changes: IntCounter,
    pub snapshot_build: Histogram,
    pub snapshot_send: Histogram,
    pub snapshot_install: Histogram,
    /// Commands refused because this node no longer led when their
    /// entry reached Raft.
    pub proposals_not_leader: IntCounter,
    pub log_sync: Histogram,
    /// Appends per log fsync (group commit).
    pub sync_appends: Histogram,
    pub appended_entries: IntCounter,
    pub appended_bytes: IntCounter,
    pub applied_entries: IntCounter,
    /// Committed entries per apply (a batch of the state machine's).
    pub apply_entries: Histogram,
    /// Callers answered `OutcomeUnknown` after leadership was lost and
    /// their entries' fate stayed unknown.
    pub outcome_unknown: IntCounterVec,
    /// The cluster's feature level as this node knows it (`features`).
    pub cluster_feature_level: IntGauge,
}

const STATES: [&str; 5] = ["leader", "follower", "candidate", "learner", "shutdown"];

impl RaftMetrics {
    pub fn register(r: &Registry) -> prometheus::Result<RaftMetrics> {
        let g = |n: &str, h: &str| IntGauge::new(n, h);
        let c = |n: &str, h: &str| IntCounter::new(n, h);
        let lat = |n: &str, h: &str, from: f64| {
            Histogram::with_opts(
                HistogramOpts::new(n, h)
                    .buckets(exponential_buckets(from, 2.0, 20).unwrap_or_default()),
            )
        };
        let m = RaftMetrics {
            term: g("treelog_raft_term", "The node's current Raft term")?,
            leader: g(
                "treelog_raft_leader",
                "The node id of the leader this node knows (0: none)",
            )?,
            state: IntGaugeVec::new(
                Opts::new("treelog_raft_state", "1 for the node's Raft state"),
                &["state"],
            )?,
            last_log_index: g(
                "treelog_raft_last_log_index",
                "The last entry in this node's log",
            )?,
            committed_index: g(
                "treelog_raft_committed_index",
                "The last entry this node knows committed",
            )?,
            applied_index: g(
                "treelog_raft_applied_index",
                "The last entry applied to this node's index",
            )?,
            snapshot_index: g(
                "treelog_raft_snapshot_index",
                "The last entry of this node's current snapshot",
            )?,
            purged_index: g(
                "treelog_raft_purged_index",
                "The last entry Raft purged from this node's log",
            )?,
            replication_lag: IntGaugeVec::new(
                Opts::new(
                    "treelog_raft_replication_lag_entries",
                    "On the leader: entries a member lacks",
                ),
                &["node"],
            )?,
            lag_members: Default::default(),
            elections: c(
                "treelog_raft_elections_total",
                "Terms this node saw begin (elections)",
            )?,
            leader_changes: c(
                "treelog_raft_leader_changes_total",
                "Times the leader this node knows changed",
            )?,
            snapshot_build: lat(
                "treelog_raft_snapshot_build_seconds",
                "Time to build a snapshot (checkpoint, catch-up, checksums)",
                1e-3,
            )?,
            snapshot_send: lat(
                "treelog_raft_snapshot_send_seconds",
                "Time to send a snapshot to a member, its install included",
                1e-3,
            )?,
            snapshot_install: lat(
                "treelog_raft_snapshot_install_seconds",
                "Time to check and install a snapshot received from the leader",
                1e-3,
            )?,
            proposals_not_leader: c(
                "treelog_raft_proposals_not_leader_total",
                "Commands refused with NotLeader because leadership moved before Raft took them",
            )?,
            log_sync: lat(
                "treelog_raft_log_sync_seconds",
                "Duration of the Raft log's fsyncs",
                50e-6,
            )?,
            sync_appends: Histogram::with_opts(
                HistogramOpts::new(
                    "treelog_raft_sync_appends",
                    "Appends made durable by one fsync of the Raft log",
                )
                .buckets(exponential_buckets(1.0, 2.0, 12).unwrap_or_default()),
            )?,
            appended_entries: c(
                "treelog_raft_appended_entries_total",
                "Entries appended to this node's log",
            )?,
            appended_bytes: c(
                "treelog_raft_appended_bytes_total",
                "Bytes of entries appended to this node's log",
            )?,
            applied_entries: c(
                "treelog_raft_applied_entries_total",
                "Committed entries applied to this node's index",
            )?,
            apply_entries: Histogram::with_opts(
                HistogramOpts::new(
                    "treelog_raft_apply_entries",
                    "Committed entries per apply to this node's index",
                )
                .buckets(exponential_buckets(1.0, 2.0, 12).unwrap_or_default()),
            )?,
            outcome_unknown: IntCounterVec::new(
                Opts::new(
                    "treelog_raft_outcome_unknown_total",
                    "Callers answered OutcomeUnknown, by why",
                ),
                &["why"],
            )?,
            cluster_feature_level: g(
                "treelog_raft_cluster_feature_level",
                "The cluster's feature level: on the leader the lowest of its members' \
                 (1 for a member of a release before feature levels or not heard from), \
                 elsewhere the leader's figure",
            )?,
        };
        r.register(Box::new(m.term.clone()))?;
        r.register(Box::new(m.leader.clone()))?;
        r.register(Box::new(m.state.clone()))?;
        for x in [
            &m.last_log_index,
            &m.committed_index,
            &m.applied_index,
            &m.snapshot_index,
            &m.purged_index,
            &m.cluster_feature_level,
        ] {
            r.register(Box::new(x.clone()))?;
        }
        r.register(Box::new(m.replication_lag.clone()))?;
        for x in [
            &m.elections,
            &m.leader_changes,
            &m.proposals_not_leader,
            &m.appended_entries,
            &m.appended_bytes,
            &m.applied_entries,
        ] {
            r.register(Box::new(x.clone()))?;
        }
        for x in [
            &m.snapshot_build,
            &m.snapshot_send,
            &m.snapshot_install,
            &m.log_sync,
            &m.sync_appends,
            &m.apply_entries,
        ] {
            r.register(Box::new(x.clone()))?;
        }
        r.register(Box::new(m.outcome_unknown.clone()))?;
        for s in STATES {
            m.state.with_label_values(&[s]).set(0);
        }
        m.outcome_unknown.with_label_values(&["leadership_lost"]);
        m.outcome_unknown.with_label_values(&["not_committed"]);
        Ok(m)
    }

    pub(crate) fn appended(&self, n: u64, bytes: u64) {
        self.appended_entries.inc_by(n);
        self.appended_bytes.inc_by(bytes);
    }

    pub(crate) fn synced(&self, took: Duration, appends: usize) {
        self.log_sync.observe(took.as_secs_f64());
        self.sync_appends.observe(appends as f64);
    }

    pub(crate) fn applied(&self, n: u64) {
        self.applied_entries.inc_by(n);
        self.apply_entries.observe(n as f64);
    }

    pub(crate) fn snapshot_built(&self, took: Duration) {
        self.snapshot_build.observe(took.as_secs_f64());
    }

    pub(crate) fn snapshot_sent(&self, took: Duration) {
        self.snapshot_send.observe(took.as_secs_f64());
    }

    pub(crate) fn snapshot_installed(&self, took: Duration) {
        self.snapshot_install.observe(took.as_secs_f64());
    }

    pub(crate) fn refused_not_leader(&self) {
        self.proposals_not_leader.inc();
    }

    /// Refreshes the gauges from openraft's metrics, with the state and
    /// leader this node reports (check-quorum applied).
    pub(crate) fn refresh(
        &self,
        m: &openraft::RaftMetrics<TypeConfig>,
        state: &str,
        leader: Option<u64>,
    ) {
        self.term.set(m.current_term as i64);
        self.leader.set(leader.unwrap_or(0) as i64);
        for s in STATES {
            self.state.with_label_values(&[s]).set((s == state) as i64);
        }
        let idx = |l: &Option<crate::types::LogId>| l.as_ref().map_or(0, |l| l.index) as i64;
        self.last_log_index
            .set(m.last_log_index.unwrap_or(0) as i64);
        self.committed_index.set(idx(&m.local_committed));
        self.applied_index.set(idx(&m.last_applied));
        self.snapshot_index.set(idx(&m.snapshot));
        self.purged_index.set(idx(&m.purged));
        // This runs at every change of openraft's metrics (each commit on
        // a leader): the members' series are set in place, and only those
        // of members no longer replicated to are dropped (a reset would
        // make every series anew each time).
        let mut members = Vec::new();
        if let Some(rep) = &m.replication {
            let last = m.last_log_index.unwrap_or(0);
            for (node, matched) in rep.iter() {
                let matched = matched.as_ref().map_or(0, |l| l.index);
                let node = node.to_string();
                self.replication_lag
                    .with_label_values(&[&node])
                    .set(last.saturating_sub(matched) as i64);
                members.push(node);
            }
        }
        let mut known = self.lag_members.lock().unwrap_or_else(|p| p.into_inner());
        for gone in known.iter().filter(|n| !members.contains(n)) {
            let _ = self.replication_lag.remove_label_values(&[gone]);
        }
        *known = members;
    }
}

/// The name of a node's state (metrics, status).
pub(crate) fn state_name(m: &openraft::RaftMetrics<TypeConfig>) -> &'static str {
    match m.state {
        openraft::ServerState::Leader => "leader",
        openraft::ServerState::Follower => "follower",
        openraft::ServerState::Candidate => "candidate",
        openraft::ServerState::Learner => "learner",
        openraft::ServerState::Shutdown => "shutdown",
    }
}
