#!/usr/bin/python3
"""A PyTorch reference of the backend's Gated DeltaNet model, built from torch
ops with autograd: the same network (backend/model/model_stage_module.h,
backend/layers/gdn_layer.h), the same loss (the mean token cross-entropy of
the step's M T tokens) and the same AdamW (backend/train/adamw.h), started
from the weights and fed the tokens that `stateflow train --dump-weights`
writes (backend/train/run_dump.h).

It serves twice:
  check  an independent whole-model check: the backend's losses over a few
         steps (`stateflow train --json`) against this model's, in float32
         and float64 (exit 0 agree, 1 disagree, 77 torch missing: a skip);
  speed  a speed anchor: tokens/s of one backend run and of this model on the
         same weights, tokens and thread count, side by side.

Not a second implementation of the backend's kernels: the recurrence is
either the plain token-by-token delta rule (--core recurrent) or a chunkwise
form over blocks of T_C tokens (--core chunk, the default) with dense torch
products and triangular solves, and every gradient comes from autograd.

  /usr/bin/python3 bench/torch_reference.py check --binary build/tools/stateflow
  /usr/bin/python3 bench/torch_reference.py speed --binary build/tools/stateflow \\
      --model gdn-small -T 2048 -M 1 --steps 4

Dimension legend: B microbatches (the batch dimension), S tokens, C hidden
size, H heads, K key head dim, Dv value head dim, F SwiGLU size, W conv
width, V vocabulary, L block length (T_C).
"""

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

SKIP = 77  # ctest's SKIP_RETURN_CODE for this test

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the test is skipped, not failed
    print(f"SKIP: PyTorch and numpy are not importable by {sys.executable} ({e}); "
          "install Debian's python3-torch (scripts/install-deps.sh)")
    sys.exit(SKIP)

# Per-step relative loss agreement required by `check` (see docs/performance.md
# and the comment in Check()).
TOLERANCE = {"float32": 1e-4, "float64": 1e-9}


# ---- the run dump -------------------------------------------------------------

class RunDump:
    """The index (path.json) and tensors (path) of a run dump."""

    NP_DTYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32}

    def __init__(self, path):
        with open(path + ".json") as f:
            self.index = json.load(f)
        if self.index.get("format") != "stateflow-run-dump 1":
            raise ValueError(f"{path}.json: format {self.index.get('format')!r} "
                             "is not 'stateflow-run-dump 1'")
        with open(path, "rb") as f:
            blob = f.read()
        self.tensors = {}
        for t in self.index["tensors"]:
            dtype = np.dtype(self.NP_DTYPES[t["dtype"]]).newbyteorder("<")
            count = t["bytes"] // dtype.itemsize
            a = np.frombuffer(blob, dtype=dtype, count=count, offset=t["offset"])
            self.tensors[t["name"]] = a.reshape(t["shape"]).copy()

    def params(self):
        """Name -> numpy array of every parameter, in the trainer's order."""
        return {n: a for n, a in self.tensors.items() if not n.startswith("tokens.")}

    def tokens(self, step):
        return self.tensors[f"tokens.step{step}"]  # (M, T + 1) int32


class Dims:
    def __init__(self, index):
        m, c = index["model"], index["constants"]
        self.C = int(m["hidden_size"])
        self.H = int(m["num_heads"])
        self.K = int(m["head_dim_k"])
        self.Dv = int(m["head_dim_v"])
        self.F = int(m["mlp_size"])
        self.W = int(m["conv_width"])
        self.V = int(m["vocab_size"])
        self.layers = int(m["num_layers"])
        self.norm_eps = float(c["norm_eps"])
        self.l2_eps = float(c["l2_eps"])
        self.block_size = int(c["block_size"])


# ---- the model ----------------------------------------------------------------

def rms_norm(x, w, eps):
    """x * rsqrt(mean(x^2) + eps) * w over the last dimension."""
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * w


def l2_norm(x, scale, eps):
    """scale * x / sqrt(|x|^2 + eps) over the last dimension."""
    return x * (torch.rsqrt(x.square().sum(-1, keepdim=True) + eps) * scale)


def softplus(x):
    """log(1 + e^x) without overflow and without torch's threshold."""
    return x.clamp(min=0) + torch.log1p(torch.exp(-x.abs()))


def short_conv(x, w):
    """Causal depthwise convolution from a zero start: y_t = sum_j w[j] x_{t-j}.
    x (B, S, Ch), w (W, Ch)."""
    W, Ch = w.shape
    xp = F.pad(x.transpose(1, 2), (W - 1, 0))             # (B, Ch, W-1+S)
    taps = w.flip(0).t().unsqueeze(1)                      # (Ch, 1, W)
    return F.conv1d(xp, taps, groups=Ch).transpose(1, 2)   # (B, S, Ch)


def delta_rule_recurrent(q, k, v, g, beta):
    """Token by token: S_t = a_t S_{t-1} + u_t k_t^T with
    u_t = beta_t (v_t - a_t S_{t-1} k_t), a_t = exp(g_t); o_t = S_t q_t.
    q, k (B, H, S, K); v (B, H, S, Dv); g, beta (B, H, S). Returns o (B, H, S, Dv)."""
    B, H, S_len, K = k.shape
    Dv = v.shape[-1]
    state = q.new_zeros(B, H, Dv, K)
    alpha = torch.exp(g)
    outs = []
    for t in range(S_len):
        a_t = alpha[:, :, t, None]                                     # (B, H, 1)
        k_t = k[:, :, t]                                               # (B, H, K)
        pred = torch.einsum("bhvk,bhk->bhv", state, k_t)               # S k_t
        u = beta[:, :, t, None] * (v[:, :, t] - a_t * pred)            # (B, H, Dv)
        state = a_t[..., None] * state + u[..., None] * k_t[:, :, None, :]
        outs.append(torch.einsum("bhvk,bhk->bhv", state, q[:, :, t]))
    return torch.stack(outs, dim=2)


def delta_rule_chunk(q, k, v, g, beta, L):
    """The same function over blocks of L tokens (docs/gdn-kernel.md's UT form):
    per block, with G the cumulative log decay, Gam_rs = exp(G_r - G_s) (s <= r)
    and A = diag(beta) ((K K^T) o Gam) strictly lower,
      U = (I + A)^{-1} diag(beta) V,  Wk = (I + A)^{-1} diag(beta e^G) K,
      V_new = U - Wk S^T,  O = diag(e^G) Q S^T + ((Q K^T) o Gam) V_new,
      S <- e^{G_last} S + V_new^T diag(e^{G_last - G}) K.
    Shapes as delta_rule_recurrent."""
    B, H, S_len, K = k.shape
    Dv = v.shape[-1]
    pad = (-S_len) % L  # padded tokens: k = 0, beta = 0, g = 0 leave S alone
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    n = (S_len + pad) // L
    q, k = q.reshape(B, H, n, L, K), k.reshape(B, H, n, L, K)
    v = v.reshape(B, H, n, L, Dv)
    g, beta = g.reshape(B, H, n, L), beta.reshape(B, H, n, L)

    G = g.cumsum(-1)                                                 # (B, H, n, L)
    incl = torch.ones(L, L, dtype=torch.bool).tril()
    strict = torch.ones(L, L, dtype=torch.bool).tril(-1)
    Gam = (G[..., :, None] - G[..., None, :]).masked_fill(~incl, -math.inf).exp()
    A = (beta[..., None] * (k @ k.transpose(-1, -2)) * Gam).masked_fill(~strict, 0.0)
    I_A = A + torch.eye(L, dtype=A.dtype)
    gam = G.exp()                                                    # (B, H, n, L)
    U = torch.linalg.solve_triangular(I_A, beta[..., None] * v, upper=False,
                                      unitriangular=True)           # (B, H, n, L, Dv)
    Wk = torch.linalg.solve_triangular(I_A, (beta * gam)[..., None] * k, upper=False,
                                       unitriangular=True)          # (B, H, n, L, K)
    P = (q @ k.transpose(-1, -2)) * Gam                              # (B, H, n, L, L)
    decay_to_end = torch.exp(G[..., -1:] - G)                        # (B, H, n, L)
    kd = decay_to_end[..., None] * k                                 # (B, H, n, L, K)

    # Per-block views by unbind (its backward stacks the blocks' gradients;
    # indexing U[:, :, c] instead would add a full-size zero tensor per block).
    blocks = zip(*(t.unbind(2) for t in (U, Wk, q, P, gam, kd)))
    state = q.new_zeros(B, H, Dv, K)
    outs = []
    for U_c, W_c, q_c, P_c, gam_c, kd_c in blocks:
        v_new = U_c - W_c @ state.transpose(-1, -2)                  # (B, H, L, Dv)
        outs.append(gam_c[..., None] * (q_c @ state.transpose(-1, -2)) + P_c @ v_new)
        state = gam_c[..., -1, None, None] * state + v_new.transpose(-1, -2) @ kd_c
    return torch.cat(outs, dim=2)[:, :, :S_len]


class GdnModel:
    """The model of the run dump: embedding, the GDN layers, head and loss."""

    def __init__(self, dump, dtype, core):
        self.d = Dims(dump.index)
        self.core = core
        self.params = {n: torch.tensor(a, dtype=dtype).requires_grad_()
                       for n, a in dump.params().items()}
        expected = 3 + 18 * self.d.layers  # embedding, 18 per layer, head norm + output
        if len(self.params) != expected:
            raise ValueError(f"the dump holds {len(self.params)} parameters, "
                             f"expected {expected} for {self.d.layers} layers")

    def layer(self, x, i):
        d, p = self.d, (lambda n: self.params[f"layer{i}.{n}"])
        B, S_len, _ = x.shape
        xn = rms_norm(x, p("attn_norm.weight"), d.norm_eps)                 # (B, S, C)
        q_in, k_in = F.linear(xn, p("q_proj.weight")), F.linear(xn, p("k_proj.weight"))
        v_in = F.linear(xn, p("v_proj.weight"))
        a, b = F.linear(xn, p("a_proj.weight")), F.linear(xn, p("b_proj.weight"))
        z = F.linear(xn, p("g_proj.weight"))                                # (B, S, HV)
        q = l2_norm(F.silu(short_conv(q_in, p("q_conv.weight"))).view(B, S_len, d.H, d.K),
                    1.0 / math.sqrt(d.K), d.l2_eps)
        k = l2_norm(F.silu(short_conv(k_in, p("k_conv.weight"))).view(B, S_len, d.H, d.K),
                    1.0, d.l2_eps)
        v = F.silu(short_conv(v_in, p("v_conv.weight"))).view(B, S_len, d.H, d.Dv)
        g = -torch.exp(p("A_log")) * softplus(a + p("dt_bias"))             # (B, S, H)
        beta = torch.sigmoid(b)
        qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))                 # (B, H, S, .)
        gh, bh = g.transpose(1, 2), beta.transpose(1, 2)                    # (B, H, S)
        if self.core == "recurrent":
            o = delta_rule_recurrent(qh, kh, vh, gh, bh)
        else:
            o = delta_rule_chunk(qh, kh, vh, gh, bh, d.block_size)
        o = o.transpose(1, 2)                                               # (B, S, H, Dv)
        gated = rms_norm(o, p("o_norm.weight"), d.norm_eps).reshape(B, S_len, -1) * F.silu(z)
        h = x + F.linear(gated, p("o_proj.weight"))
        hn = rms_norm(h, p("mlp_norm.weight"), d.norm_eps)
        mlp = F.silu(F.linear(hn, p("mlp.gate_proj.weight"))) * F.linear(hn, p("mlp.up_proj.weight"))
        return h + F.linear(mlp, p("mlp.down_proj.weight"))

    def loss(self, tokens):
        """Mean cross-entropy over the M T targets. tokens (M, T + 1) int."""
        ids = torch.as_tensor(tokens, dtype=torch.long)
        x = F.embedding(ids[:, :-1], self.params["embedding.weight"])       # (B, S, C)
        for i in range(self.d.layers):
            x = self.layer(x, i)
        xn = rms_norm(x, self.params["head.norm.weight"], self.d.norm_eps)
        logits = F.linear(xn, self.params["head.output.weight"])            # (B, S, V)
        return F.cross_entropy(logits.reshape(-1, self.d.V), ids[:, 1:].reshape(-1))


class AdamW:
    """backend/train/adamw.cc, term for term: bias corrections folded into the
    step size and the square root, eps outside the root, decoupled decay
    lr wd w (on the weights before the update) for parameters of rank >= 2."""

    def __init__(self, params, opts, decay_all=False):
        self.params = list(params)
        self.decay_all = decay_all  # the negative control of `check`: decay gains too
        self.lr, self.b1, self.b2 = opts["learning_rate"], opts["beta1"], opts["beta2"]
        self.eps, self.wd = opts["epsilon"], opts["weight_decay"]
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        step_size = self.lr / (1.0 - self.b1 ** self.t)
        inv_sqrt_c2 = 1.0 / math.sqrt(1.0 - self.b2 ** self.t)
        for p, m, v in zip(self.params, self.m, self.v):
            g = p.grad
            m.mul_(self.b1).add_(g, alpha=1.0 - self.b1)
            v.mul_(self.b2).addcmul_(g, g, value=1.0 - self.b2)
            update = step_size * m / (v.sqrt() * inv_sqrt_c2 + self.eps)
            if (p.dim() >= 2 or self.decay_all) and self.wd != 0.0:
                update += (self.lr * self.wd) * p
            p.sub_(update)


def train_torch(dump, dtype, core, steps, on_step=None, decay_all=False):
    """Losses of `steps` steps of the torch model from the dump."""
    model = GdnModel(dump, dtype, core)
    opt = AdamW(model.params.values(), dump.index["adamw"], decay_all)
    losses = []
    for step in range(steps):
        start = time.perf_counter()
        for p in model.params.values():
            p.grad = None
        loss = model.loss(dump.tokens(step))
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if on_step:
            on_step(step, losses[-1], time.perf_counter() - start)
    return losses


# ---- the backend --------------------------------------------------------------

def run_backend(args, dtype, dump_path, steps):
    """Runs `stateflow train` (P = 1) with a dump; returns its JSON Report."""
    cmd = [args.binary, "train", "--model", args.model, "-P", "1",
           "-M", str(args.microbatches), "-T", str(args.seq_len), "-N", str(args.chunks),
           "--steps", str(steps), "--dtype", dtype, "--threads", str(args.threads),
           "--json", "--dump-weights", dump_path]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def check(args):
    """Backend and torch losses per step, per dtype; True if all agree.

    Tolerances. float32: both sides round every operation to 24 bits but sum
    in different orders (blocked GEMMs, the chunkwise core, chunk boundaries),
    so step 0's losses differ by ~1e-8 relative; each AdamW step turns
    gradient rounding into weight differences, and ten steps at lr 3e-3 grow
    them to ~1e-6 (gdn-tiny) or ~1e-5 (gdn-small, M = 2, T = 512). That is the
    float32 noise floor itself: the backend's float32 losses differ from its
    own float64 losses by as much (printed below as the yardstick). 1e-4
    sits above that floor; it confirms the float32 path, but it is not the
    sharp test. float64 is: the same growth from 1e-16 stays below 1e-13,
    and the bound is the issue's 1e-9, while the negative control (weight
    decay on the gains too, one detail of AdamW) moves the losses by ~1e-4,
    five orders of magnitude beyond it."""
    ok = True
    cores = [args.core] if args.core != "both" else ["chunk", "recurrent"]
    backend_losses = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in args.dtypes:
            path = os.path.join(tmp, f"run-{dtype}.bin")
            report = run_backend(args, dtype, path, args.steps)
            backend = [float(x) for x in report["losses"]]
            backend_losses[dtype] = backend
            dump = RunDump(path)
            for core in cores:
                torch_losses = train_torch(dump, getattr(torch, dtype), core, args.steps)
                rel = [abs(t - b) / abs(b) for t, b in zip(torch_losses, backend)]
                worst = max(rel)
                passed = len(backend) == args.steps and worst <= TOLERANCE[dtype]
                ok &= passed
                print(f"{args.model} {dtype} core={core} M={args.microbatches} "
                      f"T={args.seq_len} N={args.chunks}: max relative loss difference "
                      f"{worst:.3e} (tolerance {TOLERANCE[dtype]:.0e}) "
                      f"{'ok' if passed else 'FAILED'}")
                for s, (b, t, r) in enumerate(zip(backend, torch_losses, rel)):
                    print(f"  step {s:2d}  backend {b:.12f}  torch {t:.12f}  rel {r:.2e}")
            if dtype == "float64" and dump.index["adamw"]["weight_decay"] != 0.0:
                ok &= negative_control(dump, backend, args)
    if len(backend_losses) == 2:
        worst = max(abs(a - b) / abs(b) for a, b in
                    zip(backend_losses["float32"], backend_losses["float64"]))
        print(f"yardstick: the backend's float32 losses against its float64 losses: "
              f"max relative difference {worst:.3e}")
    return ok


def torch_build():
    """"AVX2, BLAS libblas.so.3": torch's CPU capability and the BLAS library
    this process loaded (Debian's torch calls whichever libblas.so.3 the
    system's alternatives, or LD_LIBRARY_PATH, provide)."""
    capability = "?"
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage" in line:
            capability = line.split(":", 1)[1].strip()
    torch.ones(2, 2) @ torch.ones(2, 2)  # the BLAS is loaded by now
    blas = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "blas" in os.path.basename(path):
                blas.add(path)
    return f"{capability}, BLAS {', '.join(sorted(blas)) or '?'}"


def negative_control(dump, backend, args):
    """The check must see a one-detail difference: the same float64 run with
    weight decay on the gains too (not only on matrices, as adamw.h says)
    must leave the tolerance. True if it does."""
    losses = train_torch(dump, torch.float64, "chunk", args.steps, decay_all=True)
    worst = max(abs(t - b) / abs(b) for t, b in zip(losses, backend))
    seen = worst > TOLERANCE["float64"]
    print(f"negative control (float64, weight decay on every parameter): max relative "
          f"difference {worst:.3e}, {'detected' if seen else 'NOT detected: the check is blind'}")
    return seen


def children_cpu_s():
    """CPU seconds (user + system) of the finished child processes so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def speed(args):
    """tokens/s of the backend and of the torch model, same weights, tokens and
    threads, over --rounds alternating rounds (the first step of every run is
    a warm-up and left out).

    Two clocks. CPU time, the figure: on a shared machine a single-threaded
    step's CPU time is what it takes on an idle core, while its wall time
    includes waiting for one. The backend's CPU time per step is that of a
    run of 1 + k steps minus that of a run of 1 step (startup, weights and
    the warm-up cancel), divided by k; torch's is its process time per step.
    Wall time: the fastest step of each side (the report's step_times_s, and
    perf_counter around a torch step), printed beside it."""
    torch.set_num_threads(args.threads)
    tokens = args.microbatches * args.seq_len
    k = args.steps - 1
    backend_cpu, backend_wall, torch_cpu, torch_wall = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.bin")
        for _ in range(args.rounds):
            c0 = children_cpu_s()
            run_backend(args, "float32", path, 1)
            c1 = children_cpu_s()
            report = run_backend(args, "float32", path, args.steps)
            c2 = children_cpu_s()
            backend_cpu.append(((c2 - c1) - (c1 - c0)) / k)
            backend_wall += [float(t) for t in report["step_times_s"][1:]]
            marks = []
            torch_losses = train_torch(
                RunDump(path), torch.float32, args.core, args.steps,
                on_step=lambda s, loss, t: marks.append((time.process_time(), t)))
            torch_cpu.append((marks[-1][0] - marks[0][0]) / k)
            torch_wall += [t for _, t in marks[1:]]
    commit = report.get("provenance", {}).get("git_commit", "?")
    print(f"model {args.model}, P = 1, M = {args.microbatches}, T = {args.seq_len}, "
          f"N = {args.chunks}, float32, {args.threads} thread(s); {args.rounds} rounds of "
          f"{args.steps} steps (first left out); stateflow commit {commit}")
    print(f"torch {torch.__version__} (core={args.core}), "
          f"{torch.get_num_threads()} thread(s), {torch_build()}")
    print(f"step 0 loss: backend {report['losses'][0]:.6f}, torch {torch_losses[0]:.6f}")
    cpu = {"backend": statistics.median(backend_cpu), "torch": statistics.median(torch_cpu)}
    wall = {"backend": min(backend_wall), "torch": min(torch_wall)}
    for side in ("backend", "torch"):
        print(f"{side:8s} {tokens / cpu[side]:9.1f} tokens per CPU second (median of rounds, "
              f"{cpu[side] * 1e3:7.1f} ms per step); fastest wall step "
              f"{tokens / wall[side]:9.1f} tokens/s")
    print(f"backend / torch = {cpu['torch'] / cpu['backend']:.2f}x by CPU time, "
          f"{wall['torch'] / wall['backend']:.2f}x by the fastest wall steps")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["check", "speed"])
    ap.add_argument("--binary", required=True, help="the stateflow executable")
    ap.add_argument("--model", default="gdn-tiny")
    ap.add_argument("-M", "--microbatches", type=int, default=4)
    ap.add_argument("-T", "--seq-len", type=int, default=256)
    ap.add_argument("-N", "--chunks", type=int, default=None,
                    help="backend chunks (default: 4 for check, 1 for speed)")
    ap.add_argument("--steps", type=int, default=None, help="default: 10 check, 4 speed")
    ap.add_argument("--dtype", choices=["float32", "float64", "both"], default="both")
    ap.add_argument("--core", choices=["chunk", "recurrent", "both"], default="chunk")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3, help="speed: alternating runs")
    args = ap.parse_args()
    if args.chunks is None:
        args.chunks = 4 if args.mode == "check" else 1
    if args.steps is None:
        args.steps = 10 if args.mode == "check" else 4
    args.dtypes = ["float32", "float64"] if args.dtype == "both" else [args.dtype]
    if args.mode == "speed" and args.core == "both":
        ap.error("speed takes one --core")
    torch.set_num_threads(args.threads)
    try:
        ok = check(args) if args.mode == "check" else speed(args)
    except (RuntimeError, ValueError, OSError) as e:
        print(f"torch_reference: {e}", file=sys.stderr)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
