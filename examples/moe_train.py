"""A small mixture-of-experts language model trained with the tokitai ops
and, from the same seed, with plain PyTorch ops: loss curves and step times.

    python3 examples/moe_train.py [--steps 200] [--modes eager,default,reduce-overhead]
                                  [--device cuda|cpu] [--tokens 4096]

Model (fp32 master weights, rounded to fp16 on each call; Adam):
    embedding [V, D] -> router (Linear D->E) -> top-2 of E experts ->
    expert MLP (Linear D->H, ReLU, Linear H->D), the two expert outputs of a
    token weighted by the softmax of its router scores over the two experts
    chosen, + residual -> vocabulary projection (Linear D->V) -> softmax ->
    cross-entropy.
Routing is random: each step draws which two distinct experts serve each
token (every expert gets 2T/E tokens, so shapes stay static for
torch.compile and CUDA graphs); the router learns how to weigh them.
Data: synthetic; each token's target is a fixed random permutation of it,
so the loss falls from ln(V) towards 0.

Every layer is a tokitai_jit.torch module (Embedding, Linear). The tokitai
run calls the modules (the embedding, GEMM and softmax operators with their
backward operators); the PyTorch run uses the same modules' weights with
F.embedding, torch.mm (fp16) and torch.softmax (fp16). Both start from the
same weights and see the same tokens and routing. Modes: "eager", and
torch.compile with fullgraph=True ("default", "reduce-overhead": CUDA graphs).
On --device cpu the tokitai run uses the library's CPU references and the
PyTorch run fp32 arithmetic on fp16 values (a check, not a benchmark).

Prints a table (loss at a few steps, the largest per-step gap between the
two curves, median step time) and, with --json, writes the curves. The gap
at a step is |tokitai - torch| / max(torch, 1% of the first loss).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from typing import Any, Dict, List, Tuple

import torch
import torch.nn.functional as F

import tokitai_jit.torch as tt

V, D, H, E = 1024, 256, 512, 8
LOSS_SCALE = 256.0


class MoE(torch.nn.Module):
    """The model's layers as tokitai modules (weights [in, out], fp32
    masters); forward() runs either implementation on them."""

    def __init__(self, seed: int, device: str) -> None:
        super().__init__()
        f32 = torch.float32
        self.emb = tt.Embedding(V, D, dtype=f32, device=device)
        self.router = tt.Linear(D, E, bias=False, dtype=f32, device=device)
        self.up = torch.nn.ModuleList(tt.Linear(D, H, bias=False, dtype=f32, device=device) for _ in range(E))
        self.down = torch.nn.ModuleList(tt.Linear(H, D, bias=False, dtype=f32, device=device) for _ in range(E))
        self.vocab = tt.Linear(D, V, bias=False, dtype=f32, device=device)
        # The same weights on every run, whatever the global RNG did.
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                fan_in = p.shape[0]
                scale = 1.0 if name.startswith("emb") else 1.0 / math.sqrt(fan_in)
                p.copy_(torch.randn(tuple(p.shape), generator=g) * scale)

    def forward(self, impl: str, x: torch.Tensor, y: torch.Tensor, slots: torch.Tensor,
                pick: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of the step. slots [E, 2T/E]: the tokens of
        each expert; pick [T, 2]: each token's two experts."""
        T = x.shape[0]
        if impl == "tokitai":
            h = self.emb(x)  # [T, D] fp16
        else:
            h = F.embedding(x, self.emb.weight.half())
        scores = self.linear(impl, self.router, h)  # [T, E] fp32
        gate = torch.softmax(scores.gather(1, pick), dim=1)  # [T, 2] over the chosen pair
        # each expert's weight per token: the gate of the slot that chose it
        w_tok = torch.zeros(T, E, device=x.device, dtype=torch.float32).scatter(1, pick, gate)
        mix = torch.zeros(T, D, device=x.device, dtype=torch.float32)
        for e in range(E):
            tok = slots[e]
            u = torch.relu(self.linear(impl, self.up[e], h.index_select(0, tok))).half()
            out = self.linear(impl, self.down[e], u) * w_tok.index_select(0, tok)[:, e:e + 1]
            mix = mix.index_add(0, tok, out)
        z = (h.float() + mix).half()
        logits = self.linear(impl, self.vocab, z).half()  # [T, V]
        if impl == "tokitai":
            s = tt.softmax(logits)
        elif logits.is_cuda:
            s = torch.softmax(logits, dim=-1)
        else:
            s = torch.softmax(logits.float(), dim=-1).half()
        # clamped so that the gradient -1/p stays inside fp16's range
        picked = s.gather(1, y.view(-1, 1)).float().clamp_min(1e-4)
        return -picked.log().mean()

    @staticmethod
    def linear(impl: str, layer: tt.Linear, a16: torch.Tensor) -> torch.Tensor:  # fp32 out
        if impl == "tokitai":
            return layer(a16)
        w16 = layer.weight.half()
        if a16.is_cuda:
            return torch.mm(a16, w16).float()
        return a16.float() @ w16.float()  # CPU PyTorch has no fp16 GEMM everywhere


def make_data(seed: int, steps: int, tokens: int, device: str) -> List[Tuple[torch.Tensor, ...]]:
    """Per step: tokens x, targets y, each expert's tokens slots [E, 2T/E],
    each token's two experts pick [T, 2] (distinct, every expert 2T/E)."""
    if tokens % E:
        raise ValueError("--tokens must be a multiple of %d" % E)
    g = torch.Generator().manual_seed(seed + 1)
    perm = torch.randperm(V, generator=g)
    pos = torch.arange(tokens)
    out = []
    for _ in range(steps):
        x = torch.randint(0, V, (tokens,), generator=g)
        order = torch.randperm(tokens, generator=g)  # token at position i
        first = pos % E
        # within each block of E positions the second expert is the first
        # shifted by the same 1..E-1: distinct, and a permutation per block
        shift = 1 + torch.randint(0, E - 1, (tokens // E,), generator=g).repeat_interleave(E)
        second = (first + shift) % E
        pick = torch.empty(tokens, 2, dtype=torch.int64)
        pick[order, 0], pick[order, 1] = first, second
        slots = torch.stack([torch.cat([order[first == e], order[second == e]]) for e in range(E)])
        out.append(tuple(t.to(device) for t in (x, perm[x], slots, pick)))
    return out


def train(impl: str, mode: str, steps: int, seed: int, device: str, tokens: int = 4096) -> Dict[str, Any]:
    model = MoE(seed, device)
    data = make_data(seed, steps, tokens, device)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    f = lambda *batch: model(impl, *batch)  # noqa: E731
    if mode != "eager":
        torch._dynamo.reset()
        f = torch.compile(f, fullgraph=True, mode=mode)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    losses, times = [], []
    for batch in data:
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = f(*batch)
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
    """The curves' largest gap: |a - b| per step relative to b, where b is
    at least 1% of the first loss. Below that the loss is rounding noise
    (fp16 products, two summation orders) and the gap is measured against
    1% of the first loss instead, so a learned task does not read as a 20%
    gap between 0.004 and 0.005."""
    floor = 0.01 * abs(b[0])
    gaps = [abs(p - q) / max(abs(q), floor) for p, q in zip(a, b)]
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    tail = min(20, len(a))
    return {"max_rel_gap": gaps[worst], "max_gap_step": worst, "at_step": (a[worst], b[worst]),
            "first_gap": abs(a[0] - b[0]),
            "tail_mean_a": statistics.mean(a[-tail:]), "tail_mean_b": statistics.mean(b[-tail:])}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--tokens", type=int, default=4096, help="tokens a step (a multiple of 8)")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (the CPU references; slow)")
    ap.add_argument("--modes", default="eager,default,reduce-overhead")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu (the CPU references, a few steps)")
        return 2
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    results = []
    for mode in args.modes.split(","):
        for impl in ("tokitai", "torch"):
            r = train(impl, mode, args.steps, args.seed, args.device, args.tokens)
            results.append(r)
            print("%-8s %-16s loss %.4f -> %.4f  step %.3f ms (first step %.1f s)" % (
                impl, mode, r["losses"][0], r["losses"][-1], r["step_ms"], r["first_step_s"]), flush=True)
    print()
    marks = sorted({k for k in (0, 10, 20, 30, 50, args.steps - 1) if k < args.steps})
    print("| mode | " + " | ".join("loss step %d (tokitai / torch)" % k for k in marks) +
          " | largest gap at any step | step ms tokitai | step ms torch |")
    print("|---|" + "---|" * len(marks) + "---|---|---|")
    for i in range(0, len(results), 2):
        a, b = results[i], results[i + 1]
        c = compare(a["losses"], b["losses"])
        la, lb = a["losses"], b["losses"]
        print("| %s | %s | %.2f%% | %.2f | %.2f |" % (
            a["mode"], " | ".join("%.4f / %.4f" % (la[k], lb[k]) for k in marks),
            100 * c["max_rel_gap"], a["step_ms"], b["step_ms"]))
        a["compare"] = c
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
