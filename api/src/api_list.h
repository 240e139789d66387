/*
 * What paged and scatter writes and weight transfer plans share: extents merged where a
 * piece continues the last one in both regions, and the check that no destination byte is
 * written twice (api_p2p_list.c).
 */
#ifndef STRATA_API_LIST_H
#define STRATA_API_LIST_H

#include "inter/engine.h"

#include <strata/strata.h>

/* Bytes one merged extent may reach (it is cut into chunks all the same). */
#define API_LIST_MERGE_MAX ((size_t)64 << 20)

/* A destination range: the rank it is written at, and the list entry it came from. */
typedef struct api_dst_range {
    int    rank;
    size_t offset, length, entry;
} api_dst_range_t;

/** No two of the n ranges overlap (sorted in place); otherwise STRATA_ERR_INVALID and one
 *  line naming call and two entries that do ("what" names them: "entries", "pieces"). */
strata_status_t api_ranges_disjoint(const char *call, api_dst_range_t *ranges, size_t n,
                                    const char *what);

/** len bytes from loff to roff at the end of extents[0..*count_p): merged into the last
 *  extent where it continues it in both regions and the sum stays within
 *  API_LIST_MERGE_MAX, else a new extent (room for it is the caller's). */
void            api_extent_append(inter_extent_t *extents, uint32_t *count_p, size_t loff,
                                  size_t roff, size_t len);

#endif
