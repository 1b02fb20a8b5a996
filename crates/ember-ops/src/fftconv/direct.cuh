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
//   c = lane % 4). The forward keeps 64-bit words q[j] = (pair j, pair j + 8) in shared memory, so
//   that a quad is q[j], q[j − 8]: two 8-byte loads straight into the mma's registers (the backward
//   keeps one 32-bit word per j, fd_tile in direct_bwd.cuh, for its shared-memory budget).
// - B (v): the CTA's 16 rows of u in shared memory (zero past L and past B; copied by cp.async,
//   then converted in place), one ldmatrix.x4 per 16 inputs for both 8-row halves.
// - Tiles with no tap of f ((d0 − 15, d0 + 15) outside [dmin, dmax]) are skipped: the causal
//   filter touches only tiles with s0 ≤ t0, and a short one only a band.
// A warp computes two neighbouring output tiles i, i + 1 at once: their Toeplitz quads are the same
// one step apart, so each step loads one B fragment and one A quad for four mma (the loop is bound
// by shared-memory wavefronts: 2 per mma, against 4 for one tile at a time). The pairs are dealt to
// warps in zigzag order (w, 2W − 1 − w, 2W + w, …) so the causal triangle's long and short rows of
// tiles pair up. Each finished tile goes through the warp's own 16 × 16 staging buffer so that
// lanes own 8 consecutive outputs of one row: GELU, postgate and mask, then one 16-byte store (or
// element stores where L % 8 ≠ 0).
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
// Four taps per thread per round, their loads issued before any is used: a plain loop waits one DRAM
// latency per tap (the profile's hottest stall at L = 1024, ~4 rounds per thread).
__device__ __forceinline__ void fd_load_taps(const FcParams& p, const FdGeom& q, float* fs, int n, int h) {
    constexpr int U = 4;
    for (int i0 = threadIdx.x; i0 < n; i0 += U * blockDim.x) {
        float v[U];
#pragma unroll
        for (int e = 0; e < U; ++e) {
            const int i = i0 + e * blockDim.x, j = q.pw0 - 1 + i;
            v[e] = (i < n && j >= q.dmin && j <= q.dmax) ? fd_tap(p, h, j) : 0.f;
        }
#pragma unroll
        for (int e = 0; e < U; ++e) {
            if (i0 + e * blockDim.x < n) fs[i0 + e * blockDim.x] = v[e];
        }
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

// The forward's A quad from the 64-bit pair table: pq[w] = (pw[w], pw[w + 8]), so {pq[w], pq[w − 8]}
// is {pw[w], pw[w + 8], pw[w − 8], pw[w]}: two 8-byte loads, no register moves.
__device__ __forceinline__ void fd_quad(u32 (&a)[4], const uint2* pq, int w) {
    const uint2 x = pq[w], y = pq[w - 8];
    a[0] = x.x;
    a[1] = x.y;
    a[2] = y.x;
    a[3] = y.y;
}

// Input tiles jlo..jhi of one output tile into acc (rows 0–7, rows 8–15); wi = pbase + 16·i.
__device__ __forceinline__ void fd_steps1(float (&acc)[2][4], int jlo, int jhi, int wi, const uint2* pq, u32 vbase) {
#pragma unroll 2
    for (int j = jlo; j <= jhi; ++j) {
        u32 b[4], a[4];
        fd_ldmatrix4(b, vbase + (u32)(j * 16 * 2));
        fd_quad(a, pq, wi - 16 * j);
        fd_mma4(acc[0], a, b[0], b[1]);
        fd_mma4(acc[1], a, b[2], b[3]);
    }
}

// Input tiles jlo..jhi of two neighbouring output tiles ix, ix + 1 at once. The Toeplitz quad of
// (ix + 1, j) is that of (ix, j − 1), so each step loads one B fragment and one new A quad for four
// mma (the shared-memory traffic per mma is what bounds the loop: 2 wavefronts instead of 4).
__device__ __forceinline__ void fd_steps2(float (&x)[2][4], float (&y)[2][4], int jlo, int jhi, int wx, const uint2* pq, u32 vbase) {
    u32 prev[4];
    fd_quad(prev, pq, wx - 16 * (jlo - 1));
#pragma unroll 2
    for (int j = jlo; j <= jhi; ++j) {
        u32 b[4], a[4];
        fd_ldmatrix4(b, vbase + (u32)(j * 16 * 2));
        fd_quad(a, pq, wx - 16 * j);
        fd_mma4(x[0], a, b[0], b[1]);
        fd_mma4(x[1], a, b[2], b[3]);
        fd_mma4(y[0], prev, b[0], b[1]);
        fd_mma4(y[1], prev, b[2], b[3]);
#pragma unroll
        for (int e = 0; e < 4; ++e) prev[e] = a[e];
    }
}

// Output tiles ix (inputs xlo..xhi) and ix + 1 (ylo..yhi): their common input tiles by fd_steps2, the
// rest by fd_steps1 (every range below may be empty). A fixed order per tile: deterministic.
__device__ __forceinline__ void fd_tile_pair(float (&x)[2][4], float (&y)[2][4], int ix, int xlo, int xhi, int ylo, int yhi, const uint2* pq, int pbase, u32 vbase) {
#pragma unroll
    for (int e = 0; e < 4; ++e) x[0][e] = x[1][e] = y[0][e] = y[1][e] = 0.f;
    const int wx = pbase + 16 * ix, wy = wx + 16;
    const int lo = max(xlo, ylo), hi = min(xhi, yhi);
    if (lo > hi) {
        fd_steps1(x, xlo, xhi, wx, pq, vbase);
        fd_steps1(y, ylo, yhi, wy, pq, vbase);
        return;
    }
    fd_steps1(x, xlo, lo - 1, wx, pq, vbase);
    fd_steps1(y, ylo, lo - 1, wy, pq, vbase);
    fd_steps2(x, y, lo, hi, wx, pq, vbase);
    fd_steps1(x, hi + 1, xhi, wx, pq, vbase);
    fd_steps1(y, hi + 1, yhi, wy, pq, vbase);
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

// A finished output tile i of the forward: staged through the warp's buffer ws so that a lane owns
// row n = lane / 2, outputs 16·i + 8·(lane % 2) … + 7; scaled back, GELU, mask, postgate, stored.
template <typename TO>
__device__ __forceinline__ void fd_fwd_epilogue(const FcParams& p, float* ws, const float* back_row, int i, const float (&acc)[2][4], int h, i64 b0, int nvalid, int lane) {
    const int g = lane >> 2, c = lane & 3;
    const i64 L = p.L;
    __syncwarp();
    fd_stage(ws, FD_WS, 0, g, c, acc[0], acc[1]);
    __syncwarp();
    const int n = lane >> 1;
    const i64 t = (i64)i * 16 + (lane & 1) * 8;
    if (n >= nvalid || t >= L) return;
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

    u16* vs = reinterpret_cast<u16*>(fd_smem);                                      // [16][vstride]
    uint2* pq = reinterpret_cast<uint2*>(fd_smem + (size_t)FD_ROWS * q.vstride * 2);  // [npw]
    float* fs = reinterpret_cast<float*>(pq + q.npw);                                // [npw + 1]: f[pw0 − 1 + i]
    float* ws = fs + q.npw + 1 + warp * FD_ROWS * FD_WS;                             // this warp's [16][FD_WS]

    // The rows of u and the filter taps, all loads in flight at once.
    fd_load_rows(p, q, vs, h, b0, nvalid, warp, lane);
    fd_load_taps(p, q, fs, q.npw + 1, h);
    asm volatile("cp.async.wait_all;");
    __syncthreads();

    const int ef = fd_filter_exp(q, fs, lane);
    const float sf = fd_pow2(ef);
    fd_scale_rows(q, vs, ef, back_row, nullptr, warp, lane);
    // The filter pair table: pq[i] = (pair i, pair i + 8), pair i = (f[j], f[j − 1])·2^ef at j = pw0 + i.
    // (The tiles read pairs up to npw − 3; the guard only keeps the last words inside fs.)
    for (int i = tid; i < q.npw; i += blockDim.x) {
        const u32 lo = ember_pack2<ember_f16>(fs[i + 1] * sf, fs[i] * sf);
        const u32 hi = i + 8 < q.npw ? ember_pack2<ember_f16>(fs[i + 9] * sf, fs[i + 8] * sf) : 0u;
        pq[i] = make_uint2(lo, hi);
    }
    __syncthreads();

    const int g = lane >> 2, c = lane & 3;
    // ldmatrix rows: matrix lane / 8 is (rows 0–7 | 8–15) × (inputs s0..+7 | s0+8..+15).
    const int mq = lane >> 3, mr = lane & 7;
    const u32 vbase = (u32)__cvta_generic_to_shared(vs + ((mq >> 1) * 8 + mr) * q.vstride + (mq & 1) * 8);
    const int pbase = g - 2 * c - q.pw0;
    // Band of tiles with taps: s-tile j of output tile i when 16(i − j) ∈ (dmin − 16, dmax + 16).
    const int below = (q.dmax + 15) / 16, above = (-q.dmin + 15) / 16;
    // Neighbouring output tiles 2u, 2u + 1 together, the pairs u dealt in zigzag order.
    const int units = (q.tt + 1) / 2;
    for (int base = 0; base < units; base += 2 * FD_WARPS) {
#pragma unroll 1
        for (int half = 0; half < 2; ++half) {
            const int u = fd_zigzag(base, half, warp);
            if (u >= units) continue;
            const int ix = 2 * u, iy = ix + 1;
            float x[2][4], y[2][4];
            if (iy >= q.tt) {  // the last tile of an odd count alone
#pragma unroll
                for (int e = 0; e < 4; ++e) x[0][e] = x[1][e] = 0.f;
                fd_steps1(x, max(0, ix - below), min(q.tt - 1, ix + above), pbase + 16 * ix, pq, vbase);
                fd_fwd_epilogue<TO>(p, ws, back_row, ix, x, h, b0, nvalid, lane);
                continue;
            }
            fd_tile_pair(x, y, ix, max(0, ix - below), min(q.tt - 1, ix + above), max(0, iy - below), min(q.tt - 1, iy + above), pq, pbase, vbase);
            fd_fwd_epilogue<TO>(p, ws, back_row, ix, x, h, b0, nvalid, lane);
            fd_fwd_epilogue<TO>(p, ws, back_row, iy, y, h, b0, nvalid, lane);
        }
    }
}

// Four CTAs per SM (64 registers: two tiles' accumulators); EMBER_FFTCONV_DIRECT_FWD_MINB
// (FD_FWD_MINB) sets it, for measurements.
#ifndef FD_FWD_MINB
#define FD_FWD_MINB 4
#endif
#if FC_BLOCK == 256  // one copy, in the module the host launches it from
extern "C" __global__ void __launch_bounds__(FD_WARPS * 32, FD_FWD_MINB) fc_fwd_direct_bf16_bf16(FcParams p) { ember_grid_dependency_wait(); fc_fwd_direct<ember_bf16>(p); }
extern "C" __global__ void __launch_bounds__(FD_WARPS * 32, FD_FWD_MINB) fc_fwd_direct_bf16_f32(FcParams p) { ember_grid_dependency_wait(); fc_fwd_direct<float>(p); }
#endif
