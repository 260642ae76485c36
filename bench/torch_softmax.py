#!/usr/bin/env python3
"""PyTorch's softmax forward and backward at bench/softmax's shapes.

Run beside bench/softmax on the GPU machine; same conventions: fp16 rows of
cols 64 .. 256000, rows = 2**27 // cols (256 MiB per tensor), each figure
the median over samples of a batch of back-to-back launches between two
CUDA events, after a warm-up. Bytes counted as the fewest a kernel must
move (reads + writes):
  forward   torch.softmax(x, -1)                          2 * rows * cols * 2
  backward  torch._softmax_backward_data(g, s, -1, fp16)  3 * rows * cols * 2
Against a device-to-device copy of the same traffic (dst.copy_(src) of half
the bytes), measured in the same run. One sample of rows is checked against
an fp64 reference computed on the GPU.

  torch_softmax.py [--cols N,N,...]
"""
import argparse
import statistics
import sys

import torch

ELEMS = 1 << 27
WARM, ITERS, BATCH = 3, 25, 10
COLS = [64, 1024, 4096, 32000, 50304, 128256, 256000]


def median_ms(fn):
    for _ in range(WARM):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(ITERS):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(BATCH):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / BATCH)
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
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 77
    dev = torch.device("cuda")
    print(f"device {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"{ELEMS} halves per tensor\n")
    gen = torch.Generator(device=dev).manual_seed(1)
    x_all = ((torch.rand(ELEMS, device=dev, generator=gen) * 16 - 8)).half()
    g_all = ((torch.rand(ELEMS, device=dev, generator=gen) * 2 - 1)).half()
    csrc = torch.full((ELEMS * 3 // 2,), 1.0, dtype=torch.half, device=dev)
    cdst = torch.empty_like(csrc)

    rows_out = []
    ok_all = True
    for cols in [int(c) for c in args.cols.split(",")]:
        rows = ELEMS // cols
        x = x_all[: rows * cols].view(rows, cols)
        g = g_all[: rows * cols].view(rows, cols)
        sample = torch.cat([torch.randint(0, rows, (8,), device=dev, generator=gen),
                            torch.tensor([rows - 1], device=dev)])

        traffic = 2.0 * rows * cols * 2
        copy = copy_gbs(csrc, cdst, traffic)
        y = torch.softmax(x, dim=-1)
        ok = check(y[sample], torch.softmax(x[sample].double(), dim=-1))
        ms = median_ms(lambda: torch.softmax(x, dim=-1))
        rows_out.append(("torch.softmax fwd", rows, cols, traffic / ms / 1e6, copy, ok))
        ok_all &= ok

        s = y
        traffic = 3.0 * rows * cols * 2
        copy = copy_gbs(csrc, cdst, traffic)
        gi = torch._softmax_backward_data(g, s, -1, torch.float16)
        sd, gd = s[sample].double(), g[sample].double()
        want = sd * (gd - (gd * sd).sum(-1, keepdim=True))
        ok = check(gi[sample], want)
        ms = median_ms(lambda: torch._softmax_backward_data(g, s, -1, torch.float16))
        rows_out.append(("torch softmax bwd", rows, cols, traffic / ms / 1e6, copy, ok))
        ok_all &= ok
        del y, s, gi
        print(f"  ({cols} done)", file=sys.stderr, flush=True)

    print("| op | rows x cols | GB/s | copy GB/s | x copy | check |")
    print("|----|-------------|------|-----------|--------|-------|")
    for op, rows, cols, gbs, copy, ok in rows_out:
        print(f"| {op} | {rows}x{cols} | {gbs:.1f} | {copy:.1f} | {gbs / copy:.2f} | "
              f"{'pass' if ok else 'FAIL'} |")
    print("\nall checks passed" if ok_all else "\nSOME CHECKS FAILED")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
