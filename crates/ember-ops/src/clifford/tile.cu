// Tensor-core tile engine of the fully connected product and MVLinear (mma.sync: TF32 m16n8k8 in
// three passes (split precision, f32-accurate) for f32 activations, bf16/f16 m16n8k16 natively; f32
// accumulation).
//
// A CTA (256 threads, 8 warps) owns a tile of TE_ROWS rows × TE_COLS columns of TE_NACC accumulator
// matrices and walks the reduction dimension K in chunks of TE_KC. Per chunk, every thread stages its
// share of the operand tiles into shared memory: TE_NA "A" slots (TE_ROWS × TE_KC each) and TE_NB
// "B" slots (TE_COLS × TE_KC each), k contiguous, rows padded to TE_KW = 12 words so that fragment
// loads are free of bank conflicts. Then each warp runs the triples (acc, a slot, b slot) of the
// accumulators it owns: acc += A_a · B_bᵀ over the chunk. The global loads of the next chunk are
// issued into registers before the MMAs of the current one, so their latency hides behind them.
//
// The operands come from the producers:
//   TE_A_MODE 1  path terms, row = b, k = n: the generated cl_terms of x[:, b, n], y[:, b, n]
//                (the A operand of the fully connected product, never written to memory)
//   TE_A_MODE 2  path terms, row = n, k = b (the transposed terms, for the weight gradient)
//   TE_A_MODE 3  plain: element (slot s, row r, k) at src + s·ss + r·sr + k·sk (f32 when TE_A_F32,
//                else the activation type), zero out of range
//   B            plain likewise (TE_B_F32), with columns for rows
// The epilogue:
//   TE_EPI 1  store acc[a][row][col] to dst + a·d_sa + row·d_sr + col·d_sc + split·d_split (f32 when
//             TE_D_F32, else the activation type), plus bias[col] on accumulator 0 when TE_BIAS
//   TE_EPI 2  (accumulators = path-term gradients dT[q][b][n]) stage them in shared memory and apply
//             the generated cl_terms_vjp per element (b, n) with x, y: writes dx (dst), dy (dst2)
//
// Prefix (generated per algebra and kernel, cuda.rs): TE_ROWS, TE_COLS, TE_RB = TE_ROWS/16, TE_CB
// (n8 tiles per unit), TE_COLUNITS = TE_COLS/(8·TE_CB), TE_NA, TE_NB, TE_NACC, TE_NUNITS =
// TE_NACC·TE_COLUNITS, TE_UPW (units per warp), the triple tables te_tri_start/te_tri_a/te_tri_b, the
// modes above, and for the term modes CL_M, CL_NT with the generated device functions.
// Options: -DEMBER_T=..., -DTE_HALF=<0|1>, -DTE_BF16=<0|1>.

typedef EMBER_T act_t;
#define TE_THREADS 256
#if TE_HALF
#define TE_KC 16
#else
#define TE_KC 8
#endif
#define TE_KW 12
#define TE_A_TERMS (TE_A_MODE == 1 || TE_A_MODE == 2)

// f32 → the 16-bit half pattern of the activation type.
#if TE_HALF
__device__ __forceinline__ u32 te_cvt(float v) { return (u32)ember_from_f32<act_t>(v).bits; }
#endif

// f32 → TF32 (round to nearest, ties away), as the 32-bit pattern the tensor cores read.
__device__ __forceinline__ u32 te_tf32(float v) {
#ifdef EMBER_HOST_EMU
    return (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
#else
    u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
    return r;
#endif
}

// Element (row, k) of a staged tile: the half pattern, or the f32 value itself (split into two TF32
// parts when the fragments are loaded).
__device__ __forceinline__ void te_put(u32* tile, int row, int k, float v) {
#if TE_HALF
    reinterpret_cast<u16*>(tile)[row * (2 * TE_KW) + k] = (u16)te_cvt(v);
#else
    tile[row * TE_KW + k] = __float_as_uint(v);
#endif
}

#if !TE_HALF
// f32 → hi + lo, both TF32: hi = rna(v), lo = rna(v − hi). With a·b ≈ a_hi·b_hi + a_hi·b_lo +
// a_lo·b_hi ("3xTF32") the products keep about 21 bits: f32 accuracy on TF32 tensor cores, where one
// pass (2^-11 relative rounding of both operands) would leave ~3e-4 relative error on random data.
__device__ __forceinline__ void te_split(u32 raw, u32& hi, u32& lo) {
    const float v = __uint_as_float(raw);
    hi = te_tf32(v);
    lo = te_tf32(v - __uint_as_float(hi));
}
#endif

__device__ __forceinline__ void te_mma(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
#ifdef EMBER_HOST_EMU
    ember_emu_mma<TE_HALF ? (TE_BF16 ? 1 : 2) : 0>(d, a, b);
#elif TE_HALF && TE_BF16
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif TE_HALF
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

template <bool F32> __device__ __forceinline__ float te_ld(const void* src, i64 i) {
    if constexpr (F32) {
        return __ldg(reinterpret_cast<const float*>(src) + i);
    } else {
        return ember_to_f32(reinterpret_cast<const act_t*>(src)[i]);
    }
}

struct te_args {
    const void* a_src;
    const void* b_src;
    const act_t* x;
    const act_t* y;
    i64 R, C, kend;
    i64 a_ss, a_sr, a_sk, b_ss, b_sc, b_sk;
    i64 xB, xN;
    i64 r0, c0;
};

#if TE_A_TERMS
#define TE_EA ((TE_ROWS * TE_KC + TE_THREADS - 1) / TE_THREADS)
#else
#define TE_LA ((TE_NA * TE_ROWS + TE_THREADS - 1) / TE_THREADS)
#endif
#define TE_LB ((TE_NB * TE_COLS + TE_THREADS - 1) / TE_THREADS)

// The next chunk's operands, held in registers between the loads and the shared-memory stores.
// Plain operands are loaded as lines: one (slot, row) line holds the chunk's TE_KC values along k.
struct te_regs {
#if TE_A_TERMS
    float xa[TE_EA][CL_M], ya[TE_EA][CL_M];
    bool live[TE_EA];
#else
    float av[TE_LA][TE_KC];
#endif
    float bv[TE_LB][TE_KC];
};

#if TE_A_TERMS
// Element e of the terms tile: (row, k), the activation element (b, n) it comes from, consecutive
// threads along n (coalesced).
__device__ __forceinline__ void te_terms_index(int e, int& row, int& k) {
#if TE_A_MODE == 1
    k = e % TE_KC;
    row = e / TE_KC;
#else
    row = e % TE_ROWS;
    k = e / TE_ROWS;
#endif
}
#endif

// Line l = (slot, row) of a plain operand with `rows` rows: its TE_KC values at src + slot·ss +
// row·sr + k·sk, k = k0.., zero out of range. Consecutive threads take consecutive rows: coalesced
// when rows are contiguous in memory (sr = 1), whole 32-byte sectors when k is (sk = 1).
template <bool F32, int RR>
__device__ __forceinline__ void te_load_line(float (&v)[TE_KC], int l, int nlines, const void* src, i64 ss, i64 sr, i64 sk, i64 r0, i64 rlim, i64 k0, i64 kend) {
    const int slot = l / RR, r = l % RR;
    const i64 row = r0 + r;
    const bool live = l < nlines && row < rlim;
    const i64 base = (i64)slot * ss + row * sr;
#pragma unroll
    for (int k = 0; k < TE_KC; ++k) v[k] = (live && k0 + k < kend) ? te_ld<F32>(src, base + (k0 + k) * sk) : 0.0f;
}

// Store a line into row r of `slot`: 8 words (TE_KC f32 as TF32, or TE_KC halves), two 16-byte stores.
__device__ __forceinline__ void te_store_line(u32* tiles, int l, int nlines, int rr, const float (&v)[TE_KC]) {
    if (l >= nlines) return;
    const int slot = l / rr, r = l % rr;
    u32 w[8];
#if TE_HALF
#pragma unroll
    for (int q = 0; q < 8; ++q) w[q] = te_cvt(v[2 * q]) | (te_cvt(v[2 * q + 1]) << 16);
#else
#pragma unroll
    for (int q = 0; q < 8; ++q) w[q] = __float_as_uint(v[q]);
#endif
    uint4* dst = reinterpret_cast<uint4*>(tiles + (slot * rr + r) * TE_KW);
    dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
    dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
}

__device__ __forceinline__ void te_load(te_regs& g, const te_args& A, i64 k0) {
    const int tid = threadIdx.x;
#if TE_A_TERMS
    const i64 xBN = A.xB * A.xN;
#pragma unroll
    for (int u = 0; u < TE_EA; ++u) {
        const int e = tid + u * TE_THREADS;
        int row, k;
        te_terms_index(e, row, k);
#if TE_A_MODE == 1
        const i64 b = A.r0 + row, n = k0 + k;
        const bool live = e < TE_ROWS * TE_KC && b < A.R && n < A.kend;
#else
        const i64 n = A.r0 + row, b = k0 + k;
        const bool live = e < TE_ROWS * TE_KC && n < A.R && b < A.kend;
#endif
        g.live[u] = live;
#pragma unroll
        for (int j = 0; j < CL_M; ++j) {
            g.xa[u][j] = live ? ember_to_f32(A.x[(i64)j * xBN + b * A.xN + n]) : 0.0f;
            g.ya[u][j] = live ? ember_to_f32(A.y[(i64)j * xBN + b * A.xN + n]) : 0.0f;
        }
    }
#else
#pragma unroll
    for (int u = 0; u < TE_LA; ++u)
        te_load_line<TE_A_F32, TE_ROWS>(g.av[u], tid + u * TE_THREADS, TE_NA * TE_ROWS, A.a_src, A.a_ss, A.a_sr, A.a_sk, A.r0, A.R, k0, A.kend);
#endif
#pragma unroll
    for (int u = 0; u < TE_LB; ++u)
        te_load_line<TE_B_F32, TE_COLS>(g.bv[u], tid + u * TE_THREADS, TE_NB * TE_COLS, A.b_src, A.b_ss, A.b_sc, A.b_sk, A.c0, A.C, k0, A.kend);
}

__device__ __forceinline__ void te_store(const te_regs& g, u32* As, u32* Bs) {
    const int tid = threadIdx.x;
#if TE_A_TERMS
#pragma unroll
    for (int u = 0; u < TE_EA; ++u) {
        const int e = tid + u * TE_THREADS;
        if (e < TE_ROWS * TE_KC) {
            int row, k;
            te_terms_index(e, row, k);
            float t[CL_NT];
            if (g.live[u]) {
                cl_terms(g.xa[u], g.ya[u], t);
            } else {
#pragma unroll
                for (int q = 0; q < CL_NT; ++q) t[q] = 0.0f;
            }
#pragma unroll
            for (int q = 0; q < CL_NT; ++q) te_put(As + q * (TE_ROWS * TE_KW), row, k, t[q]);
        }
    }
#else
#pragma unroll
    for (int u = 0; u < TE_LA; ++u) te_store_line(As, tid + u * TE_THREADS, TE_NA * TE_ROWS, TE_ROWS, g.av[u]);
#endif
#pragma unroll
    for (int u = 0; u < TE_LB; ++u) te_store_line(Bs, tid + u * TE_THREADS, TE_NB * TE_COLS, TE_COLS, g.bv[u]);
}

// One chunk of MMAs: every unit (accumulator, column block) of this warp runs its triples.
__device__ __forceinline__ void te_mma_chunk(float (&acc)[TE_UPW][TE_RB][TE_CB][4], const u32* As, const u32* Bs, int warp, int lane) {
    const int g8 = lane >> 2, q4 = lane & 3;
#pragma unroll
    for (int s = 0; s < TE_UPW; ++s) {
        const int unit = warp * TE_UPW + s;
        if (unit < TE_NUNITS) {
            const int ai = unit / TE_COLUNITS;
            const int cbase = (unit % TE_COLUNITS) * (TE_CB * 8);
            const int t1 = te_tri_start[ai + 1];
            for (int t = te_tri_start[ai]; t < t1; ++t) {
                const u32* at = As + te_tri_a[t] * (TE_ROWS * TE_KW) + g8 * TE_KW + q4;
                const u32* bt = Bs + te_tri_b[t] * (TE_COLS * TE_KW) + (cbase + g8) * TE_KW + q4;
                u32 af[TE_RB][4];
#pragma unroll
                for (int rb = 0; rb < TE_RB; ++rb) {
                    const u32* p = at + rb * 16 * TE_KW;
                    af[rb][0] = p[0];
                    af[rb][1] = p[8 * TE_KW];
                    af[rb][2] = p[4];
                    af[rb][3] = p[8 * TE_KW + 4];
                }
#if TE_HALF
#pragma unroll
                for (int cb = 0; cb < TE_CB; ++cb) {
                    const u32* p = bt + cb * 8 * TE_KW;
                    const u32 bf[2] = {p[0], p[4]};
#pragma unroll
                    for (int rb = 0; rb < TE_RB; ++rb) te_mma(acc[s][rb][cb], af[rb], bf);
                }
#else
                u32 ah[TE_RB][4], al[TE_RB][4];
#pragma unroll
                for (int rb = 0; rb < TE_RB; ++rb)
#pragma unroll
                    for (int i = 0; i < 4; ++i) te_split(af[rb][i], ah[rb][i], al[rb][i]);
#pragma unroll
                for (int cb = 0; cb < TE_CB; ++cb) {
                    const u32* p = bt + cb * 8 * TE_KW;
                    u32 bh[2], bl[2];
                    te_split(p[0], bh[0], bl[0]);
                    te_split(p[4], bh[1], bl[1]);
#pragma unroll
                    for (int rb = 0; rb < TE_RB; ++rb) {
                        // small parts first
                        te_mma(acc[s][rb][cb], al[rb], bh);
                        te_mma(acc[s][rb][cb], ah[rb], bl);
                        te_mma(acc[s][rb][cb], ah[rb], bh);
                    }
                }
#endif
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(TE_THREADS) cl_kernel(const void* __restrict__ a_src, const void* __restrict__ b_src, const act_t* __restrict__ x,
                                                                   const act_t* __restrict__ y, void* __restrict__ dst, act_t* __restrict__ dst2,
                                                                   const float* __restrict__ bias, i64 R, i64 C, i64 K, i64 k_split, i64 a_ss, i64 a_sr,
                                                                   i64 a_sk, i64 b_ss, i64 b_sc, i64 b_sk, i64 d_sa, i64 d_sr, i64 d_sc, i64 d_split,
                                                                   i64 xB, i64 xN) {
#ifdef EMBER_HOST_EMU
    u32* te_smem = ember_emu_dynamic_smem();
#else
    extern __shared__ __align__(16) u32 te_smem[];
#endif
    u32* As = te_smem;
    u32* Bs = te_smem + TE_NA * TE_ROWS * TE_KW;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g8 = lane >> 2, q4 = lane & 3;
    const i64 kbeg = (i64)blockIdx.z * k_split;
    te_args A;
    A.a_src = a_src;
    A.b_src = b_src;
    A.x = x;
    A.y = y;
    A.R = R;
    A.C = C;
    A.kend = min(K, kbeg + k_split);
    A.a_ss = a_ss;
    A.a_sr = a_sr;
    A.a_sk = a_sk;
    A.b_ss = b_ss;
    A.b_sc = b_sc;
    A.b_sk = b_sk;
    A.xB = xB;
    A.xN = xN;
    A.r0 = (i64)blockIdx.x * TE_ROWS;
    A.c0 = (i64)blockIdx.y * TE_COLS;

    float acc[TE_UPW][TE_RB][TE_CB][4];
#pragma unroll
    for (int s = 0; s < TE_UPW; ++s)
#pragma unroll
        for (int rb = 0; rb < TE_RB; ++rb)
#pragma unroll
            for (int cb = 0; cb < TE_CB; ++cb)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[s][rb][cb][e] = 0.0f;

    te_regs regs;
    if (kbeg < A.kend) {
        te_load(regs, A, kbeg);
        te_store(regs, As, Bs);
    }
    __syncthreads();
    for (i64 k0 = kbeg; k0 < A.kend; k0 += TE_KC) {
        const bool more = k0 + TE_KC < A.kend;
        if (more) te_load(regs, A, k0 + TE_KC);
        te_mma_chunk(acc, As, Bs, warp, lane);
        __syncthreads();
        if (more) {
            te_store(regs, As, Bs);
            __syncthreads();
        }
    }

#if TE_EPI == 1
#pragma unroll
    for (int s = 0; s < TE_UPW; ++s) {
        const int unit = warp * TE_UPW + s;
        if (unit < TE_NUNITS) {
            const int ai = unit / TE_COLUNITS;
            const int cbase = (unit % TE_COLUNITS) * (TE_CB * 8);
#pragma unroll
            for (int rb = 0; rb < TE_RB; ++rb)
#pragma unroll
                for (int cb = 0; cb < TE_CB; ++cb)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const i64 row = A.r0 + rb * 16 + g8 + (e >> 1) * 8;
                        const i64 col = A.c0 + cbase + cb * 8 + 2 * q4 + (e & 1);
                        if (row < R && col < C) {
                            float v = acc[s][rb][cb][e];
#if TE_BIAS
                            if (ai == 0) v += __ldg(bias + col);
#endif
                            const i64 at = ai * d_sa + row * d_sr + col * d_sc + (i64)blockIdx.z * d_split;
#if TE_D_F32
                            reinterpret_cast<float*>(dst)[at] = v;
#else
                            reinterpret_cast<act_t*>(dst)[at] = ember_from_f32<act_t>(v);
#endif
                        }
                    }
        }
    }
#else
    // Stage the path-term gradients dT[q][row][col] (rows b, columns n) and apply the terms' VJP.
    float* Cs = reinterpret_cast<float*>(te_smem);
#pragma unroll
    for (int s = 0; s < TE_UPW; ++s) {
        const int unit = warp * TE_UPW + s;
        if (unit < TE_NUNITS) {
            const int ai = unit / TE_COLUNITS;
            const int cbase = (unit % TE_COLUNITS) * (TE_CB * 8);
#pragma unroll
            for (int rb = 0; rb < TE_RB; ++rb)
#pragma unroll
                for (int cb = 0; cb < TE_CB; ++cb)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int rr = rb * 16 + g8 + (e >> 1) * 8;
                        const int cc = cbase + cb * 8 + 2 * q4 + (e & 1);
                        Cs[(ai * TE_ROWS + rr) * TE_COLS + cc] = acc[s][rb][cb][e];
                    }
        }
    }
    __syncthreads();
    const i64 xBN = xB * xN;
    act_t* dx = reinterpret_cast<act_t*>(dst);
    for (int e = tid; e < TE_ROWS * TE_COLS; e += TE_THREADS) {
        const int rr = e / TE_COLS, cc = e % TE_COLS;
        const i64 b = A.r0 + rr, n = A.c0 + cc;
        if (b < R && n < C) {
            float xi[CL_M], yi[CL_M], gt[CL_NT], dxi[CL_M], dyi[CL_M];
#pragma unroll
            for (int j = 0; j < CL_M; ++j) {
                xi[j] = ember_to_f32(x[(i64)j * xBN + b * xN + n]);
                yi[j] = ember_to_f32(y[(i64)j * xBN + b * xN + n]);
            }
#pragma unroll
            for (int q = 0; q < CL_NT; ++q) gt[q] = Cs[(q * TE_ROWS + rr) * TE_COLS + cc];
            cl_terms_vjp(xi, yi, gt, dxi, dyi);
#pragma unroll
            for (int j = 0; j < CL_M; ++j) {
                dx[(i64)j * xBN + b * xN + n] = ember_from_f32<act_t>(dxi[j]);
                dst2[(i64)j * xBN + b * xN + n] = ember_from_f32<act_t>(dyi[j]);
            }
        }
    }
#endif
}
