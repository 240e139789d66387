/*
 * The hwloc XML check's objects: each <object>'s attributes, its sets against its parent's
 * and its siblings', and its children, as hwloc 2.9's importer assumes them.
 */
#include "topo_hwloc_check.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const topo_set_names[TOPO_SETS] = {"cpuset", "complete_cpuset", "nodeset",
                                                      "complete_nodeset"};

/* The attribute no rule below knows. */
static strata_status_t topo_check_unknown_attr(topo_check_t *ctx, const xmlNode *node,
                                               const topo_check_obj_t *obj, const char *attr)
{
    return topo_check_fail(ctx, node, "unknown attribute %s on a %s object", attr,
                           obj->type->name);
}

/* allowed_cpuset, allowed_nodeset: the root's alone. */
static strata_status_t topo_check_allowed_attr(topo_check_t *ctx, const xmlNode *node,
                                               bool root, const char *attr, const char *value)
{
    hwloc_bitmap_t allowed = NULL;
    strata_status_t status;

    if (!root) {
        return topo_check_fail(ctx, node, "%s is only for the root object", attr);
    }
    status = topo_check_bitmap(ctx, node, attr, value, &allowed);
    hwloc_bitmap_free(allowed);
    return status;
}

/* os_index, gp_index and id (hwloc 3's "obj<gp_index>"). */
static strata_status_t topo_check_index_attr(topo_check_t *ctx, const xmlNode *node,
                                             topo_check_obj_t *obj, const char *attr,
                                             const char *value)
{
    const char *digits = value;
    uint64_t number;

    if (strcmp(attr, "os_index") == 0) {
        if (!topo_check_u64(value, UINT32_MAX, &number)) {
            return topo_check_fail(ctx, node, "os_index '%.40s' is not a number below 2^32",
                                   value);
        }
        obj->has_os_index = true;
        obj->os_index     = (unsigned)number;
        return STRATA_OK;
    }
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

/* depth and cache_*: a cache's (or a memory-side cache's). */
static strata_status_t topo_check_cache_attr(topo_check_t *ctx, const xmlNode *node,
                                             topo_check_obj_t *obj, const char *attr,
                                             const char *value)
{
    const topo_check_type_t *type = obj->type;
    bool cache = type->cache_level != 0 || type->type == HWLOC_OBJ_MEMCACHE;
    uint64_t number;

    if (strcmp(attr, "depth") == 0) {
        if (!topo_check_u64(value, 255, &number)) {
            return topo_check_fail(ctx, node, "depth '%.40s' is not a small number", value);
        }
        obj->has_cache_depth = true;
        obj->cache_depth     = (unsigned)number;
        return STRATA_OK;
    }
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
    return topo_check_unknown_attr(ctx, node, obj, attr);
}

/* kind, subkind and dont_merge: a Group's. */
static strata_status_t topo_check_group_attr(topo_check_t *ctx, const xmlNode *node,
                                             const topo_check_obj_t *obj, const char *attr,
                                             const char *value)
{
    uint64_t number;

    if (obj->type->type != HWLOC_OBJ_GROUP) {
        return topo_check_fail(ctx, node, "%s on a %s, which is not a Group", attr,
                               obj->type->name);
    }
    return topo_check_u64(value, attr[0] == 'd' ? 1 : UINT32_MAX, &number)
               ? STRATA_OK
               : topo_check_fail(ctx, node, "Group %s '%.40s' is out of range", attr, value);
}

/* pci_*: a PCI device's or a bridge's. */
static strata_status_t topo_check_pci_attr(topo_check_t *ctx, const xmlNode *node,
                                           topo_check_obj_t *obj, const char *attr,
                                           const char *value)
{
    const topo_check_type_t *type = obj->type;

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
    return topo_check_unknown_attr(ctx, node, obj, attr);
}

/* bridge_type and bridge_pci: a bridge's. */
static strata_status_t topo_check_bridge_attr(topo_check_t *ctx, const xmlNode *node,
                                              topo_check_obj_t *obj, const char *attr,
                                              const char *value)
{
    if (obj->type->type != HWLOC_OBJ_BRIDGE) {
        return topo_check_fail(ctx, node, "%s on a %s", attr, obj->type->name);
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

/* osdev_type: an OS device's. */
static strata_status_t topo_check_osdev_attr(topo_check_t *ctx, const xmlNode *node,
                                             topo_check_obj_t *obj, const char *value)
{
    /* 2.x: a type from 0 (block) to 5 (coprocessor); 3.x: a mask of 7 bits */
    uint64_t number, max = (ctx->version >= 3) ? 127 : HWLOC_OBJ_OSDEV_COPROC;

    if (obj->type->type != HWLOC_OBJ_OS_DEVICE) {
        return topo_check_fail(ctx, node, "osdev_type on a %s", obj->type->name);
    }
    if (!topo_check_u64(value, max, &number)) {
        return topo_check_fail(ctx, node, "osdev_type '%.40s' is not a number up to %" PRIu64,
                               value, max);
    }
    obj->has_osdev_type = true;
    return STRATA_OK;
}

/* One attribute of an <object>; the type was read first. */
static strata_status_t topo_check_object_attr(topo_check_t *ctx, const xmlNode *node,
                                              topo_check_obj_t *obj, bool root,
                                              const char *attr, const char *value)
{
    const topo_check_type_t *type = obj->type;
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
        return topo_check_allowed_attr(ctx, node, root, attr, value);
    }
    if (strcmp(attr, "os_index") == 0 || strcmp(attr, "gp_index") == 0 ||
        strcmp(attr, "id") == 0) {
        return topo_check_index_attr(ctx, node, obj, attr, value);
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
    if (strcmp(attr, "depth") == 0 || strncmp(attr, "cache_", 6) == 0) {
        return topo_check_cache_attr(ctx, node, obj, attr, value);
    }
    if (strcmp(attr, "kind") == 0 || strcmp(attr, "subkind") == 0 ||
        strcmp(attr, "dont_merge") == 0) {
        return topo_check_group_attr(ctx, node, obj, attr, value);
    }
    if (strcmp(attr, "numanode_type") == 0 && ctx->version >= 3) {
        return type->type == HWLOC_OBJ_NUMANODE
                   ? STRATA_OK
                   : topo_check_fail(ctx, node, "numanode_type on a %s", type->name);
    }
    if (strncmp(attr, "pci_", 4) == 0) {
        return topo_check_pci_attr(ctx, node, obj, attr, value);
    }
    if (strcmp(attr, "bridge_type") == 0 || strcmp(attr, "bridge_pci") == 0) {
        return topo_check_bridge_attr(ctx, node, obj, attr, value);
    }
    if (strcmp(attr, "osdev_type") == 0) {
        return topo_check_osdev_attr(ctx, node, obj, value);
    }
    return topo_check_unknown_attr(ctx, node, obj, attr);
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

strata_status_t topo_check_object(topo_check_t *ctx, const xmlNode *node,
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
