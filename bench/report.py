"""Summaries and Markdown for bench/run: medians, ratios against the reference allocator,
geometric means, the SHSH grid, the microbenchmark table, the memory-over-time table, losses and
failures."""
import csv
import math
import statistics

import workloads as WL

LOSS_TIME = 0.03   # shardmalloc slower than a peer by more than 3%
LOSS_RSS = 0.10    # shardmalloc's peak RSS larger than a peer's by more than 10%


def wdict(w):
    return {"name": w.name, "group": w.group, "desc": w.desc, "metric": w.metric, "unit": w.unit,
            "higher_is_better": w.higher_is_better, "threads": w.threads, "family": w.family,
            "note_glibc": w.note_glibc}


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarize(meta, allocs, wls, runs, ref):
    used = []
    for r in runs:
        if r["allocator"] not in used:
            used.append(r["allocator"])
    listed = [a["name"] for a in allocs if a["name"] in used]
    # reference first, then other shardmalloc builds, then the rest as listed
    order = sorted(listed, key=lambda n: (n != ref, not n.startswith("shardmalloc"), listed.index(n)))
    summary = {}
    for w in wls:
        per = {}
        for a in order:
            rs = [r for r in runs if r["workload"] == w["name"] and r["allocator"] == a]
            if not rs:
                continue
            ok = [r for r in rs if r["status"] == "ok" and r.get("value")]
            bad = [r for r in rs if r not in ok]
            e = {"runs": len(rs), "n": len(ok), "status": "ok"}
            if bad:
                e.update(status=bad[0]["status"], error=bad[0].get("error", ""), failed=len(bad))
            if ok:
                vals = [r["value"] for r in ok]
                rss = [r["rss_kb"] for r in ok]
                e.update(value=statistics.median(vals), value_min=min(vals), value_max=max(vals),
                         rss_kb=statistics.median(rss), rss_min=min(rss), rss_max=max(rss))
                e["time"] = e["value"] if w["metric"] == "time" else 1.0 / e["value"]
                # each repetition runs every allocator once, interleaved: losses() pairs them
                e["by_rep"] = {str(r["rep"]): [r["value"] if w["metric"] == "time" else 1.0 / r["value"], r["rss_kb"]]
                               for r in ok}
            per[a] = e
        base = per.get(ref)
        for a, e in per.items():
            if e["status"] == "ok" and base and base["status"] == "ok" and "time" in e:
                e["time_ratio"] = e["time"] / base["time"]
                e["rss_ratio"] = e["rss_kb"] / base["rss_kb"] if base["rss_kb"] else None
        summary[w["name"]] = per
    geo = {}
    for a in order:
        tr = [summary[w["name"]][a].get("time_ratio") for w in wls
              if w["group"] not in WL.SEPARATE_GROUPS and a in summary[w["name"]]]
        rr = [summary[w["name"]][a].get("rss_ratio") for w in wls
              if w["group"] not in WL.SEPARATE_GROUPS and a in summary[w["name"]]]
        fails = sum(1 for w in wls if a in summary[w["name"]] and summary[w["name"]][a]["status"] != "ok")
        geo[a] = {"time": geomean(tr), "rss": geomean(rr), "n": len([x for x in tr if x]), "failures": fails}
    # keep the file small: the exact command line is kept for failed runs (runs.jsonl has all),
    # the RSS samples go to memtime.csv
    slim = []
    for r in runs:
        r = dict(r)
        if r["status"] == "ok":
            r.pop("cmd", None)
        if "memtime" in r:
            r["memtime"] = {k: v for k, v in r["memtime"].items() if k != "samples"}
        for k in ("wall", "value"):
            if isinstance(r.get(k), float):
                r[k] = float("%.6g" % r[k])
        slim.append(r)
    return {"meta": meta, "allocators": allocs, "order": order, "reference": ref, "workloads": wls,
            "runs": slim, "summary": summary, "geomean": geo, "memtime": memtime_summary(wls, runs, order)}


def write_csv(data, path):
    groups = {w["name"]: w for w in data["workloads"]}
    with open(path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["workload", "group", "allocator", "rep", "status", "value", "unit", "wall_s", "peak_rss_kib", "error"])
        for r in data["runs"]:
            w = groups[r["workload"]]
            wr.writerow([r["workload"], w["group"], r["allocator"], r["rep"], r["status"],
                         "%.6g" % r["value"] if r.get("value") else "", w["unit"],
                         "%.4f" % r.get("wall", 0), r.get("rss_kb", 0), r.get("error", "")])


# ---------------------------------------------------------------------------------------------

def fmt_val(v, w):
    if v is None:
        return "-"
    if w["metric"] == "time":
        return "%.3f s" % v if v < 10 else "%.2f s" % v
    if w["unit"] == "req/s":
        return "%.0f req/s" % v
    return "%.2f %s" % (v, w["unit"])


def fmt_mib(kb):
    return "%.1f MiB" % (kb / 1024.0) if kb is not None else "-"


def fmt_ratio(x):
    if x is None:
        return "-"
    return "%.2f" % x if x < 100 else "%.0f" % x


def fail_cell(e):
    st = e["status"].upper()
    return "**%s**" % st


def short(a):
    return a


def table(headers, rows, align=None):
    out = ["| " + " | ".join(headers) + " |"]
    align = align or (["l"] + ["r"] * (len(headers) - 1))
    out.append("|" + "|".join(":---" if a == "l" else "---:" for a in align) + "|")
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def main_workloads(data):
    return [w for w in data["workloads"] if w["group"] not in WL.SEPARATE_GROUPS]


def wlabel(w, data):
    return w["name"] + (" †" if w.get("note_glibc") and "glibc" in data["order"] else "")


def ratio_table(data, key):
    """key: 'time' or 'rss'. Reference column absolute, others relative."""
    ref = data["reference"]
    order = data["order"]
    heads = ["workload"] + [("%s (abs.)" % a if a == ref else a) for a in order]
    rows = []
    for w in main_workloads(data):
        per = data["summary"][w["name"]]
        row = [wlabel(w, data)]
        for a in order:
            e = per.get(a)
            if not e:
                row.append("")
            elif e["status"] != "ok":
                row.append(fail_cell(e))
            elif a == ref:
                row.append(fmt_val(e["value"], w) if key == "time" else fmt_mib(e["rss_kb"]))
            else:
                row.append(fmt_ratio(e.get("time_ratio" if key == "time" else "rss_ratio"))
                           + (" †" if a == "glibc" and w.get("note_glibc") else ""))
        rows.append(row)
    geo = ["**geometric mean**"]
    for a in order:
        g = data["geomean"][a]
        geo.append("**1.00**" if a == ref else "**%s**" % fmt_ratio(g["time" if key == "time" else "rss"]))
    rows.append(geo)
    return table(heads, rows)


def at_or_below(data, a, key):
    """(k, n): on k of the n main workloads both ran, the reference's median time or peak RSS is at or
    below allocator a's"""
    ref, k, n = data["reference"], 0, 0
    for w in main_workloads(data):
        s, e = data["summary"][w["name"]].get(ref), data["summary"][w["name"]].get(a)
        if not (s and e and s["status"] == "ok" and e["status"] == "ok" and "time" in s and "time" in e):
            continue
        n += 1
        k += s[key] <= e[key]
    return k, n


def summary_table(data):
    ref = data["reference"]
    rows = []
    for a in data["order"]:
        g = data["geomean"][a]
        cmp = ["", ""] if a == ref else ["%d of %d" % at_or_below(data, a, "time"), "%d of %d" % at_or_below(data, a, "rss_kb")]
        rows.append([("**%s**" % a) if a == ref else a, fmt_ratio(g["time"]), fmt_ratio(g["rss"])] + cmp +
                    [g["n"], g["failures"] or ""])
    return table(["allocator", "time vs %s (geo. mean)" % ref, "peak RSS vs %s (geo. mean)" % ref,
                  "%s as fast or faster on" % ref, "%s's peak RSS at or below on" % ref,
                  "workloads compared", "failed workloads"], rows)


# each hardened build against its own allocator's release build in the same run: what its defences cost
HARDENED = [("shardmalloc-secure", "shardmalloc"), ("mimalloc-secure", "mimalloc")]


MIMALLOC_SECURE_NOTE = ("mimalloc-secure is built once per mimalloc version into `build/bench/peers/`: Debian's "
                        "source package of the installed `libmimalloc2.0` is fetched with `apt-get source` "
                        "through a private list directory (the system's apt configuration is not changed), then "
                        "configured with `MI_SECURE=ON` and the flags of Debian's own build; `--quick` runs leave "
                        "it out unless `--allocators` names it.")

HARDENED_NOTE = ("What each allocator's hardening costs, from the same run. mimalloc-secure is mimalloc built by "
                 "`bench/run` from Debian's source package of the installed version with `MI_SECURE=ON` (its "
                 "full level: guard pages, encoded free lists, randomised allocation, double-free checks; no "
                 "canary after blocks) and Debian's other build settings. shardmalloc-secure runs with its "
                 "default options, `shuffle` included: blocks handed out in a random order, which costs programs "
                 "that walk their data in the order they allocated it the CPU's prefetching (micro-walk below; "
                 "`SHARDMALLOC_SHUFFLE=0` turns that defence off and keeps the others).")


def hardened_table(data):
    rows = []
    for hard, rel in HARDENED:
        times, rss, worst = [], [], None
        for w in main_workloads(data):
            h, r = data["summary"][w["name"]].get(hard), data["summary"][w["name"]].get(rel)
            if not (h and r and h["status"] == "ok" and r["status"] == "ok" and "time" in h and "time" in r):
                continue
            t = h["time"] / r["time"]
            times.append(t)
            rss.append(h["rss_kb"] / r["rss_kb"] if r["rss_kb"] else None)
            if worst is None or t > worst[0]:
                worst = (t, w["name"])
        if times:
            rows.append([hard, rel, fmt_ratio(geomean(times)), "%s (%s)" % (fmt_ratio(worst[0]), worst[1]),
                         fmt_ratio(geomean(rss)), len(times)])
    if not rows:
        return None
    return table(["hardened build", "against", "time (geo. mean)", "worst workload", "peak RSS (geo. mean)",
                  "workloads"], rows)


def abs_table(data):
    order = data["order"]
    rows = []
    for w in data["workloads"]:
        per = data["summary"][w["name"]]
        row = [wlabel(w, data), w["unit"]]
        for a in order:
            e = per.get(a)
            if not e:
                row.append("")
            elif e["status"] != "ok" and "value" not in e:
                row.append(fail_cell(e))
            else:
                v = e["value"]
                fm = "%.3g" if v < 1000 else "%.0f"
                cell = (fm % v) + " (" + (fm % e["value_min"]) + "–" + (fm % e["value_max"]) + ")"
                cell += " / %.1f (%.1f–%.1f)" % (e["rss_kb"] / 1024, e["rss_min"] / 1024, e["rss_max"] / 1024)
                if e["status"] != "ok":
                    cell = fail_cell(e) + " " + cell
                row.append(cell)
        rows.append(row)
    return table(["workload", "unit"] + order, rows)


def shsh_grid(data):
    fams = WL.SHSH_WORKLOADS
    ws = [w for w in data["workloads"] if w["group"] == "shsh"]
    if not ws:
        return ""
    threads = sorted({w["threads"] for w in ws})
    out = []
    for t in threads:
        cols = [f for f in fams if any(w["family"] == f and w["threads"] == t for w in ws)]
        rows = []
        for a in data["order"]:
            row = [a]
            vals = []
            for f in cols:
                e = data["summary"]["%s-%d" % (f, t)].get(a)
                if not e:
                    row.append("")
                    vals.append(None)
                elif e["status"] != "ok":
                    row.append(fail_cell(e))
                    vals.append(None)
                else:
                    row.append("%.1f" % e["value"])
                    vals.append(e["value"])
            # the post's overall score: equal numbers of pairs in every pattern = harmonic mean
            overall_set = WL.SHSH_SINGLE if t == 1 else WL.SHSH_WORKLOADS
            ov = [v for f, v in zip(cols, vals) if f in overall_set]
            if set(overall_set) <= set(cols) and all(v for v in ov):
                row.append("**%.1f**" % (len(ov) / sum(1.0 / v for v in ov)))
            else:
                row.append("-")
            rows.append(row)
        out.append("**%d thread%s** (millions of malloc/free pairs per second, higher is better)\n\n" % (t, "" if t == 1 else "s")
                   + table(["allocator"] + cols + ["overall"], rows))
    return "\n\n".join(out)


def micro_table(data):
    ws = [w for w in data["workloads"] if w["group"] == "micro"]
    if not ws:
        return ""
    out = []
    for w in ws:
        per = data["summary"][w["name"]]
        g = per.get("glibc")
        m = per.get("mimalloc")
        rows = []
        for a in data["order"]:
            e = per.get(a)
            if not e:
                continue
            if e["status"] != "ok":
                rows.append([a, fail_cell(e), "", "", ""])
                continue
            vg = "%.2f×" % (e["value"] / g["value"]) if g and g["status"] == "ok" else "-"
            vm = "%.2f×" % (e["value"] / m["value"]) if m and m["status"] == "ok" else "-"
            rows.append([a, "%.1f" % e["value"], "%.1f–%.1f" % (e["value_min"], e["value_max"]), vg, vm])
        out.append("**%s**: %s\n\n" % (w["name"], w["desc"]) +
                   table(["allocator", "%s (median)" % w["unit"], "min–max", "vs glibc", "vs mimalloc"], rows))
    return "\n\n".join(out) + "\n\nRatios here are throughput ratios: above 1× is faster than the compared allocator."


# ---- memory over time -------------------------------------------------------------------------

HALF = 0.5  # "gave back": RSS below half of the burst's peak


def memtime_metrics(series, phases):
    """From one run's RSS samples ([ms, KiB]) and phases (ms): per phase (each cycle, then the
    final free), the burst's peak RSS, the RSS at the start and the end of the idle phase, and how
    long after the last free() returned the RSS fell below half of that peak (0 = already during
    the frees, None = not within the idle phase)."""
    if not series:
        return {}
    out = {"peak_kib": max(k for _, k in series), "per_phase": []}
    for p in phases:
        start, idle, end = p.get("alloc", p["free"]), p["idle"], p["end"]
        burst = [k for t, k in series if start <= t <= idle]
        in_idle = [k for t, k in series if idle <= t <= end]
        e = {"cycle": p["cycle"], "burst_peak_kib": max(burst) if burst else None,
             "idle_start_kib": in_idle[0] if in_idle else None,
             "idle_end_kib": in_idle[-1] if in_idle else None, "t50_ms": None}
        if burst:
            below = [t for t, k in series if p["free"] <= t <= end and k < HALF * e["burst_peak_kib"]]
            if below:
                e["t50_ms"] = round(max(0.0, below[0] - idle), 1)
        out["per_phase"].append(e)
    return out


def memtime_summary(wls, runs, order):
    """Per memory-over-time workload: the program's live bytes and, per allocator, the medians
    over the repetitions and the repetition to plot (the one with the median mean RSS)."""
    out = {}
    for w in wls:
        if w["group"] != "memtime":
            continue
        per = {}
        live = None
        for a in order:
            rs = [r for r in runs if r["workload"] == w["name"] and r["allocator"] == a
                  and r["status"] == "ok" and r.get("memtime", {}).get("phases")]
            if not rs:
                continue
            if live is None:
                live = [{"cycle": p["cycle"], "live_peak": p["live_peak"], "live_kept": p["live_kept"]}
                        for p in rs[0]["memtime"]["phases"]]
            mts = [r["memtime"] for r in rs]
            nph = min(len(m["per_phase"]) for m in mts)
            idle_end, idle_drop, t50 = [], [], []
            for i in range(nph):
                ps = [m["per_phase"][i] for m in mts if m["per_phase"][i]["idle_end_kib"] is not None]
                idle_end.append(statistics.median(p["idle_end_kib"] for p in ps) if ps else None)
                idle_drop.append(statistics.median(p["idle_start_kib"] - p["idle_end_kib"] for p in ps) if ps else None)
                # "never" counts as the longest; median_low keeps a value some run really had
                ts = [m["per_phase"][i]["t50_ms"] for m in mts]
                t = statistics.median_low([x if x is not None else math.inf for x in ts])
                t50.append(None if t == math.inf else t)
            means = []
            for r in rs:
                ks = [k for _, k in r["memtime"].get("samples", [])]
                means.append((sum(ks) / len(ks) if ks else 0, r["rep"]))
            plot_rep = sorted(means)[(len(means) - 1) // 2][1]
            per[a] = {"n": len(rs), "peak_kib": statistics.median(r["rss_kb"] for r in rs),
                      "idle_end_kib": idle_end, "idle_drop_kib": idle_drop, "t50_ms": t50, "plot_rep": plot_rep}
        out[w["name"]] = {"live": live, "per": per}
    return out


def write_memtime_csv(runs, path):
    """Every RSS sample of every memory-over-time run (the JSON keeps only the phases)."""
    n = 0
    with open(path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["workload", "allocator", "rep", "ms", "rss_kib"])
        for r in runs:
            for ms, kib in r.get("memtime", {}).get("samples", []):
                wr.writerow([r["workload"], r["allocator"], r["rep"], ms, kib])
                n += 1
    return n


def write_memtime_csv_plotted(src, dst, memtime):
    """The samples of the runs the chart shows (one per allocator and workload: the run with the
    median mean RSS), for the published copy: every run's samples (over 1 MiB) stay in the run's
    own directory."""
    keep = {(w, a, str(e["plot_rep"])) for w, m in memtime.items() for a, e in m["per"].items()}
    with open(src, newline="") as fi, open(dst, "w", newline="") as fo:
        rd, wr = csv.reader(fi), csv.writer(fo)
        wr.writerow(next(rd))
        for row in rd:
            if (row[0], row[1], row[2]) in keep:
                wr.writerow(row)


def fmt_t50(t):
    if t is None:
        return "never"
    return "during the frees" if t == 0 else "%.0f ms" % t


def fmt_idle_end(kib, drop):
    """RSS at the end of an idle phase and, when it gave back 1 MiB or more, how much it gave
    back during that phase."""
    if kib is None:
        return "-"
    return "%.1f" % (kib / 1024.0) + (" (−%.0f)" % (drop / 1024.0) if drop is not None and drop >= 1024 else "")


def memtime_tables(data):
    mt = data.get("memtime") or {}
    out = []
    for w in data["workloads"]:
        m = mt.get(w["name"])
        if not m or not m["per"]:
            continue
        cycles = [p["cycle"] for p in (m["live"] or [])]
        ncyc = len([c for c in cycles if c != "final"])
        heads = (["allocator", "peak RSS"] + ["end of idle %d" % (i + 1) for i in range(ncyc)]
                 + ["end of final idle"]
                 + ["below ½ of the burst's peak after the free (cycle %s / final)"
                    % " / ".join(str(i + 1) for i in range(ncyc))])
        live = m["live"]
        rows = [["*live data (the program's)*", "*%.1f*" % (max(p["live_peak"] for p in live) / 1048576.0)]
                + ["*%.1f*" % (p["live_kept"] / 1048576.0) for p in live] + [""]]
        for a in data["order"]:
            e = m["per"].get(a)
            if not e:
                st = data["summary"][w["name"]].get(a)
                if st:
                    rows.append([a, fail_cell(st)] + [""] * (len(heads) - 2))
                continue
            rows.append([a, "%.1f" % (e["peak_kib"] / 1024.0)]
                        + [fmt_idle_end(k, d) for k, d in zip(e["idle_end_kib"], e["idle_drop_kib"])]
                        + [" / ".join(fmt_t50(t) for t in e["t50_ms"])])
        out.append("**%s** (MiB; %s)\n\n" % (w["name"], w["desc"]) + table(heads, rows))
    return "\n\n".join(out)


def memtime_md(data, charts, prefix=""):
    """The body of the memory-over-time section (no heading), or "" when it did not run."""
    mt = data.get("memtime") or {}
    if not any(m["per"] for m in mt.values()):
        return ""
    meta = data["meta"]
    reps = sorted({e["n"] for m in mt.values() for e in m["per"].values()})
    shard = ["%s %s" % (a["name"], a["version"]) for a in data["allocators"]
             if a["name"].startswith("shardmalloc") and a["name"] in data["order"]]
    parts = ["Resident memory sampled every 5 ms (`/proc/PID/statm`, by the `measure` helper) while "
             "`bench/src/bursts.c` allocates in bursts and then sleeps: who gives memory back, and how fast. "
             "Run of %s (`%s`%s), %s run(s) per allocator; the chart shows each allocator's run with the "
             "median mean RSS, the table the medians." % (meta["date"], meta["command"],
                                                             "; " + ", ".join(shard) if shard else "",
                                                             "–".join(str(x) for x in reps))]
    if "memtime.svg" in charts or "memtime.png" in charts:
        parts.append("![RSS over time](%s%s)" % (prefix, "memtime.svg" if "memtime.svg" in charts else "memtime.png"))
    parts.append(memtime_tables(data))
    parts.append("Peak RSS is `ru_maxrss`. *End of idle* is the last sample before the program wakes up "
                 "again, with in parentheses what the allocator gave back while the program slept (from the "
                 "first sample of the idle phase, when 1 MiB or more); the live-data row is what the program "
                 "itself holds at those points. The last column is the time from the return of the last "
                 "`free()` of the cycle to the first sample below half of that cycle's peak RSS (“during the "
                 "frees”: it fell that low before they were done; “never”: not within the idle phase, "
                 "%d ms, %d ms for the final one). RSS counts pages given back with `MADV_FREE` until the "
                 "kernel needs them, so an allocator that frees lazily would look here as if it kept the "
                 "memory (which, for anyone watching RSS, it does)." % (WL.BURSTS_IDLE_MS, WL.BURSTS_FINAL_IDLE_MS))
    return "\n\n".join(parts)


def worse_in(s, e, kind):
    """(k, n): in k of the n repetitions both ran, s was worse than e on kind ("time" or "rss"):
    a loss in every repetition is the allocators' difference, one in some of them the run's spread"""
    i = 0 if kind == "time" else 1
    a, b = s.get("by_rep") or {}, e.get("by_rep") or {}
    reps = [r for r in a if r in b]
    return sum(1 for r in reps if a[r][i] > b[r][i]), len(reps)


def fmt_worse_in(kn):
    return "%d of %d" % kn if kn[1] else "–"


def losses(data):
    """(workload, peer, kind, shard value, peer value, how much worse, (repetitions worse, of)) where
    shardmalloc loses."""
    ref = data["reference"]
    if not ref.startswith("shardmalloc"):
        return []
    out = []
    for w in data["workloads"]:
        per = data["summary"][w["name"]]
        s = per.get(ref)
        if not s or s["status"] != "ok":
            continue
        for a in data["order"]:
            if a.startswith("shardmalloc"):
                continue
            e = per.get(a)
            if not e or e["status"] != "ok":
                continue
            # the memory-over-time workloads mostly sleep: their time says nothing
            if w["group"] != "memtime" and s["time"] > e["time"] * (1 + LOSS_TIME):
                out.append((w, a, "time", s, e, s["time"] / e["time"] - 1, worse_in(s, e, "time")))
            if e["rss_kb"] and s["rss_kb"] > e["rss_kb"] * (1 + LOSS_RSS):
                out.append((w, a, "rss", s, e, s["rss_kb"] / e["rss_kb"] - 1, worse_in(s, e, "rss")))
    return out


def losses_md(data):
    ls = losses(data)
    ref = data["reference"]
    if not ref.startswith("shardmalloc"):
        return "_shardmalloc was not part of this run._"
    if not ls:
        return "None: shardmalloc is within 3% on time and 10% on peak RSS of every peer on every workload."
    rows = []
    for w, a, kind, s, e, d, kn in ls:
        if kind == "time":
            rows.append([wlabel(w, data), a, "time", fmt_val(s["value"], w), fmt_val(e["value"], w), "+%.1f%%" % (100 * d),
                         fmt_worse_in(kn)])
        else:
            rows.append([wlabel(w, data), a, "peak RSS", fmt_mib(s["rss_kb"]), fmt_mib(e["rss_kb"]), "+%.1f%%" % (100 * d),
                         fmt_worse_in(kn)])
    return (table(["workload", "peer", "what", ref, "peer", "%s worse by" % ref, "worse in repetitions"], rows) +
            "\n\nMedians. *Worse in repetitions*: each repetition runs every allocator once, one after the other, "
            "and counts where %s was the worse of the two; a loss in fewer than all of them is within the "
            "run-to-run spread of this machine." % ref)


def failures_md(data):
    bad = [r for r in data["runs"] if r["status"] != "ok"]
    if not bad:
        return "None: every run finished and passed its own checks."
    out = []
    seen = set()
    for r in bad:
        key = (r["workload"], r["allocator"])
        n = sum(1 for x in bad if (x["workload"], x["allocator"]) == key)
        if key in seen:
            continue
        seen.add(key)
        out.append("- **%s under %s: %s** (%s; %d of %d runs)\n\n  ```\n  %s\n  ```\n\n  ```\n%s\n  ```"
                   % (r["workload"], r["allocator"], r["status"], r.get("error", ""), n,
                      data["summary"][r["workload"]][r["allocator"]]["runs"],
                      r["cmd"].replace("\n", "\n  "),
                      "\n".join("  " + ln for ln in (r.get("stderr") or "(no output)").splitlines()[-25:])))
    return "\n".join(out)


def allocators_md(data):
    rows = []
    for a in data["allocators"]:
        rows.append([a["name"], "`%s`" % a["lib"] if a["lib"] else "(no preload)", a.get("package") or "",
                     a.get("version") or "", a["status"] if a["status"] == "ok" else "**%s**" % a["status"],
                     a.get("note") or ""])
    return table(["allocator", "library", "package", "version", "status", "note"], rows,
                 align=["l", "l", "l", "l", "l", "l"])


def machine_md(meta):
    m = meta["machine"]
    load = ""
    if meta.get("load_before") is not None:
        load = "; load average %.1f before and %.1f after the run" % (meta["load_before"], meta.get("load_after", 0))
    return ("%s, %s CPUs (%s), %s GiB RAM, Linux %s, %s, %s, redis %s, python3 %s, sqlite3 %s, gcc %s, z3 %s"
            % (m.get("os"), m.get("cpus"), m.get("cpu"), m.get("memory_gib"), m.get("kernel"), m.get("glibc"),
               m.get("cc"), m.get("redis-server_version"), m.get("python3_version"), m.get("sqlite3_version"),
               m.get("gcc_version"), m.get("z3_version")) + load)


def notes_md(data):
    notes = []
    for w in data["workloads"]:
        if w.get("note_glibc") and "glibc" in data["order"]:
            notes.append("† %s: %s." % (w["name"], w["note_glibc"]))
    return "\n".join(notes)


def charts_md(charts, prefix="", ref="shardmalloc"):
    out = []
    if "time.svg" in charts or "time.png" in charts:
        out.append("![time relative to %s](%s%s)" % (ref, prefix, "time.svg" if "time.svg" in charts else "time.png"))
    if "rss.svg" in charts or "rss.png" in charts:
        out.append("![peak RSS relative to %s](%s%s)" % (ref, prefix, "rss.svg" if "rss.svg" in charts else "rss.png"))
    return "\n\n".join(out)


def markdown(data, charts=()):
    meta = data["meta"]
    ref = data["reference"]
    parts = [
        "# shardmalloc benchmark report",
        "%s run of %s: `%s`, %d repetition(s) per (workload, allocator), interleaved; medians. Took %.0f min.%s"
        % (meta["mode"], meta["date"], meta["command"], meta["reps"], meta["duration_s"] / 60,
           " **Interrupted: partial results.**" if meta.get("interrupted") else ""),
        "Machine: " + machine_md(meta),
        "## Allocators", allocators_md(data),
        "## Summary", "Geometric means of the per-workload ratios to %s over the workloads both finished "
        "(micro excluded); above 1 means slower or larger than %s." % (ref, ref),
        summary_table(data),
    ]
    h = hardened_table(data)
    if h:
        parts += ["## Hardened builds against their own release builds", HARDENED_NOTE, h]
    if charts:
        parts += ["## Charts", charts_md(charts, "", ref)]
    parts += [
        "## Time relative to %s" % ref,
        "Median wall time (or the inverse of the workload's own throughput) divided by %s's; "
        "the %s column shows its absolute median. 1.00 = same, above 1 = slower than %s." % (ref, ref, ref),
        ratio_table(data, "time"),
        "## Peak RSS relative to %s" % ref,
        "Median peak resident set size (ru_maxrss) divided by %s's; the %s column shows its absolute median."
        % (ref, ref),
        ratio_table(data, "rss"),
    ]
    n = notes_md(data)
    if n:
        parts.append(n)
    g = shsh_grid(data)
    if g:
        parts += ["## Scalable High Speed Heap workloads", g,
                  "The overall score is the post's: the rate if every pattern did the same number of pairs "
                  "(the harmonic mean; single-threaded: simple, isolated and swing only)."]
    m = micro_table(data)
    if m:
        parts += ["## Microbenchmark", m]
    mt = memtime_md(data, charts)
    if mt:
        parts += ["## Memory over time", mt]
    parts += ["## Where %s loses" % ref,
              "Every (workload, peer) where %s is more than 3%% slower or uses more than 10%% more peak RSS." % ref,
              losses_md(data),
              "## Failures", failures_md(data),
              "## All medians", "value (min–max) / peak RSS MiB (min–max)", abs_table(data)]
    return "\n\n".join(parts) + "\n"


def console_summary(data):
    ref = data["reference"]
    lines = []
    if main_workloads(data):  # else only separately reported groups ran: no geometric means
        lines.append("%-22s %14s %14s %9s" % ("allocator", "time vs " + ref[:6], "rss vs " + ref[:6], "failures"))
        for a in data["order"]:
            g = data["geomean"][a]
            lines.append("%-22s %14s %14s %9s" % (a, fmt_ratio(g["time"]), fmt_ratio(g["rss"]), g["failures"] or ""))
    bad = {}
    for r in data["runs"]:
        if r["status"] != "ok":
            bad.setdefault((r["workload"], r["allocator"]), r)
    for (w, a), r in bad.items():
        lines.append("FAILED: %s under %s: %s (%s)" % (w, a, r["status"], r.get("error", "")))
    for w in data["workloads"]:
        if w["group"] == "micro":
            per = data["summary"][w["name"]]
            lines.append("%s (%s, median): " % (w["name"], w["unit"]) + ", ".join(
                "%s %.1f" % (a, per[a]["value"]) for a in data["order"] if a in per and per[a].get("value")))
    for name, m in (data.get("memtime") or {}).items():
        lines.append("%s, RSS at the end of each idle phase (MiB, median): " % name + "; ".join(
            "%s %s" % (a, "/".join("%.0f" % (k / 1024.0) if k is not None else "-" for k in e["idle_end_kib"]))
            for a, e in m["per"].items()))
    ls = losses(data)
    if ls:
        firm = sum(1 for x in ls if x[6][1] and x[6][0] == x[6][1])
        lines.append("%s loses (>3%% time / >10%% RSS) in %d (workload, peer) pairs, %d of them in every repetition; "
                     "see the report" % (ref, len(ls), firm))
    return "\n".join(lines)


MT_BEGIN = "<!-- memtime:begin (generated by bench/run --publish) -->"
MT_READING = "<!-- memtime:reading (written by hand; bench/run --publish keeps it) -->"
MT_END = "<!-- memtime:end -->"


def memtime_section(data, charts, prefix, reading=""):
    """The docs page's memory-over-time section between markers, so that a publish of just this
    part can replace it in place and a hand-written reading of the chart survives republishing."""
    body = memtime_md(data, charts, prefix)
    if not body:
        return ""
    return "\n\n".join([MT_BEGIN, "## Memory over time", body,
                         "Per-sample data of the runs the chart shows: [memtime.csv](%smemtime.csv) (every "
                         "run's samples are in its own `bench/results/<timestamp>/memtime.csv`); phases and "
                         "per-run numbers: [memtime.json](%smemtime.json)." % (prefix, prefix),
                         MT_READING, reading.strip() or "_No reading written for this run yet._", MT_END])


def find_memtime_section(page):
    """(the whole section, the hand-written reading) of a docs page, or ("", "")."""
    i, j = page.find(MT_BEGIN), page.find(MT_END)
    if i < 0 or j < i:
        return "", ""
    section = page[i:j + len(MT_END)]
    k = section.find(MT_READING)
    reading = section[k + len(MT_READING):-len(MT_END)].strip() if k >= 0 else ""
    if reading.startswith("_No reading written"):
        reading = ""
    return section, reading


def replace_memtime_section(page, section):
    old, _ = find_memtime_section(page)
    if old:
        return page.replace(old, section)
    k = page.find("\n## Allocators")
    if k < 0:
        return page.rstrip("\n") + "\n\n" + section + "\n"
    return page[:k + 1] + section + "\n\n" + page[k + 1:]


def docs_page(data, charts, prefix, memtime=""):
    meta = data["meta"]
    ref = data["reference"]
    groups = []
    for gname in WL.GROUPS:
        ws = [w for w in data["workloads"] if w["group"] == gname]
        if not ws:
            continue
        if gname == "shsh":
            fams = []
            for w in ws:
                if w["family"] not in fams:
                    fams.append(w["family"])
            items = ["- **%s**: %s." % (f, WL.SHSH_DESC[f]) for f in fams]
            items.append("- Each runs at %s threads (unidirectional and bidirectional need pairs, so not at 1; "
                         "at 1 thread only simple, isolated and swing, as in the post); sizes are uniform in "
                         "4-259 bytes and the size is re-drawn for one allocation in eight."
                         % ", ".join(str(t) for t in sorted({w["threads"] for w in ws})))
        else:
            items = ["- **%s**: %s." % (w["name"], w["desc"]) for w in ws]
        if gname == "stress":
            items.append("- N = %d here (the number of CPUs; `--nthreads` changes it)." % meta["nthreads"])
        groups.append("### %s\n\n%s" % (WL.GROUP_TITLES[gname], "\n".join(items)))
    banner = []
    if meta["mode"] != "full" or meta.get("interrupted"):
        banner = ["> **Placeholder: this page shows a %s run%s, not a full run.** Replace it with "
                  "`bench/run --publish` (the full run takes about 20 minutes on 2 cores)."
                  % (meta["mode"], " that was interrupted" if meta.get("interrupted") else "")]
    parts = [
        "# Benchmarks"] + banner + [
        "shardmalloc against the allocators people actually choose between: glibc's malloc, jemalloc, "
        "tcmalloc, mimalloc and Intel's tbbmalloc (all from Debian's packages, and mimalloc's secure mode built from "
        "Debian's source), run side by side on the same "
        "programs with the same inputs. Everything on this page comes from one run of `bench/run` (the "
        "`make bench` target); to reproduce it, see [How to run](#how-to-run).",
        "**This run**: %s, %s mode, %d repetitions, took %.0f minutes. Machine: %s."
        % (meta["date"], meta["mode"], meta["reps"], meta["duration_s"] / 60, machine_md(meta)),
        "## Results",
        "Time and peak memory relative to %s: 1.00 = same as %s, above 1 = slower (or larger) than %s. "
        "Bars above 3 are cut and labelled with their value." % (ref, ref, ref),
    ]
    if charts:
        parts.append(charts_md(charts, prefix, ref))
    parts += [
        "### Summary (geometric means)", summary_table(data),
    ]
    h = hardened_table(data)
    if h:
        parts += [
            "### Hardened builds against their own release builds", HARDENED_NOTE, h]
    parts += [
        "### Time relative to %s" % ref,
        "The %s column is the absolute median (wall time, or the workload's own throughput)." % ref,
        ratio_table(data, "time"),
        "### Peak RSS relative to %s" % ref, ratio_table(data, "rss"),
    ]
    n = notes_md(data)
    if n:
        parts.append(n)
    g = shsh_grid(data)
    if g:
        parts += ["### Scalable High Speed Heap grid", g,
                  "Overall is the post's score: the rate if each pattern did the same number of malloc/free pairs "
                  "(harmonic mean; at 1 thread over simple, isolated and swing only)."]
    m = micro_table(data)
    if m:
        parts += ["### Microbenchmark", m]
    parts += [
        "### Where %s loses" % ref, losses_md(data),
        "### Failures", failures_md(data),
        "Full tables with min–max spreads: [report.md](%sreport.md); raw runs: [results.json](%sresults.json), "
        "[results.csv](%sresults.csv)." % (prefix, prefix, prefix),
    ] + ([memtime] if memtime else []) + [
        "## Allocators", allocators_md(data),
        "## Workloads",
        "All synthetic workloads are small C programs in `bench/src/`, written for this suite from the "
        "published descriptions of the original benchmarks. Every one checks its own work: each block carries a "
        "tag derived from its address and size in its first and last bytes, checked before it is freed; "
        "counts and checksums are compared at the end; realloc must keep contents. A run that fails a check "
        "exits with status 3 and is reported as a failure (never as a score). The real programs are Debian's "
        "binaries, unchanged, and their answers are checked too.",
    ] + groups + [
        "## Method",
        "- Each allocator is slipped under the unchanged program with `LD_PRELOAD` (glibc: no preload; "
        "tbbmalloc through its malloc proxy `libtbbmalloc_proxy.so.2`). Before the run a probe program checks "
        "that `malloc` really resolves to the preloaded library; an allocator that cannot be preloaded is "
        "listed as such and skipped.",
        "- Runs are interleaved: each repetition runs every workload under every allocator, in a freshly "
        "shuffled allocator order, before the next repetition starts, so slow drifts of the machine (other "
        "load, thermal state) spread over all allocators instead of favouring one.",
        "- Time is the wall time of the process, measured by the harness, or the throughput the workload "
        "reports (SHSH: millions of malloc/free pairs per second; redis: requests per second), turned into "
        "time as its inverse. Peak RSS is `ru_maxrss` from `wait4` (for gcc it includes cc1; for redis it is "
        "the server's).",
        "- The shardmalloc debug build (internal assertions) is several times slower, so it runs %d time(s) "
        "per workload instead of %d; its row is there to catch crashes and gross regressions, not for timing."
        % (meta.get("debug_reps", meta["reps"]), meta["reps"]),
        "- Each cell is the median of the repetitions; the full report gives min–max. Ratios divide by "
        "%s's median; the summary is the geometric mean of the ratios over the workloads both allocators "
        "finished. The microbenchmark table is reported on its own and left out of the means." % ref,
        "- The workloads keep their own per-thread state (counters written on every operation, queue ends) "
        "in separate cache lines. Until 2026-11-21 larson, SHSH and mstress kept it in one small array from "
        "`calloc`, so two threads' counters shared a cache line or not depending on where the allocator under "
        "test put that array: larson took 1.05 s on glibc with the array as glibc placed it and 0.65 s with "
        "it line-aligned, shardmalloc-secure 0.94 s and 0.61 s. Runs published before then carry that effect.",
        "- In the producer/consumer workloads (unidirectional, bidirectional, micro-xthread) a thread with "
        "nothing to do sleeps on a futex until its partner has filled or drained half of their 1024-slot ring, "
        "and thread i is pinned to the i-th allowed CPU, so partners sit on different cores. Until 2026-11-22 "
        "waiters spun and called `sched_yield`, and the scheduler's placement decided the result: "
        "unidirectional-4 measured 13 to 70 Mpairs/s on one library from run to run, and the three workloads "
        "were bimodal. Runs published before then carry that effect.",
        "- The machine is small (2 cores) and was not otherwise idle-guaranteed; differences of a few per cent "
        "on a single workload are within noise (see the min–max spreads). On the shared virtual machines "
        "these runs use, there are phases of minutes in which traffic between the two cores costs 2-4x more "
        "for every allocator at once: xmalloc-N and unidirectional-4 then run 3-6x slower with both cores busy "
        "(seen by hand on 2026-11-26: shardmalloc's xmalloc-N 0.28 or 0.87 s, and every other allocator's "
        "likewise, from one run to the next). Interleaving spreads such a phase over all allocators of a "
        "repetition, and full runs take five repetitions (three until 2026-11-26) so that the median is not "
        "one unlucky phase.",
        "## How to run",
        "```\nmake bench                      # installs dependencies, builds the release library, runs bench/run\n"
        "bench/run --quick               # representative subset, < 5 minutes on 2 cores\n"
        "bench/run                       # everything (%s)\n"
        "bench/run --only micro          # just the microbenchmark\n"
        "bench/run --only memtime        # just the memory-over-time chart (--publish then updates only its section)\n"
        "bench/run --only larson-N,shsh --allocators glibc,shardmalloc --reps 5\n"
        "bench/run --threads 1,2 --nthreads 4\n"
        "bench/run --alloc mine=/path/to/libmine.so     # add any preloadable allocator\n"
        "bench/run --alloc af=build/secure/libshardmalloc-secure.so,SHARDMALLOC_ATOMIC_FREE=1  # ... with settings of its own\n"
        "bench/run --list                # workloads and allocators\n"
        "bench/run --publish             # also copy the results here (bench/results/published/) and rewrite this page\n```"
        % ("about %d minutes here" % max(1, round(meta["duration_s"] / 60)) if meta["mode"] == "full"
           else "about 20 minutes on 2 cores"),
        "Missing allocator packages (`libjemalloc2`, `libtcmalloc-minimal4`, `libmimalloc2.0`, `libtbbmalloc2`) "
        "and programs (`redis-server`, `redis-tools`, `sqlite3`, `z3`) are installed with apt-get when run as "
        "root; matplotlib for the charts goes into a virtualenv under `build/bench/`. Workloads are compiled "
        "with `cc -O2` into `build/bench/bin`. Each run writes `bench/results/<timestamp>/` with results.json, "
        "results.csv, report.md and the charts. " + MIMALLOC_SECURE_NOTE,
    ]
    return "\n\n".join(parts) + "\n"
