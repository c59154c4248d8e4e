#!/usr/bin/python3
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
"""Turn the runs of contrib/bench/perftest_compare.sh and bench.sh into one
table, a CSV of the medians and, with python3-matplotlib, PNG plots.

Input: a CSV with the header bench,size,metric,transport,run,value, one row
per figure of one run ("fail" for a run that gave none). Each cell of the
table is the median of the runs of one transport; each ratio divides a
remapring figure by the baseline's (posix+cma). Metrics: lat (usec, one
way), bw (MB/s, 2^20 bytes), rate (messages/s), held (bytes of memory held
per payload byte, contrib/bench/storm.sh). For lat and held a ratio below 1
means remapring is ahead (faster, holds less), for bw and rate above 1.
"""
import argparse
import csv
import os
import statistics
import sys

BASELINE = "posix+cma"
METRIC_ORDER = {"lat": 0, "bw": 1, "rate": 2, "held": 3}
UNITS = {"lat": "usec", "bw": "MB/s", "rate": "msg/s", "held": "B/B"}
# metrics where less is better
LOWER_BETTER = ("lat", "held")


def human_size(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d %s" % (n >> shift, unit)
    return "%d B" % n


def fmt_value(metric, v):
    if v is None:
        return "fail"
    if metric == "held":
        return "%.2f" % v
    if metric == "rate":
        return "%.2fM" % (v / 1e6) if v >= 1e6 else "%.0fk" % (v / 1e3)
    if metric == "lat" or v < 100:
        return "%.2f" % v if v < 100 else "%.0f" % v
    return "%.0f" % v


def load(path):
    """{(bench, size, metric): {transport: [values]}} and the key order"""
    data, order, transports = {}, [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["bench"], int(row["size"]), row["metric"])
            if key not in data:
                data[key] = {}
                order.append(key)
            vals = data[key].setdefault(row["transport"], [])
            if row["transport"] not in transports:
                transports.append(row["transport"])
            try:
                vals.append(float(row["value"]))
            except ValueError:
                pass
    benches = []
    for b, _, _ in order:
        if b not in benches:
            benches.append(b)
    order.sort(key=lambda k: (benches.index(k[0]), k[1],
                              METRIC_ORDER.get(k[2], 9)))
    # the baseline last, remapring's wires in the order they ran
    transports.sort(key=lambda t: t == BASELINE)
    return data, order, transports


def medians(data):
    return {key: {t: (statistics.median(v) if v else None)
                  for t, v in per.items()}
            for key, per in data.items()}


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def short_name(t):
    return t.replace("remapring-", "rr-")


def print_table(med, order, transports, missing, ref=None, out=sys.stdout):
    """ref: (name, {size: bandwidth}), a column of that bandwidth and each
    transport's share of it in the bw rows (--share-of)"""
    others = [t for t in transports if t != BASELINE]
    have_base = BASELINE in transports
    head = ["bench", "size", "metric"] + [short_name(t) for t in transports]
    if have_base:
        head += ["%s/posix" % short_name(t).replace("rr-", "") for t in others]
    if ref:
        head += [ref[0]] + ["%s/%s" % (short_name(t).replace("rr-", ""),
                                       ref[0]) for t in transports]
    rows = []
    for key in order:
        bench, size, metric = key
        cells = [bench, human_size(size), "%s %s" % (metric, UNITS[metric])]
        per = med[key]
        for t in transports:
            cells.append(fmt_value(metric, per[t]) if t in per else "-")
        if have_base:
            for t in others:
                r = ratio(per.get(t), per.get(BASELINE))
                if r is None:
                    cells.append("-")
                else:
                    ahead = r < 1 if metric in LOWER_BETTER else r > 1
                    cells.append("%.2f%s" % (r, "+" if ahead else "-"))
        if ref:
            bw = ref[1].get(size) if metric == "bw" else None
            cells.append(fmt_value("bw", bw) if bw else "-")
            for t in transports:
                r = ratio(per.get(t), bw)
                cells.append("-" if r is None else "%.2f" % r)
        rows.append(cells)
    for name, reason in missing:
        rows.append([name, "", ""] + ["not measured"] +
                    [""] * (len(head) - 4))
    widths = [max(len(str(r[i])) for r in [head] + rows)
              for i in range(len(head))]
    if missing:
        widths[3] = max(len(head[3]), len(short_name(transports[0])))

    def line(cells):
        parts = []
        for i, c in enumerate(cells):
            c = str(c)
            parts.append(c.ljust(widths[i]) if i < 3 else c.rjust(widths[i]))
        return "  ".join(parts).rstrip()

    print(line(head), file=out)
    print(line(["-" * w for w in widths]), file=out)
    for r in rows:
        if r[3] == "not measured":
            print("%s  not measured (%s)" %
                  (r[0].ljust(widths[0] + widths[1] + widths[2] + 4),
                   dict(missing)[r[0]]), file=out)
        else:
            print(line(r), file=out)
    if have_base:
        print("ratios: remapring / %s; '+' remapring ahead (lat and held "
              "below 1, bw and rate above 1), '-' behind" % BASELINE,
              file=out)
    if ref:
        print("%s: its bandwidth at the size, and each figure's share of "
              "it (bw rows)" % ref[0], file=out)


def write_csv(path, med, order, transports, runs, ref=None):
    # ratios to the baseline only where it was measured
    others = ([t for t in transports if t != BASELINE]
              if BASELINE in transports else [])
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["bench", "size", "metric", "unit"] + transports +
                   ["%s/%s" % (t, BASELINE) for t in others] +
                   ([ref[0]] + ["%s/%s" % (t, ref[0]) for t in transports]
                    if ref else []) + ["runs"])
        for key in order:
            per = med[key]
            row = list(key) + [UNITS[key[2]]]
            row += ["" if per.get(t) is None else "%.6g" % per[t]
                    for t in transports]
            for t in others:
                r = ratio(per.get(t), per.get(BASELINE))
                row.append("" if r is None else "%.4f" % r)
            if ref:
                bw = ref[1].get(key[1]) if key[2] == "bw" else None
                row.append("" if bw is None else "%.6g" % bw)
                for t in transports:
                    r = ratio(per.get(t), bw)
                    row.append("" if r is None else "%.4f" % r)
            row.append(runs.get(key, 0))
            w.writerow(row)


# --- plots ------------------------------------------------------------------

STYLE = {"remapring-shm": ("tab:red", "-"),
         "remapring-cma": ("tab:orange", "--"),
         BASELINE: ("tab:blue", "-")}


def series(med, bench, metric, transport):
    pts = sorted((s, per[transport]) for (b, s, m), per in med.items()
                 if b == bench and m == metric and
                 per.get(transport) is not None)
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_benches(med, order, metric):
    """benches with the metric at two sizes or more, in table order"""
    out = []
    for b, _, m in order:
        if m == metric and b not in out:
            sizes = {s for (bb, s, mm) in med if bb == b and mm == metric}
            if len(sizes) >= 2:
                out.append(b)
    return out


def size_axis(ax):
    ax.set_xscale("log", base=2)
    ticks = [8, 64, 1024, 4096, 65536, 1 << 20, 4 << 20]
    ax.set_xticks(ticks)
    ax.set_xticklabels([human_size(t).replace(" ", "") for t in ticks],
                       fontsize=7)
    ax.minorticks_off()
    ax.grid(True, which="major", alpha=0.3)


def panel(ax, med, bench, metric, transports):
    for t in transports:
        x, y = series(med, bench, metric, t)
        if x:
            c, ls = STYLE.get(t, (None, ":"))
            ax.plot(x, y, marker="o", ms=3, color=c, ls=ls, label=t)
    ax.set_title(bench, fontsize=9)
    ax.set_yscale("log")
    ax.set_ylabel("%s (%s)" % (metric, UNITS[metric]), fontsize=8)
    size_axis(ax)


def grid_figure(plt, med, benches, metric, transports, title, path):
    if not benches:
        return None
    cols = min(3, len(benches))
    rows = (len(benches) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows),
                             squeeze=False)
    for i, b in enumerate(benches):
        panel(axes[i // cols][i % cols], med, b, metric, transports)
    for j in range(len(benches), rows * cols):
        axes[j // cols][j % cols].axis("off")
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def speedup_panel(ax, med, order, transports, benches):
    """remapring's speed-up over the baseline (>1: remapring faster)"""
    others = [t for t in transports if t != BASELINE]
    for i, (bench, metric) in enumerate(benches):
        for t in others:
            xs, ys = [], []
            for s in sorted({k[1] for k in order
                             if k[0] == bench and k[2] == metric}):
                per = med[(bench, s, metric)]
                r = ratio(per.get(t), per.get(BASELINE))
                if r:
                    xs.append(s)
                    ys.append(1 / r if metric == "lat" else r)
            if len(xs) >= 2:
                ax.plot(xs, ys, marker="o", ms=3, color="C%d" % (i % 10),
                        ls="-" if t.endswith("shm") else "--",
                        label="%s %s, %s" % (bench, metric,
                                             t.replace("remapring-", "")))
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_yscale("log")
    ax.set_ylabel("speed-up over %s (>1: remapring faster)" % BASELINE,
                  fontsize=8)
    size_axis(ax)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, ncol=1)


def draw(med, order, transports, outdir, summary, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots: no matplotlib for %s (apt-get install "
              "python3-matplotlib, or contrib/setup.sh)" % sys.executable,
              file=sys.stderr)
        return []
    made = []
    lat = plot_benches(med, order, "lat")
    bw = plot_benches(med, order, "bw")
    for metric, benches, name in (("lat", lat, "latency"),
                                  ("bw", bw, "bandwidth")):
        if not outdir:
            break
        p = grid_figure(plt, med, benches, metric, transports,
                        "%s against message size\n%s" % (name, title),
                        os.path.join(outdir, name + ".png"))
        if p:
            made.append(p)
    ratio_benches = [(b, "lat") for b in lat] + [(b, "bw") for b in bw]
    if outdir and ratio_benches and BASELINE in transports:
        fig, ax = plt.subplots(figsize=(9, 6))
        speedup_panel(ax, med, order, transports, ratio_benches)
        ax.set_title("remapring against %s\n%s" % (BASELINE, title),
                     fontsize=10)
        fig.tight_layout()
        p = os.path.join(outdir, "ratio.png")
        fig.savefig(p, dpi=90)
        plt.close(fig)
        made.append(p)
    if summary:
        # one picture for the README: the UCP and MPI latency and bandwidth
        # panels and the speed-up of the same benches
        pick = [b for b in ("UCP tag_lat", "Open MPI lat", "MPICH lat")
                if b in lat]
        pickbw = [b for b in ("UCP tag_bw", "Open MPI bw", "MPICH bw")
                  if b in bw]
        n = max(len(pick), len(pickbw), 1)
        fig, axes = plt.subplots(3, n, figsize=(4.2 * n, 9.6),
                                 squeeze=False)
        for i in range(n):
            if i < len(pick):
                panel(axes[0][i], med, pick[i], "lat", transports)
            else:
                axes[0][i].axis("off")
            if i < len(pickbw):
                panel(axes[1][i], med, pickbw[i], "bw", transports)
            else:
                axes[1][i].axis("off")
        if axes[0][0].get_legend_handles_labels()[0]:
            axes[0][0].legend(fontsize=7)
        gs = axes[2][0].get_gridspec()
        for a in axes[2]:
            a.remove()
        ax = fig.add_subplot(gs[2, :])
        speedup_panel(ax, med, order, transports,
                      [(b, "lat") for b in pick] +
                      [(b, "bw") for b in pickbw])
        fig.suptitle("remapring against %s\n%s" % (BASELINE, title),
                     fontsize=10)
        fig.tight_layout()
        fig.savefig(summary, dpi=80)
        plt.close(fig)
        made.append(summary)
    return made


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("raw", help="CSV of every run")
    ap.add_argument("--csv", help="write the medians and ratios here")
    ap.add_argument("--plots", metavar="DIR",
                    help="draw latency.png, bandwidth.png, ratio.png here")
    ap.add_argument("--summary", metavar="PNG",
                    help="draw the README's one-picture summary here")
    ap.add_argument("--title", default="", help="a note for the plots")
    ap.add_argument("--missing", action="append", default=[],
                    metavar="NAME:REASON",
                    help="a row that says NAME was not measured, and why")
    ap.add_argument("--share-of", metavar="BENCH",
                    help="BENCH's bw rows (one transport of the same name, "
                    "e.g. memcpy from contrib/bench/memcpy_bw.c) are no rows "
                    "of their own but a column, and each bw figure's share "
                    "of it at the same size another")
    args = ap.parse_args()

    data, order, transports = load(args.raw)
    ref = None
    if args.share_of:
        ref = (args.share_of,
               {k[1]: statistics.median(per[args.share_of])
                for k, per in data.items()
                if k[0] == args.share_of and k[2] == "bw" and
                per.get(args.share_of)})
        order = [k for k in order if k[0] != args.share_of]
        transports = [t for t in transports if t != args.share_of]
    if not order:
        print("no figures in %s" % args.raw, file=sys.stderr)
        return 1
    med = medians(data)
    runs = {k: max(len(v) for v in per.values()) for k, per in data.items()}
    missing = [tuple(m.split(":", 1)) for m in args.missing]
    print_table(med, order, transports, missing, ref)
    if args.csv:
        write_csv(args.csv, med, order, transports, runs, ref)
    if args.plots or args.summary:
        if args.plots:
            os.makedirs(args.plots, exist_ok=True)
        made = draw(med, order, transports, args.plots, args.summary,
                    args.title)
        for m in made:
            print("plot: %s" % m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
