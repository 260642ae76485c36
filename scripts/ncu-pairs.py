#!/usr/bin/env python3
"""Pairs the kernels of `bench/sweep --check-only` run under ncu with the
sweep's shapes: per shape, the tokitai kernels (name tk_*), then cuBLAS's,
with grid, block and device time (gpu__time_duration). The fill kernel
(tk_sweep_fill) separates shapes: each shape fills its two inputs, then calls
tokitai, then cuBLAS.

usage: ncu-pairs.py CHECK_MD NCU_CSV   (writes a markdown table to stdout)
"""
import csv
import re
import sys


def shapes_of(check_md):
    """(op, M, N, K, source) in the order the sweep ran them."""
    out, op = [], None
    for line in open(check_md):
        m = re.match(r"## (gemm_f16_\w+)", line)
        if m:
            op = m.group(1)
            continue
        m = re.match(r"\|\s*(\d+) x\s*(\d+) x\s*(\d+) \| (\S+)\s*\| checked", line)
        if m and op:
            out.append((op, int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)))
    return out


def kernels_of(ncu_csv):
    """[(name, grid, block, ns)] in launch order."""
    rows = {}
    with open(ncu_csv) as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        ns = v * {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6,
                  "msecond": 1e6}.get(unit, 1)
        rows[int(r["ID"])] = (r["Kernel Name"], r.get("Grid Size", ""), r.get("Block Size", ""), ns)
    return [rows[i] for i in sorted(rows)]


def main():
    shapes = shapes_of(sys.argv[1])
    ks = kernels_of(sys.argv[2])
    groups, cur = [], None
    for k in ks:
        if k[0].startswith("tk_sweep_fill"):
            if cur is None or cur["kernels"]:
                cur = {"kernels": []}
                groups.append(cur)
            continue
        if cur is not None:
            cur["kernels"].append(k)
    if len(groups) != len(shapes):
        print(f"warning: {len(groups)} kernel groups for {len(shapes)} shapes", file=sys.stderr)
    print("| op | M x N x K | source | tk us | cuB us | ratio | tk kernels | cuBLAS kernels |")
    print("|---|---|---|---:|---:|---:|---|---|")
    for s, g in zip(shapes, groups):
        tk = [k for k in g["kernels"] if k[0].startswith("tk_")]
        cb = [k for k in g["kernels"] if not k[0].startswith("tk_")]
        t_tk = sum(k[3] for k in tk) / 1e3
        t_cb = sum(k[3] for k in cb) / 1e3
        name = lambda k: f"{k[0][:90]} g{k[1]} b{k[2]} {k[3] / 1e3:.1f}"
        print(f"| {s[0][9:]} | {s[1]}x{s[2]}x{s[3]} | {s[4]} | {t_tk:.1f} | {t_cb:.1f} | "
              f"{t_cb / t_tk if t_tk else float('nan'):.3f} | {'; '.join(map(name, tk))} | "
              f"{'; '.join(map(name, cb))} |")


if __name__ == "__main__":
    main()
