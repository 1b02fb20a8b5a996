#!/usr/bin/env python3
"""Time the PyTorch reference of every ember op on the shapes `ember bench` used.

Usage: torch_ref.py EMBER_BENCH.json OUT.json [--compile all|largest|none] [--budget-ms 200]

For each row of ember's bench file (op, pass, dtype, params) this builds the same inputs in PyTorch,
times the eager reference and its torch.compile'd version with CUDA events (warm-up, then the median
of repetitions; input sets rotated like ember's when they fit in L2), and writes
{key: {"torch_eager_ms": .., "torch_compile_ms": ..}}. Ops register their reference in REFS below.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64}


def l2_bytes():
    props = torch.cuda.get_device_properties(0)
    return getattr(props, "L2_cache_size", 50 * 2**20)


def rotation(bytes_per_set):
    l2 = l2_bytes()
    if bytes_per_set >= 3 * l2:
        return 1
    return max(2, min(64, math.ceil(3 * l2 / max(bytes_per_set, 1))))


def time_ms(fn, sets, budget_ms):
    """Median per-call time of fn(i) with CUDA events, like ember's timer."""
    for i in range(3):
        fn(i % sets)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(3):
        fn(i % sets)
    torch.cuda.synchronize()
    per = max((time.perf_counter() - t0) * 1e3 / 3, 1e-3)
    reps = int(min(2000, max(5, budget_ms / per)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn(i % sets)
        ends[i].record()
    torch.cuda.synchronize()
    ms = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
    return ms[len(ms) // 2]


# ---------------------------------------------------------------------------------------------------
# References. Each takes (pass, dtype, params) and returns (fn_factory, make_inputs) where
# make_inputs(seed) builds one input set and fn_factory(compiled: bool) returns f(inputs).

def gelu_ref(pass_, dtype, p):
    n = p["n"]

    def make(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = (torch.rand(n, device="cuda", generator=g) * 6 - 3).to(dtype)
        dy = (torch.rand(n, device="cuda", generator=g) * 2 - 1).to(dtype)
        return x.requires_grad_(pass_ != "fwd"), dy

    def fwd(x, dy):
        return F.gelu(x)

    def fwd_bwd(x, dy):
        y = F.gelu(x)
        (gx,) = torch.autograd.grad(y, x, dy)
        return gx

    return (fwd if pass_ == "fwd" else fwd_bwd), make


REFS = {"gelu": gelu_ref}


def register(name):
    def deco(f):
        REFS[name] = f
        return f
    return deco


# Layer families add their references in bench/refs_<op>.py, imported here if present.
for _mod in ("refs_diffusion", "refs_gradfeat", "refs_fftconv", "refs_clifford"):
    try:
        m = __import__(_mod)
        REFS.update(getattr(m, "REFS", {}))
    except ImportError:
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_json")
    ap.add_argument("out_json")
    ap.add_argument("--compile", default="all", choices=["all", "largest", "none"])
    ap.add_argument("--budget-ms", type=float, default=200.0)
    ap.add_argument("--ops", default="", help="comma-separated op names (default: all rows)")
    args = ap.parse_args()
    doc = json.load(open(args.bench_json))
    rows = doc["rows"]
    if args.ops:
        keep = set(args.ops.split(","))
        rows = [r for r in rows if r["op"] in keep]
    # With --compile largest, only the largest-bytes row per (op, pass, dtype) is compiled.
    largest = {}
    for r in rows:
        k = (r["op"], r["pass"], r["dtype"])
        if k not in largest or r["bytes"] > largest[k]["bytes"]:
            largest[k] = r
    out = {}
    for r in rows:
        ref = REFS.get(r["op"])
        if ref is None:
            print(f"[torch] no reference for op {r['op']}", file=sys.stderr)
            continue
        dtype = DTYPES[r["dtype"]]
        res = {"torch_eager_ms": None, "torch_compile_ms": None}
        try:
            # A "<pass> graph" row (ember's GPU time from a replayed CUDA graph) is compared with
            # PyTorch's same pass, event-timed.
            fn, make = ref(r["pass"].removesuffix(" graph"), dtype, r["params"])
            sets = rotation(r["bytes"])
            inputs = [make(1000 + i) for i in range(sets)]
            res["torch_eager_ms"] = time_ms(lambda i: fn(*inputs[i]), sets, args.budget_ms)
            want = args.compile == "all" or (args.compile == "largest" and largest[(r["op"], r["pass"], r["dtype"])] is r)
            if want:
                # A fresh dynamo state per row: the references compile one function per shape, and
                # past dynamo's recompile limit torch.compile silently runs it eagerly (a Clifford run
                # of 330 rows timed eager as "compile" from its 141st row on).
                torch._dynamo.reset()
                cfn = torch.compile(fn, dynamic=False)
                res["torch_compile_ms"] = time_ms(lambda i: cfn(*inputs[i]), sets, args.budget_ms)
            del inputs
        except Exception as e:  # a reference that cannot run (e.g. out of memory) leaves nulls
            res["error"] = f"{type(e).__name__}: {e}"[:300]
        torch.cuda.empty_cache()
        out[r["key"]] = res
        print(f"[torch] {r['op']:<10} {r['pass']:<8} {r['dtype']:<5} {json.dumps(r['params'])[:40]:<40} "
              f"eager {res['torch_eager_ms']} ms  compile {res['torch_compile_ms']} ms", file=sys.stderr, flush=True)
        # Rewritten after every row, so that a run cut short by a time limit keeps the rows it timed.
        json.dump(out, open(args.out_json, "w"), indent=1)
    json.dump(out, open(args.out_json, "w"), indent=1)


if __name__ == "__main__":
    main()
