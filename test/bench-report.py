#!/usr/bin/env python3
"""bench/report.py on made-up runs: medians, the repetition-paired loss counts and the
at-or-below counts of the summary (what the published benchmark page says about a loss: firm,
or within the run-to-run spread). No allocator runs here."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import report as RP  # noqa: E402

failures = []


def check(what, seen, expected):
    if seen != expected:
        failures.append("%s: expected %r, saw %r" % (what, expected, seen))


def wl(name, metric="time"):
    return {"name": name, "group": "stress", "desc": "", "metric": metric, "unit": "s" if metric == "time" else "Mops/s",
            "higher_is_better": metric != "time", "threads": 1, "family": None, "note_glibc": None}


def run(w, a, rep, value, rss):
    return {"workload": w, "allocator": a, "rep": rep, "status": "ok", "value": value, "rss_kb": rss, "wall": value}


wls = [wl("steady"), wl("noisy"), wl("rate", "rate")]
runs = []
# steady: shardmalloc slower than peer in every repetition, and larger
for rep, (s, p) in enumerate([(1.10, 1.00), (1.20, 1.05), (1.15, 1.01)], 1):
    runs += [run("steady", "shardmalloc", rep, s, 2000), run("steady", "peer", rep, p, 1500)]
# noisy: slower by the median, but faster in one repetition; peak RSS equal once, lower otherwise
for rep, (s, p, sr) in enumerate([(1.10, 1.00, 1000), (0.90, 1.00, 900), (1.12, 1.01, 1000)], 1):
    runs += [run("noisy", "shardmalloc", rep, s, sr), run("noisy", "peer", rep, p, 1000)]
# rate (higher is better): shardmalloc faster in every repetition
for rep in (1, 2, 3):
    runs += [run("rate", "shardmalloc", rep, 20.0 + rep, 800), run("rate", "peer", rep, 10.0 + rep, 900)]
allocs = [{"name": "shardmalloc"}, {"name": "peer"}]
meta = {"mode": "quick", "reps": 3}
data = RP.summarize(meta, allocs, wls, runs, "shardmalloc")

check("median", data["summary"]["steady"]["shardmalloc"]["value"], 1.15)
ls = {(w["name"], kind): (round(d, 3), kn) for w, a, kind, s, e, d, kn in RP.losses(data)}
check("losses", sorted(ls), [("noisy", "time"), ("steady", "rss"), ("steady", "time")])
check("steady time worse in", ls[("steady", "time")][1], (3, 3))
check("steady rss worse in", ls[("steady", "rss")][1], (3, 3))
check("noisy time worse in", ls[("noisy", "time")][1], (2, 3))
check("worse_in rss, equal counts as not worse",
      RP.worse_in(data["summary"]["noisy"]["shardmalloc"], data["summary"]["noisy"]["peer"], "rss"), (0, 3))
check("worse_in on a throughput workload",
      RP.worse_in(data["summary"]["rate"]["shardmalloc"], data["summary"]["rate"]["peer"], "time"), (0, 3))
check("at_or_below time", RP.at_or_below(data, "peer", "time"), (1, 3))
check("at_or_below rss", RP.at_or_below(data, "peer", "rss_kb"), (2, 3))
md = RP.losses_md(data)
for cell in ("| 3 of 3 |", "| 2 of 3 |", "worse in repetitions"):
    if cell not in md:
        failures.append("losses table lacks %r:\n%s" % (cell, md))
summary = RP.summary_table(data)
if "| 1 of 3 | 2 of 3 |" not in summary:
    failures.append("summary table lacks the at-or-below counts:\n%s" % summary)

for f in failures:
    print("FAIL:", f)
print("bench-report: %d checks failed" % len(failures) if failures else "bench-report: all checks passed")
sys.exit(1 if failures else 0)
