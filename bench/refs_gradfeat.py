"""PyTorch reference for ember's `gradfeat` op (DiffusionNet's SpatialGradientFeatures), as in the
seed: two mm for g, four mm for the complex channel map, dot and tanh. Imported by torch_ref.py."""
import math

import torch


def spatial_gradients(x, grads_re, grads_im, a_re, a_im):
    g_re = torch.mm(grads_re, x)
    g_im = torch.mm(grads_im, x)
    b_re = g_re @ a_re.T - g_im @ a_im.T
    b_im = g_im @ a_re.T + g_re @ a_im.T
    return torch.tanh(g_re * b_re + g_im * b_im)


def gradfeat_ref(pass_, dtype, p):
    # ember's rows also name the kernel variants they timed ("fwd", "bwd"); PyTorch has one way to
    # run the layer, so those params are ignored here and every variant's row gets the same reference.
    v, k, c = p["V"], p["K"], p["C"]
    assert p.get("form", "spectral") == "spectral" and p.get("rotation", True)

    def make(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        # Same variances as ember's bench inputs: g and b are O(1), so tanh is not saturated.
        u = lambda *shape, scale: ((torch.rand(*shape, device="cuda", generator=g) * 2 - 1) * math.sqrt(3) * scale).to(dtype)
        x = u(k, c, scale=1 / math.sqrt(k))
        grads_re, grads_im = u(v, k, scale=1.0), u(v, k, scale=1.0)
        a_re, a_im = u(c, c, scale=1 / math.sqrt(2 * c)), u(c, c, scale=1 / math.sqrt(2 * c))
        d_out = u(v, c, scale=1.0)
        need = pass_ != "fwd"
        return x.requires_grad_(need), grads_re, grads_im, a_re.requires_grad_(need), a_im.requires_grad_(need), d_out

    def fwd(x, grads_re, grads_im, a_re, a_im, d_out):
        return spatial_gradients(x, grads_re, grads_im, a_re, a_im)

    def fwd_bwd(x, grads_re, grads_im, a_re, a_im, d_out):
        out = spatial_gradients(x, grads_re, grads_im, a_re, a_im)
        return torch.autograd.grad(out, (x, a_re, a_im), d_out)

    return (fwd if pass_ == "fwd" else fwd_bwd), make


REFS = {"gradfeat": gradfeat_ref}
