"""The machine's ceilings that bound W7's and W8's speedups, one thread.

A batched run cannot beat its own arithmetic at the best rate the products reach, nor read
its weights faster than memory gives them. This prints, on this machine:

- the reference GEMM rate of docs/workloads.md (1024 x 512 @ 512 x 1280 float32), which the
  bench's efficiency figures divide by;
- W7's convolution products as ops/conv.py runs them, a 3x3 convolution of 32 channels on
  8 x 8 being one im2col product per instance: forward (rows x 288) @ W^T (a transposed
  (32, 288) weight; the input gradient is the same product, of the output gradient's rows
  by the flipped weight) and the weight gradient G^T (32 x rows) @ (rows x 288), at one
  instance's rows (64) and at 6 to 64 instances';
- a wide layer's product (64 to 512 rows by a transposed 1280 x 512 weight), for scale;
- W8's expert product, a few rows times a (transposed) 256 x 256 weight, as nn.Dense runs it:
  in cache, and streamed from memory over 2,048 weights (1,024 experts, two layers: 512 MiB);
- the read bandwidth of one thread (numpy's sum over a 512 MiB array).

RESULTS.md turns these into the ceilings on the W7 and W8 acceptance figures.

    taskset -c 1 python benchmarks/hardware_bounds.py [--json out.json]
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from hybridbatch_workloads.bench.machine import gemm_rate, machine_info, one_thread  # noqa: E402  (numpy not yet)

one_thread()

import numpy as np  # noqa: E402

from hybridbatch.kernels import blas  # noqa: E402

MIB = 1 << 20


def best_seconds(fn, reps, rounds=5):
    """The fastest of `rounds` timings of `reps` calls, per call."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def product_rate(rows, k, n, rng, gradient=False):
    """GFLOP/s of (rows x k) @ (k x n) float32 through the engine's shared-weight product, the
    weight a transposed (n, k) array as a layer holds it; with `gradient`, the weight
    gradient's (k x rows) @ (rows x n) summing over the rows (blas.gemm)."""
    x = rng.standard_normal((rows, k)).astype(np.float32)
    if gradient:            # x plays the output gradient G, `summed` the rows it meets
        summed = rng.standard_normal((rows, n)).astype(np.float32)
        product = lambda: blas.gemm(x.T, summed)  # noqa: E731
    else:
        w = rng.standard_normal((n, k)).astype(np.float32).T
        product = lambda: blas.shared_product(x, w)  # noqa: E731
    reps = max(10, int(2e8 / (2 * rows * k * n)))
    return 2 * rows * k * n / best_seconds(product, reps) / 1e9


EXPERT_WEIGHTS = 2048      # W8's 1,024 experts, two layers each: 512 MiB of float32 256 x 256
READ_MIB = 512             # the array read_bandwidth sums


def streamed_expert_rate(rows, rng):
    """(GFLOP/s, GB/s of weights) of `rows` x 256 @ 256 x 256 over EXPERT_WEIGHTS distinct
    weights, more than the caches hold, each read once per pass."""
    weights = EXPERT_WEIGHTS
    ws = [rng.standard_normal((256, 256)).astype(np.float32) for _ in range(weights)]
    x = rng.standard_normal((rows, 256)).astype(np.float32)

    def one_pass():
        for w in ws:
            blas.shared_product(x, w.T)     # a Dense layer's x @ W^T

    seconds = best_seconds(one_pass, 1, rounds=3)
    return 2 * rows * 256 * 256 * weights / seconds / 1e9, weights * 256 * 256 * 4 / seconds / 1e9


def read_bandwidth(rng):
    """GB/s of one thread summing a READ_MIB MiB float32 array."""
    a = rng.standard_normal(READ_MIB * MIB // 4).astype(np.float32)
    return a.nbytes / best_seconds(lambda: a.sum(), 1, rounds=3) / 1e9


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    ref = gemm_rate()["flops_per_second"] / 1e9
    rows_w7 = (64, 384, 1024, 4096)
    out = {"machine": machine_info(), "reference_gflops": ref,
           "w7_forward_gflops": {r: product_rate(r, 288, 32, rng) for r in rows_w7},
           "w7_weight_gradient_gflops": {r: product_rate(r, 32, 288, rng, gradient=True) for r in rows_w7},
           "wide_layer_gflops": max(product_rate(r, 512, 1280, rng) for r in (64, 128, 256, 512)),
           "w8_expert_product_in_cache_gflops": {rows: product_rate(rows, 256, 256, rng)
                                                 for rows in (1, 8, 64)}}
    out["w8_expert_product_streamed_gflops"], out["w8_weights_streamed_gbs"] = streamed_expert_rate(8, rng)
    out["read_bandwidth_gbs"] = read_bandwidth(rng)
    print(f"reference GEMM 1024x512 @ 512x1280: {ref:.1f} GFLOP/s")
    for name, what in (("w7_forward_gflops", "forward and input gradient (rows x 288) @ W^T"),
                       ("w7_weight_gradient_gflops", "weight gradient G^T (32 x rows) @ (rows x 288)")):
        print(f"W7 convolution {what}: " + ", ".join(f"{r} rows {v:.1f}" for r, v in out[name].items()) + " GFLOP/s")
    print(f"a wide layer (rows by a transposed 1280 x 512 weight), best: {out['wide_layer_gflops']:.1f} GFLOP/s")
    for rows, r in out["w8_expert_product_in_cache_gflops"].items():
        print(f"W8 expert product {rows} rows @ 256 x 256, weight in cache: {r:.1f} GFLOP/s")
    print(f"W8 expert product 8 rows over {EXPERT_WEIGHTS:,} weights ({EXPERT_WEIGHTS // 4} MiB), streamed: "
          f"{out['w8_expert_product_streamed_gflops']:.1f} GFLOP/s, weights read at {out['w8_weights_streamed_gbs']:.1f} GB/s")
    print(f"one thread's read bandwidth (sum of {READ_MIB} MiB): {out['read_bandwidth_gbs']:.1f} GB/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
