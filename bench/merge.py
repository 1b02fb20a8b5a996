#!/usr/bin/env python3
"""Merge `ember bench` and `torch_ref.py` outputs into bench/results/<gpu>/<op>.{json,md,png}.

Usage: merge.py EMBER_BENCH.json TORCH.json OUT_DIR

Each <op>.json holds device, date, commit, ceilings and rows (op, pass, dtype, shape, ms, floor_ms,
floor_frac, torch_eager_ms, torch_compile_ms, ...); <op>.md is the same as a table; <op>.png plots
floor_frac per shape for ember, torch eager and torch.compile.
"""
import json
import os
import re
import sys


def slug(name):
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() or "unknown"


def shape_label(params):
    return " ".join(f"{k}={v}" for k, v in params.items())


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def main():
    bench_path, torch_path, out_root = sys.argv[1:4]
    doc = json.load(open(bench_path))
    torch_res = json.load(open(torch_path)) if os.path.exists(torch_path) else {}
    out_dir = os.path.join(out_root, slug(doc["device"]))
    os.makedirs(out_dir, exist_ok=True)
    by_op = {}
    for r in doc["rows"]:
        t = torch_res.get(r["key"], {})
        row = {
            "op": r["op"], "pass": r["pass"], "dtype": r["dtype"], "shape": r["params"],
            "ms": r["ms"], "floor_ms": r["floor_ms"], "floor_frac": r["floor_frac"], "bound": r["bound"],
            "gbps": r["gbps"], "tflops": r["tflops"],
            "torch_eager_ms": t.get("torch_eager_ms"), "torch_compile_ms": t.get("torch_compile_ms"),
        }
        for k in ("torch_eager_ms", "torch_compile_ms"):
            v = row[k]
            row[k.replace("_ms", "_speedup")] = (v / r["ms"]) if v else None
        if r.get("note"):
            row["note"] = r["note"]
        if t.get("error"):
            row["torch_error"] = t["error"]
        by_op.setdefault(r["op"], []).append(row)
    for op, rows in by_op.items():
        meta = {k: doc[k] for k in ("device", "date", "commit", "ceilings")}
        json.dump({**meta, "rows": rows}, open(os.path.join(out_dir, f"{op}.json"), "w"), indent=1)
        with open(os.path.join(out_dir, f"{op}.md"), "w") as f:
            c = doc["ceilings"]
            f.write(f"# {op} on {doc['device']} ({doc['date']}, commit {doc['commit']})\n\n")
            f.write(f"Ceilings measured in the same run: copy {c['copy_gbps']:.0f} GB/s, bf16 GEMM {c['gemm_bf16_tflops']:.0f} TFLOP/s.\n\n")
            f.write("| pass | dtype | shape | ms | floor ms | floor_frac | TFLOP/s | torch eager ms | torch.compile ms | × eager | × compile |\n")
            f.write("|---|---|---|---|---|---|---|---|---|---|---|\n")
            for r in rows:
                f.write(f"| {r['pass']} | {r['dtype']} | {shape_label(r['shape'])} | {r['ms']:.4f} | {r['floor_ms']:.4f} | "
                        f"{100 * r['floor_frac']:.1f}% | {r['tflops']:.1f} | {fmt(r['torch_eager_ms'], '.4f')} | "
                        f"{fmt(r['torch_compile_ms'], '.4f')} | {fmt(r['torch_eager_speedup'], '.2f')} | {fmt(r['torch_compile_speedup'], '.2f')} |\n")
        plot(op, rows, doc, os.path.join(out_dir, f"{op}.png"))
        print(f"[merge] {op}: {len(rows)} rows -> {out_dir}")


def plot(op, rows, doc, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("[merge] matplotlib missing: no plot", file=sys.stderr)
        return
    groups = {}
    for r in rows:
        groups.setdefault((r["pass"], r["dtype"]), []).append(r)
    n = len(groups)
    fig, axes = plt.subplots(n, 1, figsize=(max(7, 1.3 * max(len(g) for g in groups.values()) + 3), 2.8 * n), squeeze=False)
    for ax, ((pass_, dtype), rs) in zip(axes[:, 0], groups.items()):
        xs = range(len(rs))
        w = 0.27
        ember = [100 * r["floor_frac"] for r in rs]
        eager = [100 * r["floor_ms"] / r["torch_eager_ms"] if r["torch_eager_ms"] else 0 for r in rs]
        comp = [100 * r["floor_ms"] / r["torch_compile_ms"] if r["torch_compile_ms"] else 0 for r in rs]
        ax.bar([x - w for x in xs], ember, w, label="ember", color="#d9480f")
        ax.bar(list(xs), eager, w, label="torch eager", color="#868e96")
        ax.bar([x + w for x in xs], comp, w, label="torch.compile", color="#364fc7")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([shape_label(r["shape"]) for r in rs], fontsize=7, rotation=15)
        ax.set_ylabel("% of roofline floor")
        ax.set_title(f"{op} {pass_} {dtype}", fontsize=9)
        ax.set_ylim(0, 105)
        ax.grid(axis="y", alpha=0.3)
    axes[0, 0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{op} on {doc['device']} — commit {doc['commit']}, {doc['date']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
