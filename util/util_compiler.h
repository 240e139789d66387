/*
 * Small compiler helpers shared by every layer.
 */
#ifndef STRATA_UTIL_COMPILER_H
#define STRATA_UTIL_COMPILER_H

#include <stddef.h>
#include <stdlib.h>

#define UTIL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/** Pointer to the enclosing struct of a member (derived objects embed their base first). */
#define util_container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#define UTIL_LIKELY(x)   __builtin_expect(!!(x), 1)
#define UTIL_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define UTIL_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))

/** size bytes aligned to alignment (a power of two), any size; free with free(); NULL on error. */
static inline void *util_alloc_aligned(size_t alignment, size_t size)
{
    void *ptr = NULL;

    return (posix_memalign(&ptr, alignment, size ? size : 1) == 0) ? ptr : NULL;
}

#define UTIL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define UTIL_MAX(a, b) ((a) > (b) ? (a) : (b))
/** x rounded up to a multiple of align (a power of two). */
#define UTIL_ALIGN_UP(x, align) (((x) + (align) - 1) & ~((size_t)(align) - 1))

#endif
