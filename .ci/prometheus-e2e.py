#!/usr/bin/env python3
"""End-to-end check with a real Prometheus.

Starts a NATS server with JetStream (TREELOG_NATS_SERVER or nats-server),
`treelog serve` on loopback publishing its log into it (`--bridge-nats`)
and a replica of it (`serve --replica-of`), a three-node Raft cluster
(`serve --node-id`), a Prometheus scraping them all every second,
runs a workload through the CLI, then evaluates every expression of the
Grafana dashboard through Prometheus's HTTP API and fails if any returns no
data. Usage: prometheus-e2e.py PATH_TO_TREELOG_BINARY
"""
import json, os, shutil, subprocess, sys, tempfile, time, urllib.parse, urllib.request

BIN = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RPC, HTTP, PROM = "127.0.0.1:17500", "127.0.0.1:17501", "127.0.0.1:19090"
REPLICA_RPC, REPLICA_HTTP = "127.0.0.1:17510", "127.0.0.1:17511"
# A three-node Raft cluster beside them, for the dashboard's Raft row.
NODES = [(i, f"127.0.0.1:{17520 + 10 * i}", f"127.0.0.1:{17521 + 10 * i}") for i in (1, 2, 3)]
NATS = "127.0.0.1:14222"


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_until(what, fn, tries=120, pause=0.5):
    for _ in range(tries):
        try:
            if fn():
                return
        except Exception:
            pass
        time.sleep(pause)
    sys.exit(f"prometheus-e2e: timed out waiting for {what}")


def cli(*args, ok=True, server=RPC):
    r = subprocess.run([BIN, "--server", server, *args], capture_output=True, text=True, timeout=60)
    if ok and r.returncode != 0:
        sys.exit(f"prometheus-e2e: treelog {' '.join(args)} failed: {r.stderr}")
    return r


def main():
    tmp = tempfile.mkdtemp(prefix="treelog-prom-")
    procs = []
    try:
        nats = subprocess.Popen([os.environ.get("TREELOG_NATS_SERVER", "nats-server"), "-js", "-sd", f"{tmp}/nats",
                                 "-a", NATS.split(":")[0], "-p", NATS.split(":")[1]],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(nats)
        server = subprocess.Popen([BIN, "--data", f"{tmp}/db", "serve", "--listen", RPC, "--http", HTTP,
                                   "--bridge-nats", f"nats://{NATS}", "--bridge-stream", "E2E"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(server)
        wait_until("treelog /readyz", lambda: get(f"http://{HTTP}/readyz")[0] == 200)
        replica = subprocess.Popen([BIN, "--data", f"{tmp}/replica", "serve", "--listen", REPLICA_RPC,
                                    "--http", REPLICA_HTTP, "--replica-of", RPC],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(replica)
        wait_until("the replica's /readyz", lambda: get(f"http://{REPLICA_HTTP}/readyz")[0] == 200)
        for (i, rpc, http) in NODES:
            procs.append(subprocess.Popen([BIN, "--data", f"{tmp}/node{i}", "serve", "--node-id", str(i),
                                           "--listen", rpc, "--http", http],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            # Live, not ready: a node is ready once it is a member with a leader.
            wait_until(f"node {i}'s /healthz", lambda: get(f"http://{http}/healthz")[0] == 200)
        first = NODES[0][1]
        cli("cluster", "init", server=first)
        wait_until("node 1 to lead", lambda: cli("mkdir", "-p", "/c", server=first, ok=False).returncode == 0)
        for (i, rpc, _) in NODES[1:]:
            cli("cluster", "add-learner", str(i), rpc, server=first)
        cli("cluster", "promote", "2", "3", server=first)
        for (i, _, http) in NODES:
            wait_until(f"node {i}'s /readyz", lambda: get(f"http://{http}/readyz")[0] == 200)
        targets = ", ".join(f"'{t}'" for t in [HTTP, REPLICA_HTTP] + [h for (_, _, h) in NODES])
        with open(f"{tmp}/prometheus.yml", "w") as f:
            f.write(f"global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: treelog\n"
                    f"    static_configs:\n      - targets: [{targets}]\n")
        prom = subprocess.Popen(["prometheus", f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/tsdb",
                                 f"--web.listen-address={PROM}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(prom)
        up = urllib.parse.quote('sum(up{job="treelog"})')
        wait_until("prometheus to scrape the leader, the replica and the cluster", lambda: json.loads(
            get(f"http://{PROM}/api/v1/query?query={up}")[1])["data"]["result"][0]["value"][1] == "5")
        # Workload: every kind of activity the dashboard shows, spread over
        # several scrapes so that rate() has samples.
        cli("tail", "--from", "1", "--cursor", "dash", "--limit", "1")
        for round in range(8):
            cli("mkdir", "-p", f"/w/r{round}/a/b")
            cli("touch", f"/w/r{round}/a/b/f")
            cli("complete", f"/w/r{round}/a/b/f", "42")
            cli("stat", f"/w/r{round}/a/b/f")
            cli("ls", "-R", "/w")
            cli("mkdir", f"/w/r{round}", ok=False)
            cli("tail", "--cursor", "dash", "--limit", "100")
            # Through a follower, which sends it to the leader.
            cli("mkdir", "-p", f"/c/r{round}", server=NODES[1][1])
            time.sleep(1)
        time.sleep(3)
        dash = json.load(open(os.path.join(ROOT, "grafana", "dashboards", "treelog.json")))
        failures, n = [], 0
        for panel in dash["panels"]:
            for t in panel.get("targets", []):
                expr = t["expr"].replace("$__rate_interval", "30s")
                n += 1
                body = json.loads(get(f"http://{PROM}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))[1])
                if body.get("status") != "success" or not body["data"]["result"]:
                    failures.append(f"{panel['title']}: {expr} -> {body.get('error') or 'no data'}")
        for f in failures:
            print("NO DATA:", f)
        print(f"prometheus-e2e: {n - len(failures)} passed, {len(failures)} failed")
        return 1 if failures else 0
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
