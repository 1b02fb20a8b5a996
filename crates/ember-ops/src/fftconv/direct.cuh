// Direct convolution on tensor cores for short rows (fc_fwd_direct_bf16_{bf16,f32}): the forward of
// bf16 u with hd = 1 and no pregate, where L is small enough that the Toeplitz product costs fewer
// tensor-core cycles than the FFT path costs CUDA-core ones (the host picks the lengths).
//
// One CTA takes 16 rows (batch entries) of one head: y = T·v per row, T[t][s] = f[t − s] with the
// folded filter f[d] = k[d] (0 ≤ d < Lk) + k_rev[−d] (0 ≤ −d < Lkr) + D·δ[d] — the FFT path's
// k_eff without the wrap. As one GEMM per CTA: Yᵀ (L × 16) = T (L × L) · Vᵀ (L × 16), on mma.sync
// m16n8k16 (f16 operands, f32 accumulation), tiles of 16 outputs t × 16 inputs s.
// - Operands in f16, each scaled by a power of two: each row of u by its own 2^eu and f by 2^ef so
//   that the largest magnitude lands in [2^13, 2^14). A bf16 value (8 significant bits) is then exact
//   in f16 unless it is 2^-27 below its row's largest; f rounds at 2^-11 (relative), far below the
//   bf16 output's own rounding. Each output row is scaled back by 2^-(eu + ef) exactly.
// - A (T): a 16 × 16 tile at offset d0 = t0 − s0 holds f[d0 + m − kk]; a lane's four fragment
//   registers are pairs (f[j], f[j − 1]) at j = d0 + g − 2c + {0, 8, −8, 0} (g = lane / 4,
//   c = lane % 4), so the CTA keeps one word per j in shared memory and each register is one load.
// - B (v): the CTA's 16 rows of u in shared memory (zero past L and past B; copied by cp.async,
//   then converted in place), one ldmatrix.x4 per 16 inputs for both 8-row halves.
// - Tiles with no tap of f ((d0 − 15, d0 + 15) outside [dmin, dmax]) are skipped: the causal
//   filter touches only tiles with s0 ≤ t0, and a short one only a band.
// Output tiles are dealt to warps in zigzag order (w, 2W − 1 − w, 2W + w, …) so the causal
// triangle's long and short rows of tiles pair up. Each finished tile goes through the warp's own
// 16 × 16 staging buffer so that lanes own 8 consecutive outputs of one row: GELU, postgate and
// mask, then one 16-byte store (or element stores where L % 8 ≠ 0).
// Fixed order of every sum: deterministic. Dynamic shared memory: see direct_smem (cuda.rs).

#define FD_WARPS 8
#define FD_ROWS 16
// Staging buffer row stride (f32 words): rows 2c and 2c + 1 of a fragment land on distinct banks.
#define FD_WS 20

struct FdGeom {
    int tt;       // tiles of 16 along L
    int vstride;  // bf16 elements per staged row of u (16·tt + 8: conflict-free ldmatrix rows)
    int dmin, dmax;
    int pw0;      // j of the first filter-pair word (dmin − 32)
    int npw;      // filter-pair words
};

__device__ __forceinline__ FdGeom fd_geom(const FcParams& p) {
    FdGeom q;
    q.tt = (int)((p.L + 15) / 16);
    q.vstride = 16 * q.tt + 8;
    q.dmin = p.lkr > 0 ? -(p.lkr - 1) : 0;
    q.dmax = p.lk - 1;
    q.pw0 = q.dmin - 32;
    q.npw = q.dmax - q.dmin + 65;
    return q;
}

// f[d] of head h (0 outside [dmin, dmax]).
__device__ __forceinline__ float fd_tap(const FcParams& p, int h, int d) {
    float v = 0.f;
    if (d >= 0 && d < p.lk) v += reinterpret_cast<const float*>(p.k)[(i64)h * p.lk + d];
    if (d == 0 && p.dd) v += reinterpret_cast<const float*>(p.dd)[h];
    if (p.lkr > 0 && d <= 0 && -d < p.lkr) v += reinterpret_cast<const float*>(p.krev)[(i64)h * p.lkr - d];
    return v;
}

// A tile's A operand is Toeplitz: its fourth register equals its first. As one 4-register array shared
// by both products of a step, so that the loads land in the instruction's register quad directly.
__device__ __forceinline__ void fd_mma4(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void fd_ldmatrix4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// 16 bytes global → shared by cp.async; zero-filled when !valid (nothing is read then).
__device__ __forceinline__ void fd_cp16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((u32)__cvta_generic_to_shared(dst)), "l"(src), "r"(valid ? 16 : 0));
}

// e with mx·2^e in [2^13, 2^14) (clamped to ±100); 0 when mx is 0 or not finite.
__device__ __forceinline__ int fd_scale_exp(float mx) {
    if (!(mx > 0.f) || !(mx <= 3.4e38f)) return 0;
    return max(-100, min(100, 13 - ilogbf(mx)));
}
__device__ __forceinline__ float fd_pow2(int e) { return __int_as_float((127 + e) << 23); }

// The CTA's 16 rows of u (zero past L and past the batch) into vs as bf16 bits: cp.async where
// L % 8 == 0 (the caller waits), element copies otherwise.
__device__ __forceinline__ void fd_load_rows(const FcParams& p, const FdGeom& q, u16* vs, int h, i64 b0, int nvalid, int warp, int lane) {
    const ember_bf16* u = reinterpret_cast<const ember_bf16*>(p.u);
    const i64 L = p.L;
    const int lpad = 16 * q.tt;
    if ((L & 7) == 0) {
        for (int r = warp; r < FD_ROWS; r += FD_WARPS) {
            const ember_bf16* src = u + ((b0 + r) * p.H + h) * L;
            for (int t = lane * 8; t < lpad; t += 256) {
                const bool valid = r < nvalid && t < L;
                fd_cp16(vs + r * q.vstride + t, valid ? src + t : u, valid);
            }
        }
        asm volatile("cp.async.commit_group;");
    } else {
        for (int r = warp; r < FD_ROWS; r += FD_WARPS) {
            for (int t = lane; t < lpad; t += 32) vs[r * q.vstride + t] = r < nvalid && t < L ? u[((b0 + r) * p.H + h) * L + t].bits : (u16)0;
        }
    }
}

// fs[i] = f[pw0 − 1 + i] for i < n (0 outside [dmin, dmax]).
__device__ __forceinline__ void fd_load_taps(const FcParams& p, const FdGeom& q, float* fs, int n, int h) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int j = q.pw0 - 1 + i;
        fs[i] = (j >= q.dmin && j <= q.dmax) ? fd_tap(p, h, j) : 0.f;
    }
}

// The filter's scale exponent from its largest |f| (every warp finds the same one, so no block
// reduction).
__device__ __forceinline__ int fd_filter_exp(const FdGeom& q, const float* fs, int lane) {
    float mf = 0.f;
    for (int i = lane; i <= q.npw; i += 32) mf = fmaxf(mf, fabsf(fs[i]));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mf = fmaxf(mf, __shfl_xor_sync(0xffffffffu, mf, off));
    return fd_scale_exp(mf);
}

// u's scale per row by the row's largest |u| (warp w owns rows w and w + 8: a warp reduction), so
// rows of very different magnitude keep their own precision and an inf in one row touches no other;
// converts the staged rows to f16·2^eu in place. back_row[r] = 2^-(eu + ef); eu_row[r] = eu.
__device__ __forceinline__ void fd_scale_rows(const FdGeom& q, u16* vs, int ef, float* back_row, int* eu_row, int warp, int lane) {
    const int lpad = 16 * q.tt;
    for (int r = warp; r < FD_ROWS; r += FD_WARPS) {
        // The row's largest |u| as bf16 bits (their order is that of the magnitudes).
        u32 mu = 0;
        for (int t = lane * 8; t < lpad; t += 256) {
            const uint4 w = *reinterpret_cast<const uint4*>(vs + r * q.vstride + t);
            const u32 ws4[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) mu = max(mu, max(ws4[e] & 0x7fffu, (ws4[e] >> 16) & 0x7fffu));
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) mu = max(mu, __shfl_xor_sync(0xffffffffu, mu, off));
        const int eu = mu > 0x7f80u ? 0 : fd_scale_exp(ember_bf16_bits_to_f32(mu));
        if (lane == 0) {
            back_row[r] = fd_pow2(-eu) * fd_pow2(-ef);
            if (eu_row) eu_row[r] = eu;
        }
        const float su = fd_pow2(eu);
        for (int t = lane * 8; t < lpad; t += 256) {
            uint4* a = reinterpret_cast<uint4*>(vs + r * q.vstride + t);
            const uint4 w = *a;
            const u32 in[4] = {w.x, w.y, w.z, w.w};
            u32 o[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) o[e] = ember_pack2<ember_f16>(ember_bf16_bits_to_f32(in[e] & 0xffffu) * su, ember_bf16_bits_to_f32(in[e] >> 16) * su);
            *a = make_uint4(o[0], o[1], o[2], o[3]);
        }
    }
}

// One output tile i (16 outputs × the CTA's 16 rows) of the Toeplitz product: acc0 rows 0–7, acc1
// rows 8–15, over input tiles jlo..jhi. pw: the filter pairs, pbase = g − 2c − (their first j);
// vbase: this lane's ldmatrix row address of input tile 0.
__device__ __forceinline__ void fd_tile(float (&acc0)[4], float (&acc1)[4], int i, int jlo, int jhi, const u32* pw, int pbase, u32 vbase) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc0[e] = acc1[e] = 0.f;
#pragma unroll 2
    for (int j = jlo; j <= jhi; ++j) {
        u32 b[4];
        fd_ldmatrix4(b, vbase + (u32)(j * 16 * 2));
        const int w = pbase + 16 * (i - j);
        u32 a[4];
        a[0] = pw[w];
        a[1] = pw[w + 8];
        a[2] = pw[w - 8];
        a[3] = a[0];
        fd_mma4(acc0, a, b[0], b[1]);
        fd_mma4(acc1, a, b[2], b[3]);
    }
}

// A finished tile (acc0 rows 0–7, acc1 rows 8–15 of 16 outputs from t0) into staging rows of
// `stride` f32 words, as [row n][t]: acc0 holds rows 2c, 2c + 1 at t0 + g and t0 + g + 8, acc1 the
// same for rows 8 + 2c, 8 + 2c + 1.
__device__ __forceinline__ void fd_stage(float* dst, int stride, int t0, int g, int c, const float (&acc0)[4], const float (&acc1)[4]) {
    dst[(2 * c) * stride + t0 + g] = acc0[0];
    dst[(2 * c + 1) * stride + t0 + g] = acc0[1];
    dst[(2 * c) * stride + t0 + g + 8] = acc0[2];
    dst[(2 * c + 1) * stride + t0 + g + 8] = acc0[3];
    dst[(8 + 2 * c) * stride + t0 + g] = acc1[0];
    dst[(8 + 2 * c + 1) * stride + t0 + g] = acc1[1];
    dst[(8 + 2 * c) * stride + t0 + g + 8] = acc1[2];
    dst[(8 + 2 * c + 1) * stride + t0 + g + 8] = acc1[3];
}

// Output tiles are dealt to warps in zigzag order: tile of (base, half) for this warp, base a
// multiple of 2·FD_WARPS.
__device__ __forceinline__ int fd_zigzag(int base, int half, int warp) { return half == 0 ? base + warp : base + 2 * FD_WARPS - 1 - warp; }

template <typename TO>
__device__ void fc_fwd_direct(const FcParams& p) {
    extern __shared__ __align__(16) unsigned char fd_smem[];
    __shared__ float back_row[FD_ROWS];  // 2^-(eu_row + ef): the accumulators' scale back, per row
    const FdGeom q = fd_geom(p);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const i64 rbs = (p.B + FD_ROWS - 1) / FD_ROWS;
    const int h = (int)(blockIdx.x / rbs);
    const i64 b0 = (blockIdx.x - (i64)h * rbs) * FD_ROWS;
    const int nvalid = (int)min((i64)FD_ROWS, p.B - b0);
    const i64 L = p.L;

    u16* vs = reinterpret_cast<u16*>(fd_smem);                                    // [16][vstride]
    u32* pw = reinterpret_cast<u32*>(fd_smem + (size_t)FD_ROWS * q.vstride * 2);  // [npw]
    float* fs = reinterpret_cast<float*>(pw + q.npw);                              // [npw + 1]: f[pw0 − 1 + i]
    float* ws = fs + q.npw + 1 + warp * FD_ROWS * FD_WS;                           // this warp's [16][FD_WS]

    // The rows of u and the filter taps, all loads in flight at once.
    fd_load_rows(p, q, vs, h, b0, nvalid, warp, lane);
    fd_load_taps(p, q, fs, q.npw + 1, h);
    asm volatile("cp.async.wait_all;");
    __syncthreads();

    const int ef = fd_filter_exp(q, fs, lane);
    const float sf = fd_pow2(ef);
    fd_scale_rows(q, vs, ef, back_row, nullptr, warp, lane);
    // The filter pairs (f[j], f[j − 1])·2^ef.
    for (int i = tid; i < q.npw; i += blockDim.x) pw[i] = ember_pack2<ember_f16>(fs[i + 1] * sf, fs[i] * sf);
    __syncthreads();

    const int g = lane >> 2, c = lane & 3;
    // ldmatrix rows: matrix lane / 8 is (rows 0–7 | 8–15) × (inputs s0..+7 | s0+8..+15).
    const int mq = lane >> 3, mr = lane & 7;
    const u32 vbase = (u32)__cvta_generic_to_shared(vs + ((mq >> 1) * 8 + mr) * q.vstride + (mq & 1) * 8);
    const int pbase = g - 2 * c - q.pw0;
    // Band of tiles with taps: s-tile j of output tile i when 16(i − j) ∈ (dmin − 16, dmax + 16).
    const int below = (q.dmax + 15) / 16, above = (-q.dmin + 15) / 16;
    for (int base = 0; base < q.tt; base += 2 * FD_WARPS) {
#pragma unroll 1
        for (int half = 0; half < 2; ++half) {
            const int i = fd_zigzag(base, half, warp);
            if (i >= q.tt) continue;
            float acc0[4], acc1[4];
            fd_tile(acc0, acc1, i, max(0, i - below), min(q.tt - 1, i + above), pw, pbase, vbase);
            // Stage the tile as [row n][t − t0] in the warp's buffer.
            __syncwarp();
            fd_stage(ws, FD_WS, 0, g, c, acc0, acc1);
            __syncwarp();
            // Lane: row n = lane / 2, outputs t0 + 8·(lane % 2) … + 7.
            const int n = lane >> 1;
            const i64 t = (i64)i * 16 + (lane & 1) * 8;
            if (n < nvalid && t < L) {
                const i64 row = ((b0 + n) * p.H + h) * L;
                const float m = p.has_mask ? reinterpret_cast<const float*>(p.mask)[(b0 + n) * p.H + h] : 1.f;
                const float back = back_row[n];
                float z[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const float y = ws[n * FD_WS + (lane & 1) * 8 + e] * back;
                    z[e] = (p.gelu ? fc_gelu(y) : y) * m;
                }
                if ((L & 7) == 0) {
                    if (p.has_post) {
                        float gpost[8];
                        ember_load16(reinterpret_cast<const ember_bf16*>(p.post) + row + t, gpost);
#pragma unroll
                        for (int e = 0; e < 8; ++e) z[e] *= gpost[e];
                    }
                    if constexpr (sizeof(TO) == 4) {
                        float* o = reinterpret_cast<float*>(p.out) + row + t;
                        const float lo4[4] = {z[0], z[1], z[2], z[3]}, hi4[4] = {z[4], z[5], z[6], z[7]};
                        ember_store16(o, lo4);
                        ember_store16(o + 4, hi4);
                    } else {
                        ember_store16(reinterpret_cast<TO*>(p.out) + row + t, z);
                    }
                } else {
#pragma unroll
                    for (int e = 0; e < 8; ++e) {
                        if (t + e < L) {
                            float o = z[e];
                            if (p.has_post) o *= ld<ember_bf16>(p.post, row + t + e);
                            st<TO>(p.out, row + t + e, o);
                        }
                    }
                }
            }
        }
    }
}

#if FC_BLOCK == 256  // one copy, in the module the host launches it from
extern "C" __global__ void __launch_bounds__(FD_WARPS * 32, 6) fc_fwd_direct_bf16_bf16(FcParams p) { fc_fwd_direct<ember_bf16>(p); }
extern "C" __global__ void __launch_bounds__(FD_WARPS * 32, 6) fc_fwd_direct_bf16_f32(FcParams p) { fc_fwd_direct<float>(p); }
#endif
