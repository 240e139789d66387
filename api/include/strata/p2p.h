/*
 * strata's point-to-point API over the communicator's transfer engine: registered memory,
 * one-sided writes and reads, paged and scatter writes, weight transfer plans, messages,
 * immediates and the barrier. Included by <strata/strata.h>.
 */
#ifndef STRATA_P2P_H
#define STRATA_P2P_H

#include <strata/strata.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* --- Point-to-point: the transfer engine ------------------------------------------------ */

/*
 * Delivery is reliable but unordered. A target learns that written data has arrived only by
 * counting immediates: strata_imm_wait for as many as strata_write_imm_count says a write
 * produces (large writes are striped over several NICs, one immediate per piece).
 * Every call validates its input (peer, registered ranges, lengths, immediate range) and
 * refuses bad input with STRATA_ERR_INVALID and one log line, creating no request. A peer
 * that dies or goes silent fails everything involving it with STRATA_ERR_PEER_FAILED within
 * STRATA_INTER_PEER_TIMEOUT. Thread-safe: any thread may submit.
 * Submitting allocates nothing (but for the copy a paged or scatter write takes of its
 * list): requests (and send copies) come from pools sized when the
 * communicator is created, STRATA_INTER_REQUESTS of them (default 1024). While all are in
 * flight or not yet given back, strata_write, strata_read, strata_send and strata_recv
 * return STRATA_ERR_BUSY and create no request: wait for (or test) one of your requests,
 * free it, and submit again; a freed request is back in the pool within moments.
 */

typedef struct strata_mem     strata_mem_t;
typedef struct strata_request strata_request_t;

#define STRATA_MEM_DESC_SIZE 128
#define STRATA_IMM_MAX       65536u /**< immediates are 0..STRATA_IMM_MAX-1 */

/** What a peer needs to reach registered memory: plain bytes, to be sent by any means. */
typedef struct strata_mem_desc {
    uint8_t bytes[STRATA_MEM_DESC_SIZE];
} strata_mem_desc_t;

/**
 * Register [addr, addr+len) for transfers (on every rail). Free with strata_mem_deregister.
 * Host memory, or device memory of the communicator's GPU backend (strata_comm_device_backend),
 * which the NICs then read and write in place. STRATA_ERR_INVALID for a range that wraps
 * around the address space, or that is not all mapped memory of the process or not inside
 * one device allocation (a length past the end of the buffer): peers may write anywhere in
 * it. STRATA_ERR_UNSUPPORTED for managed memory, and for device memory where a rail cannot
 * register it (no FI_HMEM, peer-memory module or dma-buf): strata does not stage these
 * transfers through host memory.
 */
STRATA_API strata_status_t strata_mem_register(strata_comm_t *comm, void *addr, size_t len,
                                               strata_mem_t **mem_p);
/** Only once no request uses it. Tolerates NULL. */
STRATA_API void strata_mem_deregister(strata_comm_t *comm, strata_mem_t *mem);
STRATA_API void strata_mem_descriptor(const strata_mem_t *mem, strata_mem_desc_t *desc_p);

/** strata_write flag: the target counts imm (strata_imm_wait). */
#define STRATA_WRITE_IMM 1u

/** Write len bytes of src at src_offset to the peer's dst at dst_offset. */
STRATA_API strata_status_t strata_write(strata_comm_t *comm, int peer, const strata_mem_t *src,
                                        size_t src_offset, const strata_mem_desc_t *dst,
                                        size_t dst_offset, size_t len, unsigned flags,
                                        uint32_t imm, strata_request_t **req_p);
/**
 * Paged write: page src_pages[i] of src (bytes [src_pages[i] * page_size, + page_size)) to
 * page dst_pages[i] of the peer's dst, for i < num_pages, in one request: the job of a
 * KV-cache transfer into a decoder's page table. Pages adjacent in both lists (src_pages[i]
 * + 1 == src_pages[i + 1], the same for dst) go as one write; every write is cut into
 * chunks striped over the pair's rails, as strata_write cuts one. Any number of pages: the
 * request keeps a bounded number of chunks in flight and posts the next as each completes
 * (the lists are copied at the call, which allocates that copy). With STRATA_WRITE_IMM, once
 * every page has been written, the peer counts imm strata_write_list_imm_count(comm, me)
 * times (one per rail of the pair, none per page); it then holds every page. After an
 * error (a peer failed, the request cancelled) the immediates do not go, and pages may be
 * written or not; none is written outside those named. A destination page named twice,
 * a page past either region's end, page_size 0 or no pages: STRATA_ERR_INVALID, one log line
 * naming it, and no request. Cancellation, STRATA_ERR_BUSY and failures: as strata_write.
 */
STRATA_API strata_status_t strata_write_paged(strata_comm_t *comm, int peer,
                                              const strata_mem_t *src,
                                              const strata_mem_desc_t *dst, size_t page_size,
                                              const uint32_t *src_pages,
                                              const uint32_t *dst_pages, size_t num_pages,
                                              unsigned flags, uint32_t imm,
                                              strata_request_t **req_p);
/** One piece of strata_write_scatter. */
typedef struct strata_scatter_entry {
    size_t src_offset; /**< in the source region */
    size_t dst_offset; /**< in the peer's region */
    size_t length;     /**< bytes, at least 1 */
} strata_scatter_entry_t;
/**
 * Scatter write: every entry's length bytes from src at src_offset to the peer's dst at
 * dst_offset, in one request: pieces adjacent in both regions go as one write, and the
 * rest is as strata_write_paged (chunks, rails, one immediate per rail at the end, any
 * number of entries). Destination ranges that overlap are refused (STRATA_ERR_INVALID,
 * naming both entries), as are empty entries and ranges past a region's end.
 */
STRATA_API strata_status_t strata_write_scatter(strata_comm_t *comm, int peer,
                                                const strata_mem_t *src,
                                                const strata_mem_desc_t *dst,
                                                const strata_scatter_entry_t *entries,
                                                size_t num_entries, unsigned flags,
                                                uint32_t imm, strata_request_t **req_p);
/** Immediates one strata_write_paged or strata_write_scatter with STRATA_WRITE_IMM from
 *  peer produces at this rank (the same count at the sender for its peer): the pair's
 *  rails. */
STRATA_API uint32_t strata_write_list_imm_count(const strata_comm_t *comm, int peer);
/**
 * Weight transfer: a plan made once moves many tensors (or shards of them) from source
 * ranks to destination ranks, as often as the sources change. Every rank registers one
 * region (its weights, flat; NULL where it neither sends nor receives) and passes the same
 * list of pieces. A piece is `length` bytes of tensor `tensor` from src_rank's region at
 * src_offset to dst_rank's region at dst_offset.
 */
typedef struct strata_transfer_piece {
    uint32_t tensor;     /**< 0..num_tensors-1: what a destination waits for */
    int      src_rank;
    size_t   src_offset;
    int      dst_rank;
    size_t   dst_offset;
    size_t   length;     /**< bytes, at least 1 */
} strata_transfer_piece_t;

typedef struct strata_transfer_plan strata_transfer_plan_t;

/**
 * Collective: every rank passes the same pieces, num_tensors and imm_base (compared:
 * STRATA_ERR_CONFIG on every rank where one differs, naming it). Checks every piece (ranks,
 * tensor ids, ranges inside their regions, no destination byte written twice): a bad one
 * is STRATA_ERR_INVALID on every rank, with a line naming it. Tensor t is announced with
 * immediate imm_base + t, so imm_base + num_tensors must not pass STRATA_MOE_IMM_BASE, and
 * the caller must not wait on those itself. region stays registered while the plan lives.
 */
STRATA_API strata_status_t strata_transfer_plan_create(strata_comm_t *comm, strata_mem_t *region,
                                                       const strata_transfer_piece_t *pieces,
                                                       size_t num_pieces, uint32_t num_tensors,
                                                       uint32_t imm_base,
                                                       strata_transfer_plan_t **plan_p);
/**
 * One round: every rank calls it. A source writes its pieces, grouped per tensor and
 * destination (pieces adjacent in both regions merged), destinations interleaved, at most
 * 64 MiB per rail in flight, and returns once they are all written (or at the first
 * failure, STRATA_ERR_PEER_FAILED and the like, or STRATA_ERR_TIMEOUT). At the timeout the
 * writes not yet posted are cancelled and those posted are waited for (up to
 * STRATA_INTER_PEER_TIMEOUT; logged where one outlasts it): whatever it returns, the round
 * no longer reads the region once it has returned, and a destination may have some of the
 * round's tensors, not others (their immediates counted: a later round's wait would take
 * them for its own, so the next round needs a new plan with another imm_base). A rank
 * that sends nothing returns at once. Either way the
 * round's waits start. Before a source runs the next round, its destinations must be done
 * reading this one (a barrier, say).
 */
STRATA_API strata_status_t strata_transfer_plan_execute(strata_transfer_plan_t *plan,
                                                        uint64_t timeout_ms);
/** On a destination: wait until every piece of tensor landing here in this round is in.
 *  STRATA_ERR_INVALID where none lands here, or before strata_transfer_plan_execute. */
STRATA_API strata_status_t strata_transfer_plan_wait_tensor(strata_transfer_plan_t *plan,
                                                            uint32_t tensor,
                                                            uint64_t timeout_ms);
/** On a destination: every tensor landing here, this round. Elsewhere returns at once. */
STRATA_API strata_status_t strata_transfer_plan_wait(strata_transfer_plan_t *plan,
                                                     uint64_t timeout_ms);
/** Tolerates NULL. Not while a round is being executed. */
STRATA_API void strata_transfer_plan_destroy(strata_transfer_plan_t *plan);

/** RDMA read; STRATA_ERR_UNSUPPORTED where the transport has none. */
STRATA_API strata_status_t strata_read(strata_comm_t *comm, int peer, const strata_mem_t *dst,
                                       size_t dst_offset, const strata_mem_desc_t *src,
                                       size_t src_offset, size_t len, strata_request_t **req_p);
/** A message of at most STRATA_INTER_MSG_SIZE bytes, copied at the call. */
STRATA_API strata_status_t strata_send(strata_comm_t *comm, int peer, const void *buf,
                                       size_t len, strata_request_t **req_p);
/** Receive a message from peer, or from anyone with -1, into buf (cap bytes). */
STRATA_API strata_status_t strata_recv(strata_comm_t *comm, int peer, void *buf, size_t cap,
                                       strata_request_t **req_p);

/** STRATA_INPROGRESS until done, then the final status. */
STRATA_API strata_status_t strata_request_test(const strata_request_t *req);
/** Wait up to timeout_ms; STRATA_ERR_TIMEOUT leaves it running. */
STRATA_API strata_status_t strata_request_wait(const strata_request_t *req, uint64_t timeout_ms);
/** Bytes and sender of a completed receive. */
STRATA_API size_t strata_request_length(const strata_request_t *req);
STRATA_API int    strata_request_source(const strata_request_t *req);
/** Parts not yet posted are dropped; it completes with STRATA_ERR_CANCELLED. */
STRATA_API void   strata_request_cancel(strata_request_t *req);
/** Give the request back (done or not). Tolerates NULL. */
STRATA_API void   strata_request_free(strata_request_t *req);

/** Immediates a write of len bytes from peer produces at this rank. */
STRATA_API uint32_t strata_write_imm_count(const strata_comm_t *comm, int peer, size_t len);
/** Wait for count arrivals of imm (from from_peer, or -1 for any) and consume them. */
STRATA_API strata_status_t strata_imm_wait(strata_comm_t *comm, uint32_t imm, uint64_t count,
                                           int from_peer, uint64_t timeout_ms);
/** Barrier over all ranks of the communicator, by immediates. While every pooled request
 *  is in flight it waits for one; STRATA_ERR_BUSY if none came back within timeout_ms. */
STRATA_API strata_status_t strata_barrier(strata_comm_t *comm, uint64_t timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_P2P_H */
