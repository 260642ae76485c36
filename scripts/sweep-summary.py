#!/usr/bin/env python3
"""Markdown summary of bench/sweep CSV files (standard library only).

    scripts/sweep-summary.py TUNED.csv [HEURISTICS.csv]

Per op: shapes, geometric mean of cuBLAS time / tokitai time, worst ratio
and shape, shapes under 0.85; the same over the rows where neither side was
host-bound; then the ten worst shapes. With a second file (the same sweep
with TOKITAI_JIT_TUNE=off), both columns side by side.
"""
import csv
import math
import sys


def load(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def summary(rows):
    out = {}
    for op in ("fwd", "grad_a", "grad_b", "all"):
        sel = [r for r in rows if op == "all" or r["op"].endswith(op)]
        if not sel:
            continue
        ratios = [float(r["ratio"]) for r in sel]
        dev = [float(r["ratio"]) for r in sel if r.get("host_bound", "0") in ("0", "")]
        worst = min(sel, key=lambda r: float(r["ratio"]))
        out[op] = {
            "n": len(sel),
            "geo": math.exp(sum(math.log(x) for x in ratios) / len(ratios)),
            "worst": float(worst["ratio"]),
            "worst_shape": "%s %sx%sx%s" % (worst["op"].replace("gemm_f16_", ""), worst["M"],
                                              worst["N"], worst["K"]),
            "below": sum(1 for x in ratios if x < 0.85),
            "dev_n": len(dev),
            "dev_geo": math.exp(sum(math.log(x) for x in dev) / len(dev)) if dev else float("nan"),
        }
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    files = sys.argv[1:3]
    sums = [summary(load(p)) for p in files]
    names = ["records", "heuristics"] if len(files) == 2 else ["run"]
    print("| op | " + " | ".join("%s: n, geomean, worst (shape), < 0.85, geomean device-bound (n)" % n
                               for n in names) + " |")
    print("| --- |" + " --- |" * len(files))
    for op in ("fwd", "grad_a", "grad_b", "all"):
        cells = []
        for s in sums:
            v = s.get(op)
            if v is None:
                cells.append("-")
                continue
            cells.append("%d, %.3f, %.2f (%s), %d, %.3f (%d)" % (
                v["n"], v["geo"], v["worst"], v["worst_shape"], v["below"], v["dev_geo"],
                v["dev_n"]))
        print("| %s | %s |" % (op, " | ".join(cells)))
    rows = load(files[-1])
    rows.sort(key=lambda r: float(r["ratio"]))
    print("\nTen worst shapes (%s):\n" % names[-1])
    print("| op | M x N x K | source | tokitai us | cuBLAS us | ratio | host-bound |")
    print("| --- | --- | --- | ---: | ---: | ---: | --- |")
    for r in rows[:10]:
        print("| %s | %sx%sx%s | %s | %.1f | %.1f | %.2f | %s |" % (
            r["op"].replace("gemm_f16_", ""), r["M"], r["N"], r["K"], r["source"],
            float(r["tk_ms"]) * 1e3, float(r["cublas_ms"]) * 1e3, float(r["ratio"]),
            {"0": "no", "1": "tokitai", "2": "cuBLAS", "3": "both"}.get(r.get("host_bound", "0"),
                                                                    r.get("host_bound"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
