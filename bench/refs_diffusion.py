"""PyTorch reference of ember's `diffusion` op (DiffusionNet spectral diffusion), for torch_ref.py.

The layer is the seed-001 code verbatim; a batch of meshes (params V = a list of vertex counts) is a
Python loop over the meshes, as DiffusionNet users write it. Inputs match ember's bench: uniform
values with the same ranges (x, d_out in [-1, 1]; basis in ±1/√K; mass ~ √(K·M/V) · [½, 3⁄2];
evals in [0, 20]; times in [0.01, 0.2]); evals and times in the activation dtype, as in the seed.
fwd+bwd is forward then autograd for x and times given d_out, like ember's forward + backward.
"""
import torch


def torch_diffusion(x, basis, mass, evalues, times):
    b_t = basis.transpose(-2, -1)
    x_m = x * mass.unsqueeze(-1)
    in_basis = torch.matmul(b_t, x_m)
    diffs = torch.exp(-evalues.unsqueeze(-1) * times)
    spectral = diffs * in_basis
    return torch.matmul(basis, spectral), spectral


def diffusion_ref(pass_, dtype, p):
    if pass_ not in ("fwd", "fwd+bwd"):
        raise ValueError(f"no PyTorch counterpart for the diagnostic pass {pass_}")
    k, c = p["K"], p["C"]
    sizes = p["V"] if isinstance(p["V"], list) else [p["V"]]
    total = sum(sizes)
    offsets = [0]
    for s in sizes:
        offsets.append(offsets[-1] + s)

    def make(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)

        def u(shape, lo, hi):
            return (torch.rand(shape, device="cuda", generator=g) * (hi - lo) + lo).to(dtype)

        sk = k ** -0.5
        sm = (k * len(sizes) / total) ** 0.5
        x = u((total, c), -1.0, 1.0)
        basis = u((total, k), -sk, sk)
        mass = u((total,), 0.5 * sm, 1.5 * sm)
        evals = u((len(sizes), k), 0.0, 20.0)
        times = u((c,), 0.01, 0.2)
        d_out = u((total, c), -1.0, 1.0)
        if pass_ != "fwd":
            x.requires_grad_(True)
            times.requires_grad_(True)
        return x, basis, mass, evals, times, d_out

    def forward(x, basis, mass, evals, times):
        outs = []
        for m in range(len(sizes)):
            a, b = offsets[m], offsets[m + 1]
            outs.append(torch_diffusion(x[a:b], basis[a:b], mass[a:b], evals[m], times))
        return outs

    def fwd(x, basis, mass, evals, times, d_out):
        return forward(x, basis, mass, evals, times)

    def fwd_bwd(x, basis, mass, evals, times, d_out):
        outs = forward(x, basis, mass, evals, times)
        grads = [d_out[offsets[m]:offsets[m + 1]] for m in range(len(sizes))]
        return torch.autograd.grad([o for o, _ in outs], [x, times], grads)

    return (fwd if pass_ == "fwd" else fwd_bwd), make


REFS = {"diffusion": diffusion_ref}
