"""PyTorch reference of ember's Clifford layers, for bench/torch_ref.py.

The same math as crates/ember-ops/src/clifford (row params: layer = fused | fc | linear, alg "p,q,r",
B, N, norm): multivector GELU x·Φ(x₀), the weighted geometric product with one weight per channel
and grade path (paths ordered by (grade x, grade out, grade y), as ember-ga and flash-clifford),
the per-grade RMS norm over channels, the fully connected product (weights P × N_in × N_out) and
MVLinear (weights (n+1) × N_in × N_out, bias on the scalar blade). Activations are (M × B × N).
The algebra's blade table is built here from the signature, independently of ember.
"""
import itertools
import math

import torch

_TABLES = {}


def algebra(spec):
    """(M, grade of each blade, per-path Cayley tensors C[p, i, l, k]) of Cl(p,q,r)."""
    if spec in _TABLES:
        return _TABLES[spec]
    p, q, r = (list(map(int, spec.split(","))) + [0, 0, 0])[:3]
    n = p + q + r
    metric = [0] * r + [1] * p + [-1] * q  # null vectors first, then positive, then negative
    masks = sorted(range(1 << n), key=lambda m: (bin(m).count("1"), [b for b in range(n) if m >> b & 1]))
    index = {m: i for i, m in enumerate(masks)}
    grade = [bin(m).count("1") for m in masks]

    def sign(a, b):
        swaps, x = 0, a >> 1
        while x:
            swaps += bin(x & b).count("1")
            x >>= 1
        s = -1 if swaps & 1 else 1
        for bit in range(n):
            if a & b & (1 << bit):
                s *= metric[bit]
        return s

    M = 1 << n
    prods = []
    for i, l in itertools.product(range(M), range(M)):
        s = sign(masks[i], masks[l])
        if s:
            prods.append((i, l, index[masks[i] ^ masks[l]], s))
    paths = sorted({(grade[i], grade[k], grade[l]) for i, l, k, _ in prods})  # (gx, go, gy)
    pidx = {t: j for j, t in enumerate(paths)}
    C = torch.zeros(len(paths), M, M, M)
    for i, l, k, s in prods:
        C[pidx[(grade[i], grade[k], grade[l])], i, l, k] = s
    _TABLES[spec] = (M, grade, C)
    return _TABLES[spec]


def mvgelu(x):
    return x * (0.5 * (1.0 + torch.erf(x[0:1] * (1.0 / math.sqrt(2.0)))))


def rms_norm(o, grade):
    parts, start = [], 0
    for k in range(max(grade) + 1):
        end = start + grade.count(k)
        ok = o[start:end]
        r = torch.sqrt((ok * ok).sum(0).mean(-1, keepdim=True) + 1e-6)
        parts.append(ok / r)
        start = end
    return torch.cat(parts, 0)


def fused(x, y, w, C, grade, norm):
    gx, gy = mvgelu(x), mvgelu(y)
    wn = torch.einsum("np,pilk->nilk", w, C.to(w.dtype))
    o = torch.einsum("ibn,lbn,nilk->kbn", gx, gy, wn)
    return rms_norm(o, grade) if norm else o


def fc(x, y, w, C, grade, norm):
    gx, gy = mvgelu(x), mvgelu(y)
    t = torch.einsum("pilk,ibn,lbn->pkbn", C.to(x.dtype), gx, gy)
    o = torch.einsum("pkbn,pnm->kbm", t, w)
    return rms_norm(o, grade) if norm else o


def linear(x, w, bias, grade):
    o = torch.einsum("jbn,jnm->jbm", x, w[torch.tensor(grade, device=x.device)])
    return torch.cat([o[:1] + bias, o[1:]], 0)


def clifford_ref(pass_, dtype, p):
    if pass_ not in ("fwd", "fwd+bwd"):
        raise ValueError(f"no PyTorch counterpart for the diagnostic pass {pass_}")
    M, grade, C = algebra(p["alg"])
    C = C.cuda()
    B, N = p["B"], p["N"]
    layer, norm = p["layer"], p.get("norm", False)
    P = C.shape[0]
    train = pass_ != "fwd"

    def make(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        rnd = lambda *s, scale=1.0: ((torch.rand(*s, device="cuda", generator=g) * 2 - 1) * scale).to(dtype)
        x = rnd(M, B, N, scale=2.0).requires_grad_(train)
        dout = rnd(M, B, N)
        if layer == "linear":
            w = rnd(max(grade) + 1, N, N, scale=0.05).requires_grad_(train)
            bias = rnd(N).requires_grad_(train)
            return x, w, bias, dout
        y = rnd(M, B, N, scale=2.0).requires_grad_(train)
        w = (rnd(N, P) if layer == "fused" else rnd(P, N, N, scale=0.05)).requires_grad_(train)
        return x, y, w, dout

    def forward(*a):
        if layer == "linear":
            x, w, bias, _ = a
            return linear(x, w, bias, grade), (x, w, bias)
        x, y, w, _ = a
        f = fused if layer == "fused" else fc
        return f(x, y, w, C, grade, norm), (x, y, w)

    def fwd(*a):
        return forward(*a)[0]

    def fwd_bwd(*a):
        out, leaves = forward(*a)
        return torch.autograd.grad(out, leaves, a[-1])

    return (fwd if pass_ == "fwd" else fwd_bwd), make


REFS = {"clifford": clifford_ref}
