"""Host time of one operator call from Python, against torch.mm on the same
tensors.

    python3 examples/torch_host_cost.py [--calls 200] [--rounds 30]

The GPU is kept busy behind a long sleep kernel (torch.cuda._sleep) while
each round times --calls calls of every case one by one with
perf_counter_ns, so what is timed is the host's work (argument checks,
allocation, the launch), not the kernels. The cases take turns within each
round, so that a machine whose speed drifts during the run (other jobs,
clocks) moves every column alike. Median over all timed calls of a case;
the first round is not counted (first-call compiles and caches). Also
prints each case over torch.mm's median.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable, Dict, List

import torch

import tokitai_jit.torch as tt


def host_us(cases: Dict[str, Callable[[], object]], fast: Dict[str, bool], calls: int,
            rounds: int) -> Dict[str, float]:
    """Median host microseconds per call of each case, the cases taking
    turns within each round."""
    samples: Dict[str, List[int]] = {name: [] for name in cases}
    for r in range(rounds + 1):
        for name, fn in cases.items():
            tt.set_fast_path(fast[name])
            torch.cuda._sleep(100_000_000)  # ~0.05 s of GPU time: the queue never drains
            out = samples[name]
            for _ in range(calls):
                t0 = time.perf_counter_ns()
                fn()
                t1 = time.perf_counter_ns()
                if r:
                    out.append(t1 - t0)
            torch.cuda.synchronize()
    tt.set_fast_path(True)
    return {name: statistics.median(v) / 1e3 for name, v in samples.items()}


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
    if tt._fast is None:
        cases.pop("tt.gemm(a, b) [C extension]")
    fast = {name: "[ctypes]" not in name for name in cases}
    for name, fn in cases.items():  # first calls: compiles, caches
        tt.set_fast_path(fast[name])
        fn()
    torch.cuda.synchronize()
    us = host_us(cases, fast, args.calls, args.rounds)
    print("| call | host us per call (median) | / torch.mm |")
    print("|---|---:|---:|")
    for name in cases:
        print("| %s | %.2f | %.2f |" % (name, us[name], us[name] / us["torch.mm(a, b)"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
