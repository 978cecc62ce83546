"""Workload definitions for bench/run.

A workload says how to run one measurement (argv, environment, standard input), which number it
measures (wall time, or a throughput the program reports), and how to check that the run did
its work correctly. Inputs for the real programs (SQL script, C file, SMT problems) are generated
here, deterministically, together with the answers the checks expect.
"""
import os
import random
import re
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))

# groups, in report order
GROUPS = ["shsh", "stress", "kernel", "real", "micro", "memtime"]
GROUP_TITLES = {
    "shsh": "Scalable High Speed Heap workloads",
    "stress": "Allocator stress tests",
    "kernel": "Single-threaded compute kernels",
    "real": "Real programs",
    "micro": "Microbenchmark",
    "memtime": "Memory over time",
}
# groups with their own tables, left out of the ratio tables, geometric means and bar charts
SEPARATE_GROUPS = ("micro", "memtime")

SHSH_WORKLOADS = ["simple", "isolated", "swing", "unidirectional", "bidirectional", "chain"]
SHSH_SINGLE = ["simple", "isolated", "swing"]  # the post's single-threaded set
# total malloc/free pairs per run (full scale)
SHSH_PAIRS = {"simple": 24_000_000, "isolated": 8_000_000, "swing": 6_000_000,
              "unidirectional": 4_000_000, "bidirectional": 4_000_000, "chain": 6_000_000}
SHSH_DESC = {
    "simple": "each thread allocates a block and frees it at once, over and over (sizes 4-259 bytes, consecutive sizes tend to repeat)",
    "isolated": "each thread frees every block 2.7 thousand allocations later at the earliest and 5.4 thousand on average, in a random pattern",
    "swing": "like isolated with longer lifetimes: the live set of a thread climbs to tens of thousands of blocks, then everything is freed at once, over and over",
    "unidirectional": "threads in pairs: one allocates as fast as it can and passes the blocks through a lock-free queue to the other, which frees them",
    "bidirectional": "threads in pairs: each allocates, sends the blocks to its partner, and frees what it receives",
    "chain": "each thread does a short isolated-like run, then starts a successor (which inherits its live blocks) and exits, over and over",
}


class Ctx:
    """What workloads need to know about the run."""

    def __init__(self, build, scale, nthreads, tmp):
        self.build = build          # build dir (binaries, generated inputs)
        self.bin = os.path.join(build, "bin")
        self.gen = os.path.join(build, "gen")
        self.scale = scale          # 1.0 for the full run, smaller for --quick
        self.nthreads = nthreads    # "N" of the N-thread stress tests
        self.tmp = tmp
        self.redis_port = None


def sc(ctx, n, minimum=1):
    return max(minimum, int(n * ctx.scale))


class Workload:
    def __init__(self, name, group, desc, argv, metric="time", unit="s", quick=False, env=None,
                 stdin=None, check=None, prepare=None, kind="process", family=None, threads=None,
                 needs=(), note_glibc=None, timeout=300, sample_ms=None):
        self.name = name
        self.group = group
        self.desc = desc
        self._argv = argv
        self.metric = metric      # "time" (wall seconds, lower is better) or a RESULT key / "rps"
        self.unit = unit
        self.quick = quick
        self._env = env or {}
        self._stdin = stdin
        self._check = check
        self._prepare = prepare
        self.kind = kind          # process | redis
        self.family = family      # e.g. "simple" for the SHSH grid
        self.threads = threads
        self.needs = needs        # Debian packages the workload needs
        self.note_glibc = note_glibc
        self.timeout = timeout
        self.sample_ms = sample_ms  # sample the RSS every sample_ms (the memory-over-time chart)

    @property
    def higher_is_better(self):
        return self.metric != "time"

    def argv(self, ctx):
        return self._argv(ctx) if callable(self._argv) else list(self._argv)

    def env(self, ctx):
        return self._env(ctx) if callable(self._env) else dict(self._env)

    def stdin(self, ctx):
        return self._stdin(ctx) if callable(self._stdin) else self._stdin

    def prepare(self, ctx):
        if self._prepare:
            self._prepare(ctx)

    def check(self, ctx, out, err):
        """None if the run did its work correctly, else a message."""
        if self.kind == "process" and self.metric != "time" and parse_result(out, self.metric) is None:
            return "no RESULT %s= line in the output" % self.metric
        if self._check:
            return self._check(ctx, out, err)
        return None


def parse_result(out, key):
    m = None
    for m in re.finditer(r"^RESULT .*?\b%s=([0-9.eE+-]+)" % re.escape(key), out, re.M):
        pass
    return float(m.group(1)) if m else None


def B(ctx, name):
    return os.path.join(ctx.bin, name)


# ---------------------------------------------------------------------------------------------
# real programs: generated inputs and their checks

def sqlite_rows(ctx):
    return sc(ctx, 300_000, 1000)


def sqlite_prepare(ctx):
    n = sqlite_rows(ctx)
    os.makedirs(ctx.gen, exist_ok=True)
    path = os.path.join(ctx.gen, "sqlite-%d.sql" % n)
    sql = f""".bail on
PRAGMA cache_size = -262144;
PRAGMA temp_store = MEMORY;
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n})
INSERT INTO t SELECT x, (x * 7919) % 1000, printf('n%08d', (x * 2654435761) % 100000007),
                     printf('%.*d', 20 + x % 180, x) FROM c;
COMMIT;
CREATE INDEX t_k ON t(k);
CREATE INDEX t_name ON t(name);
SELECT 'count', count(*), sum(id), sum(length(body)) FROM t;
SELECT 'groups', count(*), sum(c) FROM (SELECT k, count(*) AS c FROM t GROUP BY k);
SELECT 'sorted', count(*), min(name), max(name) FROM (SELECT name, body FROM t ORDER BY body DESC, name);
UPDATE t SET body = body || '-updated' WHERE k % 3 = 0;
SELECT 'updated', sum(length(body)) FROM t;
DELETE FROM t WHERE k % 5 = 0;
SELECT 'after-delete', count(*), sum(id) FROM t;
SELECT 'join', count(*) FROM t a JOIN t b ON a.k = b.k AND a.id = b.id + 1000;
SELECT 'concat', length(group_concat(name, ',')) FROM t WHERE k < 50;
SELECT 'distinct', count(DISTINCT substr(name, 1, 5)) FROM t;
"""
    with open(path, "w") as f:
        f.write(sql)
    # expected answers, computed independently
    rows = []
    for x in range(1, n + 1):
        rows.append((x, (x * 7919) % 1000, "n%08d" % ((x * 2654435761) % 100000007),
                     max(20 + x % 180, len(str(x)))))
    exp = []
    exp.append("count|%d|%d|%d" % (n, n * (n + 1) // 2, sum(r[3] for r in rows)))
    ks = {}
    for r in rows:
        ks[r[1]] = ks.get(r[1], 0) + 1
    exp.append("groups|%d|%d" % (len(ks), n))
    names = [r[2] for r in rows]
    exp.append("sorted|%d|%s|%s" % (n, min(names), max(names)))
    exp.append("updated|%d" % sum(r[3] + (8 if r[1] % 3 == 0 else 0) for r in rows))
    rest = [r for r in rows if r[1] % 5 != 0]
    exp.append("after-delete|%d|%d" % (len(rest), sum(r[0] for r in rest)))
    ids = {r[0]: r[1] for r in rest}
    exp.append("join|%d" % sum(1 for i, k in ids.items() if i - 1000 in ids and ids[i - 1000] == k))
    sel = [r[2] for r in rest if r[1] < 50]
    exp.append("concat|%d" % (sum(len(s) for s in sel) + max(0, len(sel) - 1)))
    exp.append("distinct|%d" % len({r[2][:5] for r in rest}))
    with open(path + ".expected", "w") as f:
        f.write("\n".join(exp) + "\n")


def sqlite_script(ctx):
    return os.path.join(ctx.gen, "sqlite-%d.sql" % sqlite_rows(ctx))


def sqlite_check(ctx, out, err):
    with open(sqlite_script(ctx) + ".expected") as f:
        want = f.read().split()
    got = out.split()
    if got != want:
        return "sqlite output differs from the expected answers: got %r, want %r" % (got[:12], want[:12])
    return None


def gcc_funcs(ctx):
    return sc(ctx, 600, 60)


M32 = 0xFFFFFFFF


def gcc_prepare(ctx):
    """A large C file whose output the generator predicts (32-bit unsigned arithmetic)."""
    nf = gcc_funcs(ctx)
    os.makedirs(ctx.gen, exist_ok=True)
    path = os.path.join(ctx.gen, "big-%d.c" % nf)
    rnd = random.Random(2024)
    out = ["/* generated by bench/workloads.py: a large C file for the gcc -O2 workload */",
           "#include <stdio.h>", ""]
    pyfuncs = []
    leaf = []
    for i in range(nf):
        kind = rnd.randrange(4) if leaf else rnd.randrange(3)
        c = [rnd.randrange(1, 1 << 32) for _ in range(6)]
        if kind == 0:
            n = rnd.randrange(8, 32)
            out.append(f"""static unsigned f{i}(unsigned x) {{
  unsigned a[{n}], s = {c[5]}u;
  for (int i = 0; i < {n}; i++) a[i] = x * (unsigned)i + {c[0]}u;
  for (int i = 0; i < {n}; i++) {{
    switch ((a[i] + {c[1]}u) % 5u) {{
    case 0: s += a[i] * {c[2]}u; break;
    case 1: s ^= a[i] >> 3; break;
    case 2: s -= a[i]; break;
    case 3: s = s * 31u + {c[3]}u; break;
    default: s += {c[4]}u;
    }}
  }}
  return s;
}}""")

            def f(x, n=n, c=c):
                a = [(x * i + c[0]) & M32 for i in range(n)]
                s = c[5]
                for v in a:
                    k = ((v + c[1]) & M32) % 5
                    if k == 0:
                        s = (s + v * c[2]) & M32
                    elif k == 1:
                        s ^= v >> 3
                    elif k == 2:
                        s = (s - v) & M32
                    elif k == 3:
                        s = (s * 31 + c[3]) & M32
                    else:
                        s = (s + c[4]) & M32
                return s
            leaf.append(i)
        elif kind == 1:
            lit = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(rnd.randrange(16, 64)))
            out.append(f"""static unsigned f{i}(unsigned x) {{
  static const char s[] = "{lit}";
  unsigned h = {c[0]}u ^ x;
  for (int i = 0; s[i]; i++) h = (h * {c[1] | 1}u) ^ (unsigned char)s[i];
  return h + {c[2]}u;
}}""")

            def f(x, lit=lit, c=c):
                h = c[0] ^ x
                for ch in lit.encode():
                    h = ((h * (c[1] | 1)) & M32) ^ ch
                return (h + c[2]) & M32
            leaf.append(i)
        elif kind == 2:
            d = rnd.randrange(3, 7)
            out.append(f"""static unsigned f{i}(unsigned x) {{
  unsigned m[{d}][{d}], r[{d}][{d}], s = 0;
  for (int i = 0; i < {d}; i++)
    for (int j = 0; j < {d}; j++) m[i][j] = x + (unsigned)i * {c[0]}u + (unsigned)j * {c[1]}u;
  for (int i = 0; i < {d}; i++)
    for (int j = 0; j < {d}; j++) {{
      unsigned t = 0;
      for (int k = 0; k < {d}; k++) t += m[i][k] * m[k][j];
      r[i][j] = t;
    }}
  for (int i = 0; i < {d}; i++)
    for (int j = 0; j < {d}; j++) s = s * {c[2] | 1}u + r[i][j];
  return s;
}}""")

            def f(x, d=d, c=c):
                m = [[(x + i * c[0] + j * c[1]) & M32 for j in range(d)] for i in range(d)]
                s = 0
                for i in range(d):
                    for j in range(d):
                        t = 0
                        for k in range(d):
                            t = (t + m[i][k] * m[k][j]) & M32
                        s = (s * (c[2] | 1) + t) & M32
                return s
            leaf.append(i)
        else:
            p, q = rnd.choice(leaf), rnd.choice(leaf)
            out.append(f"""static unsigned f{i}(unsigned x) {{
  return f{p}(x ^ {c[0]}u) + f{q}(x + {c[1]}u) * 3u;
}}""")

            def f(x, p=p, q=q, c=c):
                return (pyfuncs[p](x ^ c[0]) + pyfuncs[q]((x + c[1]) & M32) * 3) & M32
        pyfuncs.append(f)
    out.append("int main(void) {\n  unsigned t = 0;")
    total = 0
    for i in range(nf):
        out.append(f"  t = t * 33u + f{i}({i}u);")
        total = (total * 33 + pyfuncs[i](i)) & M32
    out.append('  printf("%u\\n", t);\n  return 0;\n}')
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    with open(path + ".expected", "w") as f:
        f.write("%d\n" % total)


def gcc_paths(ctx):
    src = os.path.join(ctx.gen, "big-%d.c" % gcc_funcs(ctx))
    exe = os.path.join(ctx.tmp, "big-%d.out" % gcc_funcs(ctx))
    return src, exe


def gcc_check(ctx, out, err):
    import subprocess
    src, exe = gcc_paths(ctx)
    if not os.path.exists(exe):
        return "gcc produced no executable"
    try:
        r = subprocess.run([exe], capture_output=True, text=True, timeout=60, env=clean_env())
    finally:
        os.unlink(exe)
    with open(src + ".expected") as f:
        want = f.read().strip()
    if r.returncode != 0 or r.stdout.strip() != want:
        return "the compiled program printed %r (exit %d), expected %r" % (r.stdout.strip(), r.returncode, want)
    return None


def z3_prepare(ctx):
    os.makedirs(ctx.gen, exist_ok=True)
    path = os.path.join(ctx.gen, "z3.smt2")
    L = ["; generated by bench/workloads.py"]
    # 1. pigeonhole, 9 pigeons in 8 holes, boolean encoding: unsat
    n = 8
    L.append("(push)")
    for i in range(n + 1):
        for j in range(n):
            L.append(f"(declare-const p{i}_{j} Bool)")
    for i in range(n + 1):
        L.append("(assert (or " + " ".join(f"p{i}_{j}" for j in range(n)) + "))")
    for j in range(n):
        for i in range(n + 1):
            for k in range(i + 1, n + 1):
                L.append(f"(assert (not (and p{i}_{j} p{k}_{j})))")
    L += ["(check-sat)", "(pop)"]
    # 2. 20 queens: sat, the model is checked
    n = 20
    L.append("(push)")
    for i in range(n):
        L.append(f"(declare-const q{i} Int)")
        L.append(f"(assert (and (>= q{i} 0) (< q{i} {n})))")
    L.append("(assert (distinct " + " ".join(f"q{i}" for i in range(n)) + "))")
    for i in range(n):
        for j in range(i + 1, n):
            L.append(f"(assert (not (= (- q{i} q{j}) {j - i})))")
            L.append(f"(assert (not (= (- q{j} q{i}) {j - i})))")
    L += ["(check-sat)", "(get-value (" + " ".join(f"q{i}" for i in range(n)) + "))", "(pop)"]
    # 3. factor a 48-bit semiprime with bit-vectors: sat, the factors are checked
    P = 16777213 * 16777199
    L += ["(push)", "(declare-const x (_ BitVec 48))", "(declare-const y (_ BitVec 48))",
          f"(assert (= (bvmul x y) (_ bv{P} 48)))", "(assert (bvugt x (_ bv1 48)))",
          "(assert (bvugt y (_ bv1 48)))", f"(assert (bvult x (_ bv{1 << 24} 48)))",
          f"(assert (bvult y (_ bv{1 << 24} 48)))", "(check-sat)", "(get-value (x y))", "(pop)"]
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def z3_check(ctx, out, err):
    verdicts = re.findall(r"^(sat|unsat|unknown)\s*$", out, re.M)
    if verdicts != ["unsat", "sat", "sat"]:
        return "z3 answered %r, expected unsat, sat, sat" % (verdicts,)
    q = {int(a): int(b) for a, b in re.findall(r"\(q(\d+) (\d+)\)", out)}
    n = 20
    if sorted(q) != list(range(n)) or sorted(q.values()) != list(range(n)):
        return "z3's queens model is not a permutation"
    for i in range(n):
        for j in range(i + 1, n):
            if abs(q[i] - q[j]) == j - i:
                return "z3's queens model has queens %d and %d on a diagonal" % (i, j)
    xy = re.findall(r"\((x|y) #x([0-9a-fA-F]+)\)", out)
    vals = {k: int(v, 16) for k, v in xy}
    if vals.get("x", 0) * vals.get("y", 0) != 16777213 * 16777199:
        return "z3's factors %r do not multiply to the semiprime" % (vals,)
    return None


BURSTS_CYCLES, BURSTS_IDLE_MS, BURSTS_FINAL_IDLE_MS = 3, 300, 500


def bursts_mib(ctx):
    return sc(ctx, 256, 16)


def parse_phases(out):
    """The PHASE lines of bench/src/bursts.c: a list of dicts, times in CLOCK_MONOTONIC seconds."""
    phases = []
    for m in re.finditer(r"^PHASE (.*)$", out, re.M):
        d = dict(kv.split("=", 1) for kv in m.group(1).split())
        phases.append({k: (v if k == "cycle" else float(v) if "." in v else int(v)) for k, v in d.items()})
    return phases


def bursts_check(ctx, out, err):
    ph = parse_phases(out)
    if len(ph) != BURSTS_CYCLES + 1 or ph[-1].get("cycle") != "final":
        return "expected %d PHASE lines, got %d" % (BURSTS_CYCLES + 1, len(ph))
    return None


def python_n(ctx):
    return sc(ctx, 60_000, 5000)


def perl_check(ctx, out, err):
    if not re.search(r"^CHECK [0-9a-f]{16}$", out, re.M):
        return "perl script printed no CHECK line"
    return None


def python_check(ctx, out, err):
    if not re.search(r"^CHECK [0-9a-f]{16}$", out, re.M):
        return "python script printed no CHECK line"
    return None


def clean_env():
    env = dict(os.environ)
    for k in ("LD_PRELOAD", "PYTHONMALLOC", "MALLOC_CONF", "MIMALLOC_VERBOSE"):
        env.pop(k, None)
    return env


# redis parameters (the runner in bench/run starts the server and the client)
def redis_requests(ctx):
    return sc(ctx, 400_000, 20_000)


# ---------------------------------------------------------------------------------------------



def all_workloads(ctx, threads):
    """Every workload, in report order. `threads` is the SHSH thread list."""
    N = ctx.nthreads
    W = []
    # 1. SHSH
    for t in threads:
        for w in SHSH_WORKLOADS:
            if t == 1 and w not in SHSH_SINGLE:
                continue
            if w in ("unidirectional", "bidirectional") and t % 2:
                continue
            pairs = SHSH_PAIRS[w]
            W.append(Workload(
                "%s-%d" % (w, t), "shsh", SHSH_DESC[w],
                (lambda ctx, w=w, t=t, pairs=pairs: [B(ctx, "shsh"), w, str(t), str(sc(ctx, pairs, 10000))]),
                metric="mpairs", unit="Mpairs/s", quick=(t in (1, 4)), family=w, threads=t))
    # 2. stress tests
    W += [
        Workload("larson-N", "stress",
                 "larson-style server: each of N threads replaces random blocks (8-1000 bytes) in its own array of 1000, and after each of 30 rounds hands the array to a new thread, so blocks are freed by threads other than the one that allocated them",
                 lambda ctx: [B(ctx, "larson"), str(N), "30", str(sc(ctx, 600_000, 1000))], quick=True, threads=N),
        Workload("xmalloc-N", "stress",
                 "xmalloc-style asymmetric producer/consumer: N threads only allocate (8 bytes-4 KiB, batches of 64) and N other threads only free",
                 lambda ctx: [B(ctx, "xmalloc"), str(N), str(N), str(sc(ctx, 12_000_000, 10000))], quick=True, threads=2 * N),
        Workload("cache-scratch-1", "stress",
                 "cache-scratch with one thread: free a small object made by the main thread, then allocate, write many times and free 8-byte objects",
                 lambda ctx: [B(ctx, "cache"), "scratch", "1", "1000", str(sc(ctx, 100_000, 1000))], threads=1),
        Workload("cache-scratch-N", "stress",
                 "cache-scratch (passive false sharing): N threads each free an object allocated next to the others' by the main thread, then allocate, write and free their own small objects; an allocator that reuses the neighbouring memory makes them share cache lines",
                 lambda ctx: [B(ctx, "cache"), "scratch", str(N), "1000", str(sc(ctx, 100_000, 1000))], quick=True, threads=N),
        Workload("cache-thrash-1", "stress",
                 "cache-thrash with one thread: allocate an 8-byte object, write it many times, free it, repeat",
                 lambda ctx: [B(ctx, "cache"), "thrash", "1", "1000", str(sc(ctx, 100_000, 1000))], threads=1),
        Workload("cache-thrash-N", "stress",
                 "cache-thrash (active false sharing): N threads allocate their own small objects and write them many times; objects of different threads in one cache line make the threads fight over it",
                 lambda ctx: [B(ctx, "cache"), "thrash", str(N), "1000", str(sc(ctx, 100_000, 1000))], threads=N),
        Workload("sh6bench", "stress",
                 "sh6bench-style: batches of 1000 blocks (1-1000 bytes) of which half are freed last-in-first-out, replaced, and then all freed in allocation order",
                 lambda ctx: [B(ctx, "shbench"), "sh6", "1", str(sc(ctx, 16_000, 10))], quick=True, threads=1),
        Workload("sh8bench-N", "stress",
                 "sh8bench-style: the sh6bench pattern on N threads, each sending half of every batch to the next thread, which frees it in reverse order",
                 lambda ctx: [B(ctx, "shbench"), "sh8", str(N), str(sc(ctx, 6_000, 10))], quick=True, threads=N),
        Workload("alloc-test-1", "stress",
                 "alloc-test-style: one thread replaces blocks in 65536 slots with skewed lifetimes, sizes from a Pareto distribution up to 1 KiB, writing into each block",
                 lambda ctx: [B(ctx, "alloctest"), "1", str(sc(ctx, 15_000_000, 10000))], threads=1),
        Workload("alloc-test-N", "stress",
                 "alloc-test-style on N threads, each with its own slots",
                 lambda ctx: [B(ctx, "alloctest"), str(N), str(sc(ctx, 10_000_000, 10000))], quick=True, threads=N),
        Workload("mstress-N", "stress",
                 "mstress-style: N threads allocate, grow with realloc, free, and swap objects through a shared array; the threads are destroyed and recreated 20 times while many of their objects stay alive",
                 lambda ctx: [B(ctx, "mstress"), str(N), "20", str(sc(ctx, 250_000, 1000))], quick=True, threads=N),
        Workload("startup", "stress",
                 "short processes, as a shell script or a build runs them: one after the other, each loads the allocator, makes 300 allocations of 16-2,000 bytes and exits (peak RSS: the largest process)",
                 lambda ctx: [B(ctx, "startup"), str(sc(ctx, 300, 20))], quick=True, threads=1),
        Workload("large", "stress",
                 "large blocks: 64 KiB to 32 MiB (log-uniform), half of the operations grow a block with realloc, at most 8 live, every page written",
                 lambda ctx: [B(ctx, "large"), str(sc(ctx, 2_000 if ctx.scale >= 1 else 1_200, 50))], quick=True, threads=1),
    ]
    # 3. compute kernels
    W += [
        Workload("bigint", "kernel",
                 "big-integer expression trees: build random trees, evaluate them with heap-allocated big integers (one to a few hundred 32-bit limbs) that die right after use, check every node modulo two primes",
                 lambda ctx: [B(ctx, "bigint"), str(sc(ctx, 80_000, 100))], quick=True, threads=1),
        Workload("trees", "kernel",
                 "binary trees: build, walk and free many perfect binary trees of 24-byte nodes next to one long-lived tree",
                 lambda ctx: [B(ctx, "trees"), str(16 if ctx.scale >= 1 else 14)], threads=1),
    ]
    # 4. real programs
    W += [
        Workload("redis", "real",
                 "redis-server 7 (Debian) under the allocator, driven by redis-benchmark over loopback: pipelined (16) LPUSH of 10 values to 1000 random lists, then LRANGE of the first 10 elements; requests per second",
                 None, metric="rps", unit="req/s", quick=True, kind="redis",
                 needs=("redis-server", "redis-tools"),
                 note_glibc="Debian's redis-server is linked with jemalloc: its 'no preload' (glibc) column measures redis's own jemalloc, not glibc"),
        Workload("python", "real",
                 "python3 (Debian) with PYTHONMALLOC=malloc running an allocation-heavy script: records, JSON round trip, sets, strings, sorting, an LRU cache and a tuple tree",
                 lambda ctx: ["/usr/bin/python3", os.path.join(HERE, "programs", "pyalloc.py"), str(python_n(ctx))],
                 env={"PYTHONMALLOC": "malloc", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"},
                 check=python_check, quick=True, needs=("python3",)),
        Workload("perl", "real",
                 "perl (Debian, which uses the C library's malloc) running an allocation-heavy script: a hash of records churned in rounds, a sorted index, strings joined and split, a word count and a queue of short-lived arrays",
                 lambda ctx: ["/usr/bin/perl", os.path.join(HERE, "programs", "plalloc.pl"), str(sc(ctx, 150_000, 5000))],
                 env={"PERL_HASH_SEED": "0", "PERL_PERTURB_KEYS": "0"},
                 check=perl_check, needs=("perl",)),
        Workload("sqlite", "real",
                 "sqlite3 (Debian) on an in-memory database: insert 300k rows, build indexes, group, sort, update, delete, join and concatenate; answers checked",
                 lambda ctx: ["sqlite3", "-batch", ":memory:"], stdin=sqlite_script, check=sqlite_check,
                 prepare=sqlite_prepare, quick=True, needs=("sqlite3",)),
        Workload("gcc", "real",
                 "gcc -O2 compiling and linking a generated 600-function C file (the compiled program's output is checked)",
                 lambda ctx: ["gcc", "-O2", "-o", gcc_paths(ctx)[1], gcc_paths(ctx)[0]],
                 check=gcc_check, prepare=gcc_prepare, needs=("gcc",)),
        Workload("z3", "real",
                 "z3 (Debian) solving three problems: 9 pigeons in 8 holes (unsat), 20 queens and a 48-bit factorisation with bit-vectors (sat, models checked)",
                 lambda ctx: ["z3", os.path.join(ctx.gen, "z3.smt2")], check=z3_check, prepare=z3_prepare,
                 needs=("z3",)),
    ]
    # 5. microbenchmark (its own report table)
    W += [
        Workload("micro-pairs", "micro",
                 "one thread: malloc then free at once, sizes 8-1024 bytes",
                 lambda ctx: [B(ctx, "micro"), "pairs", str(sc(ctx, 30_000_000, 100000))],
                 metric="mpairs", unit="Mpairs/s", threads=1),
        Workload("micro-xthread", "micro",
                 "4 threads: 2 producers allocate (8-1024 bytes) and pass every block through a lock-free queue to their own consumer, which frees it",
                 lambda ctx: [B(ctx, "micro"), "xthread", str(sc(ctx, 8_000_000, 100000))],
                 metric="mpairs", unit="Mpairs/s", threads=4),
        Workload("micro-walk", "micro",
                 "one thread: 600,000 list nodes of 96 bytes, each linked to the next one allocated (57 MiB, more than the caches hold), walked in that order: a stream the CPU's prefetchers follow only where consecutive blocks are neighbours",
                 lambda ctx: [B(ctx, "micro"), "walk", str(sc(ctx, 20, 4))],
                 metric="mnodes", unit="Mnodes/s", threads=1),
    ]
    # 6. memory over time (its own chart and table; the RSS is sampled while it runs)
    for t, how in ((2, "two threads; 40% of the blocks are freed by the other thread"),
                   (1, "one thread, no other thread in the process")):
        W.append(Workload(
            "bursts-%d" % t, "memtime",
            "%s: %d cycles of: allocate 256 MiB (by bytes 10%% in 8-256 B, 30%% in 256 B-4 KiB, 45%% in "
            "4-64 KiB blocks and 15%% in a few huge blocks of 3-10 MiB) and write every page, free 90%% of the "
            "blocks (keeping 10%% live until the end), sleep %d ms; then free everything and sleep %d ms"
            % (how, BURSTS_CYCLES, BURSTS_IDLE_MS, BURSTS_FINAL_IDLE_MS),
            (lambda ctx, t=t: [B(ctx, "bursts"), str(t), str(bursts_mib(ctx)), str(BURSTS_CYCLES),
                               str(BURSTS_IDLE_MS), str(BURSTS_FINAL_IDLE_MS)]),
            check=bursts_check, threads=t, sample_ms=5))
    return W


C_PROGRAMS = ["shsh", "larson", "xmalloc", "cache", "shbench", "alloctest", "mstress", "large",
              "bigint", "trees", "micro", "bursts", "probe", "measure", "startup"]


def which(prog):
    return shutil.which(prog)
