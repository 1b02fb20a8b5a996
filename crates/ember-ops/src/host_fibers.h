// Cooperative fibers for the host emulations of CUDA kernels (test-only).
//
// Why: an emulated CTA has up to 1024 threads that meet at barriers (__syncthreads, warp shuffles,
// mma fragments). Running each as an OS thread makes every barrier a futex storm: on a 2-core test
// machine the kernel's arithmetic is a small part of the run, the scheduler the rest. Here all the
// threads of a launch step are fibers of one OS thread; a barrier wait switches to the scheduler,
// which resumes the next fiber that can run. No preemption: a fiber runs until it waits or returns,
// so each thread's code between two barriers runs as one piece (one of the orders the GPU allows),
// and a kernel that would hang on the GPU (a barrier not every thread reaches) is reported as a
// deadlock instead.
//
// Thread-local state of the emulated threads (threadIdx, blockIdx, per-thread queues) must be
// restored by the caller's `resume` hook each time a fiber is resumed: they are one OS thread.
#ifndef EMBER_HOST_FIBERS_H
#define EMBER_HOST_FIBERS_H
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

// AddressSanitizer (the gradfeat host model is built with it where the compiler has it): a fiber's
// last frame never returns, so its redzones stay poisoned in the shadow of the stack's memory; each
// run unpoisons the stacks before reusing them.
#if defined(__SANITIZE_ADDRESS__)
#define HOST_FIBERS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HOST_FIBERS_ASAN 1
#endif
#endif
#ifdef HOST_FIBERS_ASAN
#include <sanitizer/asan_interface.h>
#endif

#if defined(__x86_64__) && defined(__linux__)
#define HOST_FIBERS_ASM 1
#else
#define HOST_FIBERS_ASM 0
#include <ucontext.h>
#endif

namespace host_fibers {

// A barrier of `expected` fibers (set before use); `generation` counts completed rounds.
struct Barrier {
    unsigned expected = 0, arrived = 0;
    unsigned long long generation = 0;
};

#if HOST_FIBERS_ASM
// Saves the callee-saved registers, the SSE and x87 control words and the stack pointer of the
// caller in *save_sp, then continues the context whose stack pointer is load_sp.
extern "C" void host_fibers_switch(void** save_sp, void* load_sp);
asm(R"(
    .text
    .p2align 4
    .globl host_fibers_switch
    .type host_fibers_switch, @function
host_fibers_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    fnstcw (%rsp)
    stmxcsr 8(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    fldcw (%rsp)
    ldmxcsr 8(%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size host_fibers_switch, .-host_fibers_switch
)");
struct Context {
    void* sp = nullptr;
};
inline void switch_to(Context& from, Context& to) { host_fibers_switch(&from.sp, to.sp); }
// A context that starts `entry` on `stack` at its first switch: the frame host_fibers_switch pops
// (control words, six registers, return address = entry), placed so that entry sees the stack
// alignment of a called function (rsp ≡ 8 mod 16).
inline void make(Context& c, unsigned char* stack, size_t size, void (*entry)()) {
    auto top = reinterpret_cast<unsigned long long>(stack + size) & ~15ull;
    auto* frame = reinterpret_cast<unsigned long long*>(top - 80);
    frame[0] = 0x037f;  // x87 control word: default
    frame[1] = 0x1f80;  // MXCSR: default (round to nearest, exceptions masked)
    for (int r = 2; r < 8; ++r) frame[r] = 0;
    frame[8] = reinterpret_cast<unsigned long long>(entry);
    frame[9] = 0;
    c.sp = frame;
}
#else
struct Context {
    ucontext_t uc;
};
inline void switch_to(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
inline void make(Context& c, unsigned char* stack, size_t size, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}
#endif

class Scheduler {
public:
    static constexpr size_t kStackBytes = 256 << 10;

    // Runs body(i) for every i < n as fibers until all have returned; resume(i) runs before fiber i
    // is (re)entered. Returns false on a deadlock: fibers left and every one of them waiting on a
    // barrier that cannot complete.
    bool run(unsigned n, const std::function<void(unsigned)>& body, const std::function<void(unsigned)>& resume) {
        active() = this;
        body_ = &body;
        while (stacks_.size() < n) stacks_.emplace_back(new unsigned char[kStackBytes]);
        fibers_.assign(n, Fiber{});
        for (unsigned i = 0; i < n; ++i) {
#ifdef HOST_FIBERS_ASAN
            __asan_unpoison_memory_region(stacks_[i].get(), kStackBytes);
#endif
            make(fibers_[i].ctx, stacks_[i].get(), kStackBytes, &entry);
        }
        // Sweeps alternate direction, so that between two barriers sometimes the low threads run
        // first and sometimes the high ones: a missing barrier between a write and a read of shared
        // memory then shows as a read of the poisoned contents whichever side reads first.
        for (bool reverse = false;; reverse = !reverse) {
            bool left = false, ran = false;
            for (unsigned s = 0; s < n; ++s) {
                const unsigned i = reverse ? n - 1 - s : s;
                Fiber& f = fibers_[i];
                if (f.done) continue;
                left = true;
                if (f.wait && f.wait->generation == f.generation) continue;
                f.wait = nullptr;
                current_ = i;
                resume(i);
                switch_to(main_, f.ctx);
                ran = true;
            }
            if (!left) return true;
            if (!ran) return false;
        }
    }

    // The calling fiber arrives at b and continues once all b.expected fibers have.
    void wait(Barrier& b) {
        if (++b.arrived == b.expected) {
            b.arrived = 0;
            ++b.generation;
            return;
        }
        Fiber& f = fibers_[current_];
        f.wait = &b;
        f.generation = b.generation;
        switch_to(f.ctx, main_);
    }

    unsigned current() const { return current_; }

private:
    struct Fiber {
        Context ctx;
        bool done = false;
        Barrier* wait = nullptr;
        unsigned long long generation = 0;
    };
    static Scheduler*& active() {
        static Scheduler* s = nullptr;
        return s;
    }
    static void entry() {
        Scheduler* s = active();
        (*s->body_)(s->current_);
        s->fibers_[s->current_].done = true;
        switch_to(s->fibers_[s->current_].ctx, s->main_);
        std::abort();  // a finished fiber is never resumed
    }

    std::vector<Fiber> fibers_;
    std::vector<std::unique_ptr<unsigned char[]>> stacks_;
    Context main_;
    unsigned current_ = 0;
    const std::function<void(unsigned)>* body_ = nullptr;
};

}  // namespace host_fibers
#endif  // EMBER_HOST_FIBERS_H
