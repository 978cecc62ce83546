"""Allocation-heavy Python workload for the allocator benchmark.

Run as `PYTHONMALLOC=malloc PYTHONHASHSEED=0 python3 pyalloc.py SCALE` so that every Python object
comes from malloc. It builds and churns the kinds of data real programs hold: records (dicts with
strings, lists and floats), a JSON round trip, an inverted index of sets, string building and
splitting, sorting of tuples, an LRU cache that keeps evicting, and a tree of tuples. Every step
checks an invariant, and the script prints one line `CHECK <digest>` that must be the same under
every allocator.
"""
import hashlib
import json
import random
import sys
from collections import OrderedDict


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    rnd = random.Random(12345)
    digest = hashlib.sha256()

    # 1. records
    recs = []
    for i in range(n):
        recs.append({
            "id": i,
            "name": "user%07d" % i,
            "tags": [str(rnd.randrange(2000)) for _ in range(rnd.randrange(1, 7))],
            "score": rnd.random(),
            "meta": {"k": i % 97, "s": "x" * (i % 50)},
        })
    assert len(recs) == n

    # 2. JSON round trip (many short strings and floats)
    text = json.dumps(recs)
    back = json.loads(text)
    assert back == recs, "json round trip changed the data"
    digest.update(hashlib.sha256(text.encode()).digest())
    del back, text

    # 3. inverted index: tag -> set of ids
    idx = {}
    for r in recs:
        for t in r["tags"]:
            idx.setdefault(t, set()).add(r["id"])
    assert sum(len(v) for v in idx.values()) == sum(len(set(r["tags"])) for r in recs)
    digest.update(str(sorted((k, len(v)) for k, v in idx.items())).encode())

    # 4. string building and splitting
    joined = " ".join(r["name"] + ":" + ",".join(r["tags"]) for r in recs)
    parts = joined.split(" ")
    assert len(parts) == n
    assert all(p.split(":")[0] == r["name"] for p, r in zip(parts, recs))
    del joined, parts

    # 5. sorting tuples
    order = sorted((r["score"], r["id"], r["name"]) for r in recs)
    assert all(order[i] <= order[i + 1] for i in range(len(order) - 1))
    digest.update(str([o[1] for o in order[:: max(1, n // 1000)]]).encode())
    del order

    # 6. an LRU cache that keeps evicting (lists of varying length come and go)
    cache = OrderedDict()
    cap = max(16, n // 8)
    hits = 0
    for _ in range(n * 3):
        key = int(rnd.paretovariate(1.2) * 7) % n
        if key in cache:
            cache.move_to_end(key)
            hits += 1
            assert cache[key][0] == key
        else:
            cache[key] = [key] * rnd.randrange(1, 24)
            if len(cache) > cap:
                cache.popitem(last=False)
    assert len(cache) <= cap
    digest.update(str(hits).encode())
    del cache

    # 7. a tree of tuples, rebuilt a few times
    def build(d, v):
        if d == 0:
            return (v,)
        return (build(d - 1, 2 * v), build(d - 1, 2 * v + 1), v)

    def total(t):
        if len(t) == 1:
            return t[0]
        return total(t[0]) + total(t[1]) + t[2]

    depth = max(10, min(18, n.bit_length()))
    for _ in range(3):
        tree = build(depth, 1)
        s = total(tree)
        # sum over a complete tree labelled in heap order: all labels 1..2^(d+1)-1
        m = (1 << (depth + 1)) - 1
        assert s == m * (m + 1) // 2, "tree sum mismatch"
        del tree

    print("CHECK " + digest.hexdigest()[:16])


if __name__ == "__main__":
    main()
