#!/usr/bin/env python3
"""The frameworks' output layer and loss path, replayed and measured (issue 28 item 3).

Replays, in PyTorch, what Megatron-Core r0.12's last pipeline stage does with
one microbatch's final-norm output at TP 1 (ms-swift 3.6 runs the same code):
the output layer's bf16 logits [T, V], the unfused vocab-parallel
cross-entropy (a float32 copy of the logits turned into the softmax in place
and saved for the backward, the per-token losses), then the backward (the
saved softmax turned into d(logits) in place, cast to the logits' dtype by
autograd, the output layer's input and weight gradients). It is written
here from the arithmetic docs/cost-model.md ("Systems") reads in the
frameworks' code, not taken from it.

On a CUDA device it reads torch.cuda.max_memory_allocated around each pass
and prints, beside each figure, what the simulator's table charges for it
(docs/cost-model.md, "Systems: the head as the frameworks run it"): the
forward's peak above what was live before it, what the forward leaves alive
for the backward, and the backward's peak above that. Writes
OUT/head-memory.md and OUT/head-memory.csv.

On the CPU (the GPU kit's dry run, `--small`) there is no allocator to
read: it checks the replay's loss and every gradient against
torch.nn.functional.cross_entropy through autograd in float64, and fails if
they differ, so that what a GPU measures is the loss a framework computes.

  python3 gpu_head_memory.py --out DIR [--tokens 65536] [--vocab 50304] [--hidden 2560]
  python3 gpu_head_memory.py --out DIR --small --device cpu
"""
import argparse
import csv
import os
import sys


def make_cross_entropy(torch):
    class VocabCrossEntropy(torch.autograd.Function):
        """Megatron's unfused vocab-parallel cross-entropy at TP 1, as
        docs/cost-model.md describes it: the float32 copy of the logits
        becomes the softmax in place and is the one tensor saved."""

        @staticmethod
        def forward(ctx, logits, target):
            # The float32 copy [T, V] (float64 stays float64: the CPU check).
            work = logits.to(torch.promote_types(logits.dtype, torch.float32), copy=True)
            top = work.max(dim=-1)[0]
            work -= top.unsqueeze(-1)
            rows = torch.arange(work.shape[0], device=work.device)
            predicted = work[rows, target].clone()
            torch.exp(work, out=work)
            total = work.sum(dim=-1)
            loss = torch.log(total) - predicted  # per token, float32
            work.div_(total.unsqueeze(-1))  # the softmax, in place
            ctx.save_for_backward(work, target)
            return loss

        @staticmethod
        def backward(ctx, d_loss):
            softmax, target = ctx.saved_tensors
            grad = softmax  # in place: the saved softmax becomes d(logits)
            rows = torch.arange(grad.shape[0], device=grad.device)
            grad[rows, target] -= 1.0
            grad.mul_(d_loss.unsqueeze(-1))
            return grad, None  # float32; autograd casts it to the logits' dtype

    return VocabCrossEntropy


def head_step(torch, ce, xn, weight, target):
    logits = torch.matmul(xn, weight.t())  # the output layer, [T, V]
    losses = ce.apply(logits, target)
    del logits  # freed as the forward returns (nothing saved it)
    return losses


def check_on_cpu(torch, ce, tokens, vocab, hidden):
    """The replay's loss and gradients against F.cross_entropy, float64."""
    gen = torch.Generator().manual_seed(1)
    xn = torch.randn(tokens, hidden, dtype=torch.float64, generator=gen, requires_grad=True)
    weight = (torch.randn(vocab, hidden, dtype=torch.float64, generator=gen) / hidden ** 0.5)
    weight.requires_grad_(True)
    target = torch.randint(0, vocab, (tokens,), generator=gen)
    scale = torch.rand(tokens, dtype=torch.float64, generator=gen)

    ours = head_step(torch, ce, xn, weight, target)
    (ours * scale).sum().backward()
    got = (ours.detach().clone(), xn.grad.clone(), weight.grad.clone())
    xn.grad = None
    weight.grad = None
    ref = torch.nn.functional.cross_entropy(torch.matmul(xn, weight.t()), target, reduction="none")
    (ref * scale).sum().backward()
    want = (ref.detach(), xn.grad, weight.grad)
    worst = 0.0
    for name, a, b in zip(("losses", "d(xn)", "d(weight)"), got, want):
        err = ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()
        worst = max(worst, err)
        print(f"{name}: max relative difference {err:.3e}")
    return worst


def measure_on_cuda(torch, ce, tokens, vocab, hidden):
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(1)
    xn = torch.randn(tokens, hidden, dtype=torch.bfloat16, device=dev, generator=gen)
    xn.requires_grad_(True)
    weight = torch.randn(vocab, hidden, dtype=torch.bfloat16, device=dev, generator=gen)
    weight.requires_grad_(True)
    target = torch.randint(0, vocab, (tokens,), device=dev, generator=gen)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    losses = head_step(torch, ce, xn, weight, target)
    torch.cuda.synchronize()
    fwd_peak = torch.cuda.max_memory_allocated() - before
    held = torch.cuda.memory_allocated() - before
    torch.cuda.reset_peak_memory_stats()
    at_backward = torch.cuda.memory_allocated()
    losses.backward(torch.ones_like(losses))
    torch.cuda.synchronize()
    bwd_peak = torch.cuda.max_memory_allocated() - at_backward
    return fwd_peak, held, bwd_peak


def predicted(tokens, vocab, hidden, act=2, stat=4):
    """docs/cost-model.md's table for the output layer and loss (the norm's
    tensors aside; xn, the weight and its gradient are live before)."""
    t, v = tokens, vocab
    fwd_peak = t * v * (act + stat) + t * stat  # bf16 logits + float32 copy, the losses
    held = t * v * stat + t * stat               # the softmax; the losses the caller keeps
    # d(losses) and d(logits) in bf16 beside the float32 softmax; then the
    # output layer's d(xn) [t, h] and d(weight) [V, h] (unfused: bf16).
    bwd_peak = t * stat + t * v * act
    return fwd_peak, held, bwd_peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--hidden", type=int, default=2560)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--small", action="store_true",
                    help="T 256, V 1000, h 64 (the dry run's sizes)")
    args = ap.parse_args()
    if args.small:
        args.tokens, args.vocab, args.hidden = 256, 1000, 64
    for name in ("tokens", "vocab", "hidden"):
        if getattr(args, name) < 1:
            print(f"gpu_head_memory: --{name} must be >= 1", file=sys.stderr)
            return 2
    try:
        import torch
    except ImportError:
        print("gpu_head_memory: PyTorch is not importable", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    ce = make_cross_entropy(torch)
    worst = check_on_cpu(torch, ce, min(args.tokens, 256), min(args.vocab, 1000),
                         min(args.hidden, 64))
    if worst > 1e-12:
        print(f"gpu_head_memory: the replay differs from cross_entropy by {worst:.3e} "
              "(relative, float64)", file=sys.stderr)
        return 1
    if args.device == "cpu":
        print("gpu_head_memory: CPU: the replay's arithmetic checked; no allocator to read")
        return 0
    if not torch.cuda.is_available():
        print("gpu_head_memory: no CUDA device visible to PyTorch", file=sys.stderr)
        return 1
    got = measure_on_cuda(torch, ce, args.tokens, args.vocab, args.hidden)
    want = predicted(args.tokens, args.vocab, args.hidden)
    names = ("forward peak above its start", "left for the backward",
             "backward peak above its start")
    rows = [(n, w, g, g / w if w else float("nan")) for n, w, g in zip(names, want, got)]
    title = (f"Output layer and loss, T {args.tokens}, V {args.vocab}, h {args.hidden}, "
             f"bf16, TP 1, on {torch.cuda.get_device_name()} (torch {torch.__version__})")
    with open(os.path.join(args.out, "head-memory.md"), "w") as f:
        f.write(f"{title}\n\n| bytes | predicted | measured | measured / predicted |\n"
                "| --- | ---: | ---: | ---: |\n")
        for n, w, g, r in rows:
            f.write(f"| {n} | {w:,} | {g:,} | {r:.4f} |\n")
    with open(os.path.join(args.out, "head-memory.csv"), "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["quantity", "tokens", "vocab", "hidden", "predicted_bytes", "measured_bytes"])
        for n, w, g, _ in rows:
            out.writerow([n, args.tokens, args.vocab, args.hidden, w, g])
    print(open(os.path.join(args.out, "head-memory.md")).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
