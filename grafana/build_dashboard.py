#!/usr/bin/env python3
"""Generates grafana/dashboards/treelog.json (run it after changing panels).

Every query uses metric names that `treelog serve` exports on /metrics;
tests/grafana.rs checks that against a real server.
"""
import json, os

DS = {"type": "prometheus", "uid": "${datasource}"}
RI = "$__rate_interval"
panels = []
y = 0


def row(title):
    global y
    panels.append({"type": "row", "title": title, "collapsed": False,
                   "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "id": len(panels) + 1, "panels": []})
    y += 1


def ts(title, targets, unit="short", w=12, desc=""):
    global y
    x = 0 if (not panels or panels[-1]["type"] == "row" or panels[-1]["gridPos"]["x"] + panels[-1]["gridPos"]["w"] >= 24) else 12
    if x == 0 and panels and panels[-1]["type"] != "row":
        y += 8
    panels.append({
        "type": "timeseries", "title": title, "description": desc, "datasource": DS,
        "id": len(panels) + 1,
        "gridPos": {"h": 8, "w": w, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [{"datasource": DS, "expr": e, "legendFormat": l, "refId": chr(65 + i)} for i, (e, l) in enumerate(targets)],
    })


def q(h, quant):
    return f'histogram_quantile({quant}, sum by (le) (rate({h}_bucket[{RI}])))'


row("Write path")
ts("Operations per second by kind", [(f'sum by (op) (rate(treelog_operations_total{{outcome="ok"}}[{RI}]))', "{{op}}")], "ops",
   desc="Committed commands per second.")
ts("Refused operations by error kind", [(f'sum by (op, outcome) (rate(treelog_operations_total{{outcome!="ok"}}[{RI}]))', "{{op}} {{outcome}}")], "ops")
ts("Write latency p99 per stage", [
    (q("treelog_write_queue_wait_seconds", 0.99), "queue wait"),
    (q("treelog_write_validate_seconds", 0.99), "validate"),
    (q("treelog_write_log_seconds", 0.99), "log append"),
    (q("treelog_write_sync_seconds", 0.99), "fsync"),
    (q("treelog_write_index_apply_seconds", 0.99), "index apply"),
    (q("treelog_write_end_to_end_seconds", 0.99), "end to end"),
], "s")
ts("Write latency p50 per stage", [
    (q("treelog_write_queue_wait_seconds", 0.5), "queue wait"),
    (q("treelog_write_sync_seconds", 0.5), "fsync"),
    (q("treelog_write_end_to_end_seconds", 0.5), "end to end"),
], "s")
ts("Group size (commands per group, per fsync)", [
    (f'rate(treelog_write_group_commands_sum[{RI}]) / rate(treelog_write_group_commands_count[{RI}])', "mean per group"),
    (f'rate(treelog_write_group_commands_sum[{RI}]) / rate(treelog_write_sync_seconds_count[{RI}])', "mean per fsync"),
    (q("treelog_write_group_commands", 0.99), "p99 per group"),
    (f'rate(treelog_write_group_commands_count[{RI}])', "groups/s"),
    (f'rate(treelog_write_sync_seconds_count[{RI}])', "fsyncs/s"),
])
ts("Log bytes per group", [(q("treelog_write_group_bytes", 0.5), "p50"), (q("treelog_write_group_bytes", 0.99), "p99")], "bytes")

row("Watermarks, log and replay")
ts("Sequence watermarks", [("treelog_last_seq", "last"), ("treelog_applied_seq", "applied"), ("treelog_log_start_seq", "log start")])
ts("Log size", [("treelog_log_records", "records"), ("treelog_log_bytes", "bytes")])
ts("Writer health and replay", [("treelog_writer_failed", "writer failed"), ("treelog_replay_running", "replay running"),
                                (f"rate(treelog_replay_records_total[{RI}])", "replayed records/s")])
ts("Retention", [(f"increase(treelog_retention_removed_records_total[{RI}])", "records removed"),
                 (f"increase(treelog_cursors_expired_total[{RI}])", "cursors expired")])

row("Change streams")
ts("Subscribers and delivery", [("treelog_stream_subscribers", "subscribers"),
                                (f"rate(treelog_stream_items_delivered_total[{RI}])", "items/s delivered")])
ts("Cursor lag (records)", [("treelog_cursor_lag_records", "{{cursor}}")],
   desc="Records between each durable cursor and the end of the log; alert before it reaches the expiry bound.")
ts("Cursor positions", [("treelog_cursor_acked_seq", "{{cursor}}"), ("treelog_last_seq", "last")])

row("Reads")
ts("Reads per second", [(f"sum by (op) (rate(treelog_reads_total[{RI}]))", "{{op}}"),
                        (f"rate(treelog_path_lookups_total[{RI}])", "path component lookups")], "ops")
ts("Writer read cache", [(f"rate(treelog_writer_cache_hits_total[{RI}])", "hits/s"),
                         (f"rate(treelog_writer_cache_misses_total[{RI}])", "misses/s")], "ops",
   desc="Index lookups made while validating commands, served from the writer's exact cache or from RocksDB.")
ts("Readers' cache misses", [(f"sum by (cf) (rate(treelog_read_cache_misses_total[{RI}]))", "{{cf}} misses/s"),
                             (f"rate(treelog_path_lookups_total[{RI}])", "path component lookups/s")], "ops",
   desc="Readers' index lookups that went to RocksDB, beside the edge lookups made resolving paths: the edges hit ratio is 1 - edges misses / path lookups.")
ts("Read latency p99 (server)", [(f'histogram_quantile(0.99, sum by (le, op) (rate(treelog_read_seconds_bucket[{RI}])))', "{{op}}")], "s")

row("RocksDB")
ts("Estimated keys per column family", [("treelog_rocksdb_estimated_keys", "{{cf}}")])
ts("Live SST bytes per column family", [("treelog_rocksdb_live_sst_bytes", "{{cf}}")], "bytes")
ts("Memtable bytes per column family", [("treelog_rocksdb_memtable_bytes", "{{cf}}")], "bytes")
ts("Pending compaction bytes and block cache", [("treelog_rocksdb_pending_compaction_bytes", "pending {{cf}}"),
                                                ("treelog_rocksdb_block_cache_usage_bytes", "block cache")], "bytes")

row("Server and process")
ts("Connections and requests in flight", [("treelog_server_connections", "connections"), ("treelog_server_requests_in_flight", "in flight"),
                                          (f"rate(treelog_server_connections_rejected_total[{RI}])", "rejected/s")])
ts("Requests per second", [(f"sum by (request) (rate(treelog_server_requests_total[{RI}]))", "{{request}}")], "reqps")
ts("Rejected frames and auth failures", [(f"rate(treelog_server_rejected_frames_total[{RI}])", "bad frames/s"),
                                         (f"rate(treelog_server_auth_failures_total[{RI}])", "auth failures/s"),
                                         (f"rate(treelog_server_connections_accepted_total[{RI}])", "accepted/s")])
ts("Replies queued for clients", [("treelog_server_queued_reply_bytes", "queued bytes")], "bytes",
   desc="Encoded replies not yet written to clients' sockets; each connection's share is bounded by --max-conn-buffer-bytes")
ts("Limits reached", [(f"rate(treelog_server_backpressure_total[{RI}])", "back-pressure/s"),
                      (f"rate(treelog_server_handshake_evictions_total[{RI}])", "handshake evictions/s"),
                      (f"sum by (port) (rate(treelog_server_accept_errors_total[{RI}]))", "accept errors/s {{port}}"),
                      (f"rate(treelog_http_connections_rejected_total[{RI}])", "http rejected/s"),
                      ("treelog_server_connections_handshaking", "handshaking")],
   desc="Accept errors mean the open-file limit is too low (see docs/OPERATIONS.md, Client-facing limits)")
ts("Process CPU", [(f"rate(process_cpu_seconds_total[{RI}])", "cpu cores")], "percentunit")
ts("Process memory and file descriptors", [("process_resident_memory_bytes", "resident bytes"), ("process_open_fds", "open fds")])

row("Replication")
ts("Replica lag (records)", [("treelog_replica_lag_records", "{{instance}}")],
   desc="Records a replica is behind its source (treelog admin status); bounded under load is healthy, growing is not")
ts("Replica lag (seconds)", [("treelog_replica_lag_seconds", "{{instance}}")], "s",
   desc="How old a replica's newest state is while its source has a newer one")
ts("Replica positions", [("treelog_applied_seq and on(instance) treelog_replica_connected", "applied {{instance}}"),
                         ("treelog_replica_leader_committed_seq", "source committed {{instance}}"),
                         ("treelog_replica_connected", "connected {{instance}}")],
   desc="The replica's applied sequence beside its source's committed sequence as it last heard it; connected is 1 while it streams")
ts("Replica reconnects and re-bootstraps", [(f"increase(treelog_replica_reconnects_total[{RI}])", "reconnects {{instance}}"),
                                             (f"increase(treelog_replica_rebootstraps_total[{RI}])", "re-bootstraps {{instance}}")],
   desc="Reconnections to the source, and bootstraps again from a new checkpoint (the replica's position was removed from the source's log, or its history diverged)")
ts("Last bootstrap", [("treelog_replica_bootstrap_bytes", "bytes {{instance}}"), ("treelog_replica_bootstrap_seconds", "seconds {{instance}}")],
   desc="Checkpoint bytes fetched and seconds taken by the replica's last bootstrap")

row("Raft cluster")
ts("Raft state", [("treelog_raft_term", "term {{instance}}"), ("treelog_raft_leader", "leader {{instance}}"),
                  ('treelog_raft_state{state="leader"}', "leading {{instance}}")],
   desc="Each node's term, the leader it knows (node id, 0 for none) and whether it leads (docs/CLUSTER.md); one leader, all nodes agreeing, is healthy")
ts("Raft log positions", [("treelog_raft_last_log_index", "last {{instance}}"), ("treelog_raft_committed_index", "committed {{instance}}"),
                          ("treelog_raft_applied_index", "applied {{instance}}"), ("treelog_raft_purged_index", "purged {{instance}}"),
                          ("treelog_raft_snapshot_index", "snapshot {{instance}}")],
   desc="The last entry in each node's log, the last it knows committed, the last applied to its index, and where its log was purged behind its snapshot")
ts("Raft replication lag (entries)", [("treelog_raft_replication_lag_entries", "node {{node}}")],
   desc="On the leader: entries each member lacks; bounded under load is healthy, a member growing behind is down or slow")
ts("Raft elections and leader changes", [(f"increase(treelog_raft_elections_total[{RI}])", "elections {{instance}}"),
                                        (f"increase(treelog_raft_leader_changes_total[{RI}])", "leader changes {{instance}}")],
   desc="Terms begun and changes of the known leader; more than the failures explain means heartbeats are late (an overloaded node, a slow disk)")
ts("Raft snapshots", [(q("treelog_raft_snapshot_build_seconds", 0.99), "build p99"), (q("treelog_raft_snapshot_send_seconds", 0.99), "send p99"),
                      (q("treelog_raft_snapshot_install_seconds", 0.99), "install p99")], "s",
   desc="Building a snapshot (a checkpoint and its checksums), sending one to a node that lacks the purged log, and checking and installing one")
ts("Raft log fsync", [(q("treelog_raft_log_sync_seconds", 0.99), "fsync p99"), (q("treelog_raft_sync_appends", 0.5), "appends per fsync p50")],
   desc="The log syncer's fsyncs and how many of Raft's appends each made durable (group commit)")
ts("Raft entries", [(f"rate(treelog_raft_appended_entries_total[{RI}])", "appended/s {{instance}}"),
                    (f"rate(treelog_raft_applied_entries_total[{RI}])", "applied/s {{instance}}")], "ops")
ts("Raft refusals and unknown outcomes", [(f"increase(treelog_raft_proposals_not_leader_total[{RI}])", "not leader {{instance}}"),
                                         (f"sum by (why) (increase(treelog_raft_outcome_unknown_total[{RI}]))", "outcome unknown: {{why}}")],
   desc="Commands refused because leadership moved before Raft took them (safe to retry), and callers answered OutcomeUnknown (read before retrying)")

row("Change-stream bridge")
ts("Bridge positions", [("treelog_bridge_published_seq", "published {{instance}}"),
                        ("treelog_bridge_committed_seq", "committed {{instance}}")],
   desc="The last record the bus acknowledged beside the server's committed sequence (docs/BRIDGE.md)")
ts("Bridge lag", [("treelog_bridge_lag_records", "records {{instance}}")],
   desc="Committed records the bus has not acknowledged; bounded under load is healthy, growing means the bridge or the bus cannot keep up")
ts("Bridge lag (seconds)", [("treelog_bridge_lag_seconds", "{{instance}}")], "s",
   desc="Age of the oldest committed record the bus has not acknowledged (0 when caught up)")
ts("Bridge latency", [(q("treelog_bridge_publish_seconds", 0.5), "publish p50"), (q("treelog_bridge_publish_seconds", 0.99), "publish p99"),
                      (q("treelog_bridge_commit_to_ack_seconds", 0.5), "commit to ack p50"),
                      (q("treelog_bridge_commit_to_ack_seconds", 0.99), "commit to ack p99")], "s",
   desc="From sending a message to JetStream's ack, and from a record's commit to the ack of its last part")
ts("Bridge throughput", [(f"rate(treelog_bridge_records_total[{RI}])", "records/s"),
                         (f"rate(treelog_bridge_messages_total[{RI}])", "messages/s"),
                         (f"rate(treelog_bridge_bytes_total[{RI}])", "bytes/s")])
ts("Bridge state", [("treelog_bridge_connected", "connected {{instance}}"), ("treelog_bridge_failed", "failed {{instance}}"),
                    (f"increase(treelog_bridge_retries_total[{RI}])", "retries {{instance}}"),
                    (f"increase(treelog_bridge_duplicates_total[{RI}])", "duplicates {{instance}}")],
   desc="connected is 1 while the bus is reachable; failed is 1 when the bridge stopped on a gap or a stream it cannot use (an operator must act); retries are attempts started again after errors")

dash = {
    "title": "treelog",
    "uid": "treelog-overview",
    "tags": ["treelog"],
    "timezone": "browser",
    "schemaVersion": 39,
    "version": 1,
    "refresh": "10s",
    "time": {"from": "now-1h", "to": "now"},
    "templating": {"list": [{
        "name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
        "current": {}, "hide": 0, "refresh": 1, "regex": "", "options": []}]},
    "annotations": {"list": []},
    "panels": panels,
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboards", "treelog.json")
with open(out, "w") as f:
    json.dump(dash, f, indent=2)
    f.write("\n")
print(f"wrote {out}: {len([p for p in panels if p['type'] != 'row'])} panels")
