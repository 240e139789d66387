/*
 * Anonymous mappings bound to a NUMA node before their pages are touched. Each allocation
 * starts with one page that records its length, so util_numa_free needs only the pointer.
 */
#include "util_numa.h"

#include "util_log.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* From the kernel's <linux/mempolicy.h>: prefer the node, falling back where it is full. */
#define UTIL_MPOL_PREFERRED 1
#define UTIL_MPOL_F_NODE    (1 << 0)
#define UTIL_MPOL_F_ADDR    (1 << 1)
#define UTIL_NUMA_MAGIC     0x4e554d41u /* "NUMA" */
#define UTIL_LONG_BITS      (8 * sizeof(unsigned long))

typedef struct util_numa_header {
    uint32_t magic;
    size_t   mapped; /* bytes of the whole mapping, this page included */
} util_numa_header_t;

static size_t util_page_size(void)
{
    long page = sysconf(_SC_PAGESIZE);

    return page > 0 ? (size_t)page : 4096;
}

/* Prefer node for [addr, addr + len); the kernel may refuse (no such node, no NUMA, a
 * sandbox without mbind), and then the pages go where they would have gone. */
static void util_numa_prefer(void *addr, size_t len, int node)
{
    /* One word more than the nodes need: maxnode (node + 2) bits are read. */
    unsigned long mask[(UTIL_NUMA_MAX_NODE + 1) / UTIL_LONG_BITS + 1] = {0};

    mask[(size_t)node / UTIL_LONG_BITS] = 1ul << ((size_t)node % UTIL_LONG_BITS);
    /* maxnode counts one past the last bit the kernel reads. */
    if (syscall(SYS_mbind, addr, len, UTIL_MPOL_PREFERRED, mask, (unsigned long)node + 2,
                0) != 0) {
        UTIL_LOG_DEBUG("numa: memory cannot be placed on node %d: %s", node, strerror(errno));
    }
}

void *util_numa_alloc(size_t size, int node)
{
    size_t page = util_page_size(), mapped;
    util_numa_header_t *header;
    char *base;

    if (size == 0 || size > SIZE_MAX - 2 * page) {
        return NULL;
    }
    mapped = page + (size + page - 1) / page * page;
    base   = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        return NULL;
    }
    if (node >= 0 && node <= UTIL_NUMA_MAX_NODE) {
        util_numa_prefer(base + page, mapped - page, node);
    }
    /* Touched now, by the policy just set, rather than by whichever thread comes first. */
    memset(base + page, 0, mapped - page);
    header  = (util_numa_header_t *)base;
    *header = (util_numa_header_t){.magic = UTIL_NUMA_MAGIC, .mapped = mapped};
    return base + page;
}

void util_numa_free(void *ptr)
{
    util_numa_header_t *header;

    if (ptr == NULL) {
        return;
    }
    header = (util_numa_header_t *)((char *)ptr - util_page_size());
    if (header->magic != UTIL_NUMA_MAGIC) {
        UTIL_LOG_ERROR("numa: %p was not allocated by util_numa_alloc; not freed", ptr);
        return;
    }
    header->magic = 0;
    munmap(header, header->mapped);
}

int util_numa_node_of(const void *addr)
{
    int node = -1;

    if (syscall(SYS_get_mempolicy, &node, NULL, 0ul, addr, UTIL_MPOL_F_NODE | UTIL_MPOL_F_ADDR) !=
        0) {
        return -1;
    }
    return node;
}
