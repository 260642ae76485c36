"""A small mixture-of-experts language model trained with the tokitai ops
and, from the same seed, with plain PyTorch ops: loss curves and step times.

    python3 examples/moe_train.py [--steps 200] [--modes eager,default,reduce-overhead]

Model (fp32 master weights, rounded to fp16 on each step; Adam):
    embedding [V, D] -> top-2 of E experts, random routing (each expert gets
    2T/E tokens a step, drawn from the seed) -> expert MLP (Linear D->H,
    ReLU, Linear H->D; the two outputs of a token are averaged) + residual ->
    vocabulary projection [D, V] -> softmax -> cross-entropy.
Data: synthetic; each token's target is a fixed random permutation of it,
so the loss falls from ln(V) towards 0.

The tokitai run uses tokitai_jit.torch (embedding, gemm, softmax with their
backward ops); the PyTorch run uses F.embedding, torch.mm (fp16) and
torch.softmax (fp16) on the same tensors. Both start from the same weights
and see the same tokens and routing. Modes: "eager", and torch.compile with
fullgraph=True ("default", "reduce-overhead": CUDA graphs).

Prints a table (loss at a few steps, the largest per-step gap between the
two curves, median step time) and, with --json, writes the curves.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from typing import Any, Dict, List

import torch
import torch.nn.functional as F

import tokitai_jit.torch as tt

V, D, H, E, T = 1024, 256, 512, 8, 4096
LOSS_SCALE = 256.0


class Ops:
    """The three operations the model needs, from one implementation."""

    def __init__(self, impl: str) -> None:
        self.impl = impl

    def embedding(self, w16: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if self.impl == "tokitai":
            return tt.embedding(w16, x.to(torch.int32))
        return F.embedding(x, w16)

    def mm(self, a16: torch.Tensor, b16: torch.Tensor) -> torch.Tensor:  # fp32 out
        if self.impl == "tokitai":
            return tt.gemm(a16, b16)
        return torch.mm(a16, b16).float()

    def softmax(self, x16: torch.Tensor) -> torch.Tensor:
        if self.impl == "tokitai":
            return tt.softmax(x16)
        return torch.softmax(x16, dim=-1)


def init_params(seed: int, device: str) -> Dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int, scale: float) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * scale).to(device).requires_grad_()

    return {
        "emb": rnd(V, D, scale=1.0),
        "w1": rnd(E, D, H, scale=1.0 / math.sqrt(D)),
        "w2": rnd(E, H, D, scale=1.0 / math.sqrt(H)),
        "wv": rnd(D, V, scale=1.0 / math.sqrt(D)),
    }


def make_data(seed: int, steps: int, device: str) -> List[Any]:
    g = torch.Generator().manual_seed(seed + 1)
    perm = torch.randperm(V, generator=g)
    out = []
    for _ in range(steps):
        x = torch.randint(0, V, (T,), generator=g)
        slots = torch.randperm(2 * T, generator=g) % T  # two experts a token
        route = slots.view(E, 2 * T // E)  # tokens of each expert
        out.append((x.to(device), perm[x].to(device), route.to(device)))
    return out


def loss_fn(ops: Ops, p: Dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
            route: torch.Tensor) -> torch.Tensor:
    h = ops.embedding(p["emb"].half(), x)  # [T, D] fp16
    w1, w2 = p["w1"].half(), p["w2"].half()
    mix = torch.zeros(T, D, device=x.device, dtype=torch.float32)
    for e in range(E):
        tok = route[e]
        u = torch.relu(ops.mm(h.index_select(0, tok), w1[e])).half()
        mix = mix.index_add(0, tok, ops.mm(u, w2[e]), alpha=0.5)
    z = (h.float() + mix).half()
    s = ops.softmax(ops.mm(z, p["wv"].half()).half())  # [T, V] fp16
    # clamped so that the gradient -1/p stays inside fp16's range
    picked = s.gather(1, y.view(-1, 1)).float().clamp_min(1e-4)
    return -picked.log().mean()


def train(impl: str, mode: str, steps: int, seed: int, device: str) -> Dict[str, Any]:
    ops = Ops(impl)
    params = init_params(seed, device)
    data = make_data(seed, steps, device)
    opt = torch.optim.Adam(params.values(), lr=3e-3)
    f = lambda x, y, r: loss_fn(ops, params, x, y, r)  # noqa: E731
    if mode != "eager":
        torch._dynamo.reset()
        f = torch.compile(f, fullgraph=True, mode=mode)
    losses, times = [], []
    for i, (x, y, r) in enumerate(data):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = f(x, y, r)
        # Scaled so that the fp16 gradients stay clear of the subnormals
        # (Adam does not see the scale).
        (loss * LOSS_SCALE).backward()
        opt.step()
        losses.append(float(loss.item()))  # synchronizes
        times.append(time.perf_counter() - t0)
    return {"impl": impl, "mode": mode, "losses": losses,
            "step_ms": statistics.median(times[10:] if len(times) > 20 else times) * 1e3,
            "first_step_s": times[0]}


def compare(a: List[float], b: List[float]) -> Dict[str, float]:
    gaps = [abs(p - q) / max(abs(q), 1e-3) for p, q in zip(a, b)]
    tail = min(20, len(a))
    return {"max_rel_gap": max(gaps), "first_gap": abs(a[0] - b[0]),
            "tail_mean_a": statistics.mean(a[-tail:]), "tail_mean_b": statistics.mean(b[-tail:])}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--modes", default="eager,default,reduce-overhead")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA device")
        return 2
    results = []
    for mode in args.modes.split(","):
        for impl in ("tokitai", "torch"):
            r = train(impl, mode, args.steps, args.seed, "cuda")
            results.append(r)
            print("%-8s %-16s loss %.4f -> %.4f  step %.3f ms (first step %.1f s)" % (
                impl, mode, r["losses"][0], r["losses"][-1], r["step_ms"], r["first_step_s"]), flush=True)
    print()
    print("| mode | loss step 0 | step 50 | step 100 | last (tokitai / torch) | max rel. gap | "
          "step ms tokitai | step ms torch |")
    print("|---|---|---|---|---|---|---|---|")
    for i in range(0, len(results), 2):
        a, b = results[i], results[i + 1]
        c = compare(a["losses"], b["losses"])
        la, lb = a["losses"], b["losses"]
        at = lambda k: "%.3f / %.3f" % (la[min(k, len(la) - 1)], lb[min(k, len(lb) - 1)])  # noqa: E731
        print("| %s | %s | %s | %s | %s | %.4f | %.3f | %.3f |" % (
            a["mode"], at(0), at(50), at(100), at(len(la) - 1), c["max_rel_gap"], a["step_ms"], b["step_ms"]))
        a["compare"] = c
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
