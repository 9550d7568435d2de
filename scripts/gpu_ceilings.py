#!/usr/bin/env python3
"""The lent GPU's two ceilings (the GPU kit's first kernels step, issue 29).

Measures, on the GPU the kit runs on, through PyTorch:
  - device memory bandwidth: a device-to-device copy of a 4 GiB buffer of
    random bytes, counting the bytes read plus the bytes written;
  - matrix rate: cuBLAS GEMMs, 8192 x 8192 x 8192, bf16 (float accumulation)
    and float32 with TF32 off (as our cuBLAS calls), on random inputs.
Each the median of timed repetitions with CUDA events after a warm-up, over
two rotating input sets. Writes OUT/ceilings.md and OUT/ceilings.csv; the
measured rates are what the kernel tables' times are read against
(docs/backend.md, "What has run on a GPU").

  python3 gpu_ceilings.py --out DIR [--reps 20]
"""
import argparse
import csv
import os
import statistics
import sys


def median_ms(torch, fn, sets, reps):
    for i in range(3):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(*sets[i % len(sets)])
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), max(times) - min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--copy-gib", type=float, default=4.0)
    ap.add_argument("--gemm-n", type=int, default=8192)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("gpu_ceilings: PyTorch is not importable", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("gpu_ceilings: no CUDA device visible to PyTorch", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    nbytes = int(args.copy_gib * 2**30)
    srcs = [(torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda"),
             torch.empty(nbytes, dtype=torch.uint8, device="cuda")) for _ in range(2)]
    ms, spread = median_ms(torch, lambda x, y: y.copy_(x), srcs, args.reps)
    rows.append(("copy, device to device", f"{args.copy_gib:g} GiB", ms, spread,
                 2 * nbytes / (ms * 1e-3) / 1e12, "TB/s (read + write)"))
    del srcs
    n = args.gemm_n
    for dtype, name in ((torch.bfloat16, "bf16"), (torch.float32, "float32")):
        sets = [(torch.randn(n, n, device="cuda", dtype=dtype),
                 torch.randn(n, n, device="cuda", dtype=dtype)) for _ in range(2)]
        ms, spread = median_ms(torch, lambda a, b: a @ b, sets, args.reps)
        rows.append((f"GEMM (cuBLAS), {name}", f"{n} x {n} x {n}", ms, spread,
                     2 * n**3 / (ms * 1e-3) / 1e12, "TFLOP/s"))
        del sets
    os.makedirs(args.out, exist_ok=True)
    name = torch.cuda.get_device_name(0)
    with open(os.path.join(args.out, "ceilings.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["gpu", "what", "size", "median_ms", "spread_ms", "rate", "unit"])
        for r in rows:
            w.writerow([name, r[0], r[1], f"{r[2]:.4f}", f"{r[3]:.4f}", f"{r[4]:.2f}", r[5]])
    lines = [f"## Ceilings ({name}, PyTorch {torch.__version__}, {args.reps} repetitions)", "",
             "| what | size | median ms | spread ms | rate |", "| --- | --- | ---: | ---: | --- |"]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]} | {r[2]:.3f} | {r[3]:.3f} | {r[4]:.2f} {r[5]} |")
    text = "\n".join(lines) + "\n"
    open(os.path.join(args.out, "ceilings.md"), "w").write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
