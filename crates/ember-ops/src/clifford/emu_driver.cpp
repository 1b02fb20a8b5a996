// Host emulation driver: runs one kernel launch (entry EMU_ENTRY) over its whole grid.
//
// Usage: driver LAUNCH_FILE. The file lists the buffers (path and byte length; each file is read
// before and written back after the launch), then "gx gy gz block smem", then the arguments, one per
// line: "B id" (a buffer's address), "N 0" (a null pointer) or "S value" (an integer scalar).
// Arguments are passed as 64-bit words, which on x86-64 is how the kernels' pointer, long long and
// int parameters travel.
typedef void (*ember_emu_kernel)(u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64,
                                 u64, u64, u64, u64);

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
        bufs[i].resize(len + 64);
        FILE* bf = std::fopen(path, "rb");
        if (!bf || std::fread(bufs[i].data(), 1, len, bf) != len) return 6;
        std::fclose(bf);
        bufs[i].resize(len);
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
    std::vector<unsigned char> dyn(smem + 64);
    std::barrier<> bar((std::ptrdiff_t)block), step((std::ptrdiff_t)block);
    ember_emu_block ctx;
    ctx.block = &bar;
    for (unsigned w = 0; w < (block + 31) / 32; ++w) ctx.warps.emplace_back(new std::barrier<>(32));
    // Shared memory starts as NaN patterns, like uninitialized memory that tests would notice.
    std::memset(dyn.data(), 0xff, dyn.size());
    ctx.dynamic_smem = dyn.data();
    ember_emu = &ctx;
    const u64 blocks = (u64)gx * gy * gz;
    ember_emu_kernel k = (ember_emu_kernel)(void*)&EMU_ENTRY;
    auto worker = [&](unsigned t) {
        threadIdx = {t, 0, 0};
        for (u64 blk = 0; blk < blocks; ++blk) {
            blockIdx = {(unsigned)(blk % gx), (unsigned)((blk / gx) % gy), (unsigned)(blk / ((u64)gx * gy))};
            k(args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8], args[9], args[10], args[11], args[12], args[13],
              args[14], args[15], args[16], args[17], args[18], args[19], args[20], args[21], args[22], args[23], args[24], args[25]);
            step.arrive_and_wait();
            if (t == 0) std::memset(dyn.data(), 0xff, dyn.size());
            step.arrive_and_wait();
        }
    };
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t) threads.emplace_back(worker, t);
    for (auto& th : threads) th.join();
    for (int i = 0; i < nb; ++i) {
        FILE* bf = std::fopen(paths[i].c_str(), "wb");
        if (!bf || std::fwrite(bufs[i].data(), 1, bufs[i].size(), bf) != bufs[i].size()) return 9;
        std::fclose(bf);
    }
    return 0;
}
