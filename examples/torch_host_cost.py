"""Host time of one operator call from Python, against torch.mm on the same
tensors.

    python3 examples/torch_host_cost.py [--calls 200] [--rounds 30]

The GPU is kept busy behind a long sleep kernel (torch.cuda._sleep) while
each round times --calls calls one by one with perf_counter_ns, so what is
timed is the host's work (argument checks, allocation, the launch), not the
kernels. Median over all timed calls; the calls of the first round are not
counted (first-call compiles and caches).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable, Dict, List

import torch

import tokitai_jit.torch as tt


def host_us(fn: Callable[[], object], calls: int, rounds: int) -> float:
    samples: List[int] = []
    for r in range(rounds + 1):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time: the queue never drains
        for _ in range(calls):
            t0 = time.perf_counter_ns()
            fn()
            t1 = time.perf_counter_ns()
            if r:
                samples.append(t1 - t0)
        torch.cuda.synchronize()
    return statistics.median(samples) / 1e3


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--shape", default="2048,1024,1024", help="M,N,K")
    args = ap.parse_args(argv)
    M, N, K = (int(x) for x in args.shape.split(","))
    a = torch.randn(M, K, device="cuda").half()
    b = torch.randn(K, N, device="cuda").half()
    x = torch.randn(M, N, device="cuda").half()
    ctx = tt.context_for("cuda")
    cases: Dict[str, Callable[[], object]] = {
        "torch.mm(a, b)": lambda: torch.mm(a, b),
        "tt.gemm(a, b) [C extension]": lambda: tt.gemm(a, b),
        "tt.gemm(a, b) [ctypes]": lambda: tt.gemm(a, b),
        "torch.ops.tokitai.gemm_f16_fwd(a, b)": lambda: torch.ops.tokitai.gemm_f16_fwd(a, b),
        "Context.gemm_f16_fwd(a, b)": lambda: ctx.gemm_f16_fwd(a, b),
        "torch.softmax(x, -1)": lambda: torch.softmax(x, -1),
        "tt.softmax(x)": lambda: tt.softmax(x),
    }
    # The library call alone (no checks, no allocation): what is left of
    # the host time is the library's own.
    if tt._fast is not None:
        c32 = torch.empty(M, N, device="cuda")
        y = torch.empty_like(x)
        ptr, st = ctx._handle(), tt._raw_stream(0)
        gk, ga = tt._KIND["gemm_f16_fwd"], tt._ADDR["gemm_f16_fwd"]
        sk, sa = tt._KIND["softmax_f16_fwd"], tt._ADDR["softmax_f16_fwd"]
        cases["library call only: tk_gemm_f16_fwd"] = lambda: tt._fast.call(
            gk, ga, ptr, M, N, K, a.data_ptr(), K, b.data_ptr(), N, c32.data_ptr(), N, st)
        cases["library call only: tk_softmax_f16_fwd"] = lambda: tt._fast.call(
            sk, sa, ptr, M, N, x.data_ptr(), N, y.data_ptr(), N, st)
        # Where tt.gemm's time goes: the output's allocation, the argument
        # checks around the call, the autograd and compile checks around those.
        f32, dev = torch.float32, a.device
        cases["part: torch.empty((M, N), float32, device) alone"] = lambda: torch.empty(
            (M, N), dtype=f32, device=dev)
        cases["part: a.new_empty((M, N), float32) alone"] = lambda: a.new_empty((M, N), dtype=f32)
        cases["part: library call + a new output each call"] = lambda: tt._fast.call(
            gk, ga, ptr, M, N, K, a.data_ptr(), K, b.data_ptr(), N, a.new_empty((M, N), dtype=f32).data_ptr(),
            N, st)
        cases["part: tt._gemm_fwd_impl(a, b) (no autograd or compile checks)"] = lambda: tt._gemm_fwd_impl(a, b)
    print("device: %s, torch %s, C extension: %s, shape M,N,K = %d,%d,%d"
          % (torch.cuda.get_device_name(), torch.__version__, tt._fast is not None, M, N, K))
    print("| call | host us per call (median) |")
    print("|---|---|")
    for name, fn in cases.items():
        if "[C extension]" in name and tt._fast is None:
            continue
        tt.set_fast_path("[ctypes]" not in name)
        fn()
        torch.cuda.synchronize()
        print("| %s | %.2f |" % (name, host_us(fn, args.calls, args.rounds)), flush=True)
    tt.set_fast_path(True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
