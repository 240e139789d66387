/*
 * The device-producer work ring's memory format: transfer commands written by kernel blocks
 * (GPU threads, or the host backend's worker threads) and consumed by the transfer engine's
 * proxy, with credits, completion counters, immediate counters and a failure word. Plain
 * integers only, so that host C, CUDA and HIP code see the same layout; each side does its
 * own atomics (inter/ for the consumer, intra/kernels/ for producers).
 *
 * Protocol. A producer takes ticket t from a ticket counter kept outside the ring (device
 * memory on GPUs: atomics there are cheap), waits until t < credit, fills slot t % slots and
 * publishes it by storing seq = t + 1 last (release). The consumer reads slots in ticket
 * order (acquire on seq), posts them, and once the oldest commands have completed raises
 * credit (release), so a full ring makes producers wait and is never overwritten. Every
 * counter only grows: waiters compare against a running total, nothing is reset.
 */
#ifndef STRATA_UTIL_WORK_RING_H
#define STRATA_UTIL_WORK_RING_H

#include <stddef.h>
#include <stdint.h>

#define UTIL_WORK_RING_MAGIC 0x57524b31u /* "WRK1" */

/** What a command asks for. */
enum {
    UTIL_WORK_WRITE     = 1, /* RDMA write, no immediate */
    UTIL_WORK_WRITE_IMM = 2, /* RDMA write; the target counts imm once */
    UTIL_WORK_READ      = 3, /* RDMA read from the peer into the local region */
};

/** One transfer command: a cache line. */
typedef struct util_work_cmd {
    uint64_t seq;           /* ticket + 1 once the rest is written (release) */
    uint32_t op;            /* UTIL_WORK_* */
    int32_t  peer;          /* rank */
    uint32_t region;        /* local region index, also names the peer's descriptor */
    uint32_t imm;           /* WRITE_IMM: the immediate */
    uint32_t counter;       /* completion counter raised when the command is done here */
    uint32_t reserved;
    uint64_t offset;        /* in the local region */
    uint64_t remote_offset; /* in the peer's region */
    uint64_t length;        /* bytes, > 0 */
    uint64_t stamp;         /* producer's timer when written, 0 if none */
} util_work_cmd_t;

#ifndef __cplusplus /* the kernels write a command in 16-byte units: its layout is fixed */
_Static_assert(sizeof(util_work_cmd_t) == 64 && offsetof(util_work_cmd_t, op) == 8 &&
                   offsetof(util_work_cmd_t, region) == 16 &&
                   offsetof(util_work_cmd_t, offset) == 32 &&
                   offsetof(util_work_cmd_t, length) == 48,
               "util_work_cmd_t is written in 16-byte units at 16, 32 and 48");
#endif

/** The ring's head; counters, immediate counts and command slots follow it. */
typedef struct util_work_ring {
    uint32_t magic;
    uint32_t slots;        /* a power of two */
    uint32_t num_counters;
    uint32_t num_imms;
    uint32_t imm_base;     /* imms[i] counts immediate imm_base + i */
    uint32_t reserved[11];
    uint64_t credit;       /* consumer: tickets below it may be written (release) */
    uint64_t pad0[7];
    int64_t  failure;      /* consumer: 0, or the strata status that ended the ring */
    uint64_t pad1[7];
} util_work_ring_t;

static inline size_t util_work_ring_align(size_t n)
{
    return (n + 63) / 64 * 64;
}

/** Bytes of a ring with these counts. */
static inline size_t util_work_ring_bytes(uint32_t slots, uint32_t num_counters,
                                          uint32_t num_imms)
{
    return sizeof(util_work_ring_t) + util_work_ring_align(sizeof(uint64_t) * num_counters) +
           util_work_ring_align(sizeof(uint64_t) * num_imms) + sizeof(util_work_cmd_t) * slots;
}

/** counters[c]: commands naming counter c that completed here, over the ring's life. */
static inline uint64_t *util_work_ring_counters(util_work_ring_t *ring)
{
    return (uint64_t *)(ring + 1);
}

/** imms[i]: arrivals of immediate imm_base + i, over the ring's life. */
static inline uint64_t *util_work_ring_imms(util_work_ring_t *ring)
{
    return (uint64_t *)((char *)(ring + 1) +
                        util_work_ring_align(sizeof(uint64_t) * ring->num_counters));
}

static inline util_work_cmd_t *util_work_ring_cmds(util_work_ring_t *ring)
{
    return (util_work_cmd_t *)((char *)util_work_ring_imms(ring) +
                               util_work_ring_align(sizeof(uint64_t) * ring->num_imms));
}

#endif
