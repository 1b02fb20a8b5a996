"""TFLOP/s against V for gradfeat's bf16 K = 128, C = 256 rows of one merged results file.

Usage: plot_gradfeat.py RESULTS/gradfeat.json OUT.png

One panel per pass (fwd, fwd+bwd): ember's default kernels, the training pair (forward_train +
backward_from, `fwd=packed-save bwd=saved-b`) where present, other named variants given in VARIANTS,
PyTorch eager and torch.compile timed in the same run (same counted FLOPs), the issue's targets and
the bf16 GEMM rate measured in the run.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# (pass, label, fwd variant, bwd variant): the series drawn per pass.
VARIANTS = [
    ("fwd", "ember forward (default)", "packed", None),
    ("fwd", "ember forward saving b", "packed-save", None),
    ("fwd+bwd", "ember training pair (default d_A)", "packed-save", "saved-b"),
    ("fwd+bwd", "ember training pair, d_A from g's images (v13)", "packed-save", "saved-b-gimages"),
    ("fwd+bwd", "ember forward + backward (default)", "packed", "packed-img"),
]
TARGETS = {"fwd": 450.0, "fwd+bwd": 350.0}


def main():
    src, out = sys.argv[1], sys.argv[2]
    doc = json.load(open(src))
    rows = [r for r in doc["rows"] if r["dtype"] == "bf16" and r["shape"].get("K") == 128 and r["shape"].get("C") == 256]
    flops = {}  # (pass, V) -> counted FLOPs, for the PyTorch series
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, pas in zip(axes, ["fwd", "fwd+bwd"]):
        for p, label, fv, bv in VARIANTS:
            if p != pas:
                continue
            pts = sorted((r["shape"]["V"], r["tflops"]) for r in rows if r["pass"] == pas and r["shape"].get("fwd") == fv and r["shape"].get("bwd") == bv)
            for r in rows:
                if r["pass"] == pas and r["shape"].get("fwd") == fv and r["shape"].get("bwd") == bv:
                    flops[(pas, r["shape"]["V"])] = r["tflops"] * r["ms"]
            if pts:
                ax.plot([v for v, _ in pts], [t for _, t in pts], marker="o", label=label)
        for key, label in [("torch_eager_ms", "PyTorch eager"), ("torch_compile_ms", "torch.compile")]:
            pts = {}
            for r in rows:
                v = r["shape"]["V"]
                if r["pass"] == pas and r.get(key) and (pas, v) in flops:
                    pts[v] = flops[(pas, v)] / r[key]
            if pts:
                ax.plot(sorted(pts), [pts[v] for v in sorted(pts)], marker="s", linestyle="--", label=label)
        ax.axhline(TARGETS[pas], color="red", linewidth=1, label=f"target {TARGETS[pas]:.0f}")
        ax.axhline(doc["ceilings"]["gemm_bf16_tflops"], color="gray", linewidth=1, linestyle=":", label="cuBLAS bf16 GEMM (same run)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("V (vertices)")
        ax.set_ylabel("TFLOP/s (counted FLOPs)")
        ax.set_title(f"{pas}, bf16, K = 128, C = 256, rotations")
        ax.set_ylim(0, doc["ceilings"]["gemm_bf16_tflops"] * 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"gradfeat on {doc['device']}, commit {doc['commit']}, {doc['date']}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
