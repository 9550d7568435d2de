#!/usr/bin/env python3
"""The GPU kit's kernel table (scripts/gpu-kit.sh, issue 29).

For each profiled cost table given (stateflow profile --out), at each chunk
length s it sampled, one row per:
  - our recurrence core (forward, backward): the profile's phases
    pre_s + st_s + out_s (medians, timed with CUDA events by the profiler);
    the whole layer's time beside it;
  - the layer's projection GEMMs through PyTorch (cuBLAS) at the same
    shapes, float32 (TF32 off, as our cuBLAS calls) and bf16: each the
    median of timed repetitions with CUDA events, inputs random and rotated;
  - PyTorch's scaled_dot_product_attention, causal, (1, H, s, d), bf16 and
    float32, at the same lengths (the attention reference).
Writes OUT/kernel-table.md and OUT/kernel-table.csv. Without PyTorch or a
GPU (the kit's dry run) the PyTorch rows are left out and the table says so.

  python3 gpu_kernel_table.py --out DIR DIR/costs-gdn-15b.textproto ...
"""
import argparse
import csv
import os
import re
import statistics
import sys


def parse_table(path):
    """The model's fields and the samples of a CostTable in text format."""
    text = open(path).read()
    if not re.search(r"^model \{", text, re.M):  # a bare ModelSpec
        text = "model {\n" + text + "}\n"
    model = {}
    m = re.search(r"^model \{(.*?)^\}", text, re.S | re.M)
    if m:
        for key, value in re.findall(r"^\s*(\w+): (\S+)", m.group(1), re.M):
            model[key] = value.strip('"')
    device = re.search(r'^\s*device: "([^"]*)"', text, re.M)
    samples = []
    for block in re.findall(r"^samples \{(.*?)^\}", text, re.S | re.M):
        s = {}
        for key, value in re.findall(r"^\s+(\w+): (\S+)", block, re.M):
            s[key] = value.strip('"')
        samples.append(s)
    return model, (device.group(1) if device else ""), samples


def time_cuda(torch, fn, sets, reps):
    """Median seconds of fn(*inputs) over rotating input sets, CUDA events
    (the host clock when the inputs are on the CPU: --torch-device cpu)."""
    for i in range(3):
        fn(*sets[i % len(sets)])
    if sets[0][0].device.type == "cpu":
        import time
        times = []
        for i in range(reps):
            t0 = time.perf_counter()
            fn(*sets[i % len(sets)])
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*sets[i % len(sets)])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--small", action="store_true", help="dry run: small shapes")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--sdpa-lengths", default="",
                    help="also time causal SDPA at these lengths for every paper model, "
                         "its heads and head dim (the attention reference), e.g. 4096,8192")
    ap.add_argument("--gemm-lengths", default="4096,8192",
                    help="token counts of the GEMM rows for a file with no samples "
                         "(a ModelSpec from `stateflow presets --model`)")
    ap.add_argument("--no-torch", action="store_true", help="our cores' rows only")
    ap.add_argument("--torch-device", default="cuda",
                    help="cuda (default), or cpu to check this script without a GPU")
    ap.add_argument("--name", default="kernel-table", help="output files' name")
    ap.add_argument("tables", nargs="*",
                    help="CostTables (profile --out) or ModelSpecs (presets --model)")
    args = ap.parse_args()

    torch = None
    why = ""
    try:
        if args.no_torch:
            raise ImportError("--no-torch")
        import torch as _torch  # noqa: the GPU machine's PyTorch

        if args.torch_device == "cpu" or _torch.cuda.is_available():
            torch = _torch
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        else:
            why = "PyTorch sees no GPU"
    except Exception as e:  # noqa: the dry run's machine has no PyTorch
        why = f"no PyTorch ({type(e).__name__})"

    rows = []
    gemm_done = set()
    sdpa_done = set()
    for path in args.tables:
        if not os.path.exists(path):
            continue
        model, device, samples = parse_table(path)
        name = model.get("name", os.path.basename(path))
        C = int(model.get("hidden_size", 0))
        H = int(model.get("num_heads", 0))
        dk = int(model.get("head_dim_k", 0))
        dv = int(model.get("head_dim_v", 0))
        mlp = int(model.get("mlp_size", 0))
        lengths = sorted({int(s["tokens"]) for s in samples if s.get("layer_kind") == "recurrence"
                          and "tokens" in s})
        if not samples:
            lengths = [int(x) for x in args.gemm_lengths.split(",") if x]
        for s in samples:
            if s.get("layer_kind") != "recurrence" or s.get("recompute", "none") != "none":
                continue
            core = sum(float(s.get(k, 0)) for k in ("pre_s", "st_s", "out_s"))
            rows.append({"model": name, "device": device, "kernel": f"our core, {s['pass']}",
                         "dtype": "float32", "shape": f"s {s['tokens']}, H {H}, dk {dk}, dv {dv}",
                         "seconds": core, "layer_seconds": float(s.get("median_s", 0)),
                         "tflops": ""})
        if torch is None or (C < 1024 and not args.small):
            continue  # PyTorch rows for the paper models' layers only
        dev = torch.device(args.torch_device)
        dev_name = (torch.cuda.get_device_name() if dev.type == "cuda" else "cpu")
        for tokens in lengths:
            shapes = [("q/k proj", C, H * dk), ("v proj", C, H * dv), ("out proj", H * dv, C),
                      ("mlp up", C, mlp), ("mlp down", mlp, C)]
            for label, n_in, n_out in shapes:
                if n_in <= 0 or n_out <= 0:
                    continue
                for dtype in (torch.float32, torch.bfloat16):
                    key = (tokens, n_in, n_out, dtype)
                    if key in gemm_done:
                        continue
                    gemm_done.add(key)
                    sets = [(torch.randn(tokens, n_in, device=dev, dtype=dtype),
                             torch.randn(n_in, n_out, device=dev, dtype=dtype)) for _ in range(3)]
                    t = time_cuda(torch, torch.matmul, sets, args.reps)
                    rows.append({"model": name, "device": dev_name,
                                 "kernel": f"cuBLAS GEMM ({label})",
                                 "dtype": str(dtype).replace("torch.", ""),
                                 "shape": f"{tokens} x {n_in} x {n_out}", "seconds": t,
                                 "layer_seconds": "",
                                 "tflops": f"{2 * tokens * n_in * n_out / t / 1e12:.1f}"})
                    del sets
        ah = int(model.get("attn_heads", 0) or H)
        ad = int(model.get("attn_head_dim", 0) or dk or dv) or 128
        att_lengths = {int(s["tokens"]) for s in samples
                       if s.get("layer_kind") == "attention" and "tokens" in s}
        if args.sdpa_lengths and (C >= 1024 or args.small):
            att_lengths |= {int(x) for x in args.sdpa_lengths.split(",") if x}
        if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            why = f"PyTorch {torch.__version__} has no scaled_dot_product_attention"
            att_lengths = set()
        for tokens in sorted(att_lengths):
            for dtype in (torch.bfloat16, torch.float32):
                key = (tokens, ah, ad, dtype)
                if key in sdpa_done:
                    continue
                sdpa_done.add(key)
                sets = [tuple(torch.randn(1, ah, tokens, ad, device=dev, dtype=dtype)
                              for _ in range(3)) for _ in range(2)]
                fn = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=True)
                t = time_cuda(torch, fn, sets, args.reps)
                flops = 4 * ah * tokens * tokens * ad / 2  # causal: half of QK^T and PV
                rows.append({"model": name, "device": dev_name,
                             "kernel": "PyTorch SDPA causal", "dtype": str(dtype)
                             .replace("torch.", ""),
                             "shape": f"1 x {ah} x {tokens} x {ad}", "seconds": t,
                             "layer_seconds": "", "tflops": f"{flops / t / 1e12:.1f}"})
                del sets
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    os.makedirs(args.out, exist_ok=True)
    fields = ["model", "device", "kernel", "dtype", "shape", "seconds", "layer_seconds", "tflops"]
    with open(os.path.join(args.out, args.name + ".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(args.out, args.name + ".md"), "w") as f:
        f.write("## Kernel table\n\n")
        if torch is None:
            f.write(f"PyTorch rows left out: {why}.\n\n")
        elif why:
            f.write(f"Left out: {why}.\n\n")
        if not rows:
            f.write("(no rows: no table had recurrence samples, and no PyTorch rows)\n\n")
        f.write("| model | kernel | dtype | shape | ms | whole layer ms | TFLOP/s |\n")
        f.write("| --- | --- | --- | --- | ---: | ---: | ---: |\n")
        for r in rows:
            layer = f"{float(r['layer_seconds']) * 1e3:.3f}" if r["layer_seconds"] != "" else ""
            f.write(f"| {r['model']} | {r['kernel']} | {r['dtype']} | {r['shape']} | "
                    f"{float(r['seconds']) * 1e3:.3f} | {layer} | {r['tflops']} |\n")
    print(open(os.path.join(args.out, args.name + ".md")).read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
