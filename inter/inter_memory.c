/*
 * Memory the engine's peers reach: registration on every rail (host memory checked as
 * mapped, device memory where the transports can register it), descriptors and sub-ranges,
 * and late release after a failure.
 */
#include "inter_internal.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

bool inter_engine_can_register(const inter_engine_t *engine, inter_mem_kind_t kind)
{
    if (kind == INTER_MEM_HOST) {
        return true;
    }
    if (kind != engine->params.device_memory) {
        return false;
    }
    INTER_FOR_EACH_RAIL(engine, r) {
        if (!engine->rails[r].tp->hmem) {
            return false;
        }
    }
    return true;
}

/*
 * Whether every page of host range [addr, addr + len) is mapped in this process: a length
 * past the end of the caller's buffer would otherwise let peers write outside it (the
 * transports take the range on trust). mincore fails with ENOMEM at an unmapped page.
 */
static bool inter_host_range_mapped(const void *addr, size_t len)
{
    static unsigned char vec[4096];
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(page - 1);
    uintptr_t end = (uintptr_t)addr + len; /* no overflow: checked by the caller */

    while (start < end) {
        size_t pages = UTIL_MIN((end - start + page - 1) / page, sizeof(vec));

        int rc, tries = 0;

        /* vec is only written, never read: threads may share it. EAGAIN says the kernel
         * was short of memory for the answer (seen with sanitizers' shadow memory), not
         * that a page is unmapped: ask again. */
        while ((rc = mincore((void *)start, pages * page, vec)) != 0 && errno == EAGAIN &&
               ++tries < 100) {
            sched_yield();
        }
        if (rc != 0) {
            return false;
        }
        start += pages * page;
    }
    return true;
}

strata_status_t inter_engine_mem_register(inter_engine_t *engine, void *addr, size_t len,
                                          inter_mr_t **mr_p)
{
    return inter_engine_mem_register_kind(engine, addr, len, INTER_MEM_HOST, 0, mr_p);
}

strata_status_t inter_engine_mem_register_kind(inter_engine_t *engine, void *addr, size_t len,
                                               inter_mem_kind_t kind, int device,
                                               inter_mr_t **mr_p)
{
    strata_status_t status = STRATA_OK;
    inter_mr_t *mr;

    if (addr == NULL || len == 0 || mr_p == NULL) {
        UTIL_LOG_ERROR("engine: cannot register %zu bytes at %p", len, addr);
        return STRATA_ERR_INVALID;
    }
    if ((uintptr_t)addr > UINTPTR_MAX - len) {
        UTIL_LOG_ERROR("engine: cannot register %zu bytes at %p: the range wraps around the "
                       "address space", len, addr);
        return STRATA_ERR_INVALID;
    }
    if (kind == INTER_MEM_HOST && !inter_host_range_mapped(addr, len)) {
        UTIL_LOG_ERROR("engine: cannot register %zu bytes at %p: part of the range is not "
                       "mapped memory of this process (a length past the buffer's end?)", len,
                       addr);
        return STRATA_ERR_INVALID;
    }
    if (!inter_engine_can_register(engine, kind)) {
        return STRATA_ERR_UNSUPPORTED;
    }
    mr = calloc(1, sizeof(*mr));
    if (mr == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    mr->addr = addr;
    mr->len  = len;
    pthread_mutex_lock(&engine->mr_lock);
    INTER_FOR_EACH_RAIL(engine, r) {
        if (status != STRATA_OK) {
            break;
        }
        status = engine->ops->mem_register(engine->rails[r].tp, addr, len, kind, device,
                                           atomic_fetch_add(&engine->key_counter, 1),
                                           &mr->tmr[r]);
        if (status == STRATA_OK && r == INTER_LOCAL_RAIL) {
            mr->has_local = true;
        } else if (status == STRATA_OK) {
            mr->num_rails++;
        }
    }
    if (status == STRATA_OK) {
        mr->next = engine->mrs;
        if (engine->mrs != NULL) {
            engine->mrs->prev = mr;
        }
        engine->mrs = mr;
    }
    pthread_mutex_unlock(&engine->mr_lock);
    if (status != STRATA_OK) {
        inter_engine_mem_deregister(engine, mr);
        return status;
    }
    *mr_p = mr;
    return STRATA_OK;
}

void inter_engine_mem_deregister(inter_engine_t *engine, inter_mr_t *mr)
{
    if (mr == NULL) {
        return;
    }
    pthread_mutex_lock(&engine->mr_lock);
    for (int r = 0; r < mr->num_rails; ++r) {
        engine->ops->mem_deregister(engine->rails[r].tp, &mr->tmr[r]);
    }
    if (mr->has_local) {
        engine->ops->mem_deregister(engine->rails[INTER_LOCAL_RAIL].tp,
                                    &mr->tmr[INTER_LOCAL_RAIL]);
    }
    if (mr->prev != NULL) {
        mr->prev->next = mr->next;
    } else if (engine->mrs == mr) {
        engine->mrs = mr->next;
    }
    if (mr->next != NULL) {
        mr->next->prev = mr->prev;
    }
    pthread_mutex_unlock(&engine->mr_lock);
    free(mr);
}

void inter_engine_mem_release_late(inter_engine_t *engine, inter_mr_t *mr, void *ptr,
                                   void (*free_fn)(void *ptr))
{
    inter_late_release_t *late = malloc(sizeof(*late));

    if (late == NULL) {
        UTIL_LOG_WARN("engine: out of memory; %zu registered bytes are kept to process exit",
                      mr->len);
        return;
    }
    *late = (inter_late_release_t){.mr = mr, .ptr = ptr, .free_fn = free_fn};
    pthread_mutex_lock(&engine->mr_lock);
    late->next           = engine->late_release;
    engine->late_release = late;
    pthread_mutex_unlock(&engine->mr_lock);
}

void inter_engine_mem_descriptor(const inter_mr_t *mr, inter_rdesc_t *desc_p)
{
    memset(desc_p, 0, sizeof(*desc_p));
    desc_p->magic     = INTER_RDESC_MAGIC;
    desc_p->num_rails = (uint32_t)mr->num_rails;
    desc_p->base      = (uint64_t)(uintptr_t)mr->addr;
    desc_p->length    = mr->len;
    for (int r = 0; r < mr->num_rails; ++r) {
        desc_p->keys[r] = mr->tmr[r].key;
    }
    desc_p->has_local = mr->has_local;
    desc_p->keys[INTER_LOCAL_RAIL] = mr->has_local ? mr->tmr[INTER_LOCAL_RAIL].key : 0;
}

void inter_engine_mem_range(const inter_mr_t *mr, size_t offset, size_t length,
                            inter_rdesc_t *desc_p)
{
    inter_engine_mem_descriptor(mr, desc_p);
    if (offset > mr->len || length > mr->len - offset) {
        UTIL_LOG_ERROR("engine: range [%zu, +%zu) is outside a registration of %zu bytes",
                       offset, length, mr->len);
        desc_p->magic = 0; /* refused wherever it is used */
        return;
    }
    desc_p->base     += offset;
    desc_p->mr_offset = offset;
    desc_p->length    = length;
}
