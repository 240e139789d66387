/*
 * The hwloc XML check's parts (topo_hwloc_check.c): what it knows of hwloc's objects, the
 * state of one check, and the helpers the document, object and value parts share.
 */
#ifndef STRATA_TOPO_HWLOC_CHECK_H
#define STRATA_TOPO_HWLOC_CHECK_H

#include "topo_internal.h"

#include <hwloc.h>
#include <libxml/tree.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TOPO_CHECK_MAX_DEPTH        64      /* real machines nest about 15 deep */
#define TOPO_CHECK_MAX_OBJECTS      (1u << 20)
#define TOPO_CHECK_MAX_BITMAP_WORDS 4096    /* 131072 CPUs or NUMA nodes */

typedef enum topo_check_kind {
    TOPO_CHECK_NORMAL, /* Machine, Package, Die, caches, Core, PU, Group: have cpusets */
    TOPO_CHECK_MEMORY, /* NUMANode, MemCache */
    TOPO_CHECK_IO,     /* Bridge, PCIDev, OSDev */
    TOPO_CHECK_MISC
} topo_check_kind_t;

typedef struct topo_check_type {
    const char       *name;
    hwloc_obj_type_t  type;
    topo_check_kind_t kind;
    unsigned          cache_level; /* 1-5 for CPU caches, else 0 */
    bool              icache;
} topo_check_type_t;

/* The four sets of an object, in this order; absent sets are NULL. */
enum { TOPO_SET_CPU, TOPO_SET_COMPLETE_CPU, TOPO_SET_NODE, TOPO_SET_COMPLETE_NODE, TOPO_SETS };

typedef struct topo_check_obj {
    const topo_check_type_t *type;
    hwloc_bitmap_t           set[TOPO_SETS];
    hwloc_bitmap_t           normal_children; /* union of the normal children's cpusets */
    hwloc_bitmap_t           memory_children; /* union of the memory children's nodesets */
    bool                     has_os_index;
    unsigned                 os_index;
    bool                     has_cache_depth;
    unsigned                 cache_depth;
    unsigned                 cache_type;
    int                      bridge_upstream;  /* -1 when absent */
    bool                     has_busid;
    bool                     has_bridge_pci;
    bool                     has_osdev_type;
} topo_check_obj_t;

typedef struct topo_check_gp {
    uint64_t gp_index;
    long     line;
} topo_check_gp_t;

typedef struct topo_check {
    const char     *name;
    char           *err;
    unsigned        version;   /* major format version: 2 or 3 */
    unsigned        objects;
    hwloc_bitmap_t  pus;       /* every PU's cpuset so far */
    hwloc_bitmap_t  numas;     /* every NUMA node's nodeset so far */
    unsigned        num_numa;
    topo_check_gp_t *gps;
    size_t          num_gps;
    size_t          max_gps;
} topo_check_t;

/* Attributes of a non-object element: each allowed name, each value checked by kind. */
typedef enum topo_check_value {
    TOPO_VALUE_TEXT,
    TOPO_VALUE_NUMBER,
    TOPO_VALUE_SIGNED,
    TOPO_VALUE_BITMAP,
    TOPO_VALUE_TYPE,
    TOPO_VALUE_HEX
} topo_check_value_t;

typedef struct topo_check_attr {
    const char        *name;
    topo_check_value_t value;
    bool               required;
} topo_check_attr_t;

/* --- Failures and values (topo_hwloc_check_values.c) ----------------------------------- */

strata_status_t topo_check_fail(topo_check_t *ctx, const xmlNode *node, const char *fmt,
                                ...) UTIL_PRINTF(3, 4);
strata_status_t topo_check_stray_text(topo_check_t *ctx, const xmlNode *text,
                                      const char *where);
strata_status_t topo_check_nomem(topo_check_t *ctx);
const char *topo_check_text(const xmlNode *children);
bool topo_check_blank(const char *text);
bool topo_check_u64(const char *s, uint64_t max, uint64_t *value_p);
bool topo_check_int(const char *s, int64_t min, int64_t max);
bool topo_check_busid(const char *s);
bool topo_check_pci_type(const char *s);
bool topo_check_bridge_pci(const char *s);
bool topo_check_float(const char *s);
strata_status_t topo_check_bitmap(topo_check_t *ctx, const xmlNode *node,
                                  const char *attr, const char *text,
                                  hwloc_bitmap_t *set_p);
const topo_check_type_t *topo_check_type_find(const char *name);
strata_status_t topo_check_gp_add(topo_check_t *ctx, uint64_t gp_index, long line);
strata_status_t topo_check_element_attrs(topo_check_t *ctx, const xmlNode *node,
                                         const topo_check_attr_t *allowed, size_t n);
strata_status_t topo_check_leaf(topo_check_t *ctx, const xmlNode *node);
strata_status_t topo_check_content(topo_check_t *ctx, const xmlNode *node,
                                   size_t expected, const char **text_p);
strata_status_t topo_check_info(topo_check_t *ctx, const xmlNode *node);
strata_status_t topo_check_userdata(topo_check_t *ctx, const xmlNode *node);

/* --- Objects (topo_hwloc_check_object.c) ----------------------------------------------- */

/* An <object> and everything below it, against its parent's sets; depth bounds recursion. */
strata_status_t topo_check_object(topo_check_t *ctx, const xmlNode *node,
                                  topo_check_obj_t *parent, unsigned depth);

#endif
