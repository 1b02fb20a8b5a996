// Direct backward for short rows (fc_bwd_direct_bf16_{bf16,f32}, fc_dk_direct): the backward of the
// direct forward's cases (bf16 u, hd = 1, no pregate), without the FFT. Same CTA shape as the forward:
// 16 rows (batch entries) of one head, 8 warps, mma.sync m16n8k16 f16 → f32, f the folded filter.
//
// A. z = T·v again (the forward's product, skipped without GELU and postgate), then per element
//    d_z = d_out·mask·postgate·gelu'(z) and d_postgate = d_out·mask·gelu(z); d_z (f32) stays in shared
//    memory, each row's largest |d_z| in `zmax`.
// B. d_z to f16 twice: per row by its own power of two (for d_u: rows are independent there), and
//    per row by 2^(E − eu_row) with one E for the CTA (for the filter gradient, which sums over rows:
//    the products d_z·(u·2^eu) then all carry the same 2^E, and a row far below the largest product
//    only loses digits the sum would not keep anyway).
// C. d_u = Tᵀ·d_z: the forward's tile loop on the reversed filter f'[d] = f[−d] (its pair words
//    built from the same taps), B operand d_z.
// D. The filter gradient g[j] = Σ_b Σ_t d_z[b,t]·v[b,t − j] for j in [dmin, dmax] (d_k = g[0..Lk),
//    d_k_rev[m] = g[−m], d_D = g[0]): for a tile pair at offset P (t-tile T, s-tile T − P) the
//    product Σ_b d_z[b, 16T + r]·v[b, 16(T − P) + c] is one mma with the batch as its k dimension
//    (A = d_z transposed, B = v transposed, both by ldmatrix.trans); summing over T in the
//    accumulator leaves a 16 × 16 tile per P whose diagonals r − c are g[16P + r − c]. The tiles go to
//    shared memory, then each g[j] is summed over its (at most two) tiles in a fixed order.
// Several CTAs per head (B > 16) write their g to a workspace and fc_dk_direct sums them in order;
// with one CTA per head the kernel writes d_k, d_k_rev and d_D itself. Deterministic throughout.
// Dynamic shared memory: see direct_bwd_smem (cuda.rs).

#define FDB_NONE (-1000000)  // no live row (for the largest-exponent reduction)

struct FdbGeom {
    int dzs;     // f32 words per row of the d_z / d_u staging (16·tt + 4: fragment stores conflict-free)
    int plo, np; // tile offsets P of the filter gradient: plo .. plo + np − 1
    int pw_off;  // byte offsets in the dynamic shared memory
    int fs_off, dzf_off, acc_off;
};

__device__ __forceinline__ int fdb_floor_div16(int a) { return a >= 0 ? a / 16 : -((15 - a) / 16); }

__device__ __forceinline__ FdbGeom fdb_geom(const FdGeom& q) {
    FdbGeom b;
    b.dzs = 16 * q.tt + 4;
    b.plo = -fdb_floor_div16(15 - q.dmin);  // ⌈(dmin − 15)/16⌉
    b.np = fdb_floor_div16(q.dmax + 15) - b.plo + 1;
    b.pw_off = 3 * FD_ROWS * q.vstride * 2;
    // The taps are read only while the pair words are built, before d_z is: they share its space.
    b.dzf_off = (b.pw_off + 2 * q.npw * 4 + 15) & ~15;
    b.fs_off = b.dzf_off;
    b.acc_off = b.dzf_off + FD_ROWS * b.dzs * 4;
    return b;
}

__device__ __forceinline__ void fd_ldmatrix4_trans(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// The filter gradient g[j] (j in [dmin, dmax]) to d_k / d_k_rev / d_D of head h.
__device__ __forceinline__ void fdb_store_dk(const FcParams& p, int h, int j, float v) {
    if (j >= 0 && j < p.lk) reinterpret_cast<float*>(p.dk)[(i64)h * p.lk + j] = v;
    if (j <= 0 && -j < p.lkr) reinterpret_cast<float*>(p.dkrev)[(i64)h * p.lkr - j] = v;
    if (j == 0 && p.ddd) reinterpret_cast<float*>(p.ddd)[h] = v;
}

// One output tile i (16 outputs × the CTA's 16 rows) of a Toeplitz product (z again, and d_u): acc0
// rows 0–7, acc1 rows 8–15, over input tiles jlo..jhi. pw: the filter pairs, pbase = g − 2c − (their
// first j); vbase: this lane's ldmatrix row address of input tile 0.
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

// GELU, POST: the options (p.gelu, p.has_post), as template arguments so that the per-element
// epilogue has no branches.
template <typename TD, bool GELU, bool POST>
__device__ void fc_bwd_direct(const FcParams& p) {
    constexpr bool NEED_Z = GELU || POST;
    extern __shared__ __align__(16) unsigned char fd_smem[];
    __shared__ float back_u[FD_ROWS];   // 2^-(eu + ef): z's scale back
    __shared__ int eu_row[FD_ROWS];
    __shared__ u32 zmax[FD_ROWS];       // largest |d_z| of the row (f32 bits)
    __shared__ float back_du[FD_ROWS];  // 2^-(ez + ef): d_u's scale back
    __shared__ float sz_row[FD_ROWS];   // 2^ez
    __shared__ int ek_row[FD_ROWS];     // E − eu: d_z's exponent for the filter gradient
    __shared__ int e_k;                 // E
    const FdGeom q = fd_geom(p);
    const FdbGeom gb = fdb_geom(q);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const i64 rbs = (p.B + FD_ROWS - 1) / FD_ROWS;
    const int h = (int)(blockIdx.x / rbs);
    const int part = (int)(blockIdx.x - (i64)h * rbs);
    const i64 b0 = (i64)part * FD_ROWS;
    const int nvalid = (int)min((i64)FD_ROWS, p.B - b0);
    const i64 L = p.L;
    const int lint = (int)L;
    const int lpad = 16 * q.tt;

    u16* vs = reinterpret_cast<u16*>(fd_smem);   // [16][vstride] v·2^eu (f16)
    u16* dzu = vs + FD_ROWS * q.vstride;          // [16][vstride] d_z·2^ez (f16)
    u16* dzk = dzu + FD_ROWS * q.vstride;         // [16][vstride] d_z·2^(E − eu) (f16)
    u32* pw = reinterpret_cast<u32*>(fd_smem + gb.pw_off);  // [npw] pairs of f
    u32* pwr = pw + q.npw;                                  // [npw] pairs of f'
    float* fs = reinterpret_cast<float*>(fd_smem + gb.fs_off);    // [npw + 2]: f[pw0 − 1 + i] (in dzf's space)
    float* dzf = reinterpret_cast<float*>(fd_smem + gb.dzf_off);  // [16][dzs]: z, d_z, then d_u (f32)
    float* accs = reinterpret_cast<float*>(fd_smem + gb.acc_off); // [np][32] the tiles' diagonal sums
    float* tw = accs + gb.np * 32 + warp * 16 * 17;                // this warp's [16][17] staging tile

    fd_load_rows(p, q, vs, h, b0, nvalid, warp, lane);
    fd_load_taps(p, q, fs, q.npw + 2, h);
    if (tid < FD_ROWS) zmax[tid] = 0u;
    asm volatile("cp.async.wait_all;");
    __syncthreads();

    const int ef = fd_filter_exp(q, fs, lane);
    const float sf = fd_pow2(ef);
    fd_scale_rows(q, vs, ef, back_u, eu_row, warp, lane);
    // Pairs (f[j], f[j − 1]) from j = pw0, and (f'[j], f'[j − 1]) = (f[−j], f[1 − j]) from j = −dmax − 32.
    for (int i = tid; i < q.npw; i += blockDim.x) {
        pw[i] = ember_pack2<ember_f16>(fs[i + 1] * sf, fs[i] * sf);
        pwr[i] = ember_pack2<ember_f16>(fs[q.npw - i] * sf, fs[q.npw - i + 1] * sf);
    }
    __syncthreads();

    const int g = lane >> 2, c = lane & 3;
    const int mq = lane >> 3, mr = lane & 7;
    // ldmatrix rows as in the forward: matrix lane / 8 is (rows 0–7 | 8–15) × (s0..+7 | s0+8..+15).
    const u32 row_off = (u32)((((mq >> 1) * 8 + mr) * q.vstride + (mq & 1) * 8) * 2);
    const u32 vbase = (u32)__cvta_generic_to_shared(vs) + row_off;
    const int below = (q.dmax + 15) / 16, above = (-q.dmin + 15) / 16;

    // A. d_z per tile of 16 outputs.
    for (int base = 0; base < q.tt; base += 2 * FD_WARPS) {
#pragma unroll 1
        for (int half = 0; half < 2; ++half) {
            const int i = fd_zigzag(base, half, warp);
            if (i >= q.tt) continue;
            // Lane: row n = lane / 2, outputs t .. t + 7. Its d_out (and postgate) loads are issued
            // before the tile's products, so that their latency hides behind them.
            const int n = lane >> 1;
            const int tl = i * 16 + (lane & 1) * 8;
            const int t = tl;  // L ≤ 4096 here: 32-bit compares
            const bool live = n < nvalid && t < lint;
            const bool vec = (L & 7) == 0;
            const i64 row = ((b0 + (live ? n : 0)) * p.H + h) * L;
            float dout[8], post[8];
            uint4 raw_d0 = make_uint4(0, 0, 0, 0), raw_d1 = raw_d0, raw_p = raw_d0;
            if (live && vec) {
                if constexpr (sizeof(TD) == 4) {
                    raw_d0 = *reinterpret_cast<const uint4*>(reinterpret_cast<const float*>(p.dout) + row + t);
                    raw_d1 = *reinterpret_cast<const uint4*>(reinterpret_cast<const float*>(p.dout) + row + t + 4);
                } else {
                    raw_d0 = *reinterpret_cast<const uint4*>(reinterpret_cast<const TD*>(p.dout) + row + t);
                }
                if (POST) raw_p = *reinterpret_cast<const uint4*>(reinterpret_cast<const ember_bf16*>(p.post) + row + t);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const bool in = live && t + e < lint;
                    dout[e] = in ? ld<TD>(p.dout, row + t + e) : 0.f;
                    post[e] = in && POST ? ld<ember_bf16>(p.post, row + t + e) : 0.f;
                }
            }
            const float m = live && p.has_mask ? reinterpret_cast<const float*>(p.mask)[(b0 + n) * p.H + h] : 1.f;
            if (NEED_Z) {
                float acc0[4], acc1[4];
                fd_tile(acc0, acc1, i, max(0, i - below), min(q.tt - 1, i + above), pw, g - 2 * c - q.pw0, vbase);
                fd_stage(dzf, gb.dzs, i * 16, g, c, acc0, acc1);
            }
            __syncwarp();
            if (live && vec) {
                if constexpr (sizeof(TD) == 4) {
                    const u32 w[8] = {raw_d0.x, raw_d0.y, raw_d0.z, raw_d0.w, raw_d1.x, raw_d1.y, raw_d1.z, raw_d1.w};
#pragma unroll
                    for (int e = 0; e < 8; ++e) dout[e] = __uint_as_float(w[e]);
                } else {
                    ember_unpack8(raw_d0, dout, true);
                }
                if (POST) ember_unpack8(raw_p, post, true);
            }
            float dz[8], dpost[8];
            float mx = 0.f;
            bool nan = false;
            const float back = back_u[n];
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float dg = dout[e] * m;
                float gz = 0.f, gp = 1.f;
                if (NEED_Z) {
                    const float z = dzf[n * gb.dzs + tl + e] * back;
                    gz = z;
                    if (GELU) fc_gelu_grad(z, gz, gp);
                }
                float d = dg * gp;
                if (POST) {
                    d *= post[e];
                    dpost[e] = dg * gz;
                }
                dz[e] = live && t + e < lint ? d : 0.f;
                mx = fmaxf(mx, fabsf(dz[e]));
                nan |= dz[e] != dz[e];
            }
            if (POST && live) {
                if (vec) {
                    ember_store16(reinterpret_cast<ember_bf16*>(p.dpost) + row + t, dpost);
                } else {
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        if (t + e < lint) st<ember_bf16>(p.dpost, row + t + e, dpost[e]);
                }
            }
#pragma unroll
            for (int e = 0; e < 8; ++e) dzf[n * gb.dzs + tl + e] = dz[e];
            // The pair of lanes of row n, then one update of the row's largest (order-free: deterministic).
            // A NaN makes the row's largest NaN (above every other bit pattern; its scale is then 1).
            u32 bits = nan ? 0x7fc00000u : __float_as_uint(mx);
            bits = max(bits, __shfl_xor_sync(0xffffffffu, bits, 1));
            if ((lane & 1) == 0 && bits) atomicMax(&zmax[n], bits);
        }
    }
    __syncthreads();

    // B. Scales: ez per row (d_u), E for the CTA (filter gradient).
    if (warp == 0) {
        const int r = lane & 15;
        const float mz = __uint_as_float(zmax[r]);
        const bool live = mz > 0.f && mz <= 3.4e38f;
        const int ez = fd_scale_exp(mz);
        int lz = live ? ilogbf(mz) - eu_row[r] : FDB_NONE;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) lz = max(lz, __shfl_xor_sync(0xffffffffu, lz, off));
        const int E = lz == FDB_NONE ? 0 : max(-250, min(250, 13 - lz));
        if (lane < FD_ROWS) {
            sz_row[r] = fd_pow2(ez);
            back_du[r] = fd_pow2(-ez) * fd_pow2(-ef);
            ek_row[r] = E - eu_row[r];
        }
        if (lane == 0) e_k = E;
    }
    __syncthreads();
    for (int n = warp; n < FD_ROWS; n += FD_WARPS) {
        for (int t = lane * 8; t < lpad; t += 256) {
            const float* src = dzf + n * gb.dzs + t;
            const float su = sz_row[n];
            const int ek = ek_row[n];
            u32 ou[4], ok[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float lo = src[2 * e], hi = src[2 * e + 1];
                ou[e] = ember_pack2<ember_f16>(lo * su, hi * su);
                ok[e] = ember_pack2<ember_f16>(ldexpf(lo, ek), ldexpf(hi, ek));
            }
            *reinterpret_cast<uint4*>(dzu + n * q.vstride + t) = make_uint4(ou[0], ou[1], ou[2], ou[3]);
            *reinterpret_cast<uint4*>(dzk + n * q.vstride + t) = make_uint4(ok[0], ok[1], ok[2], ok[3]);
        }
    }
    __syncthreads();

    // C. d_u tiles (reversed filter: the band's sides swap) into the staging rows.
    {
        const u32 dzbase = (u32)__cvta_generic_to_shared(dzu) + row_off;
        const int pbase_r = g - 2 * c - (-q.dmax - 32);
        for (int base = 0; base < q.tt; base += 2 * FD_WARPS) {
#pragma unroll 1
            for (int half = 0; half < 2; ++half) {
                const int i = fd_zigzag(base, half, warp);
                if (i >= q.tt) continue;
                float acc0[4], acc1[4];
                fd_tile(acc0, acc1, i, max(0, i - above), min(q.tt - 1, i + below), pwr, pbase_r, dzbase);
                fd_stage(dzf, gb.dzs, i * 16, g, c, acc0, acc1);
            }
        }
    }

    // D. Filter-gradient tiles, one offset P per unit (zigzag over units).
    {
        // A: d_z transposed (rows t, columns b): memory rows b, matrix lane / 8 = (b 0–7 | 8–15) × (t | t + 8).
        const u32 abase = (u32)__cvta_generic_to_shared(dzk) + row_off;
        // B: v transposed (rows b = k, columns s = n): matrices (b 0–7, s), (b 8–15, s), (b 0–7, s + 8), (b 8–15, s + 8).
        const u32 bbase = (u32)__cvta_generic_to_shared(vs) + (u32)((((mq & 1) * 8 + mr) * q.vstride + (mq >> 1) * 8) * 2);
        for (int base = 0; base < gb.np; base += 2 * FD_WARPS) {
#pragma unroll 1
            for (int half = 0; half < 2; ++half) {
                const int u = fd_zigzag(base, half, warp);  // uniform across the warp
                if (u >= gb.np) continue;
                const int P = gb.plo + u;
                float acc0[4] = {0.f, 0.f, 0.f, 0.f}, acc1[4] = {0.f, 0.f, 0.f, 0.f};
                const int tlo = max(0, P), thi = min(q.tt, q.tt + P);
#pragma unroll 2
                for (int T = tlo; T < thi; ++T) {
                    u32 a[4], b[4];
                    fd_ldmatrix4_trans(a, abase + (u32)(T * 32));
                    fd_ldmatrix4_trans(b, bbase + (u32)((T - P) * 32));
                    fd_mma4(acc0, a, b[0], b[1]);
                    fd_mma4(acc1, a, b[2], b[3]);
                }
                // Tile [r][c] (acc0 columns 0–7, acc1 columns 8–15; rows g, g + 8) through the warp's
                // staging, then lane dd < 31 sums diagonal r − c = dd − 15 (in r order).
                __syncwarp();
                tw[g * 17 + 2 * c] = acc0[0];
                tw[g * 17 + 2 * c + 1] = acc0[1];
                tw[(g + 8) * 17 + 2 * c] = acc0[2];
                tw[(g + 8) * 17 + 2 * c + 1] = acc0[3];
                tw[g * 17 + 8 + 2 * c] = acc1[0];
                tw[g * 17 + 8 + 2 * c + 1] = acc1[1];
                tw[(g + 8) * 17 + 8 + 2 * c] = acc1[2];
                tw[(g + 8) * 17 + 8 + 2 * c + 1] = acc1[3];
                __syncwarp();
                {
                    const int d = lane - 15;
                    float s = 0.f;
#pragma unroll
                    for (int r = 0; r < 16; ++r) {
                        const int col = r - d;
                        if (col >= 0 && col < 16) s += tw[r * 17 + col];
                    }
                    if (lane < 31) accs[u * 32 + lane] = s;
                }
            }
        }
    }
    __syncthreads();

    // d_u rows out (u's dtype, bf16).
    for (int n = warp; n < nvalid; n += FD_WARPS) {
        for (int t = lane * 8; t < lint; t += 256) {
            const i64 row = ((b0 + n) * p.H + h) * L;
            const float back = back_du[n];
            float o[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) o[e] = dzf[n * gb.dzs + t + e] * back;
            if ((L & 7) == 0) {
                ember_store16(reinterpret_cast<ember_bf16*>(p.du) + row + t, o);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    if (t + e < lint) st<ember_bf16>(p.du, row + t + e, o[e]);
            }
        }
    }
    // The filter gradient: g[j] from the tiles P = ⌈(j − 15)/16⌉ … ⌊(j + 15)/16⌋, each over its
    // diagonal r − c = j − 16P, in a fixed order.
    const int ndiag = q.dmax - q.dmin + 1;
    for (int jj = tid; jj < ndiag; jj += blockDim.x) {
        const int j = q.dmin + jj;
        const int p0 = max(gb.plo, -fdb_floor_div16(15 - j)), p1 = min(gb.plo + gb.np - 1, fdb_floor_div16(j + 15));
        float s = 0.f;
        for (int P = p0; P <= p1; ++P) s += accs[(P - gb.plo) * 32 + j - 16 * P + 15];
        const float v = ldexpf(s, -e_k);
        if (rbs == 1) fdb_store_dk(p, h, j, v);
        else reinterpret_cast<float*>(p.sbuf)[((i64)h * rbs + part) * ndiag + jj] = v;
    }
}

#if FC_BLOCK == 256
// fc_bwd_direct{G}{P}_bf16_{d_out}: G = GELU, P = postgate; MINB: the CTAs per SM the register cap
// aims at — 4 (64 registers) where ptxas needs no spills for it, else 3 (80 registers, no spills).
// EMBER_FFTCONV_DIRECT_BWD_MINB (FD_BWD_MINB) sets it for every entry, for measurements.
#ifdef FD_BWD_MINB
#define FDB_MINB(m) FD_BWD_MINB
#else
#define FDB_MINB(m) m
#endif
#define FDB_ENTRY(G, P, NAME, TD, MINB) \
    extern "C" __global__ void __launch_bounds__(FD_WARPS * 32, FDB_MINB(MINB)) fc_bwd_direct##G##P##_bf16_##NAME(FcParams p) { ember_grid_dependency_wait(); fc_bwd_direct<TD, G, P>(p); }
FDB_ENTRY(0, 0, bf16, ember_bf16, 4)
FDB_ENTRY(0, 1, bf16, ember_bf16, 3)
FDB_ENTRY(1, 0, bf16, ember_bf16, 4)
FDB_ENTRY(1, 1, bf16, ember_bf16, 3)
FDB_ENTRY(0, 0, f32, float, 4)
FDB_ENTRY(0, 1, f32, float, 3)
FDB_ENTRY(1, 0, f32, float, 3)
FDB_ENTRY(1, 1, f32, float, 3)
#undef FDB_ENTRY
#undef FDB_MINB

// The filter gradients of heads with several CTAs: the CTAs' partials (sbuf, [head][part][diag])
// summed in part order.
extern "C" __global__ void fc_dk_direct(FcParams p) { ember_grid_dependency_wait();
    const int dmin = p.lkr > 0 ? -(p.lkr - 1) : 0;
    const int ndiag = p.lk - 1 - dmin + 1;
    const i64 rbs = (p.B + FD_ROWS - 1) / FD_ROWS;
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (i64)p.heads * ndiag) return;
    const int h = (int)(idx / ndiag), jj = (int)(idx - (i64)h * ndiag);
    const float* src = reinterpret_cast<const float*>(p.sbuf) + (i64)h * rbs * ndiag + jj;
    float s = 0.f;
    for (i64 r = 0; r < rbs; ++r) s += src[r * ndiag];
    fdb_store_dk(p, h, dmin + jj, s);
}
#endif
