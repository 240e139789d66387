/*
 * Checks an hwloc XML document before the hwloc library reads it. hwloc's importer trusts
 * its input: an object without a type, a PU with children or a cpuset that does not parse
 * makes libhwloc 2.9 dereference NULL. Only what hwloc itself writes (formats 2.x and 3.x) is
 * let through; anything else is refused with the file, the line and the reason.
 */
#include "topo_hwloc_check.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int topo_check_gp_compare(const void *a, const void *b)
{
    const topo_check_gp_t *x = a, *y = b;

    if (x->gp_index != y->gp_index) {
        return x->gp_index < y->gp_index ? -1 : 1;
    }
    return (x->line > y->line) - (x->line < y->line);
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

/* Every child element of node is a <child_name> that passes check; text between is blank. */
static strata_status_t topo_check_children_named(topo_check_t *ctx, const xmlNode *node,
                                                 const char *child_name,
                                                 strata_status_t (*check)(topo_check_t *,
                                                                          const xmlNode *))
{
    strata_status_t status = STRATA_OK;
    char where[64];

    snprintf(where, sizeof(where), "<%s>", (const char *)node->name);
    for (const xmlNode *child = node->children; child && status == STRATA_OK;
         child = child->next) {
        if (child->type != XML_ELEMENT_NODE) {
            if (child->type == XML_TEXT_NODE && !topo_check_blank((const char *)child->content)) {
                status = topo_check_stray_text(ctx, child, where);
            }
        } else if (strcmp((const char *)child->name, child_name) != 0) {
            status = topo_check_fail(ctx, child, "unknown element <%s> in %s",
                                     (const char *)child->name, where);
        } else {
            status = check(ctx, child);
        }
    }
    return status;
}

static strata_status_t topo_check_memattr_value(topo_check_t *ctx, const xmlNode *node)
{
    static const topo_check_attr_t attrs[] = {
        {"target_obj_gp_index", TOPO_VALUE_NUMBER, true},
        {"target_obj_type", TOPO_VALUE_TYPE, true},
        {"value", TOPO_VALUE_NUMBER, true},
        {"initiator_cpuset", TOPO_VALUE_BITMAP, false},
        {"initiator_obj_gp_index", TOPO_VALUE_NUMBER, false},
        {"initiator_obj_type", TOPO_VALUE_TYPE, false},
    };
    strata_status_t status = topo_check_element_attrs(ctx, node, attrs, UTIL_ARRAY_SIZE(attrs));

    return status == STRATA_OK ? topo_check_leaf(ctx, node) : status;
}

static strata_status_t topo_check_memattr(topo_check_t *ctx, const xmlNode *node)
{
    static const topo_check_attr_t attrs[] = {
        {"name", TOPO_VALUE_TEXT, true},
        {"flags", TOPO_VALUE_NUMBER, true},
    };
    strata_status_t status = topo_check_element_attrs(ctx, node, attrs, UTIL_ARRAY_SIZE(attrs));

    return status == STRATA_OK
               ? topo_check_children_named(ctx, node, "memattr_value", topo_check_memattr_value)
               : status;
}

static strata_status_t topo_check_cpukind(topo_check_t *ctx, const xmlNode *node)
{
    static const topo_check_attr_t attrs[] = {
        {"cpuset", TOPO_VALUE_BITMAP, true},
        {"forced_efficiency", TOPO_VALUE_SIGNED, false},
    };
    strata_status_t status = topo_check_element_attrs(ctx, node, attrs, UTIL_ARRAY_SIZE(attrs));

    return status == STRATA_OK ? topo_check_children_named(ctx, node, "info", topo_check_info)
                               : status;
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
