"""Charts for a bench/run result: bar charts of time and peak RSS relative to the reference
allocator, one group of bars per workload and one bar per allocator (in the style of mimalloc's
README charts), and the memory-over-time chart (RSS against time, one line per allocator).

  python plot.py results.json OUTDIR      writes OUTDIR/time.{png,svg} and OUTDIR/rss.{png,svg},
                                          and OUTDIR/memtime.{png,svg} if memtime.csv is next to
                                          results.json
"""
import csv
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CLIP = 3.0
COLORS = {
    "shardmalloc": "#d62728", "shardmalloc-secure": "#ff9896", "shardmalloc-debug": "#f7b6d2",
    "glibc": "#7f7f7f", "jemalloc": "#1f77b4", "tcmalloc": "#2ca02c", "mimalloc": "#9467bd",
    "tbbmalloc": "#8c564b",
}
EXTRA = ["#17becf", "#bcbd22", "#e377c2", "#ff7f0e"]


PER_ROW = 22
SEPARATE_GROUPS = ("micro", "memtime")  # as workloads.SEPARATE_GROUPS: their own tables/charts
MEMTIME_LEAVE_OUT = ("-secure", "-debug")  # variants of shardmalloc: in the table, not on the chart


def chart(data, key, title, path_base):
    ref = data["reference"]
    order = data["order"]
    ws_all = [w for w in data["workloads"] if w["group"] not in SEPARATE_GROUPS]
    if not ws_all:
        return
    nrows = (len(ws_all) + PER_ROW - 1) // PER_ROW
    per_row = (len(ws_all) + nrows - 1) // nrows
    n = len(order)
    width = 0.8 / n
    fig_w = min(20.0, max(8.0, 0.11 * per_row * n + 2.0))
    fig, axes = plt.subplots(nrows, 1, figsize=(fig_w, 3.9 * nrows + 0.6), squeeze=False)
    colors = {}
    extra = iter(EXTRA)
    for a in order:
        colors[a] = COLORS.get(a) or next(extra, "#333333")
    for row in range(nrows):
        ax = axes[row][0]
        ws = ws_all[row * per_row:(row + 1) * per_row]
        for i, a in enumerate(order):
            xs, ys, fails = [], [], []
            for j, w in enumerate(ws):
                e = data["summary"][w["name"]].get(a)
                x = j - 0.4 + width * (i + 0.5)
                if not e:
                    continue
                if e["status"] != "ok":
                    fails.append(x)
                    continue
                r = e.get("time_ratio" if key == "time" else "rss_ratio")
                if r is None:
                    continue
                xs.append(x)
                ys.append(min(r, CLIP))
                if r > CLIP:
                    ax.text(x, CLIP + 0.03, "%.1f" % r, rotation=90, ha="center", va="bottom", fontsize=6)
            label = a + (" (reference)" if a == ref else "")
            ax.bar(xs, ys, width=width, color=colors[a], label=label if row == 0 else None, edgecolor="none")
            for x in fails:
                ax.text(x, 0.05, "×", color=colors[a], ha="center", va="bottom", fontsize=9, fontweight="bold")
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(ws)))
        ax.set_xticklabels([w["name"] + (" †" if w.get("note_glibc") else "") for w in ws],
                           rotation=45, ha="right", fontsize=8)
        ax.set_xlim(-0.6, len(ws) - 0.4)
        ax.set_ylim(0, CLIP + (1.0 if row == 0 else 0.5))
        ax.set_ylabel("%s vs %s" % ("time" if key == "time" else "peak RSS", ref), fontsize=9)
        ax.grid(axis="y", linewidth=0.3, alpha=0.6)
        ax.set_axisbelow(True)
        for sp in ("top", "right"):
            ax.spines[sp].set_visible(False)
    fig.suptitle(title, fontsize=10)
    axes[0][0].legend(ncol=min(n, 4), fontsize=8, loc="upper center", frameon=False)
    fig.tight_layout()
    fig.savefig(path_base + ".png", dpi=90)
    fig.savefig(path_base + ".svg")
    plt.close(fig)


def memtime_points(phases, last_ms):
    """The phase boundaries of one run (ms): start, then per cycle alloc (the first only: the
    next one starts where the idle phase ends), free, idle, end; then the final idle and end, and
    the last sample. Every run has the same structure, so the points can be matched up."""
    pts = [0.0, phases[0]["alloc"]]
    for p in phases[:-1]:
        pts += [p["free"], p["idle"], p["end"]]
    pts += [phases[-1]["idle"], phases[-1]["end"], max(last_ms, phases[-1]["end"])]
    for i in range(1, len(pts)):
        pts[i] = max(pts[i], pts[i - 1] + 0.01)  # np.interp wants them increasing
    return pts


def memtime_chart(data, csv_path, path_base):
    import numpy as np
    mt = data.get("memtime") or {}
    ws = [w for w in data["workloads"] if w["group"] == "memtime" and (mt.get(w["name"]) or {}).get("per")]
    if not ws or not os.path.exists(csv_path):
        return
    samples = {}
    with open(csv_path) as f:
        for row in csv.DictReader(f):
            key = (row["workload"], row["allocator"], int(row["rep"]))
            samples.setdefault(key, []).append((float(row["ms"]), int(row["rss_kib"])))
    phases = {(r["workload"], r["allocator"], r["rep"]): r["memtime"]["phases"]
              for r in data["runs"] if r.get("memtime", {}).get("phases")}
    ref = data["reference"]
    fig, axes = plt.subplots(len(ws), 1, figsize=(11, 4.3 * len(ws) + 0.4), squeeze=False)
    extra = iter(EXTRA)
    for row, w in enumerate(ws):
        ax = axes[row][0]
        m = mt[w["name"]]
        runs = []
        for a in data["order"]:
            e = m["per"].get(a)
            if not e or a.endswith(MEMTIME_LEAVE_OUT):
                continue
            key = (w["name"], a, e["plot_rep"])
            if key in samples and key in phases:
                runs.append((a, samples[key], phases[key], memtime_points(phases[key], samples[key][-1][0])))
        if not runs:
            continue
        # Alloc and free phases last as long as the allocator makes them (the time charts are about
        # that); stretching each run's phases to the median length lines the idle phases up, and
        # those, where memory is given back or not, keep their real length.
        npts = min(len(r[3]) for r in runs)
        common = [0.0]
        for i in range(1, npts):
            common.append(common[-1] + statistics.median(r[3][i] - r[3][i - 1] for r in runs))
        common = np.array(common) / 1e3
        ph = runs[0][2]
        ncyc = len(ph) - 1
        idle_spans = [(common[2 + 3 * c + 1], common[2 + 3 * c + 2]) for c in range(ncyc)]
        idle_spans.append((common[2 + 3 * ncyc], common[3 + 3 * ncyc]))
        ymax = max(k for r in runs for _, k in r[1]) / 1024.0
        for lo, hi in idle_spans:
            ax.axvspan(lo, hi, color="#f0f0f0", zorder=0, linewidth=0)
            ax.text((lo + hi) / 2, ymax * 1.07, "idle", ha="center", va="bottom", fontsize=7, color="#777777")
        # what the program itself holds: 0, up to each burst's peak, down to what it keeps
        lx, ly = [common[0], common[1]], [0.0, 0.0]
        for c in range(ncyc):
            lx += [common[2 + 3 * c], common[3 + 3 * c], common[4 + 3 * c]]
            ly += [ph[c]["live_peak"], ph[c]["live_kept"], ph[c]["live_kept"]]
        lx += [common[2 + 3 * ncyc], common[3 + 3 * ncyc], common[-1]]
        ly += [0, 0, 0]
        ax.plot(lx, np.array(ly) / 1048576.0, color="black", linestyle="--", linewidth=0.9,
                label="live data (the program's)", zorder=5)
        for a, ser, _, pts in runs:
            t = np.array([x for x, _ in ser])
            k = np.array([y for _, y in ser]) / 1024.0
            x = np.interp(t, pts[:npts], common * 1e3) / 1e3
            color = COLORS.get(a) or next(extra, "#333333")
            ax.plot(x, k, color=color, linewidth=2.0 if a == ref else 1.2, label=a, zorder=10 if a == ref else 6)
        ax.set_xlim(0, common[-1])
        ax.set_ylim(0, ymax * 1.15)
        ax.set_ylabel("RSS (MiB)", fontsize=9)
        ax.set_title("%s: %s" % (w["name"], "two threads, cross-thread frees" if w.get("threads") == 2
                                 else "one thread" if w.get("threads") == 1 else ""), fontsize=9, loc="left")
        ax.grid(linewidth=0.3, alpha=0.6)
        ax.set_axisbelow(True)
        for sp in ("top", "right"):
            ax.spines[sp].set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, ncol=min(len(labels), 8), fontsize=8, loc="lower center", frameon=False)
    axes[-1][0].set_xlabel("time (s); alloc and free phases stretched to the median allocator's length, "
                           "idle phases (grey) in real time", fontsize=8)
    machine = data["meta"]["machine"]
    fig.suptitle("RSS over time through allocation bursts and idle phases\n"
                 "%s, %s CPUs; sampled every 5 ms" % (data["meta"]["date"], machine.get("cpus")), fontsize=10)
    fig.tight_layout(rect=(0, 0.035, 1, 1))  # room for the legend below
    fig.savefig(path_base + ".png", dpi=90)
    fig.savefig(path_base + ".svg")
    plt.close(fig)


def main():
    src, outdir = sys.argv[1], sys.argv[2]
    with open(src) as f:
        data = json.load(f)
    matplotlib.rcParams["svg.fonttype"] = "none"  # keep text as text: much smaller SVG
    machine = data["meta"]["machine"]
    sub = "%s, %s CPUs, %s run" % (data["meta"]["date"], machine.get("cpus"), data["meta"]["mode"])
    chart(data, "time", "Time relative to %s (lower is better)\n%s; × = failed" % (data["reference"], sub), os.path.join(outdir, "time"))
    chart(data, "rss", "Peak RSS relative to %s (lower is better)\n%s; × = failed" % (data["reference"], sub), os.path.join(outdir, "rss"))
    memtime_chart(data, os.path.join(os.path.dirname(os.path.abspath(src)), "memtime.csv"), os.path.join(outdir, "memtime"))


if __name__ == "__main__":
    main()
