#!/usr/bin/env python3
"""PyTorch reference of ember's `fftconv` op: hyena-dna's fftconv_ref (rfft/irfft of size 2L,
D skip, GELU), on the shapes of `ember bench` (bf16 u, f32 k and D).

Imported by torch_ref.py (REFS). Run directly with --accuracy to print PyTorch's own error with
half-precision inputs against an f64 evaluation of the same formula on the same rounded inputs —
the bound ember's half-precision output is held to (at most twice that error).
"""
import argparse

import torch
import torch.nn.functional as F


def fftconv_ref(u, k, D, gelu=True):
    """hyena-dna's reference: irfft(rfft(u, 2L)·rfft(k, 2L)/2L)[:L] + u·D, GELU, in u's dtype."""
    seqlen = u.shape[-1]
    fft_size = 2 * seqlen
    k_f = torch.fft.rfft(k, n=fft_size) / fft_size
    u_f = torch.fft.rfft(u.to(dtype=k.dtype), n=fft_size)
    y = torch.fft.irfft(u_f * k_f, n=fft_size, norm="forward")[..., :seqlen]
    out = y + u.to(dtype=k.dtype) * D.unsqueeze(-1)
    if gelu:
        out = F.gelu(out)
    return out.to(dtype=u.dtype)


def fftconv_factory(pass_, dtype, p):
    b, h, l = p["b"], p["h"], p["l"]
    gelu = p.get("gelu", True)

    def make(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        u = (torch.rand(b, h, l, device="cuda", generator=g) * 2 - 1).to(dtype)
        s = l ** -0.5
        k = (torch.rand(h, l, device="cuda", generator=g) * 2 - 1) * s
        D = torch.rand(h, device="cuda", generator=g) * 2 - 1
        dy = (torch.rand(b, h, l, device="cuda", generator=g) * 2 - 1).to(dtype)
        if pass_ != "fwd":
            u.requires_grad_(True)
            k.requires_grad_(True)
            D.requires_grad_(True)
        return u, k, D, dy

    def fwd(u, k, D, dy):
        return fftconv_ref(u, k, D, gelu)

    def fwd_bwd(u, k, D, dy):
        out = fftconv_ref(u, k, D, gelu)
        return torch.autograd.grad(out, (u, k, D), dy)

    return (fwd if pass_ == "fwd" else fwd_bwd), make


REFS = {"fftconv": fftconv_factory}


def accuracy(lengths, b, h):
    """‖out − ref‖/‖ref‖ of PyTorch's reference with bf16/f16 inputs (f32 math, rounded output)."""
    torch.manual_seed(0)
    print(f"{'dtype':<6} {'L':>7}  torch_rel_err   (B={b} H={h}, u ~ N(0,1), k ~ N(0,1/L), D ~ N(0,1), GELU)")
    for dtype in (torch.bfloat16, torch.float16):
        for l in lengths:
            u = torch.randn(b, h, l, device="cuda").to(dtype)
            k = torch.randn(h, l, device="cuda") * l ** -0.5
            D = torch.randn(h, device="cuda")
            ref = fftconv_ref(u.double(), k.double(), D.double())
            out = fftconv_ref(u, k, D).double()
            err = ((out - ref).norm() / ref.norm()).item()
            print(f"{str(dtype).split('.')[-1]:<6} {l:>7}  {err:.4e}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--accuracy", action="store_true")
    ap.add_argument("--b", type=int, default=4)
    ap.add_argument("--h", type=int, default=64)
    args = ap.parse_args()
    if args.accuracy:
        accuracy([256, 1000, 4096, 16384, 65536], args.b, args.h)
