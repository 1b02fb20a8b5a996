#!/usr/bin/env python3
"""Heatmap of the fused Clifford layer's roofline fraction over the batch × channel grid.

Usage: plot_clifford_heatmap.py RESULTS_DIR_OR_JSON [OUT.png]

Reads the merged bench results (bench/merge.py's <gpu>/clifford.json, or a folder holding one),
takes the rows of the fused Cl(3,0) f32 layer (norm on) and draws floor_frac for B × N, forward and
forward+backward side by side, with the speedup over torch.compile where it was timed. Prints the
same grid as text. Writes OUT.png (default: heatmap.png beside the json).
"""
import glob
import json
import os
import sys


def load(path):
    if os.path.isdir(path):
        found = sorted(glob.glob(os.path.join(path, "**", "clifford.json"), recursive=True))
        if not found:
            sys.exit(f"no clifford.json under {path}")
        path = found[0]
    return path, json.load(open(path))


def grid(rows, pass_):
    cells = {}
    for r in rows:
        s = r["shape"]
        # Rows that name a kernel variant ("fwd": "rows", …) are comparisons; the map shows the default.
        default = set(s) <= {"layer", "alg", "B", "N", "norm"}
        if default and r["pass"] == pass_ and r["dtype"] == "f32" and s.get("layer") == "fused" and s.get("alg") == "3,0":
            cells[(s["B"], s["N"])] = r
    bs = sorted({b for b, _ in cells})
    ns = sorted({n for _, n in cells})
    return bs, ns, cells


def main():
    path, doc = load(sys.argv[1])
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(path), "heatmap.png")
    rows = doc["rows"]
    for pass_ in ("fwd", "fwd+bwd"):
        bs, ns, cells = grid(rows, pass_)
        print(f"fused Cl(3,0) f32 {pass_}: floor_frac (B rows × N columns) on {doc['device']}")
        print("B \\ N " + "".join(f"{n:>9}" for n in ns))
        for b in bs:
            print(f"{b:<6}" + "".join(f"{100 * cells[(b, n)]['floor_frac']:8.1f}%" if (b, n) in cells else f"{'—':>9}" for n in ns))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no heatmap image", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    for ax, pass_ in zip(axes, ("fwd", "fwd+bwd")):
        bs, ns, cells = grid(rows, pass_)
        data = [[100 * cells[(b, n)]["floor_frac"] if (b, n) in cells else float("nan") for n in ns] for b in bs]
        im = ax.imshow(data, vmin=0, vmax=100, cmap="viridis", origin="lower", aspect="auto")
        ax.set_xticks(range(len(ns)), [str(n) for n in ns])
        ax.set_yticks(range(len(bs)), [str(b) for b in bs])
        ax.set_xlabel("channels N")
        ax.set_ylabel("batch B")
        target = 85 if pass_ == "fwd" else 65
        ax.set_title(f"{pass_}: % of roofline floor (target {target}%)")
        for yi, b in enumerate(bs):
            for xi, n in enumerate(ns):
                r = cells.get((b, n))
                if r is None:
                    continue
                label = f"{100 * r['floor_frac']:.0f}%"
                if r.get("torch_compile_speedup"):
                    label += f"\n×{r['torch_compile_speedup']:.1f} compile"
                elif r.get("torch_eager_speedup"):
                    label += f"\n×{r['torch_eager_speedup']:.0f} eager"
                ax.text(xi, yi, label, ha="center", va="center", color="white", fontsize=8)
        fig.colorbar(im, ax=ax)
    fig.suptitle(f"ember fused GELU → weighted GP → RMSNorm, Cl(3,0), f32 — {doc['device']} ({doc['commit']})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
