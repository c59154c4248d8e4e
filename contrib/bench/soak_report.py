#!/usr/bin/python3
#
# Copyright (c) remapring contributors. See file LICENSE for terms.
#
"""The series of a soak run (contrib/bench/soak.sh) and its verdict.

Input: the output of test/apps/ucp_hold -S, whose lines
"sample SIDE T RSS_KIB ANON_KIB SHMEM_KIB VMAS RING_VMAS FOLD_VMAS FDS
POOL_BLOCKS MESSAGES HELD" are each side's resources at time T of its traffic; the
last line of a side is taken at the end of its traffic.

Prints a table (one row every --every seconds, both sides), writes every
sample to a CSV, and judges each side: after the warm-up, no sample of a
judged series may exceed its value at the end of the warm-up (the last
sample at or before it) by more than the series' margin. Exit status 0 if
every series is flat, 1 if one grew, 2 if there are not enough samples.
"""
import argparse
import csv
import sys

FIELDS = ("rss_kib", "anon_kib", "shmem_kib", "vmas", "ring_vmas",
          "fold_vmas", "fds", "pool_blocks", "messages", "held")
SIDES = ("sender", "receiver")


def read_smaps(path):
    """The mappings of an smaps file: {(start, name): (line, Rss in KiB)}"""
    maps = {}
    cur = None
    with open(path, errors="replace") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) >= 5 and "-" in parts[0] and ":" not in parts[0]:
                name = parts[5].strip() if len(parts) > 5 else "[anon]"
                cur = (parts[0].split("-")[0], name)
                maps[cur] = ["%s %s %s" % (parts[0], parts[1], name), 0]
            elif line.startswith("Rss:") and cur is not None:
                maps[cur][1] = int(line.split()[1])
    return maps


def print_smaps_growth(side, before_path, after_path, top=8):
    """Where a process's RSS moved between two smaps snapshots"""
    try:
        before = read_smaps(before_path)
        after = read_smaps(after_path)
    except OSError:
        return
    moves = []
    for key in set(before) | set(after):
        b = before.get(key, [None, 0])
        a = after.get(key, [None, 0])
        if a[1] != b[1]:
            moves.append((a[1] - b[1], a[0] or b[0] + " (gone)", b[1], a[1]))
    total = sum(m[0] for m in moves)
    print("  %s: RSS %+d KiB in all, %d mappings before, %d after" % (
        side, total, len(before), len(after)))
    for d, what, b, a in sorted(moves, key=lambda m: -abs(m[0]))[:top]:
        print("    %+7d KiB  %6d -> %6d  %s" % (d, b, a, what))


def read_samples(path):
    samples = {side: [] for side in SIDES}
    with open(path, errors="replace") as f:
        for line in f:
            parts = line.split()
            if len(parts) != 3 + len(FIELDS) or parts[0] != "sample" or \
               parts[1] not in samples:
                continue
            try:
                s = {"t": float(parts[2])}
                s.update(zip(FIELDS, (int(v) for v in parts[3:])))
            except ValueError:
                continue
            # the mappings there would be if no page were folded
            s["unfolded_vmas"] = s["vmas"] - max(s["fold_vmas"], 0)
            samples[parts[1]].append(s)
    return samples


def margins(args, base):
    """Each judged series: (name, field, allowed growth over base, why)"""
    rss = max(2048, base["rss_kib"] * 5 // 100)
    return [
        ("RSS", "rss_kib", rss,
         "max(2 MiB, 5%% of the warm-up value) = %d KiB" % rss),
        ("VMAs", "unfolded_vmas", args.ring_slots + 1,
         "RING_SLOTS + 1 = %d (a ring view, remapped under held blocks, "
         "and the pool's view growing)" % (args.ring_slots + 1)),
        ("folded VMAs", "fold_vmas", 4 * args.max_held,
         "4 x max held = %d (each held message's first and last pages "
         "folded, each fold splitting a mapping in three)" %
         (4 * args.max_held)),
        ("fds", "fds", 0, "0"),
        ("pool blocks", "pool_blocks", args.max_held + args.ring_slots,
         "max held + RING_SLOTS = %d (a block kept by each held message, "
         "a grant growing to RING_SLOTS)" % (args.max_held +
                                             args.ring_slots)),
    ]


def fmt(v, unit=""):
    return "-" if v is None or v < 0 else "%d%s" % (v, unit)


def mib(kib):
    return "-" if kib < 0 else "%.1f" % (kib / 1024.0)


def rate(prev, cur):
    dt = cur["t"] - prev["t"]
    return (cur["messages"] - prev["messages"]) / dt if dt > 0 else 0.0


def print_table(samples, every):
    print("%8s  %-52s  %-52s" % ("", "sender", "receiver"))
    head = "%6s %7s %4s %4s %5s %6s %5s %8s"
    cols = ("RSS MiB", "VMAs", "(rr)", "(f)", "fds", "blocks", "held",
            "msg/s")
    print("%8s  %s  %s" % ("t (s)", head % cols, head % cols))
    rows = {}
    for side in SIDES:
        prev = None
        series = samples[side]
        for k, s in enumerate(series):
            last = k == len(series) - 1
            # the first sample of each period of `every` seconds
            slot = int(s["t"] // every)
            if k > 0 and not last and \
               int(series[k - 1]["t"] // every) == slot:
                continue
            r = rate(prev, s) if prev is not None else 0.0
            prev = s
            key = "end" if last else slot
            rows.setdefault(key, {})[side] = (s, r)
    keys = sorted((k for k in rows if k != "end")) + ["end"]
    for key in keys:
        if key not in rows:
            continue
        cells = []
        t = None
        for side in SIDES:
            if side not in rows[key]:
                cells.append(" " * 52)
                continue
            s, r = rows[key][side]
            t = s["t"] if t is None else t
            cells.append("%7s %7d %4s %4s %5s %6s %5s %8.0f" % (
                mib(s["rss_kib"]), s["vmas"], "(%d)" % s["ring_vmas"],
                "(%d)" % s["fold_vmas"], fmt(s["fds"]), fmt(s["pool_blocks"]), fmt(s["held"]), r))
        label = "end" if key == "end" else "%.0f" % (key * every)
        print("%8s  %s  %s" % (label, cells[0], cells[1]))
    print("(rr): of the VMAs, mappings of the transport's memfds; (f): of "
          "them, those folded pages added; msg/s: since the row before; "
          "RSS anon and shmem parts in the CSV")


def write_csv(path, wire, samples):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("wire", "side", "t_s") + FIELDS + ("msgs_per_s",))
        for side in SIDES:
            prev = None
            for s in samples[side]:
                r = rate(prev, s) if prev is not None else 0.0
                prev = s
                w.writerow([wire, side, "%.3f" % s["t"]] +
                           [s[k] for k in FIELDS] + ["%.0f" % r])


def judge(args, samples):
    grew = []
    print("warm-up: the first %.0f s; after it, each series' maximum against"
          " its value at the end of the warm-up:" % args.warmup)
    print("  %-8s %-11s %10s %10s %10s %10s  %s" % (
        "side", "series", "warm-up", "max after", "end", "margin", ""))
    for side in SIDES:
        series = samples[side]
        before = [s for s in series if s["t"] <= args.warmup]
        after = [s for s in series if s["t"] > args.warmup]
        if not before or len(after) < 2:
            print("soak_report: %s: %d samples in the warm-up, %d after it:"
                  " too few to judge" % (side, len(before), len(after)))
            return 2
        base = before[-1]
        end = series[-1]
        for name, key, margin, why in margins(args, base):
            if base[key] < 0:
                print("  %-8s %-11s not measured" % (side, name))
                continue
            top = max(s[key] for s in after)
            at = next(s["t"] for s in after if s[key] == top)
            ok = top <= base[key] + margin
            print("  %-8s %-11s %10d %10d %10d %10d  %s" % (
                side, name, base[key], top, end[key], margin,
                "flat" if ok else "GREW"))
            if not ok:
                grew.append("%s %s: %d at the end of the warm-up, %d at "
                            "%.0f s (+%d, margin %s)" % (
                                side, name, base[key], top, at,
                                top - base[key], why))
        held = max(s["held"] for s in series)
        if held >= 0:
            print("  %-8s %-11s at most %d at a sample (limit %d)" % (
                side, "held", held, args.max_held))
    print("margins: RSS (KiB) max(2 MiB, 5%%), VMAs (less those folding "
          "added) RING_SLOTS + 1 = %d, folded VMAs 4 x max held = %d, fds "
          "0, pool blocks max held + RING_SLOTS = %d" % (
              args.ring_slots + 1, 4 * args.max_held,
              args.max_held + args.ring_slots))
    if grew:
        for g in grew:
            print("NOT FLAT: " + g)
        return 1
    print("FLAT: every series of both sides within its margin after the "
          "warm-up")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log", help="ucp_hold -S output")
    p.add_argument("--csv", required=True, help="CSV to write")
    p.add_argument("--wire", default="shm")
    p.add_argument("--warmup", type=float, required=True,
                   help="seconds of warm-up")
    p.add_argument("--every", type=float, default=10,
                   help="seconds between table rows")
    p.add_argument("--max-held", type=int, required=True,
                   help="ucp_hold -H")
    p.add_argument("--ring-slots", type=int, default=16,
                   help="UCX_REMAPRING_RING_SLOTS")
    p.add_argument("--smaps", metavar="PREFIX",
                   help="PREFIX-SIDE-warmup and PREFIX-SIDE-end: smaps of "
                        "each side at the end of the warm-up and near the "
                        "end; prints where RSS moved between them")
    args = p.parse_args()

    samples = read_samples(args.log)
    write_csv(args.csv, args.wire, samples)
    if not all(samples[side] for side in SIDES):
        print("soak_report: no samples from %s" % " and ".join(
            side for side in SIDES if not samples[side]))
        return 2
    print_table(samples, max(args.every, 1e-3))
    print()
    rc = judge(args, samples)
    if args.smaps:
        print("where RSS moved from the end of the warm-up to the end "
              "(/proc/PID/smaps, Rss of each mapping by start address):")
        for side in SIDES:
            print_smaps_growth(side, "%s-%s-warmup" % (args.smaps, side),
                               "%s-%s-end" % (args.smaps, side))
    return rc


if __name__ == "__main__":
    sys.exit(main())
