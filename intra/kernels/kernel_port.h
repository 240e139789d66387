/*
 * The portability layer under the single-source kernels: grid position, block barrier,
 * release store, acquire load, relaxed load with a later acquire fence for spinning, atomic
 * add and fence at system scope, a timer, row copies,
 * and rounded fp32 arithmetic. Compiled three ways: as CUDA (nvcc), as HIP (hipcc), and
 * as host C, where each block is one worker thread with a single "thread" in it.
 */
#ifndef STRATA_INTRA_KERNEL_PORT_H
#define STRATA_INTRA_KERNEL_PORT_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KERNEL_GPU 1
#define KERNEL_FN  __device__ static inline
/* Block-shared scratch; the leader (thread 0) fills it, the block reads it after
 * kernel_block_sync. */
#define KERNEL_SHARED __shared__
#else
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#define KERNEL_GPU    0
#define KERNEL_FN     static inline
#define KERNEL_SHARED
#endif

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#endif

/** A spinning wait reads the failure word once in this many rounds. */
#define KERNEL_FAILURE_EVERY 16

/** Where the calling code runs: block of the grid, thread of the block. */
typedef struct kernel_grid {
    unsigned block;
    unsigned num_blocks;
    unsigned thread;
    unsigned num_threads;
} kernel_grid_t;

/*
 * Whether the calling thread is its block's first, the one that fills KERNEL_SHARED
 * scratch: thread 0. On the host a block is one thread, so it always is; the condition is
 * then written so that compilers see it always true and the scratch filled before it is
 * read.
 */
#if KERNEL_GPU
#define KERNEL_LEADER(g) ((g).thread == 0)
#else
#define KERNEL_LEADER(g) ((g).thread == 0 || 1)
#endif

#if KERNEL_GPU

KERNEL_FN kernel_grid_t kernel_grid_here(void)
{
    kernel_grid_t grid = {blockIdx.x, gridDim.x, threadIdx.x, blockDim.x};
    return grid;
}

/** The calling thread's block, where no kernel_grid_t was passed down. */
KERNEL_FN unsigned kernel_block_index(void)
{
    return blockIdx.x;
}

/** 16 bytes at once (both 16-byte aligned): one transaction across PCIe. */
KERNEL_FN void kernel_store_16(void *dst, const void *src)
{
    *(uint4 *)dst = *(const uint4 *)src;
}

KERNEL_FN void kernel_block_sync(void)
{
    __syncthreads();
}

/** Make this thread's earlier stores visible to every device and the host. */
KERNEL_FN void kernel_fence_system(void)
{
    __threadfence_system();
}

/* Release: the stores before it are visible to whoever acquires the value. */
KERNEL_FN void kernel_store_release_u64(uint64_t *ptr, uint64_t value)
{
    __threadfence_system();
    *(volatile uint64_t *)ptr = value;
}

/* Acquire: loads after it see what the releasing side stored before its release. */
KERNEL_FN uint64_t kernel_load_acquire_u64(const uint64_t *ptr)
{
    uint64_t value = *(const volatile uint64_t *)ptr;
    __threadfence_system();
    return value;
}

/* A word another block may be writing, read without ordering (a status code). */
KERNEL_FN int32_t kernel_load_i32(const int32_t *ptr)
{
    return *(const volatile int32_t *)ptr;
}

/*
 * For spinning: a load at system scope that orders nothing (no fence each time round), then,
 * once the awaited value has been seen, kernel_fence_acquire: the pair acquires what the
 * writer released before it. ptr may be device or mapped host memory (generic address).
 */
KERNEL_FN uint64_t kernel_load_relaxed_u64(const uint64_t *ptr)
{
#if defined(__CUDACC__)
    uint64_t value;

    asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(value) : "l"(ptr) : "memory");
    return value;
#else
    return __hip_atomic_load(ptr, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
#endif
}

/* kernel_load_relaxed_u64 for a 32-bit counter. */
KERNEL_FN uint32_t kernel_load_relaxed_u32(const uint32_t *ptr)
{
#if defined(__CUDACC__)
    uint32_t value;

    asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(value) : "l"(ptr) : "memory");
    return value;
#else
    return __hip_atomic_load(ptr, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
#endif
}

KERNEL_FN void kernel_fence_acquire(void)
{
#if defined(__CUDACC__)
    asm volatile("fence.acq_rel.sys;" ::: "memory"); /* PTX has no acquire-only fence */
#else
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, ""); /* "": system scope */
#endif
}

KERNEL_FN uint32_t kernel_atomic_add_u32(uint32_t *ptr, uint32_t value)
{
    return atomicAdd_system((unsigned int *)ptr, (unsigned int)value);
}

KERNEL_FN uint64_t kernel_atomic_add_u64(uint64_t *ptr, uint64_t value)
{
    return atomicAdd_system((unsigned long long *)ptr, (unsigned long long)value);
}

KERNEL_FN int32_t kernel_atomic_cas_i32(int32_t *ptr, int32_t expected, int32_t desired)
{
    return atomicCAS_system((int *)ptr, expected, desired);
}

/** A free-running timer; args carry how many ticks make a microsecond. */
KERNEL_FN uint64_t kernel_timer(void)
{
#if defined(__CUDACC__)
    uint64_t ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    return ns;
#else
    return __builtin_amdgcn_s_memrealtime(); /* 100 MHz on gfx9 and later */
#endif
}

/** Back off while spinning on a flag written by another device or process; spins: how
 *  many times this wait has paused already. */
KERNEL_FN void kernel_spin_pause(uint32_t spins)
{
    (void)spins;
#if defined(__CUDACC__)
    __nanosleep(100);
#else
    __builtin_amdgcn_s_sleep(2);
#endif
}

/* fp32 multiply and add, each rounded once: no contraction into fma, so that every
 * backend and the reference produce the same bits. */
KERNEL_FN float kernel_mul_f32(float a, float b)
{
    return __fmul_rn(a, b);
}

KERNEL_FN float kernel_add_f32(float a, float b)
{
    return __fadd_rn(a, b);
}

/** Copy bytes (a multiple of 16, both ends 16-byte aligned) with every thread of the block. */
KERNEL_FN void kernel_copy_block(void *dst, const void *src, size_t bytes, kernel_grid_t grid)
{
    uint4 *d = (uint4 *)dst;
    const uint4 *s = (const uint4 *)src;

    for (size_t i = grid.thread; i < bytes / 16; i += grid.num_threads) {
        d[i] = s[i];
    }
}

#else /* host C: one thread per block */

KERNEL_FN void kernel_block_sync(void)
{
}

/* The block the calling thread runs: host_moe_run_block sets it (host_kernels.c, the one
 * host file that compiles the kernels). */
static _Thread_local unsigned kernel_host_block;

KERNEL_FN unsigned kernel_block_index(void)
{
    return kernel_host_block;
}

KERNEL_FN void kernel_store_16(void *dst, const void *src)
{
    memcpy(dst, src, 16);
}

KERNEL_FN void kernel_fence_system(void)
{
    atomic_thread_fence(memory_order_seq_cst);
}

KERNEL_FN void kernel_store_release_u64(uint64_t *ptr, uint64_t value)
{
    atomic_store_explicit((_Atomic uint64_t *)ptr, value, memory_order_release);
}

KERNEL_FN uint64_t kernel_load_acquire_u64(const uint64_t *ptr)
{
    return atomic_load_explicit((_Atomic uint64_t *)ptr, memory_order_acquire);
}

KERNEL_FN int32_t kernel_load_i32(const int32_t *ptr)
{
    return atomic_load_explicit((_Atomic int32_t *)ptr, memory_order_relaxed);
}

/* The host keeps an acquire load for spinning (a plain load on x86 and Arm's ldar) and
 * needs no fence after it: ThreadSanitizer, which the host build runs under, does not model
 * standalone fences, and would report the data the flag guards. */
KERNEL_FN uint64_t kernel_load_relaxed_u64(const uint64_t *ptr)
{
    return atomic_load_explicit((_Atomic uint64_t *)ptr, memory_order_acquire);
}

KERNEL_FN uint32_t kernel_load_relaxed_u32(const uint32_t *ptr)
{
    return atomic_load_explicit((_Atomic uint32_t *)ptr, memory_order_acquire);
}

KERNEL_FN void kernel_fence_acquire(void)
{
}

KERNEL_FN uint32_t kernel_atomic_add_u32(uint32_t *ptr, uint32_t value)
{
    return atomic_fetch_add_explicit((_Atomic uint32_t *)ptr, value, memory_order_acq_rel);
}

KERNEL_FN uint64_t kernel_atomic_add_u64(uint64_t *ptr, uint64_t value)
{
    return atomic_fetch_add_explicit((_Atomic uint64_t *)ptr, value, memory_order_acq_rel);
}

KERNEL_FN int32_t kernel_atomic_cas_i32(int32_t *ptr, int32_t expected, int32_t desired)
{
    atomic_compare_exchange_strong_explicit((_Atomic int32_t *)ptr, &expected, desired,
                                            memory_order_acq_rel, memory_order_acquire);
    return expected;
}

KERNEL_FN uint64_t kernel_timer(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Blocks of several ranks share few cores: give the core to the thread being waited for;
 * a long wait then naps, so that the threads it waits for (a peer's, a proxy) get the
 * cores rather than a crowd of spinners. */
KERNEL_FN void kernel_spin_pause(uint32_t spins)
{
    if (spins < 512) {
        sched_yield();
    } else {
        struct timespec nap = {0, 20000};

        nanosleep(&nap, NULL);
    }
}

/* The host build compiles kernels with -ffp-contract=off: these are single roundings. */
KERNEL_FN float kernel_mul_f32(float a, float b)
{
    return a * b;
}

KERNEL_FN float kernel_add_f32(float a, float b)
{
    return a + b;
}

KERNEL_FN void kernel_copy_block(void *dst, const void *src, size_t bytes, kernel_grid_t grid)
{
    (void)grid;
    memcpy(dst, src, bytes);
}

#endif

/* Number conversions, written once with integer operations so that every backend rounds
 * alike: round to nearest, ties to even; NaN stays NaN. */

KERNEL_FN uint32_t kernel_f32_bits(float value)
{
    union {
        float    f;
        uint32_t u;
    } v;
    v.f = value;
    return v.u;
}

KERNEL_FN float kernel_bits_f32(uint32_t bits)
{
    union {
        float    f;
        uint32_t u;
    } v;
    v.u = bits;
    return v.f;
}

KERNEL_FN float kernel_bf16_to_f32(uint16_t value)
{
    return kernel_bits_f32((uint32_t)value << 16);
}

KERNEL_FN uint16_t kernel_f32_to_bf16(float value)
{
    uint32_t u = kernel_f32_bits(value);

    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

KERNEL_FN float kernel_fp16_to_f32(uint16_t value)
{
    uint32_t sign = (uint32_t)(value & 0x8000u) << 16;
    uint32_t exp = (value >> 10) & 0x1fu, mant = value & 0x3ffu;

    if (exp == 0x1f) {
        return kernel_bits_f32(sign | 0x7f800000u | (mant << 13));
    }
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in fp32 */
        float magnitude = (float)mant * 5.9604644775390625e-8f;
        return sign ? -magnitude : magnitude;
    }
    return kernel_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

KERNEL_FN uint16_t kernel_f32_to_fp16(float value)
{
    uint32_t u = kernel_f32_bits(value);
    uint32_t sign = (u >> 16) & 0x8000u, abs = u & 0x7fffffffu;
    int32_t exp = (int32_t)(abs >> 23) - 127 + 15;
    uint32_t mant, shift, half, rest;

    if (abs > 0x7f800000u) {
        return (uint16_t)(sign | 0x7e00u);
    }
    if (exp >= 0x1f) {
        return (uint16_t)(sign | 0x7c00u); /* overflow and infinity */
    }
    if (exp <= 0) {
        if (exp < -10) {
            return (uint16_t)sign; /* below half the smallest subnormal */
        }
        mant  = (abs & 0x7fffffu) | 0x800000u;
        shift = (uint32_t)(14 - exp);
        half  = mant >> shift;
        rest  = mant & ((1u << shift) - 1u);
        if (rest > (1u << (shift - 1)) || (rest == (1u << (shift - 1)) && (half & 1u))) {
            ++half;
        }
        return (uint16_t)(sign | half);
    }
    half = ((uint32_t)exp << 10) | ((abs >> 13) & 0x3ffu);
    rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) {
        ++half; /* may carry into the exponent, up to infinity: still correct */
    }
    return (uint16_t)(sign | half);
}

#endif
