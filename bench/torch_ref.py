#!/usr/bin/env python3
"""PyTorch timings of the memory-bound operators at bench/ops's shapes.

Run beside bench/ops on the GPU machine. Same conventions: fp16 tensors,
median of many CUDA-event-timed runs after a warm-up, bytes counted as the
fewest a kernel must move (reads + writes):
  softmax fwd     2 * rows * cols * 2
  softmax bwd     3 * rows * cols * 2   (s, g read; grad written)
  embedding fwd   2 * Q * D * 2 + Q * 4
  embedding bwd   3 * Q * D * 2 + Q * 4 (lower bound; PyTorch's dense
                  backward also writes the whole V x D table)
Also measures the device-to-device copy bandwidth (torch copy_) as bench/ops
does with its own copy kernel.
"""
import statistics
import sys

import torch


def median_ms(fn, warm=3, iters=50):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def row(op, shape, ms, gbs, copy):
    print(f"| {op:<20} | {shape:<20} | {ms:9.4f} | {gbs:8.1f} GB/s | {gbs / copy:5.2f} x copy |")


def main():
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 77
    dev = torch.device("cuda")
    print(f"device {torch.cuda.get_device_name(0)}, torch {torch.__version__}\n")
    print("| op                   | shape                |        ms | rate          | vs copy      |")
    print("|----------------------|----------------------|-----------|---------------|--------------|")

    n = 1 << 29  # 1 GiB of bytes
    src = torch.empty(n, dtype=torch.uint16, device=dev).fill_(0x3C00)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    copy = 2 * n * 2 / ms / 1e6
    print(f"| {'d2d copy':<20} | {'1 GiB':<20} | {ms:9.4f} | {copy:8.1f} GB/s | {1.0:5.2f} x copy |")
    del src, dst

    for rows, cols in [(4096, 32000), (16384, 4096), (65536, 1024)]:
        x = (torch.rand(rows, cols, device=dev) * 16 - 8).half()
        g = (torch.rand(rows, cols, device=dev) * 2 - 1).half()
        shape = f"{rows}x{cols}"
        ms = median_ms(lambda: torch.softmax(x, dim=-1))
        row("softmax_fwd", shape, ms, 2 * rows * cols * 2 / ms / 1e6, copy)
        s = torch.softmax(x, dim=-1)
        # softmax backward: grad_in = s * (g - sum(g * s)), PyTorch's kernel
        ms = median_ms(lambda: torch._softmax_backward_data(g, s, -1, torch.float16))
        row("softmax_bwd", shape, ms, 3 * rows * cols * 2 / ms / 1e6, copy)
        del x, g, s

    V, D, Q = 50304, 1024, 16384
    weight = (torch.rand(V, D, device=dev) * 2 - 1).half().requires_grad_(True)
    idx = torch.randint(0, V, (Q,), device=dev)
    shape = f"{V}x{D} q{Q}"
    ms = median_ms(lambda: torch.nn.functional.embedding(idx, weight))
    row("embedding_fwd", shape, ms, (2 * Q * D * 2 + Q * 4) / ms / 1e6, copy)
    grad_out = (torch.rand(Q, D, device=dev) * 2 - 1).half()
    ms = median_ms(
        lambda: torch.ops.aten.embedding_dense_backward(grad_out, idx, V, -1, False))
    row("embedding_bwd dense", shape, ms, (3 * Q * D * 2 + Q * 4) / ms / 1e6, copy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
