#!/usr/bin/env bash
# powercut.sh — simulated power cuts of treelog on LazyFS
# =======================================================
#
# What it tests
#   treelog's log-retention, rebuild, creation and replica paths under power
#   cuts:
#     a  background retention under load: the crash worker (2 threads,
#        --retain-records 2000 --retention-interval-ms 50) on an empty database
#     b  `admin retention --max-records 2000` on a database of ~20k records
#        whose index was never flushed (the worker was killed with -9)
#     c  `admin rebuild` on the same ~20k-record database
#     d  the creation of a new database: `treelog --data D mkdir -p /a/b`, the
#        first command on an empty directory D
#     e  a replica (`serve --replica-of`) whose data is on LazyFS, seeded from
#        a backup 3,000 creates behind its leader (a `serve` outside LazyFS):
#        it catches up before serving, then streams while a writer imports
#        files on the leader; after the cut it must verify, resume as a
#        replica without bootstrapping again, and end with the leader's digest
#   The data directory lives on a LazyFS mount: LazyFS keeps every write in its
#   own page cache until the file is fsynced, so losing that cache is a power
#   cut (metadata operations — create, rename, unlink — go straight to the
#   backing directory in this LazyFS version; only unsynced file data is lost).
#
# The crash worker (scenario a, and the database of b and c)
#   It is the workload of treelog's kill tests (tests/common/worker.rs) and
#   lives in the test binaries, not in `treelog`: here, the `crash` test
#   binary of the root crate (`cargo test --test crash --no-run` builds it and
#   prints its path, target/debug/deps/crash-<hash>). It is started as
#     BIN crash_worker_process --exact --ignored --nocapture --test-threads 1 -q
#   with TREELOG_CRASH_WORKER set to its arguments joined by the byte 0x1f:
#     DATA 0x1f THREADS 0x1f RUN [0x1f --retain-records 0x1f N 0x1f
#     --retention-interval-ms 0x1f MS]
#   and prints `READY`, `BEGIN ...` and `ACK ...` lines (flushed); the test
#   harness's own lines (`running 1 test`, ...) are ignored. The worker always
#   syncs before acknowledging (it has no --durability), so scenario a has no
#   negative control with unsynced acknowledgements.
#
# Cut methods (each trial uses one)
#   inject:OP:TIMING:K  LazyFS is started with an injected fault
#                       [[injection]] type="clear-cache" from="*" op=OP
#                       timing=TIMING occurrence=K crash=true
#                       and kills itself (losing its cache) before the
#                       (K+1)-th OP (TIMING=before) or right after the K-th OP
#                       returned, before its reply (TIMING=after), counted over
#                       the whole mount. OP is fsync, unlink, create, rename or
#                       truncate. from="*" needs the patch below.
#   fifo:T              after T seconds: SIGSTOP treelog, write
#                       `lazyfs::clear-cache` to the faults fifo, wait for
#                       "cache is cleared", SIGKILL treelog, kill LazyFS.
#   If a cut did not happen by itself (K larger than the run, or the command
#   finished first) the trial says so ("cut": false for b/c/d: LazyFS is then
#   killed after the command exited; for a, a fifo cut is made at the end of
#   the run).
#   Then the backing directory (what was synced) is copied aside and opened
#   directly, without LazyFS.
#
# Checks after each cut (a trial fails on any of them)
#   a, b, c:
#   - `admin info` exits 0 (exit 10 = corruption refused: reported as a bug)
#   - `admin verify` exits 0; exit 11 is accepted only when the log start is
#     past 1 (retention removed records, and verify needs the whole log)
#   - a: every ACKed create/rename/delete of the worker is reflected exactly:
#     each thread's files equal the ACKed model, or the model plus that
#     thread's one in-flight (BEGIN without ACK) op; every ACK seq <= last_seq
#   - a, cut while the worker's open was still creating the database (the
#     marker TREELOG-CREATING is there): the worker must not have printed
#     READY; `admin info` must refuse (exit 10, "the creation of a database
#     here was interrupted"); the write (`touch`, which may create) must
#     succeed, `admin verify` exit 0, and the namespace hold only that file
#   - b, c: `ls -R --json /` equals the snapshot of the database before the
#     command (retention and rebuild must not change the namespace)
#   - the database still takes a write (`touch /powercut-after-cut`)
#   d:
#   - first `admin info` (which does not create): if the directory holds the
#     marker TREELOG-CREATING it must refuse with exit 10 and "the creation of
#     a database here was interrupted"; if it holds a database and no marker,
#     it must exit 0 (an empty directory: anything, it is only recorded)
#   - `touch /after` (which may create, so starts an interrupted creation
#     over) exits 0, then `admin verify` exits 0
#   - if mkdir had succeeded before the cut (it exited 0 or printed its
#     `mkdir /a/b (seq N)` line), `/a/b` exists
#
# Limits
#   LazyFS loses unsynced file data only: it does not drop or reorder creates,
#   renames or unlinks, and does not simulate directory fsync. So scenario d
#   cannot simulate a creation marker that is not durable: TREELOG-CREATING
#   is on the backing directory from the moment it is created until it is
#   removed, and the cuts where the directory fsyncs of a creation matter
#   (RocksDB's files there without the marker, or the marker's removal
#   undone) are not exercised.
#
# Needs
#   - /dev/fuse and fusermount3 (apt-get install fuse3); run as root
#   - a built LazyFS with the patch below:  ./powercut.sh build-lazyfs SRC
#     where SRC is a checkout of github.com/dsrhaslab/lazyfs (tested at
#     a47a5baea559020f29902662de77764b0cbd62ce). It installs cmake, g++,
#     libfuse3-dev, libtoml11-dev, libspdlog-dev with apt-get, applies the
#     patch (CMake uses Debian's toml11/spdlog instead of FetchContent;
#     injections with from="*"; unlink's "after" injection fires after the
#     unlink, not as "before") and builds with -j2.
#   - a treelog binary (debug or release), and the `crash` test binary (the
#     crash worker, above) for scenarios a, b and c
#   - python3 (standard library only)
#
# Run
#   ./powercut.sh build-lazyfs /path/to/lazyfs            # once
#   ./powercut.sh run [--treelog BIN] [--worker BIN] [--lazyfs BIN]
#                     [--work DIR] [--scenarios a,b,c,d] [--trials N]
#                     [--seed S] [--a-secs 6] [--records 20000] [--keep-all]
#   ./powercut.sh run --exhaustive ...   # b, c, d: cut at every counted op instead
#   ./powercut.sh run --only 'b:inject:unlink:after:3'    # replay one trial
#   Defaults (paths relative to the current directory): --treelog ./treelog
#   if it exists, else target/release/treelog, else target/debug/treelog of
#   the repository holding this script; --worker `crash-test` next to the
#   treelog binary; --lazyfs ./lazyfs/lazyfs/build/lazyfs; --work ./runs;
#   --trials 12 per scenario; --seed 1.
#   Run times with a debug build on 2 cores (LazyFS's start and unmount
#   included, 4 to 8 s a trial): `--scenarios a --trials 12` 13 trials,
#   ~1.5-2 min; `--scenarios b,c,d --exhaustive` 333 trials, ~30 min
#   (b 83 trials ~8 min, c 121 ~13 min, d 129 ~9 min; ~10 s for the
#   b/c database); the default run (12 trials per scenario) ~5 min.
#   Each scenario is profiled first (one uncut run with
#   log_all_operations=true counts the fsync/unlink/create/rename/truncate
#   calls and times the run); the cut points K and T are drawn from those
#   ranges with the seed (same seed and same profile counts: same plan;
#   scenario a's counts vary a little from run to run).
#   Output: one line per trial, then a summary with each scenario's run time;
#   exit 1 if any trial failed.
#   Every trial leaves WORK/<trial>/ with the LazyFS config and log, the
#   command's output and result.json; a failed trial keeps the cut database as
#   WORK/<trial>/cut-db (open it with `treelog --data .../cut-db admin info`).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ "${1:-}" == "build-lazyfs" ]]; then
    SRC="${2:?usage: powercut.sh build-lazyfs LAZYFS_SRC_DIR}"
    SRC="$(cd "$SRC" && pwd)"
    missing=()
    for p in cmake g++ libfuse3-dev fuse3 libtoml11-dev libspdlog-dev pkg-config; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if ((${#missing[@]})); then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
    fi
    if ! grep -q 'powercut patch' "$SRC/lazyfs/src/lazyfs.cpp"; then
        sed -n '/^__LAZYFS_PATCH__$/,/^__END_DATA__$/p' "${BASH_SOURCE[0]}" | sed '1d;$d' > "$SRC/powercut-lazyfs.patch"
        (cd "$SRC" && patch -p1 < powercut-lazyfs.patch)
    fi
    (cd "$SRC/libs/libpcache" && mkdir -p build && cd build && cmake -DCMAKE_BUILD_TYPE=Release .. >/dev/null && make -j2)
    (cd "$SRC/lazyfs" && mkdir -p build && cd build && cmake -DCMAKE_BUILD_TYPE=Release -DLAZYFS_BUILD_TESTS=OFF .. >/dev/null && make -j2)
    grep -q '^user_allow_other' /etc/fuse.conf 2>/dev/null || echo user_allow_other >> /etc/fuse.conf
    echo "built $SRC/lazyfs/build/lazyfs"
    exit 0
fi

if [[ "${1:-}" != "run" ]]; then
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 2
fi
shift
grep -q '^user_allow_other' /etc/fuse.conf 2>/dev/null || echo user_allow_other >> /etc/fuse.conf
PY="$(sed -n '/^__PYTHON__$/,/^__LAZYFS_PATCH__$/p' "${BASH_SOURCE[0]}" | sed '1d;$d')"
POWERCUT_SCRIPT_DIR="$HERE" exec python3 -u -c "$PY" "$@"

# Data below (never executed): the Python harness, then the LazyFS patch.
: <<'__END_DATA__'
__PYTHON__
import argparse, json, os, random, re, shutil, signal, subprocess, sys, time

ap = argparse.ArgumentParser(prog="powercut.sh run")
ap.add_argument("--treelog", default="", help="the treelog CLI (default: ./treelog, else the repository's target/release or target/debug)")
ap.add_argument("--worker", default="",
                help="the `crash` test binary, which holds the crash worker (default: crash-test next to the treelog binary)")
ap.add_argument("--lazyfs", default="./lazyfs/lazyfs/build/lazyfs")
ap.add_argument("--work", default="./runs")
ap.add_argument("--scenarios", default="a,b,c,d")
ap.add_argument("--trials", type=int, default=12, help="trials per scenario")
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--a-secs", type=float, default=6.0, help="length of a scenario-a run")
ap.add_argument("--e-secs", type=float, default=8.0, help="length of a scenario-e run (the replica's life before the cut)")
ap.add_argument("--records", type=int, default=20000, help="ACKed writes in the b/c database")
ap.add_argument("--retain", type=int, default=2000)
ap.add_argument("--only", default="", help="run just these trials: SCEN:METHOD[,...], e.g. b:inject:fsync:before:12 or a:fifo:2.5")
ap.add_argument("--exhaustive", action="store_true",
                help="b, c and d: instead of --trials random cuts, cut at every (op, before/after, K) the profile counted")
ap.add_argument("--keep-all", action="store_true", help="keep the cut database of passing trials too")
args = ap.parse_args()

def default_treelog():
    repo = os.path.dirname(os.path.dirname(os.environ.get("POWERCUT_SCRIPT_DIR", ".")))
    for c in ("./treelog", os.path.join(repo, "target/release/treelog"), os.path.join(repo, "target/debug/treelog")):
        if os.access(c, os.X_OK):
            return c
    sys.exit("no treelog binary: pass --treelog BIN (or build it: `cargo build`)")


TL = os.path.abspath(args.treelog or default_treelog())
LFS = os.path.abspath(args.lazyfs)
WORK = os.path.abspath(args.work)
for p in (TL, LFS):
    if not os.access(p, os.X_OK):
        sys.exit(f"not executable: {p} (see `powercut.sh` usage)")
scens = [s for s in args.scenarios.split(",") if s]
only = [x.split(":") for x in args.only.split(",") if x]
for s_ in scens + [o[0] for o in only]:
    if s_ not in ("a", "b", "c", "d", "e"):
        sys.exit(f"unknown scenario {s_!r} (a, b, c, d or e)")
NEED_WORKER = any(s_ in ("a", "b", "c") for s_ in (scens if not only else [o[0] for o in only]))
WORKER = os.path.abspath(args.worker or os.path.join(os.path.dirname(TL), "crash-test"))
if NEED_WORKER and not os.access(WORKER, os.X_OK):
    sys.exit(f"no crash worker at {WORKER}: scenarios a, b and c need the `crash` test binary of the root "
             f"crate (`cargo test --test crash --no-run` prints its path, target/debug/deps/crash-<hash>); "
             f"pass it with --worker BIN, or copy it as crash-test next to the treelog binary")
if not os.path.exists("/dev/fuse"):
    sys.exit("/dev/fuse is missing")
os.makedirs(WORK, exist_ok=True)
rng = random.Random(args.seed)
OPS = ["fsync", "unlink", "create", "rename", "truncate"]


def log(*a):
    print(*a, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, **kw)


def tl(data, *a, timeout=600):
    r = sh([TL, "--data", data, *a], timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def worker_cmd(data, threads, run, *extra):
    """The crash worker: the `crash` test binary running its ignored entry test,
    its arguments in TREELOG_CRASH_WORKER (separated by 0x1f)."""
    env = dict(os.environ)
    env["TREELOG_CRASH_WORKER"] = "\x1f".join([data, str(threads), run, *map(str, extra)])
    cmd = [WORKER, "crash_worker_process", "--exact", "--ignored", "--nocapture", "--test-threads", "1", "-q"]
    return cmd, env


def worker_acks(text):
    """ACK lines of the worker's output (the test harness's own lines are not the worker's)."""
    return sum(1 for ln in text.split("\n")[:-1] if ln.startswith("ACK "))  # not a cut last line


class LazyFS:
    """One LazyFS process over ROOT mounted on MNT (foreground, killed with -9 for a cut)."""

    def __init__(self, tdir, root, mnt, injection=None, log_all=False):
        self.tdir, self.root, self.mnt = tdir, root, mnt
        self.fifo = os.path.join(tdir, "faults.fifo")
        self.logfile = os.path.join(tdir, "lazyfs.log")
        cfg = [
            "[faults]", f'fifo_path="{self.fifo}"',
            "[cache]", "apply_eviction=false",
            "[cache.simple]", 'custom_size="4gb"', "blocks_per_page=1",
            "[filesystem]", f"log_all_operations={'true' if log_all else 'false'}",
            f'logfile="{self.logfile}"',
        ]
        if injection:
            op, timing, k = injection
            cfg += ["[[injection]]", 'type="clear-cache"', 'from="*"']
            if op == "rename":
                cfg.append('to="*"')
            cfg += [f'op="{op}"', f'timing="{timing}"', f"occurrence={k}", "crash=true"]
        self.cfg = os.path.join(tdir, "lazyfs.toml")
        with open(self.cfg, "w") as f:
            f.write("\n".join(cfg) + "\n")

    def start(self):
        os.makedirs(self.mnt, exist_ok=True)
        sh(["fusermount3", "-u", "-z", self.mnt])
        out = open(os.path.join(self.tdir, "lazyfs.stdout"), "w")
        self.p = subprocess.Popen(
            [LFS, self.mnt, "--config-path", self.cfg, "-o", "allow_other",
             "-o", "modules=subdir", "-o", f"subdir={self.root}", "-f"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        t0 = time.time()
        while not os.path.ismount(self.mnt):
            if self.p.poll() is not None or time.time() - t0 > 20:
                raise RuntimeError(f"LazyFS did not mount (see {self.tdir}/lazyfs.stdout)")
            time.sleep(0.05)

    def alive(self):
        return self.p.poll() is None

    def fault_fired(self):
        try:
            return "Triggered fault condition" in open(self.logfile, errors="replace").read()
        except FileNotFoundError:
            return False

    def clear_cache(self):
        before = open(self.logfile, errors="replace").read().count("cache is cleared")
        fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"lazyfs::clear-cache\n")
        os.close(fd)
        t0 = time.time()
        while open(self.logfile, errors="replace").read().count("cache is cleared") <= before:
            if time.time() - t0 > 60:
                raise RuntimeError("clear-cache did not complete")
            time.sleep(0.02)

    def op_counts(self):
        """How many of each cut-able operation the mount saw (with log_all)."""
        counts = {op: 0 for op in OPS}
        for line in open(self.logfile, errors="replace"):
            m = re.search(r"\[lazyfs\.ops\]: lfs_(\w+)\(", line)
            if m and m.group(1) in counts:
                counts[m.group(1)] += 1
        return counts

    def kill(self):
        """Power off: LazyFS dies with its cache; only what was synced is in ROOT."""
        if self.alive():
            self.p.send_signal(signal.SIGKILL)
        self.p.wait()
        sh(["fusermount3", "-u", "-z", self.mnt])


def make_base(records):
    """A database of ~records ACKed writes, killed with -9 (index never flushed), and its snapshot."""
    bdir = os.path.join(WORK, f"base-{records}")
    done = os.path.join(bdir, "done.json")
    if os.path.exists(done):
        return json.load(open(done))
    shutil.rmtree(bdir, ignore_errors=True)
    os.makedirs(bdir)
    db = os.path.join(bdir, "db")
    outp = os.path.join(bdir, "worker.out")
    cmd, env = worker_cmd(db, 2, "base")
    with open(outp, "w") as out:
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                             stderr=open(os.path.join(bdir, "worker.err"), "w"))
        while p.poll() is None:
            time.sleep(0.05)
            if worker_acks(open(outp).read()) >= records:
                break
        p.kill()
        p.wait()
    if worker_acks(open(outp).read()) < records:
        sys.exit(f"the crash worker exited (status {p.returncode}) before {records} ACKs: see {bdir}/worker.err")
    snapdb = os.path.join(bdir, "snapshot-db")
    shutil.copytree(db, snapdb)
    rc, info, err = tl(snapdb, "admin", "info")
    assert rc == 0, err
    rc, ls, err = tl(snapdb, "ls", "-R", "--json", "/")
    assert rc == 0, err
    json.dump(sorted(json.loads(ls), key=lambda e: e["path"]), open(os.path.join(bdir, "snapshot.json"), "w"))
    shutil.rmtree(snapdb)
    meta = {"db": db, "snapshot": os.path.join(bdir, "snapshot.json"), "info": info,
            "acks": worker_acks(open(outp).read())}
    json.dump(meta, open(done, "w"))
    return meta


def power_cut(p, fs, elapsed, inj):
    """Freezes treelog (if it still runs) and drops LazyFS's unsynced data;
    the caller kills treelog. Returns how the cut was made."""
    if p.poll() is None:
        p.send_signal(signal.SIGSTOP)
    fs.clear_cache()
    return f"clear-cache at {elapsed:.2f}s" + (" (injection not reached)" if inj else "")


def free_addr():
    import socket
    s_ = socket.socket()
    s_.bind(("127.0.0.1", 0))
    a = f"127.0.0.1:{s_.getsockname()[1]}"
    s_.close()
    return a


def tree(n):
    """A local directory of n empty files, for `treelog import`."""
    d = os.path.join(WORK, f"tree-{n}")
    if not os.path.isdir(d) or len(os.listdir(d)) != n:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for i in range(n):
            open(os.path.join(d, f"f{i}"), "w").close()
    return d


def make_replica_base():
    """Scenario e: a leader database, and a backup of it taken 3,000 creates
    before its end (the replica's seed: it starts that far behind)."""
    bdir = os.path.join(WORK, "base-e")
    done = os.path.join(bdir, "done.json")
    if os.path.exists(done):
        return json.load(open(done))
    shutil.rmtree(bdir, ignore_errors=True)
    os.makedirs(bdir)
    leader, seed = os.path.join(bdir, "leader"), os.path.join(bdir, "seed")
    for a in (["mkdir", "-p", "/e"], ["import", tree(2000), "/e/early"], ["admin", "backup", seed],
              ["import", tree(3000), "/e/late"]):
        rc, out, err = tl(leader, *a)
        assert rc == 0, (a, err)
    meta = {"leader": leader, "seed": seed}
    json.dump(meta, open(done, "w"))
    return meta


def status(addr):
    r = sh([TL, "--server", addr, "--json", "admin", "status"], timeout=10)
    return json.loads(r.stdout) if r.returncode == 0 else None


def verify_digest(db):
    rc, out, err = tl(db, "admin", "verify")
    m = re.search(r"live digest:\s+(\w+)", out)
    return rc, (m.group(1) if m else None), (err or out).strip()[-300:]


def run_replica_trial(name, method, base, profile=False):
    """Scenario e: a replica on LazyFS (its database seeded from a backup
    3,000 records behind, so it catches up before serving, then streams
    while a writer imports files on the leader) is cut. Then what was
    synced must open and verify, resume following the leader as a replica
    (no re-bootstrap), and end with the leader's digest."""
    tdir = os.path.join(WORK, name)
    shutil.rmtree(tdir, ignore_errors=True)
    os.makedirs(tdir)
    root, mnt = os.path.join(tdir, "root"), os.path.join(tdir, "mnt")
    os.makedirs(root)
    leader_db = os.path.join(tdir, "leader")
    shutil.copytree(base["leader"], leader_db)
    rc, out, err = tl(os.path.join(root, "db"), "admin", "restore", base["seed"], os.path.join(root, "db"))
    assert rc == 0, err
    inj = (method[1], method[2], int(method[3])) if method[0] == "inject" else None
    fs = LazyFS(tdir, root, mnt, injection=inj, log_all=profile)
    L, LH, R, RH = free_addr(), free_addr(), free_addr(), free_addr()
    lout = open(os.path.join(tdir, "leader.err"), "w")
    leader = subprocess.Popen([TL, "--data", leader_db, "serve", "--listen", L, "--http", LH],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=lout)
    t0 = time.time()
    while status(L) is None:
        assert leader.poll() is None and time.time() - t0 < 30, "the leader did not start"
        time.sleep(0.05)
    fs.start()

    def replica(data, errname):
        return subprocess.Popen([TL, "--data", data, "serve", "--listen", R, "--http", RH, "--replica-of", L,
                                 "--replica-catch-up-min", "1000", "--replica-batch-bytes", "16384"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(tdir, errname), "w"))

    stop = [False]

    def writer():
        i = 0
        while not stop[0]:
            sh([TL, "--server", L, "import", tree(200), f"/e/live{i}"], timeout=60)
            i += 1

    import threading
    wt = threading.Thread(target=writer)
    wt.start()
    p = replica(os.path.join(mnt, "db"), "replica.err")
    t0 = time.time()
    at = float(method[1]) if method[0] == "fifo" else args.e_secs
    cut, how = False, ""
    while True:
        el = time.time() - t0
        if inj and not fs.alive():
            cut, how = True, f"injected fault fired at {el:.2f}s"
            break
        if p.poll() is not None or el >= at:
            break
        time.sleep(0.005)
    elapsed = time.time() - t0
    rc_before = p.poll()
    if not cut and fs.alive():
        cut, how = True, power_cut(p, fs, elapsed, inj)
    if p.poll() is None:
        p.kill()
    p.wait()
    fs.kill()
    res = {"trial": name, "scenario": "e", "method": ":".join(method), "cut": cut, "how": how,
           "cmd_rc": rc_before, "elapsed": round(elapsed, 2)}
    if profile:
        res["counts"] = fs.op_counts()
    errs = []
    check = os.path.join(tdir, "check-db")
    shutil.copytree(os.path.join(root, "db"), check)
    rc, out, err = tl(check, "admin", "info")
    res["info_rc"] = rc
    if rc != 0:
        errs.append(f"admin info exit {rc}: {(err or out).strip()[:300]}")
    else:
        res.update(parse_info(out))
        vrc, _, vmsg = verify_digest(check)
        res["verify_rc"] = vrc
        if vrc != 0:
            errs.append(f"admin verify exit {vrc}: {vmsg}")
    cut_at = res.get("applied_seq")
    # It resumes as a replica of the leader, which goes on taking writes.
    p = replica(check, "replica-after.err")
    time.sleep(1.0)
    stop[0] = True
    wt.join()
    end = status(L)["applied_seq"]
    t0 = time.time()
    st = None
    while time.time() - t0 < 120:
        st = status(R)
        if st and st["applied_seq"] >= end:
            break
        time.sleep(0.1)
    res["resumed_to"] = st and st["applied_seq"]
    if not st or st["applied_seq"] < end:
        errs.append(f"the replica did not catch up with the leader ({end}) after the cut: {st}")
    try:
        metrics = urllib_get(f"http://{RH}/metrics")
        m = re.search(r"^treelog_replica_rebootstraps_total (\d+)", metrics, re.M)
        res["rebootstraps"] = int(m.group(1)) if m else None
        if res["rebootstraps"] != 0:
            errs.append(f"the replica bootstrapped again after the cut ({res['rebootstraps']})")
    except Exception as e:
        errs.append(f"metrics: {e}")
    for proc in (p, leader):
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            errs.append("a server did not stop on SIGTERM")
    _, ld, _ = verify_digest(leader_db)
    vrc, rd, vmsg = verify_digest(check)
    if vrc != 0 or ld is None or rd != ld:
        errs.append(f"digests after the resume: replica {rd} (verify exit {vrc}: {vmsg[:100]}), leader {ld}")
    res["applied_seq"], res["last_seq"] = cut_at, res.get("last_seq")
    res["errors"] = errs
    res["ok"] = not errs
    json.dump(res, open(os.path.join(tdir, "result.json"), "w"), indent=1)
    if res["ok"] and not args.keep_all:
        for d in (check, leader_db, root):
            shutil.rmtree(d, ignore_errors=True)
    return res


def urllib_get(url):
    import urllib.request
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def parse_info(txt):
    d = {}
    for line in txt.splitlines():
        m = re.match(r"(\w+):\s+(\d+)", line)
        if m:
            d[m.group(1)] = int(m.group(2))
    return d


def check_worker(outp, ls_entries, last_seq):
    """Scenario a: the namespace must equal the ACKed model (+ at most each thread's in-flight op)."""
    text = open(outp, errors="replace").read()
    lines = text.split("\n")[:-1]  # drop a partial last line
    run = None
    exp, pend, maxack, nack = {}, {}, 0, 0

    def tid(path):
        return path.split("/")[3]

    def apply(s, op):
        s = set(s)
        if op[0] == "create":
            s.add(op[1])
        elif op[0] == "delete":
            s.discard(op[1])
        elif op[0] == "rename":
            s.discard(op[1]); s.add(op[2])
        return s

    for ln in lines:
        if not (ln.startswith("BEGIN ") or ln.startswith("ACK ")):
            continue  # READY, and the test harness's own lines
        w = ln.split()
        op = tuple(w[1:4]) if w[1] == "rename" else tuple(w[1:3])
        run = run or op[1].split("/")[2]
        t = tid(op[1])
        exp.setdefault(t, set())
        if w[0] == "BEGIN":
            pend[t] = op
        else:
            nack += 1
            maxack = max(maxack, int(w[-1]))
            exp[t] = apply(exp[t], op)
            pend[t] = None
    errs = []
    if maxack > last_seq:
        errs.append(f"ACKed seq {maxack} > last_seq {last_seq}")
    actual = {}
    for e in ls_entries:
        parts = e["path"].split("/")
        if len(parts) == 5 and parts[1] == "crash" and parts[2] == run:
            actual.setdefault(parts[3], set()).add(e["path"])
    for t in sorted(set(exp) | set(actual)):
        a, x = actual.get(t, set()), exp.get(t, set())
        ok = a == x or (pend.get(t) and a == apply(x, pend[t]))
        if not ok:
            errs.append(f"thread {t}: missing ACKed {sorted(x - a)[:5]} ({len(x - a)}), "
                        f"unexpected {sorted(a - x)[:5]} ({len(a - x)}), in-flight {pend.get(t)}")
    return errs, {"acks": nack, "max_ack_seq": maxack}


CREATING = "TREELOG-CREATING"


def check_created(db, tdir, cmd_rc):
    """Scenario d: the cut directory, whatever the creation had reached, becomes a database."""
    res, errs = {}, []
    names = sorted(os.listdir(db)) if os.path.isdir(db) else None
    res["marker"] = names is not None and CREATING in names
    res["files"] = len(names or [])
    res["state"] = ("no directory" if names is None else "empty" if not names else
                    "marker" if res["marker"] else "database" if "CURRENT" in names else "other")
    rc, out, err = tl(db, "admin", "info")
    res["pre_info_rc"] = rc
    if res["marker"]:
        if rc != 10 or "the creation of a database here was interrupted" not in err:
            errs.append(f"admin info on an interrupted creation: exit {rc} (want 10, 'the creation of a "
                        f"database here was interrupted'): {(err or out).strip()[:300]}")
    elif res["state"] in ("database", "other") and rc != 0:
        errs.append(f"admin info ({res['state']}, no marker) exit {rc}: {(err or out).strip()[:300]}")
    rc, out, err = tl(db, "touch", "/after")
    res["touch_rc"] = rc
    if rc != 0:
        errs.append(f"touch /after (may create) exit {rc}: {(err or out).strip()[:300]}")
        return res, errs
    rc, out, err = tl(db, "admin", "info")
    res["info_rc"] = rc
    if rc != 0:
        errs.append(f"admin info after the touch exit {rc}: {(err or out).strip()[:300]}")
    else:
        res.update(parse_info(out))
    rc, out, err = tl(db, "admin", "verify")
    res["verify_rc"] = rc
    if rc != 0:
        errs.append(f"admin verify exit {rc}: {(err or out).strip()[-400:]}")
    stdout = open(os.path.join(tdir, "worker.out"), errors="replace").read()
    res["mkdir_acked"] = cmd_rc == 0 or "mkdir /a/b (seq" in stdout
    rc, out, err = tl(db, "stat", "/a/b")
    res["a_b_exists"] = rc == 0
    if res["mkdir_acked"] and rc != 0:
        errs.append(f"mkdir -p /a/b succeeded before the cut (exit {cmd_rc}) but /a/b is missing: stat exit {rc}: "
                    f"{(err or out).strip()[:200]}")
    return res, errs


def check_cut_creation(db, tdir):
    """Scenario a, cut while the worker's open was creating the database: the marker is
    there, so commands that do not create refuse it, and one that may create starts over."""
    res, errs = {"creation_cut": True}, []
    w = open(os.path.join(tdir, "worker.out"), errors="replace").read()
    if any(ln.startswith("READY ") for ln in w.split("\n")) or worker_acks(w):
        errs.append(f"{CREATING} left behind although the worker's open had returned (READY printed)")
    rc, out, err = tl(db, "admin", "info")
    res["info_rc"] = rc
    if rc != 10 or "the creation of a database here was interrupted" not in err:
        errs.append(f"admin info on an interrupted creation: exit {rc} (want 10, 'the creation of a "
                    f"database here was interrupted'): {(err or out).strip()[:300]}")
    rc, out, err = tl(db, "touch", "/powercut-after-cut")
    res["touch_rc"] = rc
    if rc != 0:
        errs.append(f"touch (may create) after a cut creation: exit {rc}: {(err or out).strip()[:300]}")
        return res, errs
    rc, out, err = tl(db, "admin", "verify")
    res["verify_rc"] = rc
    if rc != 0:
        errs.append(f"admin verify exit {rc}: {(err or out).strip()[-400:]}")
    rc, out, err = tl(db, "ls", "-R", "--json", "/")
    paths = sorted(e["path"] for e in json.loads(out)) if rc == 0 else None
    if paths != ["/powercut-after-cut"]:
        errs.append(f"the database created again is not empty but for the touched file: ls exit {rc}, {paths}")
    return res, errs


def check_db(db, scen, tdir, base):
    if scen == "a" and os.path.exists(os.path.join(db, CREATING)):
        return check_cut_creation(db, tdir)
    res, errs = {}, []
    rc, out, err = tl(db, "admin", "info")
    res["info_rc"] = rc
    if rc != 0:
        note = ""
        if scen == "a":
            w = open(os.path.join(tdir, "worker.out"), errors="replace").read()
            note = (f" [the worker had printed READY: {'yes' if 'READY ' in w else 'no'}, "
                    f"ACKs: {worker_acks(w)}]")
        errs.append(f"admin info exit {rc}: {(err or out).strip()[:400]}{note}")
        return res, errs
    info = parse_info(out)
    res.update(info)
    rc, out, err = tl(db, "admin", "verify")
    res["verify_rc"] = rc
    if rc == 11 and info.get("log_start", 1) > 1:
        res["verify"] = "n/a (log start > 1)"
    elif rc != 0:
        errs.append(f"admin verify exit {rc}: {(err or out).strip()[-400:]}")
    rc, out, err = tl(db, "ls", "-R", "--json", "/")
    if rc != 0:
        errs.append(f"ls -R exit {rc}: {err.strip()[:300]}")
    else:
        entries = json.loads(out)
        if scen == "a":
            e2, extra = check_worker(os.path.join(tdir, "worker.out"), entries, info.get("last_seq", 0))
            res.update(extra)
            errs += e2
        else:
            snap = json.load(open(base["snapshot"]))
            got = sorted(entries, key=lambda e: e["path"])
            if got != snap:
                sp = {e["path"]: e for e in snap}
                gp = {e["path"]: e for e in got}
                miss = sorted(set(sp) - set(gp))
                more = sorted(set(gp) - set(sp))
                diff = sorted(p for p in set(sp) & set(gp) if sp[p] != gp[p])
                errs.append(f"namespace differs from the snapshot: missing {len(miss)} {miss[:5]}, "
                            f"unexpected {len(more)} {more[:5]}, changed {len(diff)} {diff[:5]}")
            res["entries"] = len(got)
    rc, out, err = tl(db, "touch", "/powercut-after-cut")
    if rc != 0:
        errs.append(f"write after the cut: exit {rc}: {err.strip()[:300]}")
    return res, errs


def run_trial(name, scen, method, base, profile=False):
    if scen == "e":
        return run_replica_trial(name, method, base_e, profile)
    tdir = os.path.join(WORK, name)
    shutil.rmtree(tdir, ignore_errors=True)
    os.makedirs(tdir)
    root, mnt = os.path.join(tdir, "root"), os.path.join(tdir, "mnt")
    os.makedirs(root)
    if scen in ("b", "c"):
        shutil.copytree(base["db"], os.path.join(root, "db"))
    elif scen == "d":
        os.makedirs(os.path.join(root, "db"))  # the empty directory a first command creates the database in
    inj = None
    if method[0] == "inject":
        inj = (method[1], method[2], int(method[3]))
    fs = LazyFS(tdir, root, mnt, injection=inj, log_all=profile)
    fs.start()
    data = os.path.join(mnt, "db")
    env = None
    if scen == "a":
        cmd, env = worker_cmd(data, 2, "pc", "--retain-records", args.retain, "--retention-interval-ms", 50)
        limit = args.a_secs
    elif scen == "b":
        cmd = [TL, "--data", data, "admin", "retention", "--max-records", str(args.retain)]
        limit = 600
    elif scen == "c":
        cmd = [TL, "--data", data, "admin", "rebuild"]
        limit = 600
    else:
        cmd = [TL, "--data", data, "mkdir", "-p", "/a/b"]
        limit = 600
    with open(os.path.join(tdir, "command"), "w") as f:
        f.write(" ".join(cmd) + "\n")
        if env:
            f.write("TREELOG_CRASH_WORKER=" + env["TREELOG_CRASH_WORKER"].replace("\x1f", "<0x1f>") + "\n")
    out = open(os.path.join(tdir, "worker.out"), "w")
    errf = open(os.path.join(tdir, "worker.err"), "w")
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=errf)
    at = float(method[1]) if method[0] == "fifo" else None
    cut, how = False, ""
    while True:
        el = time.time() - t0
        if inj and not fs.alive():
            cut, how = True, f"injected fault fired at {el:.2f}s"
            break
        if p.poll() is not None:
            break
        if at is not None and el >= at:
            break
        if el >= limit:
            break
        time.sleep(0.005)
    elapsed = time.time() - t0
    cmd_rc = p.poll()
    if not cut and fs.alive() and (cmd_rc is None or scen == "a"):
        # fifo cut (or scenario a at its end)
        cut, how = True, power_cut(p, fs, elapsed, inj)
    if p.poll() is None:
        p.kill()
    p.wait()
    cmd_rc = cmd_rc if cmd_rc is not None else p.returncode
    if inj and fs.fault_fired() and not how:
        cut, how = True, "injected fault fired"
    if not how:
        how = "power off after the command exited"
    fs.kill()
    out.close(); errf.close()
    res = {"trial": name, "scenario": scen, "method": ":".join(method), "cut": cut, "how": how,
           "cmd_rc": cmd_rc, "elapsed": round(elapsed, 2)}
    if profile:
        res["counts"] = fs.op_counts()
    cutdb = os.path.join(tdir, "cut-db")
    if os.path.exists(os.path.join(root, "db")):
        shutil.copytree(os.path.join(root, "db"), cutdb)
    checkdb = os.path.join(tdir, "check-db")
    if scen == "d":
        if os.path.exists(cutdb):
            shutil.copytree(cutdb, checkdb)
        r, errs = check_created(checkdb, tdir, cmd_rc)
        res.update(r)
    elif os.path.exists(cutdb):
        shutil.copytree(cutdb, checkdb)
        r, errs = check_db(checkdb, scen, tdir, base)
        res.update(r)
    else:
        errs = [] if res.get("acks", 0) == 0 else ["database directory missing"]
        res["note"] = "no database directory on the backing store"
    if scen == "a" and not os.path.exists(cutdb):
        if worker_acks(open(os.path.join(tdir, "worker.out")).read()):
            errs.append("ACKed writes but no database on the backing store")
    res["errors"] = errs
    res["ok"] = not errs
    json.dump(res, open(os.path.join(tdir, "result.json"), "w"), indent=1)
    shutil.rmtree(checkdb, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    if res["ok"] and not args.keep_all:
        shutil.rmtree(cutdb, ignore_errors=True)
    return res


def fmt(r):
    s = "PASS" if r["ok"] else "FAIL"
    extra = (f"info={r.get('info_rc')} verify={r.get('verify_rc')} log_start={r.get('log_start')} "
             f"applied={r.get('applied_seq')} last={r.get('last_seq')}")
    if r["scenario"] == "d":
        extra = (f"cut-dir={r.get('state')}({r.get('files')} files) info-before={r.get('pre_info_rc')} "
                 f"touch={r.get('touch_rc')} verify={r.get('verify_rc')} mkdir-acked={r.get('mkdir_acked')} "
                 f"/a/b={r.get('a_b_exists')}")
    if r["scenario"] == "a" and r.get("creation_cut"):
        extra = (f"creation cut ({CREATING} left, no READY): info={r.get('info_rc')} "
                 f"touch={r.get('touch_rc')} verify={r.get('verify_rc')}")
    elif r["scenario"] == "a":
        extra += f" acks={r.get('acks')} max_ack={r.get('max_ack_seq')}"
    line = f"{s} {r['trial']:<28} {r['method']:<28} cut={'yes' if r['cut'] else 'no '} rc={r['cmd_rc']} {r['elapsed']:>6}s {extra} [{r['how']}]"
    for e in r["errors"]:
        line += f"\n     ! {e}"
    return line


base = None
if (any(s in ("b", "c") for s in scens) and not only) or any(o[0] in ("b", "c") for o in only):
    log(f"base database: {args.records} ACKed writes, killed with -9 ...")
    base = make_base(args.records)
    log(f"  {base['db']} ({base['acks']} ACKs)")

base_e = None
if ("e" in scens and not only) or any(o[0] == "e" for o in only):
    log("scenario e base: a leader database and a backup 3,000 creates behind ...")
    base_e = make_replica_base()

results = []
times = {}
if only:
    for i, parts in enumerate(only):
        r = run_trial(f"only{i}-{parts[0]}-{'-'.join(parts[1:])}", parts[0], parts[1:], base)
        log(fmt(r)); results.append(r)
else:
    for scen in scens:
        t_scen = time.time()
        prof = run_trial(f"{scen}-profile", scen, ["fifo", str(1e9)] if scen not in ("a", "e") else
                         ["fifo", str(args.a_secs if scen == "a" else args.e_secs)], base, profile=True)
        log(f"profile {scen}: {prof['elapsed']}s (with op logging) counts {prof['counts']}")
        log(fmt(prof)); results.append(prof)
        if not prof["ok"]:
            log("  (the uncut profile run failed: see above)")
        counts = prof["counts"]
        dur = prof["elapsed"]
        plan = []
        cands = [op for op in OPS if counts[op] >= 1]
        lo = 0.01 if scen == "d" else 0.05  # a creation takes a fraction of a second
        if args.exhaustive and scen in ("b", "c", "d"):
            for op in cands:
                for timing in ("before", "after"):
                    for k in range(1, counts[op] + (1 if timing == "after" else 0)):
                        plan.append(["inject", op, timing, str(k)])
            for i in range(max(1, args.trials // 4)):
                plan.append(["fifo", f"{rng.uniform(lo, max(2 * lo, dur)):.2f}"])
        for i in range(0 if plan else args.trials):
            if i % 4 == 3:  # every fourth trial: a clear-cache at a random moment
                plan.append(["fifo", f"{rng.uniform(lo, max(2 * lo, dur if scen not in ('a', 'e') else (args.a_secs if scen == 'a' else args.e_secs))):.2f}"])
                continue
            # weight fsync (the commit point of everything) and unlink (retention/obsolete files)
            op = rng.choice([o for o in ["fsync", "fsync", "unlink", "unlink", "create", "rename", "truncate"] if o in cands])
            timing = rng.choice(["before", "after"])
            n = counts[op]
            k = rng.randint(1, max(1, n - 1 if timing == "before" else n))
            plan.append(["inject", op, timing, str(k)])
        for i, m in enumerate(plan):
            r = run_trial(f"{scen}{i:02d}-{'-'.join(m)}", scen, m, base)
            log(fmt(r)); results.append(r)
        times[scen] = time.time() - t_scen
        log(f"scenario {scen}: {len(plan) + 1} trials (profile included) in {times[scen]:.0f}s")

fails = [r for r in results if not r["ok"]]
log("")
log("summary:")
for scen in sorted({r["scenario"] for r in results}):
    rs = [r for r in results if r["scenario"] == scen]
    t = f", {times[scen]:.0f}s" if scen in times else ""
    log(f"  {scen}: {len(rs)} trials, {sum(r['cut'] for r in rs)} cut, {sum(not r['ok'] for r in rs)} failed{t}")
for r in fails:
    log(f"  FAIL {r['trial']} ({r['method']}): {'; '.join(r['errors'])}")
json.dump(results, open(os.path.join(WORK, "results.json"), "w"), indent=1)
log(f"results: {os.path.join(WORK, 'results.json')}")
sys.exit(1 if fails else 0)
__LAZYFS_PATCH__
diff --git a/lazyfs/CMakeLists.txt b/lazyfs/CMakeLists.txt
index 3bc1555..e79bdd8 100644
--- a/lazyfs/CMakeLists.txt
+++ b/lazyfs/CMakeLists.txt
@@ -11,10 +11,9 @@ include_directories(include)
 
 link_directories(../libs/libpcache/build)
 include_directories(../libs/libpcache/include)
-link_directories(../libs/libpcache/build/_deps/spdlog-build/)
-include_directories(../libs/libpcache/build/_deps/spdlog-src/include)
-
 find_package(Threads REQUIRED)
+find_package(spdlog REQUIRED)
+find_package(toml11 REQUIRED)
 
 add_executable(${CMAKE_PROJECT_NAME})
 
@@ -34,11 +33,11 @@ target_sources(
     src/main.cpp
 )
 
-target_link_libraries(${CMAKE_PROJECT_NAME} fuse3 Threads::Threads libpcache.so)
+target_link_libraries(${CMAKE_PROJECT_NAME} fuse3 Threads::Threads libpcache.so spdlog::spdlog toml11::toml11)
 
 # ------------------ LazyFS tests ------------------
 
-option(LAZYFS_BUILD_TESTS "Build LazyFS unit tests" ON)
+option(LAZYFS_BUILD_TESTS "Build LazyFS unit tests" OFF)
 
 if (LAZYFS_BUILD_TESTS)
 
diff --git a/lazyfs/src/lazyfs.cpp b/lazyfs/src/lazyfs.cpp
index 4709ff3..53655c1 100644
--- a/lazyfs/src/lazyfs.cpp
+++ b/lazyfs/src/lazyfs.cpp
@@ -172,7 +172,10 @@ void LazyFS::trigger_configured_clear_fault (string opname,
                                   string from_path,
                                   string to_path) {
 
-    auto it = faults->find(from_path);
+    // powercut patch: an injection with from="*" matches every path, so
+    // `occurrence` counts the op over the whole file system.
+    for (const string& key : {from_path, string ("*")}) {
+    auto it = faults->find(key);
 
     if (it != faults->end()) {
         auto& v_faults = it->second;
@@ -184,7 +187,7 @@ void LazyFS::trigger_configured_clear_fault (string opname,
 
                 bool is_multi_path = this_ ()->fs_op_multi_path.find (opname) != this_ ()->fs_op_multi_path.end ();
 
-                if ((is_multi_path && to_path == clear_fault->to) || !is_multi_path) {
+                if ((is_multi_path && (to_path == clear_fault->to || key == "*")) || !is_multi_path) {
                     
                     int current_count = clear_fault->counter.load();
                     if (optiming == "before") {
@@ -217,6 +220,7 @@ void LazyFS::trigger_configured_clear_fault (string opname,
         } 
     }
 }
+}
 
 void LazyFS::add_crash_fault (string crash_timing,
                               string crash_operation,
@@ -2158,7 +2162,7 @@ int LazyFS::lfs_unlink (const char* path) {
         return -errno;
 
     this_ ()->trigger_crash_fault ("unlink", "after", path, "", CLEAR);
-    this_ ()->trigger_configured_clear_fault ("unlink", "before", path, "");
+    this_ ()->trigger_configured_clear_fault ("unlink", "after", path, "");
 
     return 0;
 }
diff --git a/libs/libpcache/CMakeLists.txt b/libs/libpcache/CMakeLists.txt
index 9e4226a..56b06fa 100644
--- a/libs/libpcache/CMakeLists.txt
+++ b/libs/libpcache/CMakeLists.txt
@@ -4,23 +4,9 @@ project(pcache VERSION 0.0.1)
 
 set (CMAKE_CXX_STANDARD 17)
 
-include(FetchContent)
-FetchContent_Declare(
-    toml
-    GIT_REPOSITORY https://github.com/ToruNiina/toml11
-    GIT_TAG        v3.7.1
-)
-FetchContent_MakeAvailable(toml)
-
-FetchContent_Declare(spdlog
-    URL             https://github.com/gabime/spdlog/archive/v1.10.0.tar.gz
-    UPDATE_COMMAND  ""
-    INSTALL_COMMAND ""
-)
-
-FetchContent_MakeAvailable(spdlog)
-
-set_target_properties(spdlog PROPERTIES POSITION_INDEPENDENT_CODE ON)
+# Debian packages instead of FetchContent (no network): libtoml11-dev, libspdlog-dev
+find_package(toml11 REQUIRED)
+find_package(spdlog REQUIRED)
 
 set(warn_opts -Wall -Wextra)
 
@@ -76,7 +62,7 @@ target_sources(
     src/faults.cpp
 )
 
-target_link_libraries(pcache toml11::toml11 spdlog)
+target_link_libraries(pcache toml11::toml11 spdlog::spdlog)
 
 include(GNUInstallDirs)
 
__END_DATA__
