/*
 * Paged and scatter writes: the caller's list is checked (a destination written twice is
 * refused), turned into extents, pieces adjacent in both regions merged, and handed to the
 * engine's list write, which owns them from then on.
 */
#include "api/api.h"
#include "api_comm.h"
#include "api_list.h"

#include <stdlib.h>
#include <string.h>

static int api_dst_order(const void *a, const void *b)
{
    const api_dst_range_t *x = a, *y = b;

    if (x->rank != y->rank) {
        return x->rank < y->rank ? -1 : 1;
    }
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

strata_status_t api_ranges_disjoint(const char *call, api_dst_range_t *ranges, size_t n,
                                    const char *what)
{
    qsort(ranges, n, sizeof(*ranges), api_dst_order);
    for (size_t i = 1; i < n; ++i) {
        const api_dst_range_t *x = &ranges[i - 1], *y = &ranges[i];

        if (x->rank == y->rank && x->offset + x->length > y->offset) {
            UTIL_LOG_ERROR("%s: %s %zu and %zu write the same destination bytes (rank %d, "
                           "from offset %zu): each may be written once", call, what,
                           UTIL_MIN(x->entry, y->entry), UTIL_MAX(x->entry, y->entry), y->rank,
                           y->offset);
            return STRATA_ERR_INVALID;
        }
    }
    return STRATA_OK;
}

void api_extent_append(inter_extent_t *extents, uint32_t *count_p, size_t loff, size_t roff,
                       size_t len)
{
    inter_extent_t *x = *count_p > 0 ? &extents[*count_p - 1] : NULL;

    if (x != NULL && x->loff + x->len == loff && x->roff + x->len == roff &&
        len <= API_LIST_MERGE_MAX && x->len <= API_LIST_MERGE_MAX - len) {
        x->len += len;
    } else {
        extents[(*count_p)++] = (inter_extent_t){.loff = loff, .roff = roff, .len = len};
    }
}

/* The checks every list write makes of its arguments; one line naming the call. */
static bool api_list_args_ok(const char *call, const strata_comm_t *comm,
                             strata_request_t **req_p, unsigned flags, size_t n,
                             const void *list, const void *list2)
{
    if (comm == NULL || req_p == NULL) {
        UTIL_LOG_ERROR("%s: NULL %s", call, comm == NULL ? "communicator" : "request");
    } else if ((flags & ~STRATA_WRITE_IMM) != 0) {
        UTIL_LOG_ERROR("%s: unknown flags 0x%x", call, flags);
    } else if (n == 0 || n > UINT32_MAX || list == NULL || list2 == NULL) {
        UTIL_LOG_ERROR("%s: %zu entries (1..%u, and the list not NULL)", call, n, UINT32_MAX);
    } else {
        return true;
    }
    return false;
}

/* A list's extents as they are made: pieces adjacent in both regions merged, and every
 * destination range kept for the check that none overlaps another. */
typedef struct api_list_builder {
    inter_extent_t  *extents;
    api_dst_range_t *ranges;
    uint32_t         count;
    int              peer; /* where every range is */
} api_list_builder_t;

static strata_status_t api_list_begin(api_list_builder_t *lb, size_t n, int peer)
{
    lb->peer    = peer;
    lb->extents = malloc(n * sizeof(*lb->extents));
    lb->ranges  = malloc(n * sizeof(*lb->ranges));
    lb->count   = 0;
    return lb->extents != NULL && lb->ranges != NULL ? STRATA_OK : STRATA_ERR_NO_MEMORY;
}

/* Entry `entry`: len bytes from loff to roff. */
static void api_list_add(api_list_builder_t *lb, size_t entry, size_t loff, size_t roff,
                         size_t len)
{
    lb->ranges[entry] = (api_dst_range_t){.rank = lb->peer, .offset = roff, .length = len,
                                          .entry = entry};
    api_extent_append(lb->extents, &lb->count, loff, roff, len);
}

/* The extents (*count_p of them) once n entries were added and their destinations found
 * disjoint; NULL, with *status_p, where an entry or that check failed (logged). */
static inter_extent_t *api_list_end(api_list_builder_t *lb, size_t n, const char *call,
                                    const char *what, uint32_t *count_p,
                                    strata_status_t *status_p)
{
    if (*status_p == STRATA_OK) {
        *status_p = api_ranges_disjoint(call, lb->ranges, n, what);
    }
    free(lb->ranges);
    if (*status_p != STRATA_OK) {
        free(lb->extents);
        return NULL;
    }
    *count_p = lb->count;
    return lb->extents;
}

/* Pages as extents; NULL: no memory, or a destination page named twice (logged). */
static inter_extent_t *api_pages_extents(int peer, const uint32_t *src_pages,
                                         const uint32_t *dst_pages, size_t n, size_t page,
                                         uint32_t *count_p, strata_status_t *status_p)
{
    api_list_builder_t lb;

    *status_p = api_list_begin(&lb, n, peer);
    for (size_t i = 0; i < n && *status_p == STRATA_OK; ++i) {
        api_list_add(&lb, i, (size_t)src_pages[i] * page, (size_t)dst_pages[i] * page, page);
    }
    return api_list_end(&lb, n, "strata_write_paged", "pages at entries", count_p, status_p);
}

/* Every destination page inside the peer's region; else a line naming the first that is
 * not (the engine would name only the merged extent). */
static bool api_pages_fit(const strata_mem_desc_t *dst, const uint32_t *dst_pages, size_t n,
                          size_t page)
{
    inter_rdesc_t rdesc;

    memcpy(&rdesc, dst->bytes, sizeof(rdesc));
    for (size_t i = 0; i < n; ++i) {
        if ((uint64_t)dst_pages[i] * page + page > rdesc.length) {
            UTIL_LOG_ERROR("strata_write_paged: destination page %u (entry %zu) ends past the "
                           "peer's region of %llu bytes", dst_pages[i], i,
                           (unsigned long long)rdesc.length);
            return false;
        }
    }
    return true;
}

static strata_status_t api_write_list(strata_comm_t *comm, int peer, const strata_mem_t *src,
                                      const strata_mem_desc_t *dst, inter_extent_t *extents,
                                      uint32_t count, unsigned flags, uint32_t imm,
                                      strata_request_t **req_p)
{
    inter_rdesc_t rdesc;
    inter_request_t *req;
    strata_status_t status;

    if (dst == NULL) { /* the engine would log a bad descriptor: say which is missing */
        UTIL_LOG_ERROR("list write: NULL destination descriptor");
        free(extents);
        return STRATA_ERR_INVALID;
    }
    if (!api_engine_peer(comm, "list write", peer, false, &peer)) {
        free(extents);
        return STRATA_ERR_INVALID;
    }
    memcpy(&rdesc, dst->bytes, sizeof(rdesc));
    status = inter_engine_write_list(comm->engine, peer, (const inter_mr_t *)(uintptr_t)src,
                                     &rdesc, extents, count, (flags & STRATA_WRITE_IMM) != 0,
                                     imm, &req);
    if (status == STRATA_OK) {
        *req_p = (strata_request_t *)(void *)req;
    }
    return status;
}

STRATA_API strata_status_t strata_write_paged(strata_comm_t *comm, int peer,
                                              const strata_mem_t *src,
                                              const strata_mem_desc_t *dst, size_t page_size,
                                              const uint32_t *src_pages,
                                              const uint32_t *dst_pages, size_t num_pages,
                                              unsigned flags, uint32_t imm,
                                              strata_request_t **req_p)
{
    strata_status_t status;
    inter_extent_t *extents;
    uint32_t count = 0;

    if (!api_list_args_ok("strata_write_paged", comm, req_p, flags, num_pages, src_pages,
                          dst_pages)) {
        return STRATA_ERR_INVALID;
    }
    if (page_size == 0 || page_size > SIZE_MAX / ((size_t)UINT32_MAX + 1)) {
        UTIL_LOG_ERROR("strata_write_paged: pages of %zu bytes (at least 1, and page index "
                       "x size must fit in a size_t)", page_size);
        return STRATA_ERR_INVALID;
    }
    if (dst != NULL && !api_pages_fit(dst, dst_pages, num_pages, page_size)) {
        return STRATA_ERR_INVALID;
    }
    extents = api_pages_extents(peer, src_pages, dst_pages, num_pages, page_size, &count,
                                &status);
    if (extents == NULL) {
        return status;
    }
    return api_write_list(comm, peer, src, dst, extents, count, flags, imm, req_p);
}

/* Scatter entries as extents; NULL as api_pages_extents. */
static inter_extent_t *api_scatter_extents(int peer, const strata_scatter_entry_t *entries,
                                           size_t n, uint32_t *count_p,
                                           strata_status_t *status_p)
{
    api_list_builder_t lb;

    *status_p = api_list_begin(&lb, n, peer);
    for (size_t i = 0; i < n && *status_p == STRATA_OK; ++i) {
        const strata_scatter_entry_t *e = &entries[i];

        if (e->length == 0 || e->dst_offset > SIZE_MAX - e->length ||
            e->src_offset > SIZE_MAX - e->length) {
            UTIL_LOG_ERROR("strata_write_scatter: entry %zu is [%zu, +%zu) -> [%zu, +%zu): "
                           "empty, or past the end of memory", i, e->src_offset, e->length,
                           e->dst_offset, e->length);
            *status_p = STRATA_ERR_INVALID;
            break;
        }
        api_list_add(&lb, i, e->src_offset, e->dst_offset, e->length);
    }
    return api_list_end(&lb, n, "strata_write_scatter", "entries", count_p, status_p);
}

STRATA_API strata_status_t strata_write_scatter(strata_comm_t *comm, int peer,
                                                const strata_mem_t *src,
                                                const strata_mem_desc_t *dst,
                                                const strata_scatter_entry_t *entries,
                                                size_t num_entries, unsigned flags,
                                                uint32_t imm, strata_request_t **req_p)
{
    strata_status_t status;
    inter_extent_t *extents;
    uint32_t count = 0;

    if (!api_list_args_ok("strata_write_scatter", comm, req_p, flags, num_entries, entries,
                          entries)) {
        return STRATA_ERR_INVALID;
    }
    extents = api_scatter_extents(peer, entries, num_entries, &count, &status);
    if (extents == NULL) {
        return status;
    }
    return api_write_list(comm, peer, src, dst, extents, count, flags, imm, req_p);
}

STRATA_API uint32_t strata_write_list_imm_count(const strata_comm_t *comm, int peer)
{
    int engine_peer;

    if (comm == NULL || !api_engine_peer(comm, "strata_write_list_imm_count", peer, false,
                                         &engine_peer)) {
        return 0;
    }
    return inter_engine_list_imm_count(comm->engine, engine_peer);
}
