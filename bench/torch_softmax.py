#!/usr/bin/env python3
"""PyTorch's softmax forward and backward at bench/softmax's shapes.

Run beside bench/softmax on the GPU machine; same conventions: fp16 rows of
cols 64 .. 262144, rows = 2**27 // cols (256 MiB per tensor), each figure
the median over samples of device time: a batch of back-to-back launches
enqueued behind torch.cuda._sleep (long enough to outlast the enqueue) and
timed between two CUDA events, so the host's cost is left out; the host's
enqueue time per call is its own column (median over the same samples).
--odd/--seed add the same seeded odd widths as bench/softmax; --offset H
starts every tensor H halves into its storage. Bytes counted as the fewest
a kernel must move (reads + writes):
  forward   torch.softmax(x, -1)                          2 * rows * cols * 2
  backward  torch._softmax_backward_data(g, s, -1, fp16)  3 * rows * cols * 2
Against a device-to-device copy of the same traffic (dst.copy_(src) of half
the bytes), measured in the same run. One sample of rows is checked against
an fp64 reference computed on the GPU.

  torch_softmax.py [--cols N,N,...] [--odd N] [--seed S] [--offset H]
"""
import argparse
import math
import statistics
import sys
import time

import torch

ELEMS = 1 << 27
WARM, ITERS, BATCH = 3, 25, 10
COLS = [64, 1024, 4096, 32000, 50257, 50304, 100003, 128256, 151936, 256000, 262144]
CYCLES_PER_MS = None
SLEEP = {"ms": 2.0, "overran": 0, "samples": 0}


def odd_widths(n, seed):
    """bench/softmax's seeded odd widths (splitmix64, log-uniform 1024..262144)."""
    out, z, m = [], seed, (1 << 64) - 1
    for _ in range(n):
        z = (z + 0x9E3779B97F4A7C15) & m
        r = z
        r = ((r ^ (r >> 30)) * 0xBF58476D1CE4E5B9) & m
        r = ((r ^ (r >> 27)) * 0x94D049BB133111EB) & m
        r ^= r >> 31
        u = (r >> 11) / 9007199254740992.0
        out.append(int(1024.0 * math.pow(256.0, u)) | 1)
    return out


def cycles_per_ms():
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000000)
    a.record()
    torch.cuda._sleep(20000000)
    b.record()
    b.synchronize()
    return 20000000 / a.elapsed_time(b)


def median_ms(fn, host=None):
    """Median device ms per call; host (a list) receives the median host us per call."""
    for _ in range(WARM):
        fn()
    torch.cuda.synchronize()
    times, hosts = [], []
    for _ in range(ITERS):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        sleep = SLEEP["ms"]
        torch.cuda._sleep(int(sleep * CYCLES_PER_MS))
        t0 = time.perf_counter()
        a.record()
        for _ in range(BATCH):
            fn()
        b.record()
        h = (time.perf_counter() - t0) * 1e3
        b.synchronize()
        SLEEP["samples"] += 1
        SLEEP["overran"] += h >= sleep
        SLEEP["ms"] = min(100.0, 1.5 * h + 0.5)
        times.append(a.elapsed_time(b) / BATCH)
        hosts.append(h * 1e3 / BATCH)
    if host is not None:
        host.append(statistics.median(hosts))
    return statistics.median(times)


def copy_gbs(src, dst, traffic):
    n = int(traffic // 2 // 2)  # halves copied
    s, d = src[:n], dst[:n]
    ms = median_ms(lambda: d.copy_(s))
    return traffic / ms / 1e6


def check(got, want):
    err = (got.double() - want).abs()
    return bool((err <= 1e-3 + 1e-2 * want.abs()).all())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cols", default=",".join(map(str, COLS)))
    ap.add_argument("--odd", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--offset", type=int, default=0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 77
    global CYCLES_PER_MS
    dev = torch.device("cuda")
    CYCLES_PER_MS = cycles_per_ms()
    off = args.offset
    print(f"device {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"{ELEMS} halves per tensor, offset {off} halves")
    print(f"device time: batches of {BATCH} calls behind torch.cuda._sleep (host cost "
          f"excluded), median of {ITERS}; host: enqueue time per call, median\n")
    gen = torch.Generator(device=dev).manual_seed(1)
    x_all = ((torch.rand(ELEMS + off, device=dev, generator=gen) * 16 - 8)).half()
    g_all = ((torch.rand(ELEMS + off, device=dev, generator=gen) * 2 - 1)).half()
    s_all = torch.empty_like(x_all)
    csrc = torch.full((ELEMS * 3 // 2,), 1.0, dtype=torch.half, device=dev)
    cdst = torch.empty_like(csrc)

    rows_out = []
    ok_all = True
    widths = [int(c) for c in args.cols.split(",")] + odd_widths(args.odd, args.seed)
    for cols in widths:
        rows = ELEMS // cols
        x = x_all[off: off + rows * cols].view(rows, cols)
        g = g_all[off: off + rows * cols].view(rows, cols)
        sample = torch.cat([torch.randint(0, rows, (8,), device=dev, generator=gen),
                            torch.tensor([rows - 1], device=dev)])

        traffic = 2.0 * rows * cols * 2
        copy = copy_gbs(csrc, cdst, traffic)
        y = s_all[off: off + rows * cols].view(rows, cols)
        y.copy_(torch.softmax(x, dim=-1))
        ok = check(y[sample], torch.softmax(x[sample].double(), dim=-1))
        host = []
        ms = median_ms(lambda: torch.softmax(x, dim=-1), host)
        rows_out.append(("torch.softmax fwd", rows, cols, ms, traffic / ms / 1e6, copy, host[0],
                         ok))
        ok_all &= ok

        s = y
        traffic = 3.0 * rows * cols * 2
        copy = copy_gbs(csrc, cdst, traffic)
        gi = torch._softmax_backward_data(g, s, -1, torch.float16)
        sd, gd = s[sample].double(), g[sample].double()
        want = sd * (gd - (gd * sd).sum(-1, keepdim=True))
        ok = check(gi[sample], want)
        host = []
        ms = median_ms(lambda: torch._softmax_backward_data(g, s, -1, torch.float16), host)
        rows_out.append(("torch softmax bwd", rows, cols, ms, traffic / ms / 1e6, copy, host[0],
                         ok))
        ok_all &= ok
        del y, s, gi
        print(f"  ({cols} done)", file=sys.stderr, flush=True)

    print("| op | rows x cols | device us | GB/s | copy GB/s | x copy | host us/call | check |")
    print("|----|-------------|-----------|------|-----------|--------|--------------|-------|")
    for op, rows, cols, ms, gbs, copy, host, ok in rows_out:
        print(f"| {op} | {rows}x{cols} | {ms * 1e3:.1f} | {gbs:.1f} | {copy:.1f} | "
              f"{gbs / copy:.3f} | {host:.2f} | {'pass' if ok else 'FAIL'} |")
    print(f"\nsamples whose enqueue outlasted the sleep before them: {SLEEP['overran']} of "
          f"{SLEEP['samples']}")
    print("\nall checks passed" if ok_all else "\nSOME CHECKS FAILED")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
