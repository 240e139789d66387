/*
 * Checks an hwloc XML document before the hwloc library reads it. hwloc's importer trusts
 * its input: an object without a type, a PU with children or a cpuset that does not parse
 * makes libhwloc 2.9 dereference NULL. Only what hwloc itself writes (formats 2.x and 3.x) is
 * let through; anything else is refused with the file, the line and the reason.
 */
#include "topo_internal.h"

#include <hwloc.h>
#include <libxml/tree.h>

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The type names hwloc 2.x and 3.x write (hwloc_obj_type_string), nothing looser. */
static const topo_check_type_t topo_check_types[] = {
    {"Machine", HWLOC_OBJ_MACHINE, TOPO_CHECK_NORMAL, 0, false},
    {"Package", HWLOC_OBJ_PACKAGE, TOPO_CHECK_NORMAL, 0, false},
    {"Die", HWLOC_OBJ_DIE, TOPO_CHECK_NORMAL, 0, false},
    {"Core", HWLOC_OBJ_CORE, TOPO_CHECK_NORMAL, 0, false},
    {"PU", HWLOC_OBJ_PU, TOPO_CHECK_NORMAL, 0, false},
    {"L1Cache", HWLOC_OBJ_L1CACHE, TOPO_CHECK_NORMAL, 1, false},
    {"L2Cache", HWLOC_OBJ_L2CACHE, TOPO_CHECK_NORMAL, 2, false},
    {"L3Cache", HWLOC_OBJ_L3CACHE, TOPO_CHECK_NORMAL, 3, false},
    {"L4Cache", HWLOC_OBJ_L4CACHE, TOPO_CHECK_NORMAL, 4, false},
    {"L5Cache", HWLOC_OBJ_L5CACHE, TOPO_CHECK_NORMAL, 5, false},
    {"L1iCache", HWLOC_OBJ_L1ICACHE, TOPO_CHECK_NORMAL, 1, true},
    {"L2iCache", HWLOC_OBJ_L2ICACHE, TOPO_CHECK_NORMAL, 2, true},
    {"L3iCache", HWLOC_OBJ_L3ICACHE, TOPO_CHECK_NORMAL, 3, true},
    {"Group", HWLOC_OBJ_GROUP, TOPO_CHECK_NORMAL, 0, false},
    {"NUMANode", HWLOC_OBJ_NUMANODE, TOPO_CHECK_MEMORY, 0, false},
    {"MemCache", HWLOC_OBJ_MEMCACHE, TOPO_CHECK_MEMORY, 0, false},
    {"Bridge", HWLOC_OBJ_BRIDGE, TOPO_CHECK_IO, 0, false},
    {"PCIDev", HWLOC_OBJ_PCI_DEVICE, TOPO_CHECK_IO, 0, false},
    {"OSDev", HWLOC_OBJ_OS_DEVICE, TOPO_CHECK_IO, 0, false},
    {"Misc", HWLOC_OBJ_MISC, TOPO_CHECK_MISC, 0, false},
};

/* The four sets of an object, in this order; absent sets are NULL. */
enum { TOPO_SET_CPU, TOPO_SET_COMPLETE_CPU, TOPO_SET_NODE, TOPO_SET_COMPLETE_NODE, TOPO_SETS };
static const char *const topo_set_names[TOPO_SETS] = {"cpuset", "complete_cpuset", "nodeset",
                                                      "complete_nodeset"};

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

static strata_status_t topo_check_fail(topo_check_t *ctx, const xmlNode *node, const char *fmt,
                                       ...) UTIL_PRINTF(3, 4);

static strata_status_t topo_check_fail(topo_check_t *ctx, const xmlNode *node, const char *fmt,
                                       ...)
{
    char reason[TOPO_ERR_LEN];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    topo_error(ctx->err, "%s:%ld: invalid hwloc XML: %s", ctx->name, xmlGetLineNo(node), reason);
    return STRATA_ERR_PARSE;
}

/* Report text where it starts: libxml2 numbers a text node with the line it ends on. */
static strata_status_t topo_check_stray_text(topo_check_t *ctx, const xmlNode *text,
                                             const char *where)
{
    const char *s = (const char *)text->content;
    long line = xmlGetLineNo(text);
    bool before = true;

    for (; s != NULL && *s != '\0'; ++s) {
        before = before && isspace((unsigned char)*s);
        line -= (*s == '\n' && !before);
    }
    topo_error(ctx->err, "%s:%ld: invalid hwloc XML: text inside %s", ctx->name, line, where);
    return STRATA_ERR_PARSE;
}

static strata_status_t topo_check_nomem(topo_check_t *ctx)
{
    topo_error(ctx->err, "%s: out of memory while checking hwloc XML", ctx->name);
    return STRATA_ERR_NO_MEMORY;
}

/* The text of an attribute or element: one text node, "" when empty, NULL otherwise. */
static const char *topo_check_text(const xmlNode *children)
{
    if (children == NULL) {
        return "";
    }
    if (children->type != XML_TEXT_NODE || children->next != NULL || children->content == NULL) {
        return NULL;
    }
    return (const char *)children->content;
}

static bool topo_check_blank(const char *text)
{
    for (; *text != '\0'; ++text) {
        if (!isspace((unsigned char)*text)) {
            return false;
        }
    }
    return true;
}

/* A decimal number of 1-20 digits, no sign, no space, at most max. */
static bool topo_check_u64(const char *s, uint64_t max, uint64_t *value_p)
{
    uint64_t value = 0;
    size_t n = 0;

    for (; isdigit((unsigned char)s[n]); ++n) {
        unsigned digit = (unsigned)(s[n] - '0');

        if (n >= 20 || value > (UINT64_MAX - digit) / 10) {
            return false;
        }
        value = value * 10 + digit;
    }
    if (n == 0 || s[n] != '\0' || value > max) {
        return false;
    }
    *value_p = value;
    return true;
}

static bool topo_check_int(const char *s, int64_t min, int64_t max)
{
    uint64_t magnitude;
    bool negative = (s[0] == '-');

    if (!topo_check_u64(s + negative, (uint64_t)INT64_MAX, &magnitude)) {
        return false;
    }
    return negative ? -(int64_t)magnitude >= min : (int64_t)magnitude <= max;
}

/* Exactly n hex digits (n_max when n_min differs) at *s; advances *s. */
static bool topo_check_hex(const char **s, size_t n_min, size_t n_max)
{
    size_t n = 0;

    while (isxdigit((unsigned char)(*s)[n])) {
        ++n;
    }
    *s += n;
    return n >= n_min && n <= n_max;
}

static bool topo_check_char(const char **s, char c)
{
    if (**s != c) {
        return false;
    }
    ++*s;
    return true;
}

/* "dddd:bb:dd.f": PCI domains of 4-8 digits (Intel VMD domains have 5). */
static bool topo_check_busid(const char *s)
{
    return topo_check_hex(&s, 4, 8) && topo_check_char(&s, ':') && topo_check_hex(&s, 2, 2) &&
           topo_check_char(&s, ':') && topo_check_hex(&s, 2, 2) && topo_check_char(&s, '.') &&
           topo_check_hex(&s, 1, 1) && *s == '\0';
}

/* "cccc [vvvv:dddd] [vvvv:dddd] rr", and " pp" (the prog-if) from hwloc 3. */
static bool topo_check_pci_type(const char *s)
{
    bool ok = topo_check_hex(&s, 4, 6) && topo_check_char(&s, ' ');

    for (int i = 0; ok && i < 2; ++i) {
        ok = topo_check_char(&s, '[') && topo_check_hex(&s, 4, 4) && topo_check_char(&s, ':') &&
             topo_check_hex(&s, 4, 4) && topo_check_char(&s, ']') && topo_check_char(&s, ' ');
    }
    ok = ok && topo_check_hex(&s, 2, 2);
    if (ok && *s == ' ') {
        ++s;
        ok = topo_check_hex(&s, 2, 2);
    }
    return ok && *s == '\0';
}

/* "dddd:[ss-ss]": the bus range behind a bridge. */
static bool topo_check_bridge_pci(const char *s)
{
    return topo_check_hex(&s, 4, 8) && topo_check_char(&s, ':') && topo_check_char(&s, '[') &&
           topo_check_hex(&s, 2, 2) && topo_check_char(&s, '-') && topo_check_hex(&s, 2, 2) &&
           topo_check_char(&s, ']') && *s == '\0';
}

static bool topo_check_float(const char *s)
{
    char *end;
    double value;

    if (!isdigit((unsigned char)s[0])) {
        return false;
    }
    value = strtod(s, &end);
    return *end == '\0' && isfinite(value) && value >= 0.0;
}

/* hwloc's bitmap text: "0xf...f" (infinite), then comma-separated 32-bit words "0x0000ffff". */
static bool topo_check_bitmap_text(const char *s)
{
    unsigned words = 0;

    if (strncmp(s, "0xf...f", 7) == 0) {
        s += 7;
        if (*s == '\0') {
            return true;
        }
        if (*s++ != ',') {
            return false;
        }
    }
    for (;;) {
        if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) {
            return false;
        }
        s += 2;
        if (!topo_check_hex(&s, 1, 8) || ++words > TOPO_CHECK_MAX_BITMAP_WORDS) {
            return false;
        }
        if (*s == '\0') {
            return true;
        }
        if (*s++ != ',') {
            return false;
        }
    }
}

static strata_status_t topo_check_bitmap(topo_check_t *ctx, const xmlNode *node,
                                         const char *attr, const char *text,
                                         hwloc_bitmap_t *set_p)
{
    hwloc_bitmap_t set;

    if (!topo_check_bitmap_text(text)) {
        return topo_check_fail(ctx, node, "%s '%.40s' is not an hwloc bitmap (0x%08x,...)", attr,
                               text, 0xffu);
    }
    if (*set_p != NULL) {
        return topo_check_fail(ctx, node, "%s given twice", attr);
    }
    set = hwloc_bitmap_alloc();
    if (set == NULL) {
        return topo_check_nomem(ctx);
    }
    if (hwloc_bitmap_sscanf(set, text) != 0) {
        hwloc_bitmap_free(set);
        return topo_check_fail(ctx, node, "%s '%.40s' does not parse", attr, text);
    }
    *set_p = set;
    return STRATA_OK;
}

static const topo_check_type_t *topo_check_type_find(const char *name)
{
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(topo_check_types); ++i) {
        if (strcmp(topo_check_types[i].name, name) == 0) {
            return &topo_check_types[i];
        }
    }
    return NULL;
}

static strata_status_t topo_check_gp_add(topo_check_t *ctx, uint64_t gp_index, long line)
{
    topo_check_gp_t *grown;

    if (ctx->num_gps == ctx->max_gps) {
        size_t max = ctx->max_gps ? 2 * ctx->max_gps : 256;

        grown = realloc(ctx->gps, max * sizeof(*grown));
        if (grown == NULL) {
            return topo_check_nomem(ctx);
        }
        ctx->gps     = grown;
        ctx->max_gps = max;
    }
    ctx->gps[ctx->num_gps++] = (topo_check_gp_t){.gp_index = gp_index, .line = line};
    return STRATA_OK;
}

static int topo_check_gp_compare(const void *a, const void *b)
{
    const topo_check_gp_t *x = a, *y = b;

    if (x->gp_index != y->gp_index) {
        return x->gp_index < y->gp_index ? -1 : 1;
    }
    return (x->line > y->line) - (x->line < y->line);
}

/* One attribute of an <object>; the type was read first. */
static strata_status_t topo_check_object_attr(topo_check_t *ctx, const xmlNode *node,
                                              topo_check_obj_t *obj, bool root,
                                              const char *attr, const char *value)
{
    const topo_check_type_t *type = obj->type;
    bool cache = type->cache_level != 0 || type->type == HWLOC_OBJ_MEMCACHE;
    uint64_t number;

    for (int s = 0; s < TOPO_SETS; ++s) {
        if (strcmp(attr, topo_set_names[s]) == 0) {
            if (type->kind == TOPO_CHECK_IO || type->kind == TOPO_CHECK_MISC) {
                return topo_check_fail(ctx, node, "%s object has a %s: only CPU and memory "
                                       "objects have one", type->name, attr);
            }
            return topo_check_bitmap(ctx, node, attr, value, &obj->set[s]);
        }
    }
    if (strcmp(attr, "allowed_cpuset") == 0 || strcmp(attr, "allowed_nodeset") == 0) {
        hwloc_bitmap_t allowed = NULL;
        strata_status_t status;

        if (!root) {
            return topo_check_fail(ctx, node, "%s is only for the root object", attr);
        }
        status = topo_check_bitmap(ctx, node, attr, value, &allowed);
        hwloc_bitmap_free(allowed);
        return status;
    }
    if (strcmp(attr, "os_index") == 0) {
        if (!topo_check_u64(value, UINT32_MAX, &number)) {
            return topo_check_fail(ctx, node, "os_index '%.40s' is not a number below 2^32",
                                   value);
        }
        obj->has_os_index = true;
        obj->os_index     = (unsigned)number;
        return STRATA_OK;
    }
    if (strcmp(attr, "gp_index") == 0 || strcmp(attr, "id") == 0) {
        const char *digits = value;

        if (attr[0] == 'i' && strncmp(value, "obj", 3) == 0) {
            digits = value + 3;
        } else if (attr[0] == 'i') {
            return topo_check_fail(ctx, node, "id '%.40s' is not obj<number>", value);
        }
        if (!topo_check_u64(digits, UINT64_MAX - 1, &number) || number == 0) {
            return topo_check_fail(ctx, node, "%s '%.40s' is not a positive number", attr, value);
        }
        /* hwloc 3 writes both, with the same number: count the object once. */
        if (attr[0] == 'i' && xmlHasProp(node, BAD_CAST "gp_index") != NULL) {
            xmlChar *gp = xmlGetProp(node, BAD_CAST "gp_index");
            bool same = gp != NULL && strcmp((const char *)gp, digits) == 0;

            xmlFree(gp);
            return same ? STRATA_OK
                        : topo_check_fail(ctx, node, "id '%.40s' differs from gp_index", value);
        }
        return topo_check_gp_add(ctx, number, xmlGetLineNo(node));
    }
    if (strcmp(attr, "name") == 0 || strcmp(attr, "subtype") == 0) {
        return STRATA_OK;
    }
    if (strcmp(attr, "local_memory") == 0) {
        if (type->type != HWLOC_OBJ_NUMANODE && !root) {
            return topo_check_fail(ctx, node, "local_memory on a %s", type->name);
        }
        return topo_check_u64(value, UINT64_MAX, &number)
                   ? STRATA_OK
                   : topo_check_fail(ctx, node, "local_memory '%.40s' is not a number", value);
    }
    if (strcmp(attr, "depth") == 0) {
        if (!topo_check_u64(value, 255, &number)) {
            return topo_check_fail(ctx, node, "depth '%.40s' is not a small number", value);
        }
        obj->has_cache_depth = true;
        obj->cache_depth     = (unsigned)number;
        return STRATA_OK;
    }
    if (strncmp(attr, "cache_", 6) == 0) {
        if (!cache) {
            return topo_check_fail(ctx, node, "%s on a %s, which is not a cache", attr,
                                   type->name);
        }
        if (strcmp(attr, "cache_size") == 0 || strcmp(attr, "cache_linesize") == 0) {
            return topo_check_u64(value, strcmp(attr, "cache_size") ? UINT32_MAX : UINT64_MAX,
                                  &number)
                       ? STRATA_OK
                       : topo_check_fail(ctx, node, "%s '%.40s' is not a number", attr, value);
        }
        if (strcmp(attr, "cache_associativity") == 0) {
            return topo_check_int(value, -1, INT32_MAX)
                       ? STRATA_OK
                       : topo_check_fail(ctx, node, "cache_associativity '%.40s' is not a number "
                                         "from -1", value);
        }
        if (strcmp(attr, "cache_type") == 0) {
            if (!topo_check_u64(value, HWLOC_OBJ_CACHE_INSTRUCTION, &number)) {
                return topo_check_fail(ctx, node, "cache_type '%.40s' is not 0, 1 or 2", value);
            }
            obj->cache_type = (unsigned)number;
            return STRATA_OK;
        }
        if (strcmp(attr, "cache_inclusive") == 0 && ctx->version >= 3) {
            return topo_check_u64(value, 1, &number)
                       ? STRATA_OK
                       : topo_check_fail(ctx, node, "cache_inclusive '%.40s' is not 0 or 1",
                                         value);
        }
    }
    if (strcmp(attr, "kind") == 0 || strcmp(attr, "subkind") == 0 ||
        strcmp(attr, "dont_merge") == 0) {
        if (type->type != HWLOC_OBJ_GROUP) {
            return topo_check_fail(ctx, node, "%s on a %s, which is not a Group", attr,
                                   type->name);
        }
        return topo_check_u64(value, attr[0] == 'd' ? 1 : UINT32_MAX, &number)
                   ? STRATA_OK
                   : topo_check_fail(ctx, node, "Group %s '%.40s' is out of range", attr, value);
    }
    if (strcmp(attr, "numanode_type") == 0 && ctx->version >= 3) {
        return type->type == HWLOC_OBJ_NUMANODE
                   ? STRATA_OK
                   : topo_check_fail(ctx, node, "numanode_type on a %s", type->name);
    }
    if (strncmp(attr, "pci_", 4) == 0) {
        if (type->type != HWLOC_OBJ_PCI_DEVICE && type->type != HWLOC_OBJ_BRIDGE) {
            return topo_check_fail(ctx, node, "%s on a %s, which is not a PCI object", attr,
                                   type->name);
        }
        if (strcmp(attr, "pci_busid") == 0) {
            obj->has_busid = true;
            return topo_check_busid(value)
                       ? STRATA_OK
                       : topo_check_fail(ctx, node, "pci_busid '%.40s' is not dddd:bb:dd.f",
                                         value);
        }
        if (strcmp(attr, "pci_type") == 0) {
            return topo_check_pci_type(value)
                       ? STRATA_OK
                       : topo_check_fail(ctx, node, "pci_type '%.60s' is not "
                                         "'class [vendor:device] [vendor:device] rev'", value);
        }
        if (strcmp(attr, "pci_link_speed") == 0) {
            return topo_check_float(value)
                       ? STRATA_OK
                       : topo_check_fail(ctx, node, "pci_link_speed '%.40s' is not a number",
                                         value);
        }
    }
    if (strcmp(attr, "bridge_type") == 0 || strcmp(attr, "bridge_pci") == 0) {
        if (type->type != HWLOC_OBJ_BRIDGE) {
            return topo_check_fail(ctx, node, "%s on a %s", attr, type->name);
        }
        if (attr[7] == 'p') {
            obj->has_bridge_pci = true;
            return topo_check_bridge_pci(value)
                       ? STRATA_OK
                       : topo_check_fail(ctx, node, "bridge_pci '%.40s' is not dddd:[bb-bb]",
                                         value);
        }
        /* upstream host (0) or PCI (1), downstream PCI (1) */
        if ((value[0] != '0' && value[0] != '1') || strcmp(value + 1, "-1") != 0) {
            return topo_check_fail(ctx, node, "bridge_type '%.40s' is not 0-1 or 1-1", value);
        }
        obj->bridge_upstream = value[0] - '0';
        return STRATA_OK;
    }
    if (strcmp(attr, "osdev_type") == 0) {
        /* 2.x: a type from 0 (block) to 5 (coprocessor); 3.x: a mask of 7 bits */
        uint64_t max = (ctx->version >= 3) ? 127 : HWLOC_OBJ_OSDEV_COPROC;

        if (type->type != HWLOC_OBJ_OS_DEVICE) {
            return topo_check_fail(ctx, node, "osdev_type on a %s", type->name);
        }
        if (!topo_check_u64(value, max, &number)) {
            return topo_check_fail(ctx, node, "osdev_type '%.40s' is not a number up to %" PRIu64,
                                   value, max);
        }
        obj->has_osdev_type = true;
        return STRATA_OK;
    }
    return topo_check_fail(ctx, node, "unknown attribute %s on a %s object", attr, type->name);
}

static strata_status_t topo_check_object_attrs(topo_check_t *ctx, const xmlNode *node,
                                               topo_check_obj_t *obj, bool root)
{
    const xmlAttr *attr = node->properties;
    const char *value;
    strata_status_t status;

    value = attr ? topo_check_text(attr->children) : NULL;
    if (attr == NULL || strcmp((const char *)attr->name, "type") != 0 || value == NULL) {
        return topo_check_fail(ctx, node, "<object> without a type as its first attribute");
    }
    obj->type = topo_check_type_find(value);
    if (obj->type == NULL) {
        return topo_check_fail(ctx, node, "unknown object type '%.40s'", value);
    }
    for (attr = attr->next; attr != NULL; attr = attr->next) {
        value = topo_check_text(attr->children);
        if (value == NULL) {
            return topo_check_fail(ctx, node, "attribute %s has entity references",
                                   (const char *)attr->name);
        }
        status = topo_check_object_attr(ctx, node, obj, root, (const char *)attr->name, value);
        if (status != STRATA_OK) {
            return status;
        }
    }
    return STRATA_OK;
}

/* What a type needs of its own attributes and sets. */
static strata_status_t topo_check_object_self(topo_check_t *ctx, const xmlNode *node,
                                              topo_check_obj_t *obj)
{
    const topo_check_type_t *type = obj->type;
    hwloc_bitmap_t *set = obj->set;

    if (type->kind == TOPO_CHECK_NORMAL || type->kind == TOPO_CHECK_MEMORY) {
        for (int s = 0; s < TOPO_SETS; ++s) {
            if (set[s] == NULL) {
                return topo_check_fail(ctx, node, "%s object without a %s", type->name,
                                       topo_set_names[s]);
            }
        }
        if (!hwloc_bitmap_isincluded(set[TOPO_SET_CPU], set[TOPO_SET_COMPLETE_CPU]) ||
            !hwloc_bitmap_isincluded(set[TOPO_SET_NODE], set[TOPO_SET_COMPLETE_NODE])) {
            return topo_check_fail(ctx, node, "%s cpuset or nodeset is not within its "
                                   "complete set", type->name);
        }
    }
    if (type->cache_level != 0) {
        if (!obj->has_cache_depth || obj->cache_depth != type->cache_level) {
            return topo_check_fail(ctx, node, "%s without depth=\"%u\"", type->name,
                                   type->cache_level);
        }
        if (type->icache != (obj->cache_type == HWLOC_OBJ_CACHE_INSTRUCTION)) {
            return topo_check_fail(ctx, node, "%s with cache_type %u", type->name,
                                   obj->cache_type);
        }
    }
    switch (type->type) {
    case HWLOC_OBJ_PU:
        if (hwloc_bitmap_weight(set[TOPO_SET_CPU]) != 1 ||
            (obj->has_os_index && !hwloc_bitmap_isset(set[TOPO_SET_CPU], obj->os_index))) {
            return topo_check_fail(ctx, node, "PU whose cpuset is not the one CPU of its "
                                   "os_index");
        }
        if (hwloc_bitmap_intersects(ctx->pus, set[TOPO_SET_CPU])) {
            return topo_check_fail(ctx, node, "PU P#%d appears twice",
                                   hwloc_bitmap_first(set[TOPO_SET_CPU]));
        }
        hwloc_bitmap_or(ctx->pus, ctx->pus, set[TOPO_SET_CPU]);
        break;
    case HWLOC_OBJ_NUMANODE:
        if (!obj->has_os_index || hwloc_bitmap_weight(set[TOPO_SET_NODE]) != 1 ||
            !hwloc_bitmap_isset(set[TOPO_SET_NODE], obj->os_index)) {
            return topo_check_fail(ctx, node, "NUMANode whose nodeset is not the one node of "
                                   "its os_index");
        }
        if (hwloc_bitmap_intersects(ctx->numas, set[TOPO_SET_NODE])) {
            return topo_check_fail(ctx, node, "NUMANode P#%u appears twice", obj->os_index);
        }
        hwloc_bitmap_or(ctx->numas, ctx->numas, set[TOPO_SET_NODE]);
        ctx->num_numa++;
        break;
    case HWLOC_OBJ_BRIDGE:
        if (obj->bridge_upstream < 0 || !obj->has_bridge_pci) {
            return topo_check_fail(ctx, node, "Bridge without bridge_type and bridge_pci");
        }
        if (obj->bridge_upstream == HWLOC_OBJ_BRIDGE_PCI && !obj->has_busid) {
            return topo_check_fail(ctx, node, "PCI bridge without pci_busid");
        }
        break;
    case HWLOC_OBJ_PCI_DEVICE:
        if (!obj->has_busid) {
            return topo_check_fail(ctx, node, "PCIDev without pci_busid");
        }
        break;
    case HWLOC_OBJ_OS_DEVICE:
        if (!obj->has_osdev_type) {
            return topo_check_fail(ctx, node, "OSDev without osdev_type");
        }
        break;
    default:
        break;
    }
    return STRATA_OK;
}

/* Where an object may sit: the tree hwloc builds, which its importer and core assume. */
static strata_status_t topo_check_object_place(topo_check_t *ctx, const xmlNode *node,
                                               const topo_check_obj_t *obj,
                                               topo_check_obj_t *parent)
{
    const topo_check_type_t *type = obj->type, *ptype = parent->type;
    bool parent_normal = ptype->kind == TOPO_CHECK_NORMAL && ptype->type != HWLOC_OBJ_PU;
    bool ok;

    switch (type->kind) {
    case TOPO_CHECK_NORMAL:
        ok = parent_normal;
        break;
    case TOPO_CHECK_MEMORY:
        ok = parent_normal || ptype->type == HWLOC_OBJ_MEMCACHE;
        break;
    case TOPO_CHECK_IO:
        if (type->type == HWLOC_OBJ_BRIDGE && obj->bridge_upstream == HWLOC_OBJ_BRIDGE_HOST) {
            ok = ptype->kind == TOPO_CHECK_NORMAL;
        } else if (type->type == HWLOC_OBJ_OS_DEVICE) {
            ok = ptype->kind == TOPO_CHECK_NORMAL || ptype->type == HWLOC_OBJ_PCI_DEVICE;
        } else {
            ok = ptype->kind == TOPO_CHECK_NORMAL || ptype->type == HWLOC_OBJ_BRIDGE;
        }
        break;
    default:
        ok = true; /* Misc objects hang anywhere */
        break;
    }
    if (!ok) {
        return topo_check_fail(ctx, node, "a %s cannot be a child of a %s", type->name,
                               ptype->name);
    }
    if (type->kind != TOPO_CHECK_NORMAL && type->kind != TOPO_CHECK_MEMORY) {
        return STRATA_OK;
    }
    for (int s = 0; s < TOPO_SETS; ++s) {
        if (!hwloc_bitmap_isincluded(obj->set[s], parent->set[s])) {
            return topo_check_fail(ctx, node, "%s %s is not within its parent %s's", type->name,
                                   topo_set_names[s], ptype->name);
        }
    }
    if (type->kind == TOPO_CHECK_NORMAL) {
        if (hwloc_bitmap_intersects(parent->normal_children, obj->set[TOPO_SET_COMPLETE_CPU])) {
            return topo_check_fail(ctx, node, "%s cpuset overlaps a sibling's", type->name);
        }
        hwloc_bitmap_or(parent->normal_children, parent->normal_children,
                        obj->set[TOPO_SET_COMPLETE_CPU]);
    } else {
        if (hwloc_bitmap_intersects(parent->memory_children,
                                    obj->set[TOPO_SET_COMPLETE_NODE])) {
            return topo_check_fail(ctx, node, "%s nodeset overlaps a sibling's", type->name);
        }
        hwloc_bitmap_or(parent->memory_children, parent->memory_children,
                        obj->set[TOPO_SET_COMPLETE_NODE]);
    }
    return STRATA_OK;
}

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

static strata_status_t topo_check_element_attrs(topo_check_t *ctx, const xmlNode *node,
                                                const topo_check_attr_t *allowed, size_t n)
{
    const char *value;
    uint64_t number;
    size_t i;

    for (const xmlAttr *attr = node->properties; attr != NULL; attr = attr->next) {
        for (i = 0; i < n && strcmp(allowed[i].name, (const char *)attr->name) != 0; ++i) {
        }
        if (i == n) {
            return topo_check_fail(ctx, node, "unknown attribute %s on <%s>",
                                   (const char *)attr->name, (const char *)node->name);
        }
        value = topo_check_text(attr->children);
        if (value == NULL) {
            return topo_check_fail(ctx, node, "attribute %s has entity references",
                                   (const char *)attr->name);
        }
        switch (allowed[i].value) {
        case TOPO_VALUE_NUMBER:
            if (!topo_check_u64(value, UINT64_MAX, &number)) {
                goto err_value;
            }
            break;
        case TOPO_VALUE_SIGNED:
            if (!topo_check_int(value, INT32_MIN, INT32_MAX)) {
                goto err_value;
            }
            break;
        case TOPO_VALUE_BITMAP:
            if (!topo_check_bitmap_text(value)) {
                goto err_value;
            }
            break;
        case TOPO_VALUE_TYPE:
            if (topo_check_type_find(value) == NULL) {
                goto err_value;
            }
            break;
        case TOPO_VALUE_HEX: {
            const char *digits = value + 2;

            if (strncmp(value, "0x", 2) != 0 || !topo_check_hex(&digits, 1, 8) ||
                *digits != '\0') {
                goto err_value;
            }
            break;
        }
        default:
            break;
        }
        continue;
err_value:
        return topo_check_fail(ctx, node, "<%s> %s '%.40s' is malformed",
                               (const char *)node->name, (const char *)attr->name, value);
    }
    for (i = 0; i < n; ++i) {
        if (allowed[i].required && xmlHasProp(node, BAD_CAST allowed[i].name) == NULL) {
            return topo_check_fail(ctx, node, "<%s> without %s", (const char *)node->name,
                                   allowed[i].name);
        }
    }
    return STRATA_OK;
}

/* Children of an element that has none but blank text. */
static strata_status_t topo_check_leaf(topo_check_t *ctx, const xmlNode *node)
{
    for (const xmlNode *child = node->children; child != NULL; child = child->next) {
        if (child->type == XML_COMMENT_NODE || child->type == XML_PI_NODE) {
            continue;
        }
        if (child->type == XML_TEXT_NODE && !topo_check_blank((const char *)child->content)) {
            char where[64];

            snprintf(where, sizeof(where), "<%s>", (const char *)node->name);
            return topo_check_stray_text(ctx, child, where);
        }
        if (child->type != XML_TEXT_NODE) {
            return topo_check_fail(ctx, child, "<%s> has unexpected content",
                                   (const char *)node->name);
        }
    }
    return STRATA_OK;
}

/* Text content whose length hwloc is told in a length attribute. */
static strata_status_t topo_check_content(topo_check_t *ctx, const xmlNode *node,
                                          size_t expected, const char **text_p)
{
    const char *text = topo_check_text(node->children);

    if (text == NULL || strlen(text) != expected) {
        return topo_check_fail(ctx, node, "<%s> content is not the %zu characters of its length",
                               (const char *)node->name, expected);
    }
    *text_p = text;
    return STRATA_OK;
}

static strata_status_t topo_check_info(topo_check_t *ctx, const xmlNode *node)
{
    static const topo_check_attr_t attrs[] = {
        {"name", TOPO_VALUE_TEXT, true},
        {"value", TOPO_VALUE_TEXT, false},
    };
    strata_status_t status = topo_check_element_attrs(ctx, node, attrs, UTIL_ARRAY_SIZE(attrs));

    return status == STRATA_OK ? topo_check_leaf(ctx, node) : status;
}

static strata_status_t topo_check_userdata(topo_check_t *ctx, const xmlNode *node)
{
    static const topo_check_attr_t attrs[] = {
        {"name", TOPO_VALUE_TEXT, false},
        {"length", TOPO_VALUE_NUMBER, true},
        {"encoding", TOPO_VALUE_TEXT, false},
    };
    strata_status_t status = topo_check_element_attrs(ctx, node, attrs, UTIL_ARRAY_SIZE(attrs));
    xmlChar *length, *encoding;
    const char *text;
    uint64_t n = 0;

    if (status != STRATA_OK) {
        return status;
    }
    length   = xmlGetProp(node, BAD_CAST "length");
    encoding = xmlGetProp(node, BAD_CAST "encoding");
    if (!topo_check_u64((const char *)length, TOPO_FILE_MAX_BYTES, &n)) {
        status = topo_check_fail(ctx, node, "<userdata> length is too large");
    } else if (encoding != NULL && strcmp((const char *)encoding, "base64") == 0) {
        n = 4 * ((n + 2) / 3);
    }
    xmlFree(length);
    xmlFree(encoding);
    return status == STRATA_OK ? topo_check_content(ctx, node, (size_t)n, &text) : status;
}

static strata_status_t topo_check_object(topo_check_t *ctx, const xmlNode *node,
                                         topo_check_obj_t *parent, unsigned depth);

/* The elements inside an <object>: info, page_type and userdata first, then objects. */
static strata_status_t topo_check_object_children(topo_check_t *ctx, const xmlNode *node,
                                                  topo_check_obj_t *obj, bool root,
                                                  unsigned depth)
{
    static const topo_check_attr_t page_type_attrs[] = {
        {"size", TOPO_VALUE_NUMBER, true},
        {"count", TOPO_VALUE_NUMBER, false},
    };
    strata_status_t status = STRATA_OK;
    bool seen_object = false;
    const char *tag;

    for (const xmlNode *child = node->children; child && status == STRATA_OK;
         child = child->next) {
        if (child->type == XML_COMMENT_NODE || child->type == XML_PI_NODE) {
            continue;
        }
        if (child->type != XML_ELEMENT_NODE) {
            if (child->type != XML_TEXT_NODE ||
                !topo_check_blank((const char *)child->content)) {
                char where[64];

                snprintf(where, sizeof(where), "a %s object", obj->type->name);
                status = topo_check_stray_text(ctx, child, where);
            }
            continue;
        }
        tag = (const char *)child->name;
        if (strcmp(tag, "object") == 0) {
            seen_object = true;
            status = topo_check_object(ctx, child, obj, depth + 1);
            continue;
        }
        if (seen_object) {
            status = topo_check_fail(ctx, child, "<%s> after a child <object>", tag);
        } else if (strcmp(tag, "info") == 0) {
            status = topo_check_info(ctx, child);
        } else if (strcmp(tag, "userdata") == 0) {
            status = topo_check_userdata(ctx, child);
        } else if (strcmp(tag, "page_type") == 0) {
            if (obj->type->type != HWLOC_OBJ_NUMANODE && !root) {
                status = topo_check_fail(ctx, child, "<page_type> in a %s", obj->type->name);
            } else {
                status = topo_check_element_attrs(ctx, child, page_type_attrs,
                                                  UTIL_ARRAY_SIZE(page_type_attrs));
                status = status == STRATA_OK ? topo_check_leaf(ctx, child) : status;
            }
        } else {
            status = topo_check_fail(ctx, child, "unknown element <%s> in an object", tag);
        }
    }
    return status;
}

static void topo_check_obj_release(topo_check_obj_t *obj)
{
    for (int s = 0; s < TOPO_SETS; ++s) {
        hwloc_bitmap_free(obj->set[s]);
    }
    hwloc_bitmap_free(obj->normal_children);
    hwloc_bitmap_free(obj->memory_children);
}

static strata_status_t topo_check_object(topo_check_t *ctx, const xmlNode *node,
                                         topo_check_obj_t *parent, unsigned depth)
{
    topo_check_obj_t obj = {.bridge_upstream = -1};
    bool root = (parent == NULL);
    strata_status_t status;

    if (depth > TOPO_CHECK_MAX_DEPTH) {
        return topo_check_fail(ctx, node, "objects nested more than %d deep",
                               TOPO_CHECK_MAX_DEPTH);
    }
    if (++ctx->objects > TOPO_CHECK_MAX_OBJECTS) {
        return topo_check_fail(ctx, node, "more than %u objects", TOPO_CHECK_MAX_OBJECTS);
    }
    obj.normal_children = hwloc_bitmap_alloc();
    obj.memory_children = hwloc_bitmap_alloc();
    if (obj.normal_children == NULL || obj.memory_children == NULL) {
        status = topo_check_nomem(ctx);
        goto out;
    }
    status = topo_check_object_attrs(ctx, node, &obj, root);
    if (status == STRATA_OK) {
        status = topo_check_object_self(ctx, node, &obj);
    }
    if (status == STRATA_OK && root && obj.type->type != HWLOC_OBJ_MACHINE) {
        status = topo_check_fail(ctx, node, "the root object is a %s, not a Machine",
                                 obj.type->name);
    }
    if (status == STRATA_OK && !root) {
        status = topo_check_object_place(ctx, node, &obj, parent);
    }
    if (status == STRATA_OK) {
        status = topo_check_object_children(ctx, node, &obj, root, depth);
    }
    if (status == STRATA_OK && root) {
        if (ctx->num_numa == 0) {
            status = topo_check_fail(ctx, node, "no NUMANode object: hwloc 2 requires one");
        } else if (!hwloc_bitmap_isequal(obj.set[TOPO_SET_NODE], ctx->numas)) {
            status = topo_check_fail(ctx, node, "the root nodeset is not its NUMA nodes'");
        }
    }
out:
    topo_check_obj_release(&obj);
    return status;
}

/* Whitespace-separated numbers (or Type:number in a distances2hetero), counted. */
static strata_status_t topo_check_numbers(topo_check_t *ctx, const xmlNode *node,
                                          const char *text, bool typed, uint64_t *count_p)
{
    char token[64];
    size_t n;
    uint64_t number;

    while (*text != '\0') {
        if (*text == ' ') {
            ++text;
            continue;
        }
        n = strcspn(text, " ");
        if (n >= sizeof(token)) {
            return topo_check_fail(ctx, node, "<%s> value too long", (const char *)node->name);
        }
        memcpy(token, text, n);
        token[n] = '\0';
        text += n;
        if (typed) {
            char *colon = strchr(token, ':');

            if (colon == NULL) {
                return topo_check_fail(ctx, node, "<%s> index '%s' is not Type:number",
                                       (const char *)node->name, token);
            }
            *colon = '\0';
            if (topo_check_type_find(token) == NULL ||
                !topo_check_u64(colon + 1, UINT64_MAX, &number)) {
                *colon = ':';
                return topo_check_fail(ctx, node, "<%s> index '%s' is not Type:number",
                                       (const char *)node->name, token);
            }
        } else if (!topo_check_u64(token, UINT64_MAX, &number)) {
            return topo_check_fail(ctx, node, "<%s> value '%s' is not a number",
                                   (const char *)node->name, token);
        }
        ++*count_p;
    }
    return STRATA_OK;
}

static strata_status_t topo_check_distances(topo_check_t *ctx, const xmlNode *node, bool hetero)
{
    static const topo_check_attr_t attrs[] = {
        {"type", TOPO_VALUE_TYPE, false},
        {"nbobjs", TOPO_VALUE_NUMBER, true},
        {"indexing", TOPO_VALUE_TEXT, false},
        {"kind", TOPO_VALUE_NUMBER, true},
        {"name", TOPO_VALUE_TEXT, false},
    };
    static const topo_check_attr_t child_attrs[] = {{"length", TOPO_VALUE_NUMBER, true}};
    strata_status_t status = topo_check_element_attrs(ctx, node, attrs, UTIL_ARRAY_SIZE(attrs));
    uint64_t nbobjs = 0, length, indexes = 0, values = 0;
    xmlChar *prop;
    const char *text;

    if (status != STRATA_OK) {
        return status;
    }
    prop = xmlGetProp(node, BAD_CAST "nbobjs");
    topo_check_u64((const char *)prop, UINT64_MAX, &nbobjs);
    xmlFree(prop);
    if (nbobjs == 0 || nbobjs > ctx->objects) {
        return topo_check_fail(ctx, node, "<%s> nbobjs %" PRIu64 " is not 1 to the %u objects",
                               (const char *)node->name, nbobjs, ctx->objects);
    }
    if (!hetero && xmlHasProp(node, BAD_CAST "type") == NULL) {
        return topo_check_fail(ctx, node, "<distances2> without type");
    }
    prop = xmlGetProp(node, BAD_CAST "indexing");
    if (prop != NULL && strcmp((const char *)prop, "os") != 0 &&
        strcmp((const char *)prop, "gp") != 0) {
        status = topo_check_fail(ctx, node, "indexing is neither os nor gp");
    } else if (prop == NULL && !hetero) {
        status = topo_check_fail(ctx, node, "<distances2> without indexing");
    }
    xmlFree(prop);
    for (const xmlNode *child = node->children; child && status == STRATA_OK;
         child = child->next) {
        if (child->type != XML_ELEMENT_NODE) {
            if (child->type == XML_TEXT_NODE && !topo_check_blank((const char *)child->content)) {
                status = topo_check_stray_text(ctx, child, (const char *)node->name);
            }
            continue;
        }
        bool is_index = strcmp((const char *)child->name, "indexes") == 0;

        if (!is_index && strcmp((const char *)child->name, "u64values") != 0) {
            status = topo_check_fail(ctx, child, "unknown element <%s> in distances",
                                     (const char *)child->name);
            break;
        }
        status = topo_check_element_attrs(ctx, child, child_attrs, 1);
        if (status != STRATA_OK) {
            break;
        }
        prop = xmlGetProp(child, BAD_CAST "length");
        if (!topo_check_u64((const char *)prop, TOPO_FILE_MAX_BYTES, &length)) {
            status = topo_check_fail(ctx, child, "length is too large");
        }
        xmlFree(prop);
        if (status == STRATA_OK) {
            status = topo_check_content(ctx, child, (size_t)length, &text);
        }
        if (status == STRATA_OK) {
            status = topo_check_numbers(ctx, child, text, is_index && hetero,
                                        is_index ? &indexes : &values);
        }
    }
    if (status == STRATA_OK && (indexes != nbobjs || values != nbobjs * nbobjs)) {
        status = topo_check_fail(ctx, node, "<%s> of %" PRIu64 " objects has %" PRIu64
                                 " indexes and %" PRIu64 " values",
                                 (const char *)node->name, nbobjs, indexes, values);
    }
    return status;
}

static strata_status_t topo_check_memattr(topo_check_t *ctx, const xmlNode *node)
{
    static const topo_check_attr_t attrs[] = {
        {"name", TOPO_VALUE_TEXT, true},
        {"flags", TOPO_VALUE_NUMBER, true},
    };
    static const topo_check_attr_t value_attrs[] = {
        {"target_obj_gp_index", TOPO_VALUE_NUMBER, true},
        {"target_obj_type", TOPO_VALUE_TYPE, true},
        {"value", TOPO_VALUE_NUMBER, true},
        {"initiator_cpuset", TOPO_VALUE_BITMAP, false},
        {"initiator_obj_gp_index", TOPO_VALUE_NUMBER, false},
        {"initiator_obj_type", TOPO_VALUE_TYPE, false},
    };
    strata_status_t status = topo_check_element_attrs(ctx, node, attrs, UTIL_ARRAY_SIZE(attrs));

    for (const xmlNode *child = node->children; child && status == STRATA_OK;
         child = child->next) {
        if (child->type != XML_ELEMENT_NODE) {
            if (child->type == XML_TEXT_NODE && !topo_check_blank((const char *)child->content)) {
                status = topo_check_stray_text(ctx, child, "<memattr>");
            }
            continue;
        }
        if (strcmp((const char *)child->name, "memattr_value") != 0) {
            status = topo_check_fail(ctx, child, "unknown element <%s> in <memattr>",
                                     (const char *)child->name);
            break;
        }
        status = topo_check_element_attrs(ctx, child, value_attrs,
                                          UTIL_ARRAY_SIZE(value_attrs));
        if (status == STRATA_OK) {
            status = topo_check_leaf(ctx, child);
        }
    }
    return status;
}

static strata_status_t topo_check_cpukind(topo_check_t *ctx, const xmlNode *node)
{
    static const topo_check_attr_t attrs[] = {
        {"cpuset", TOPO_VALUE_BITMAP, true},
        {"forced_efficiency", TOPO_VALUE_SIGNED, false},
    };
    strata_status_t status = topo_check_element_attrs(ctx, node, attrs, UTIL_ARRAY_SIZE(attrs));

    for (const xmlNode *child = node->children; child && status == STRATA_OK;
         child = child->next) {
        if (child->type != XML_ELEMENT_NODE) {
            if (child->type == XML_TEXT_NODE && !topo_check_blank((const char *)child->content)) {
                status = topo_check_stray_text(ctx, child, "<cpukind>");
            }
            continue;
        }
        if (strcmp((const char *)child->name, "info") != 0) {
            status = topo_check_fail(ctx, child, "unknown element <%s> in <cpukind>",
                                     (const char *)child->name);
            break;
        }
        status = topo_check_info(ctx, child);
    }
    return status;
}

/* What follows the root object inside <topology>. */
static strata_status_t topo_check_toplevel(topo_check_t *ctx, const xmlNode *node)
{
    static const topo_check_attr_t support_attrs[] = {
        {"name", TOPO_VALUE_TEXT, true},
        {"value", TOPO_VALUE_SIGNED, false},
    };
    static const topo_check_attr_t locality_attrs[] = {
        {"domain", TOPO_VALUE_HEX, true},
        {"bus_min", TOPO_VALUE_HEX, true},
        {"bus_max", TOPO_VALUE_HEX, true},
        {"cpuset", TOPO_VALUE_BITMAP, true},
    };
    const char *tag = (const char *)node->name;
    strata_status_t status;

    if (strcmp(tag, "distances2") == 0 || strcmp(tag, "distances2hetero") == 0) {
        return topo_check_distances(ctx, node, tag[10] == 'h');
    }
    if (strcmp(tag, "support") == 0) {
        status = topo_check_element_attrs(ctx, node, support_attrs,
                                          UTIL_ARRAY_SIZE(support_attrs));
        return status == STRATA_OK ? topo_check_leaf(ctx, node) : status;
    }
    if (strcmp(tag, "memattr") == 0) {
        return topo_check_memattr(ctx, node);
    }
    if (strcmp(tag, "cpukind") == 0) {
        return topo_check_cpukind(ctx, node);
    }
    /* hwloc 3 moved root information here and added these; hwloc 2 stops reading at them. */
    if (ctx->version >= 3 && strcmp(tag, "info") == 0) {
        return topo_check_info(ctx, node);
    }
    if (ctx->version >= 3 && strcmp(tag, "pci_locality") == 0) {
        status = topo_check_element_attrs(ctx, node, locality_attrs,
                                          UTIL_ARRAY_SIZE(locality_attrs));
        return status == STRATA_OK ? topo_check_leaf(ctx, node) : status;
    }
    if (ctx->version >= 3 && strcmp(tag, "memtier") == 0) {
        return STRATA_OK; /* never read by hwloc 2 */
    }
    return topo_check_fail(ctx, node, "unknown element <%s> in <topology>", tag);
}

/* "2.0", "3.1"...: the major version, 0 when the attribute is malformed. */
static unsigned topo_check_version(const xmlNode *root)
{
    xmlChar *version = xmlGetProp(root, BAD_CAST "version");
    const char *s = (const char *)version;
    unsigned major = 0;

    if (s != NULL && isdigit((unsigned char)s[0]) && s[1] == '.' &&
        isdigit((unsigned char)s[2]) && s[3] == '\0') {
        major = (unsigned)(s[0] - '0');
    }
    xmlFree(version);
    return major;
}

static strata_status_t topo_check_document(topo_check_t *ctx, const xmlNode *root)
{
    strata_status_t status = STRATA_OK;
    bool seen_root = false;

    for (const xmlAttr *attr = root->properties; attr != NULL; attr = attr->next) {
        if (strcmp((const char *)attr->name, "version") != 0) {
            return topo_check_fail(ctx, root, "unknown attribute %s on <topology>",
                                   (const char *)attr->name);
        }
    }
    if (xmlHasProp(root, BAD_CAST "version") == NULL) {
        return topo_check_fail(ctx, root, "<topology> without a version: hwloc 1.x files are "
                               "not read (export it again with hwloc 2 or later)");
    }
    ctx->version = topo_check_version(root);
    if (ctx->version != 2 && ctx->version != 3) {
        return topo_check_fail(ctx, root, "<topology> version is not 2.x or 3.x");
    }
    for (const xmlNode *child = root->children; child && status == STRATA_OK;
         child = child->next) {
        if (child->type == XML_COMMENT_NODE || child->type == XML_PI_NODE) {
            continue;
        }
        if (child->type != XML_ELEMENT_NODE) {
            if (child->type != XML_TEXT_NODE ||
                !topo_check_blank((const char *)child->content)) {
                status = topo_check_stray_text(ctx, child, "<topology>");
            }
            continue;
        }
        if (!seen_root) {
            if (strcmp((const char *)child->name, "object") != 0) {
                return topo_check_fail(ctx, child, "<topology> does not start with the root "
                                       "<object>");
            }
            seen_root = true;
            status = topo_check_object(ctx, child, NULL, 0);
        } else {
            status = topo_check_toplevel(ctx, child);
        }
    }
    if (status == STRATA_OK && !seen_root) {
        status = topo_check_fail(ctx, root, "<topology> has no root <object>");
    }
    return status;
}

strata_status_t topo_hwloc_check(const char *name, struct _xmlDoc *doc, char *err)
{
    topo_check_t ctx = {.name = name, .err = err};
    const xmlNode *root = xmlDocGetRootElement(doc);
    strata_status_t status;

    ctx.pus   = hwloc_bitmap_alloc();
    ctx.numas = hwloc_bitmap_alloc();
    if (ctx.pus == NULL || ctx.numas == NULL) {
        status = topo_check_nomem(&ctx);
        goto out;
    }
    status = topo_check_document(&ctx, root);
    if (status == STRATA_OK && ctx.num_gps > 1) {
        qsort(ctx.gps, ctx.num_gps, sizeof(*ctx.gps), topo_check_gp_compare);
        for (size_t i = 1; i < ctx.num_gps; ++i) {
            if (ctx.gps[i].gp_index == ctx.gps[i - 1].gp_index) {
                topo_error(err, "%s:%ld: invalid hwloc XML: gp_index %" PRIu64 " used again "
                           "(first on line %ld)", name, ctx.gps[i].line, ctx.gps[i].gp_index,
                           ctx.gps[i - 1].line);
                status = STRATA_ERR_PARSE;
                break;
            }
        }
    }
out:
    free(ctx.gps);
    hwloc_bitmap_free(ctx.pus);
    hwloc_bitmap_free(ctx.numas);
    return status;
}
