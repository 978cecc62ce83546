"""Bar charts for a bench/run result: time and peak RSS relative to the reference allocator, one
group of bars per workload and one bar per allocator (in the style of mimalloc's README charts).

  python plot.py results.json OUTDIR      writes OUTDIR/time.{png,svg} and OUTDIR/rss.{png,svg}
"""
import json
import os
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


def chart(data, key, title, path_base):
    ref = data["reference"]
    order = data["order"]
    ws_all = [w for w in data["workloads"] if w["group"] != "micro"]
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


def main():
    src, outdir = sys.argv[1], sys.argv[2]
    with open(src) as f:
        data = json.load(f)
    matplotlib.rcParams["svg.fonttype"] = "none"  # keep text as text: much smaller SVG
    machine = data["meta"]["machine"]
    sub = "%s, %s CPUs, %s run" % (data["meta"]["date"], machine.get("cpus"), data["meta"]["mode"])
    chart(data, "time", "Time relative to %s (lower is better)\n%s; × = failed" % (data["reference"], sub), os.path.join(outdir, "time"))
    chart(data, "rss", "Peak RSS relative to %s (lower is better)\n%s; × = failed" % (data["reference"], sub), os.path.join(outdir, "rss"))


if __name__ == "__main__":
    main()
