// Host emulation runtime: blocks, warps and tensor cores for the kernels compiled against
// emu_prelude.h, and the driver that runs one launch over its whole grid. host_fibers.h is
// prepended to this file when it is compiled: the threads of a cluster are fibers of one OS thread.
//
// Usage: driver LAUNCH_FILE. The file lists the buffers (path and byte length; each file is read
// before and written back after the launch), then "gx gy gz block smem nargs", then the arguments,
// one per line: "B id" (a buffer's address), "N 0" (a null pointer) or "S value" (an integer
// scalar). Arguments are passed as 64-bit words, which on x86-64 is how the kernels' pointer,
// long long and int parameters travel. Fragment layouts of mma.sync follow the PTX ISA (m16n8k8
// .tf32, m16n8k16 .bf16/.f16, row.col, f32 accumulators).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

struct ember_emu_dim3 {
    unsigned int x, y, z;
};
thread_local ember_emu_dim3 threadIdx, blockIdx;
ember_emu_dim3 blockDim, gridDim;

// The kernel of this executable (defined by the kernel's translation unit).
extern "C" void* ember_emu_kernel;
// Its cluster shape where it has one (a kernel built with __cluster_dims__ defines it): the blocks
// of a cluster then run at the same time, each on its own threads and shared memory.
extern "C" const unsigned ember_emu_cluster_dims[3] __attribute__((weak));

namespace {
struct Block {
    host_fibers::Barrier block;
    std::vector<host_fibers::Barrier> warps;
    float shfl[32][32];
    u32 a[32][32][4];
    u32 b[32][32][2];
    unsigned char* dynamic_smem;
    unsigned rank;
};
// The block of the calling thread; the blocks of its cluster (rank order) and their barrier.
thread_local Block* emu;
std::vector<Block>* cluster_blocks;
host_fibers::Barrier* cluster_bar;
// Every emulated thread of a cluster is a fiber of this one OS thread.
host_fibers::Scheduler sched;
// Per-thread storage of the kernels' stand-ins (the wgmma queue), one block per fiber, kept from one
// cluster to the next as a thread_local of an OS thread would be.
std::vector<std::unique_ptr<unsigned char[]>> fiber_locals;
size_t fiber_local_bytes = 0;

float bits_f32(u32 u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Element of a fragment word: TF32 (the tensor cores read the top 19 bits) or half `half` of a
// bf16/f16 pair.
float elem(int kind, u32 word, int half) {
    if (kind == 0) return bits_f32(word & 0xffffe000u);
    const u32 bits = (word >> (16 * half)) & 0xffffu;
    if (kind == 1) return bits_f32(bits << 16);
    _Float16 h;
    const u16 b = (u16)bits;
    std::memcpy(&h, &b, 2);
    return (float)h;
}
}  // namespace

void ember_emu_syncthreads() { sched.wait(emu->block); }
u32* ember_emu_dynamic_smem() { return reinterpret_cast<u32*>(emu->dynamic_smem); }
void ember_emu_cluster_sync() { sched.wait(*cluster_bar); }
// Zero-initialised storage of `bytes` private to the calling emulated thread (the same size on every call).
void* ember_emu_thread_local(size_t bytes) {
    const unsigned i = sched.current();
    if (fiber_locals.size() <= i) fiber_locals.resize(i + 1);
    if (!fiber_locals[i]) {
        if (fiber_local_bytes && fiber_local_bytes != bytes) std::abort();
        fiber_local_bytes = bytes;
        fiber_locals[i].reset(new unsigned char[bytes]());
    }
    return fiber_locals[i].get();
}
unsigned ember_emu_cluster_rank() { return emu->rank; }
// Where `p`, an address in the calling block's dynamic shared memory, lies in block `rank` of the cluster.
const void* ember_emu_cluster_map(const void* p, unsigned rank) {
    return (*cluster_blocks)[rank].dynamic_smem + (reinterpret_cast<const unsigned char*>(p) - emu->dynamic_smem);
}

float ember_emu_shfl_xor(float v, int off) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    emu->shfl[w][l] = v;
    sched.wait(emu->warps[w]);
    const float r = emu->shfl[w][l ^ off];
    sched.wait(emu->warps[w]);
    return r;
}

void ember_emu_mma_kind(int kind, float* d, const u32* a, const u32* b) {
    const int w = threadIdx.x / 32, l = threadIdx.x % 32;
    std::memcpy(emu->a[w][l], a, 16);
    std::memcpy(emu->b[w][l], b, 8);
    sched.wait(emu->warps[w]);
    const int g = l >> 2, t = l & 3, K = kind == 0 ? 8 : 16;
    for (int e = 0; e < 4; ++e) {
        const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
        double acc = d[e];
        for (int k = 0; k < K; ++k) {
            float av, bv;
            if (kind == 0) {
                // a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (k = t, n = g), b1 (k = t+4)
                av = elem(0, emu->a[w][(row % 8) * 4 + k % 4][(row >= 8) + 2 * (k >= 4)], 0);
                bv = elem(0, emu->b[w][col * 4 + k % 4][k >= 4], 0);
            } else {
                // reg0 (g, 2t..2t+1), reg1 (g+8, ..), reg2 (g, 2t+8..), reg3 (g+8, 2t+8..); b: (k = 2t.., n = g), (k = 2t+8..)
                av = elem(kind, emu->a[w][(row % 8) * 4 + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k & 1);
                bv = elem(kind, emu->b[w][col * 4 + (k % 8) / 2][k >= 8], k & 1);
            }
            acc += (double)av * (double)bv;
        }
        d[e] = (float)acc;
    }
    sched.wait(emu->warps[w]);
}

typedef void (*kernel_fn)(u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64,
                          u64, u64, u64);

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    FILE* f = std::fopen(argv[1], "r");
    if (!f) return 3;
    int nb = 0;
    if (std::fscanf(f, "%d", &nb) != 1) return 4;
    std::vector<std::string> paths(nb);
    std::vector<std::vector<unsigned char>> bufs(nb);
    for (int i = 0; i < nb; ++i) {
        char path[4096];
        size_t len = 0;
        if (std::fscanf(f, "%4095s %zu", path, &len) != 2) return 5;
        paths[i] = path;
        bufs[i].resize(len);
        FILE* bf = std::fopen(path, "rb");
        if (!bf || std::fread(bufs[i].data(), 1, len, bf) != len) return 6;
        std::fclose(bf);
    }
    unsigned gx, gy, gz, block;
    size_t smem;
    int na;
    if (std::fscanf(f, "%u %u %u %u %zu %d", &gx, &gy, &gz, &block, &smem, &na) != 6 || na > 26) return 7;
    u64 args[26] = {0};
    for (int i = 0; i < na; ++i) {
        char kind;
        long long v;
        if (std::fscanf(f, " %c %lld", &kind, &v) != 2) return 8;
        args[i] = kind == 'B' ? (u64)bufs[v].data() : kind == 'N' ? 0 : (u64)v;
    }
    std::fclose(f);

    blockDim = {block, 1, 1};
    gridDim = {gx, gy, gz};
    const unsigned cd[3] = {ember_emu_cluster_dims ? ember_emu_cluster_dims[0] : 1u, ember_emu_cluster_dims ? ember_emu_cluster_dims[1] : 1u,
                            ember_emu_cluster_dims ? ember_emu_cluster_dims[2] : 1u};
    if (gx % cd[0] || gy % cd[1] || gz % cd[2]) return 10;  // as the driver refuses such a launch
    const unsigned csize = cd[0] * cd[1] * cd[2];
    std::vector<std::vector<unsigned char>> dyn(csize, std::vector<unsigned char>(smem + 64));
    std::vector<Block> ctx(csize);
    for (unsigned c = 0; c < csize; ++c) {
        ctx[c].block.expected = block;
        for (unsigned w = 0; w < (block + 31) / 32; ++w) {
            ctx[c].warps.emplace_back();
            ctx[c].warps.back().expected = std::min(32u, block - 32 * w);
        }
        ctx[c].dynamic_smem = dyn[c].data();
        ctx[c].rank = c;
    }
    host_fibers::Barrier cbar;
    cbar.expected = block * csize;
    cluster_blocks = &ctx;
    cluster_bar = &cbar;
    const unsigned ncx = gx / cd[0], ncy = gy / cd[1];
    const u64 clusters = (u64)ncx * ncy * (gz / cd[2]);
    kernel_fn k = (kernel_fn)ember_emu_kernel;
    // One cluster at a time; fiber i is thread i % block of block i / block (its rank).
    for (u64 cl = 0; cl < clusters; ++cl) {
        const unsigned cx = (unsigned)(cl % ncx), cy = (unsigned)((cl / ncx) % ncy), cz = (unsigned)(cl / ((u64)ncx * ncy));
        // Shared memory starts as NaN patterns, like uninitialized memory that tests would notice.
        for (unsigned c = 0; c < csize; ++c) std::memset(dyn[c].data(), 0xff, dyn[c].size());
        auto resume = [&](unsigned i) {
            const unsigned rank = i / block, rx = rank % cd[0], ry = (rank / cd[0]) % cd[1], rz = rank / (cd[0] * cd[1]);
            threadIdx = {i % block, 0, 0};
            blockIdx = {cx * cd[0] + rx, cy * cd[1] + ry, cz * cd[2] + rz};
            emu = &ctx[rank];
        };
        auto body = [&](unsigned) {
            k(args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8], args[9], args[10], args[11], args[12], args[13],
              args[14], args[15], args[16], args[17], args[18], args[19], args[20], args[21], args[22], args[23], args[24], args[25]);
        };
        if (!sched.run(block * csize, body, resume)) {
            std::fprintf(stderr, "deadlock: every thread left in cluster %llu waits on a barrier that cannot complete\n", cl);
            return 11;
        }
    }
    for (int i = 0; i < nb; ++i) {
        FILE* bf = std::fopen(paths[i].c_str(), "wb");
        if (!bf || std::fwrite(bufs[i].data(), 1, bufs[i].size(), bf) != bufs[i].size()) return 9;
        std::fclose(bf);
    }
    return 0;
}
