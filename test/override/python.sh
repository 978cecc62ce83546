#!/bin/bash
# override-python: python3 with PYTHONMALLOC=malloc (every Python object through malloc) and
# LD_PRELOAD=libshardmalloc.so runs a workload whose output must equal the glibc run's.
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/find-python.sh"
find_python || { echo "override-python: SKIPPED: no python3"; exit 77; }
echo "python: $PY ($("$PY" -V 2>&1))"
cat > "$tmp/work.py" <<'PY'
import gc, hashlib, json, pickle, random, re, threading, collections, decimal
random.seed(12345)
d = {f"k{i}": [i] * (i % 17) for i in range(200000)}
print("dict", len(d), sum(len(v) for v in d.values()))
s = set(random.randrange(10**9) for _ in range(100000))
print("set", len(s), sum(s) % 1000003)
lst = sorted((random.random(), str(i)) for i in range(200000))
print("list", len(lst), lst[0][1], lst[-1][1])
text = " ".join(f"word{i % 1000}" for i in range(300000))
print("text", len(text), hashlib.sha256(text.encode()).hexdigest()[:16])
print("regex", len(re.findall(r"word(\d)7\b", text)))
obj = {"a": [1, 2.5, None, True, "x" * 1000], "b": {str(i): list(range(i % 50)) for i in range(5000)}}
j = json.dumps(obj, sort_keys=True)
assert json.loads(j) == obj
p = pickle.dumps(obj, protocol=5)
assert pickle.loads(p) == obj
print("json", len(j), "pickle", len(p))
class Node:
    def __init__(self, n): self.n, self.ref = n, None
nodes = [Node(i) for i in range(100000)]
for a, b in zip(nodes, nodes[1:] + nodes[:1]): a.ref = b   # a big reference cycle
del nodes, a, b
print("gc", gc.collect() >= 100000)
results = [0] * 8
def work(k):
    acc = collections.Counter()
    for i in range(30000):
        acc[str(i % 97)] += len(bytes(i % 300))
    results[k] = sum(acc.values())
ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
for t in ts: t.start()
for t in ts: t.join()
print("threads", results)
decimal.getcontext().prec = 500
print("decimal", str(decimal.Decimal(2).sqrt())[-10:])
big = bytearray(50_000_000); big[-1] = 7; print("bytearray", len(big), big[-1]); del big
print("end")
PY
ref=$(PYTHONMALLOC=malloc "$PY" "$tmp/work.py" 2>&1)
out=$(PYTHONMALLOC=malloc preloaded "$PY" "$tmp/work.py" 2>&1)
check "python workload output equals the glibc run ($(wc -l <<<"$ref") lines)" "$ref" "$out"
check "python workload ran to the end" "end" "$(tail -1 <<<"$out")"
check "shardmalloc mapped into the preloaded python" "True" \
  "$(PYTHONMALLOC=malloc preloaded "$PY" -c 'print("libshardmalloc" in open("/proc/self/maps").read())' 2>&1)"
check_true "python's malloc and free bound to libshardmalloc (LD_DEBUG=bindings)" \
  bound_to_shardmalloc 'python|libpython' env PYTHONMALLOC=malloc "$PY" -c 'print(1)'
finish
