//! FFT long convolution (Hyena / H3), fused forward and backward, any length L ≥ 1.
//!
//! Spec. u: (B, H, L) in f32/f16/bf16; k: (Hh, Lk) f32 with 1 ≤ Lk ≤ L and Hh = H / head_dim;
//! D: (Hh) f32, optional. Options: `gelu`; `dropout_mask` (B, H) f32 (whole channels, as
//! hyena-dna); `k_rev` (Hh, Lkr) f32, 1 ≤ Lkr ≤ L, an anticausal term; `pregate` and `postgate`
//! (B, H, L) in u's dtype; `out_f32` (the output is f32 instead of u's dtype); `head_dim` ∈ {1, 8}.
//!
//! With head_dim = 1 (Hh = H), per row (b, h):
//! - v = u ⊙ pregate (or u)
//! - y[t] = Σ_{0≤s≤t} k[h,s]·v[t−s]  (+ Σ_{m≥0, t+m<L} k_rev[h,m]·v[t+m])
//! - z = y + D[h]·v; g = gelu(z) if `gelu`, else z; out = g ⊙ postgate ⊙ mask[b,h].
//!
//! This is hyena-dna's `fftconv_ref`: irfft(rfft(u, n)·rfft(k, n)/n)[:L] + D·u, GELU, dropout.
//!
//! Multi-head (H3 form, head_dim = hd = 8): for head g < Hh and i, j < hd, with channels
//! ci = g·hd + i and cj = g·hd + j, pregate plays H3's `v` and postgate H3's `q`:
//! - w_ij = u[b,ci] ⊙ pregate[b,cj]; z_ij = conv_g(w_ij) + D[g]·w_ij; g_ij = gelu(z_ij) or z_ij
//! - out[b,cj] = mask[b,cj] · Σ_i postgate[b,ci] ⊙ g_ij.
//!
//! For hd = 1 this is the single-head form above (i = j). Absent gates are ones.
//!
//! Backward ([`backward`]) returns d_u, d_k, d_k_rev, d_D, d_pregate, d_postgate (f32 arithmetic;
//! d_u and the gate gradients in u's dtype, the filter gradients in f32). The mask is not
//! differentiated. With d_g_ij = d_out[cj]·mask[cj]·postgate[ci] and d_z_ij = d_g_ij·gelu'(z_ij):
//! - d_w_ij = corr_g(d_z_ij) + D[g]·d_z_ij  (corr: the adjoint of the causal + anticausal conv)
//! - d_u[ci] = Σ_j d_w_ij ⊙ pregate[cj];  d_pregate[cj] = Σ_i d_w_ij ⊙ u[ci]
//! - d_postgate[ci] = Σ_j d_out[cj]·mask[cj] ⊙ g_ij
//! - d_k[g,s] = Σ_{b,i,j,t} d_z_ij[t]·w_ij[t−s];  d_k_rev[g,m] = Σ d_z_ij[t]·w_ij[t+m]
//! - d_D[g] = Σ d_z_ij·w_ij.
//!
//! FFT sizes are chosen internally: N is the smallest power of two ≥ max(32, L + max(Lk, Lkr) − 1),
//! so the circular convolution of size N equals the linear one on [0, L); on CUDA with bf16 u and no
//! k_rev, where that gives 16384 but 10240, 12288 or 14336 points also hold L + Lk − 1 and L ≤ N/2
//! (4096 < L ≤ 7168 with a full filter), the forward takes the mixed-radix size, and so does the
//! backward up to 12288 (`pair_mixed.cuh`); likewise on thread-block clusters (sm_90, hd = 1) the
//! forward takes N = 20480, 24576, 28672, 40960, 49152 or 57344 below the
//! power of two 32768 or 65536 (8192 < L ≤ 14336 and 16384 < L ≤ 28672 with a full filter), and the
//! backward runs on clusters at N = 20480, 24576, 40960, 49152 (`pair_bwd.cuh`, NOTES "v24"; at 28672
//! and 57344 it keeps the power of two). D is folded into the
//! filter (it is a tap at lag 0), so the fused kernels never re-read v for the skip term.
//!
//! Devices: f64 on the CPU runs the reference (every tensor f64 then); f32/f16/bf16 on the CPU run
//! the fast path (realfft, rayon); CUDA tensors run the fused kernels (`fftconv.cu`): a filter
//! spectrum computed once per call and read by every row, an on-chip FFT for N ≤ 32768 (one pass
//! over HBM), a four-step decomposition beyond (three passes). Short rows (bf16 u, head_dim 1, no
//! pregate, L ≤ 1024) skip the FFT in the forward: it is then the Toeplitz product y = T(k_eff)·u on
//! tensor cores (`direct.cuh`; f16 operands scaled by powers of two, f32 accumulation: u exact, the
//! filter rounded at 2^-11, below the bf16 output's rounding), and at L ≤ 512 the backward likewise
//! (`direct_bwd.cuh`: z again, d_u = Tᵀ·d_z, the filter gradient as per-offset tensor-core products
//! summed over the batch).
//! Every input is validated before any launch.
//!
//! Precision on CUDA with bf16 u beyond the direct forward's lengths: the pair kernels transform two
//! rows of a head (batch entries 2q and 2q + 1) as one complex signal. The forward at 4096 < L ≤ 8192
//! (N = 16384 and the mixed-radix sizes) keeps each row's range (a row of zeros gives exactly D·0
//! through GELU, a row 2^-30 below its partner keeps ~1.7e-3 relative error; NOTES "v15"). Elsewhere
//! (the other forward sizes, and every pair backward) the pair shares one scale, so a row much smaller
//! than its partner (all zero, e.g. padding, by the same mechanism) carries noise at ~2^-11 of the
//! partner's magnitude (measured for a row 2^-30 below O(1) partners: ~1e-4 absolute), while the whole
//! output's relative error stays ~1.6e-3 (what the checks bound). Where that matters, put sequences of
//! similar scale at neighbouring batch entries, or use f32 / f16 u (CUDA-core FFT, one row at a time).

pub mod cpu;
pub mod cuda;
pub mod reference;
mod suite;
#[cfg(test)]
mod tests;

use crate::harness::validate;
use ember_core::{DType, Device, Error, Result, Tensor};

pub use suite::Family;

/// Largest FFT size (real points) the CUDA path supports: L + Lk − 1 ≤ 2^24.
pub const MAX_CUDA_FFT: usize = 1 << 24;

/// Options of the convolution. Build with [`Options::new`] and the chained setters.
#[derive(Clone, Copy, Debug)]
pub struct Options<'a> {
    pub gelu: bool,
    /// (B, H) f32: each output channel multiplied by its mask value.
    pub dropout_mask: Option<&'a Tensor>,
    /// (Hh, Lkr) f32: the anticausal filter.
    pub k_rev: Option<&'a Tensor>,
    /// (B, H, L), u's dtype: multiplies u before the convolution (H3's `v` when head_dim = 8).
    pub pregate: Option<&'a Tensor>,
    /// (B, H, L), u's dtype: multiplies the output (H3's `q` when head_dim = 8).
    pub postgate: Option<&'a Tensor>,
    /// Output in f32 instead of u's dtype.
    pub out_f32: bool,
    /// 1 or 8 (H3 multi-head form); must divide H.
    pub head_dim: usize,
    /// CUDA only: use the four-step (multi-pass) kernels even where the on-chip FFT fits, so tests
    /// and compute-sanitizer reach that path at small sizes.
    pub force_four_step: bool,
    /// CUDA only: bytes of four-step intermediates per round of launches (`None`: 512 MiB, less on
    /// GPUs under 16 GiB; see `cuda::round_bytes`). Tests set it tiny so that a small call runs in
    /// many rounds (one row, or one head, per round).
    pub four_step_round_bytes: Option<usize>,
    /// CUDA only, bf16 u: run the on-chip forward's FFTs as DFT-matrix products on tensor cores
    /// where the size allows (complex size 256 ≤ M ≤ 4096); elsewhere ignored. Also switched on
    /// for every call by `EMBER_FFTCONV_TC=1`.
    pub tensor_cores: bool,
    /// The forward is followed by [`backward`] (a training step): where the backward runs the
    /// CUDA pair kernels (bf16 u, head_dim = 1, on-chip sizes) with an FFT of N ≥ 8192 points
    /// (L + max(Lk, Lkr) − 1 > 4096; below, recomputing was measured faster) and needs z (GELU or
    /// a postgate),
    /// and where the backward takes the CUDA four-step path (long rows, head_dim = 1, any dtype, GELU
    /// or a postgate; the forward four-step too, or in bf16 at FFT sizes 65536 and 131072 on thread
    /// block clusters), the forward also writes z = y + D·v in u's dtype (one more B·H·L store) and
    /// the backward reads it instead of recomputing it (one of its four transforms; on the
    /// four-step path an inverse row FFT and an inverse column FFT per row). d_z then sees z rounded
    /// to u's dtype (≈ 2^−9 relative in bf16, within bf16's tolerance); out is bitwise the same.
    /// On the four-step path (head_dim = 1) the forward also keeps the spectrum of every row of
    /// u ⊙ pregate, with or without GELU: f32 complex, 8·(L + 1) bytes per row for a power-of-two L
    /// (as much as PyTorch's autograd keeps of rfft(u, 2L)); the backward then skips a column and a
    /// row FFT of every row, and the values are the ones it would have computed.
    /// Elsewhere (CPU, other dtypes or sizes) nothing is saved and the backward recomputes z.
    pub training: bool,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            gelu: false,
            dropout_mask: None,
            k_rev: None,
            pregate: None,
            postgate: None,
            out_f32: false,
            head_dim: 1,
            force_four_step: false,
            four_step_round_bytes: None,
            tensor_cores: false,
            training: false,
        }
    }
}

impl<'a> Options<'a> {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn gelu(mut self, on: bool) -> Self {
        self.gelu = on;
        self
    }
    pub fn dropout_mask(mut self, mask: &'a Tensor) -> Self {
        self.dropout_mask = Some(mask);
        self
    }
    pub fn k_rev(mut self, k_rev: &'a Tensor) -> Self {
        self.k_rev = Some(k_rev);
        self
    }
    pub fn pregate(mut self, gate: &'a Tensor) -> Self {
        self.pregate = Some(gate);
        self
    }
    pub fn postgate(mut self, gate: &'a Tensor) -> Self {
        self.postgate = Some(gate);
        self
    }
    pub fn out_f32(mut self, on: bool) -> Self {
        self.out_f32 = on;
        self
    }
    pub fn head_dim(mut self, hd: usize) -> Self {
        self.head_dim = hd;
        self
    }
    pub fn four_step_round_bytes(mut self, bytes: usize) -> Self {
        self.four_step_round_bytes = Some(bytes);
        self
    }
    pub fn force_four_step(mut self, on: bool) -> Self {
        self.force_four_step = on;
        self
    }
    pub fn training(mut self, on: bool) -> Self {
        self.training = on;
        self
    }
    pub fn tensor_cores(mut self, on: bool) -> Self {
        self.tensor_cores = on;
        self
    }
}

/// The sizes of one call, after validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub b: usize,
    pub h: usize,
    pub l: usize,
    pub lk: usize,
    /// Length of k_rev, 0 when there is none.
    pub lk_rev: usize,
    pub hd: usize,
}

impl Dims {
    /// Number of filters (heads): H / head_dim.
    pub fn heads(&self) -> usize {
        self.h / self.hd
    }
    /// Real FFT size: a power of two ≥ L + max(Lk, Lkr) − 1 (so no circular wrap reaches [0, L)),
    /// and ≥ 32 (the smallest size the CUDA kernels are built for).
    pub fn fft_size(&self) -> usize {
        (self.l + self.lk.max(self.lk_rev) - 1).next_power_of_two().max(32)
    }
    /// Elements of u (B·H·L).
    pub fn numel(&self) -> usize {
        self.b * self.h * self.l
    }
}

/// What [`forward`] returns: the output, and what [`backward`] needs (the inputs, borrowed, and on
/// CUDA the filter spectrum, so backward does not recompute it).
pub struct Forward<'a> {
    pub out: Tensor,
    saved: Saved<'a>,
}

struct Saved<'a> {
    u: &'a Tensor,
    k: &'a Tensor,
    d: Option<&'a Tensor>,
    opts: Options<'a>,
    dims: Dims,
    spectrum: Option<cuda::Spectrum>,
    /// What a training forward kept for the backward on CUDA (see [`Options::training`]).
    kept: cuda::Kept,
}

impl Forward<'_> {
    pub fn dims(&self) -> Dims {
        self.saved.dims
    }
    /// Whether the forward kept z for the backward (a training forward where it applies).
    pub fn saved_z(&self) -> bool {
        self.saved.kept.z()
    }
    /// Whether the forward kept every row's spectrum for the backward (a training forward on the
    /// CUDA four-step path).
    pub fn saved_row_spectra(&self) -> bool {
        self.saved.kept.w()
    }
}

/// Gradients of a scalar loss with respect to every differentiable input.
pub struct Grads {
    /// (B, H, L), u's dtype.
    pub d_u: Tensor,
    /// (Hh, Lk), f32 (f64 on the reference path).
    pub d_k: Tensor,
    /// (Hh, Lkr) when k_rev was given.
    pub d_k_rev: Option<Tensor>,
    /// (Hh) when D was given.
    pub d_d: Option<Tensor>,
    /// (B, H, L), u's dtype, when a pregate was given.
    pub d_pregate: Option<Tensor>,
    /// (B, H, L), u's dtype, when a postgate was given.
    pub d_postgate: Option<Tensor>,
}

/// The dtype of the output (and of d_out).
pub fn out_dtype(u: DType, opts: &Options) -> DType {
    if opts.out_f32 && u != DType::F64 {
        DType::F32
    } else {
        u
    }
}

fn filter(arg: &str, t: &Tensor, device: Device, dtype: DType, heads: usize, l: usize) -> Result<usize> {
    validate::device(arg, t, device)?;
    validate::dtype(arg, t, dtype)?;
    let expected = format!("(H/head_dim, {arg}_len) = ({heads}, n) with 1 ≤ n ≤ L = {l}");
    if t.dims() != 2 || t.dim(0) != heads || t.dim(1) == 0 || t.dim(1) > l {
        return Err(Error::shape(arg, expected, t.shape()));
    }
    Ok(t.dim(1))
}

/// Check every input; return the sizes.
pub fn validate(u: &Tensor, k: &Tensor, d: Option<&Tensor>, opts: &Options) -> Result<Dims> {
    validate::non_empty("u", u)?;
    validate::activation_dtype("u", u)?;
    validate::rank("u", u, 3, "(B, H, L)")?;
    let (b, h, l) = (u.dim(0), u.dim(1), u.dim(2));
    let hd = opts.head_dim;
    if hd != 1 && hd != 8 {
        return Err(Error::invalid("head_dim", format!("expected 1 or 8, got {hd}")));
    }
    if h % hd != 0 {
        return Err(Error::invalid("head_dim", format!("expected a divisor of H = {h}, got {hd}")));
    }
    let heads = h / hd;
    let dev = u.device();
    // Filters, skip and mask are f32 (f64 with an f64 u: the reference path).
    let pd = if u.dtype() == DType::F64 { DType::F64 } else { DType::F32 };
    let lk = filter("k", k, dev, pd, heads, l)?;
    let lk_rev = match opts.k_rev {
        Some(kr) => filter("k_rev", kr, dev, pd, heads, l)?,
        None => 0,
    };
    if let Some(d) = d {
        validate::like("d", d, dev, pd, &[heads], "(H/head_dim)")?;
    }
    if let Some(m) = opts.dropout_mask {
        validate::like("dropout_mask", m, dev, pd, &[b, h], "(B, H)")?;
    }
    if let Some(g) = opts.pregate {
        validate::like("pregate", g, dev, u.dtype(), u.shape(), "the shape of u")?;
    }
    if let Some(g) = opts.postgate {
        validate::like("postgate", g, dev, u.dtype(), u.shape(), "the shape of u")?;
    }
    let dims = Dims { b, h, l, lk, lk_rev, hd };
    // L + Lk − 1 must not overflow, and on CUDA must fit the largest four-step plan.
    let span = l.checked_add(lk.max(lk_rev)).ok_or_else(|| Error::TooLarge { arg: "u".into(), what: format!("L = {l} overflows") })?;
    if matches!(dev, Device::Cuda(_)) && span - 1 > MAX_CUDA_FFT {
        return Err(Error::TooLarge {
            arg: "u".into(),
            what: format!("L + max(Lk, Lkr) − 1 = {} exceeds the largest CUDA FFT size {MAX_CUDA_FFT}", span - 1),
        });
    }
    Ok(dims)
}

/// out = fftconv(u, k, D, options); see the module doc for the exact formula.
pub fn forward<'a>(u: &'a Tensor, k: &'a Tensor, d: Option<&'a Tensor>, opts: &Options<'a>) -> Result<Forward<'a>> {
    let dims = validate(u, k, d, opts)?;
    let (out, spectrum, kept) = match u.device() {
        Device::Cpu if u.dtype() == DType::F64 => {
            let p = reference_problem(u, k, d, opts, dims)?;
            (Tensor::from_vec(reference::forward(&p), u.shape())?, None, cuda::Kept::default())
        }
        Device::Cpu => (cpu::forward(u, k, d, opts, dims)?, None, cuda::Kept::default()),
        Device::Cuda(_) => cuda::forward(u, k, d, opts, dims)?,
    };
    Ok(Forward { out, saved: Saved { u, k, d, opts: *opts, dims, spectrum, kept } })
}

/// Gradients of Σ out·d_out with respect to every input of the forward call.
pub fn backward(fwd: &Forward, d_out: &Tensor) -> Result<Grads> {
    let s = &fwd.saved;
    let u = s.u;
    validate::like("d_out", d_out, u.device(), out_dtype(u.dtype(), &s.opts), u.shape(), "the shape of u")?;
    match u.device() {
        Device::Cpu if u.dtype() == DType::F64 => {
            let p = reference_problem(u, s.k, s.d, &s.opts, s.dims)?;
            let g = reference::backward(&p, d_out.as_slice::<f64>()?);
            let heads = s.dims.heads();
            Ok(Grads {
                d_u: Tensor::from_vec(g.d_u, u.shape())?,
                d_k: Tensor::from_vec(g.d_k, &[heads, s.dims.lk])?,
                d_k_rev: g.d_k_rev.map(|v| Tensor::from_vec(v, &[heads, s.dims.lk_rev])).transpose()?,
                d_d: if s.d.is_some() { Some(Tensor::from_vec(g.d_d, &[heads])?) } else { None },
                d_pregate: g.d_pregate.map(|v| Tensor::from_vec(v, u.shape())).transpose()?,
                d_postgate: g.d_postgate.map(|v| Tensor::from_vec(v, u.shape())).transpose()?,
            })
        }
        Device::Cpu => cpu::backward(u, s.k, s.d, &s.opts, s.dims, d_out),
        Device::Cuda(_) => cuda::backward(u, s.k, s.d, &s.opts, s.dims, s.spectrum.as_ref(), &s.kept, d_out),
    }
}

fn reference_problem<'t>(u: &'t Tensor, k: &'t Tensor, d: Option<&'t Tensor>, opts: &Options<'t>, dims: Dims) -> Result<reference::Problem<'t>> {
    let sl = |t: Option<&'t Tensor>| t.map(|t| t.as_slice::<f64>()).transpose();
    Ok(reference::Problem {
        dims,
        u: u.as_slice::<f64>()?,
        k: k.as_slice::<f64>()?,
        d: sl(d)?,
        k_rev: sl(opts.k_rev)?,
        mask: sl(opts.dropout_mask)?,
        pregate: sl(opts.pregate)?,
        postgate: sl(opts.postgate)?,
        gelu: opts.gelu,
    })
}
