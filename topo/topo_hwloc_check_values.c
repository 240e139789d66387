/*
 * The hwloc XML check's failures and values: where a refusal is reported, the value forms
 * hwloc writes (numbers, bus ids, bitmaps), and the attributes of non-object elements.
 */
#include "topo_hwloc_check.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


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

strata_status_t topo_check_fail(topo_check_t *ctx, const xmlNode *node, const char *fmt,
                                ...)
{
    char reason[UTIL_REASON_LEN];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    topo_error(ctx->err, "%s:%ld: invalid hwloc XML: %s", ctx->name, xmlGetLineNo(node), reason);
    return STRATA_ERR_PARSE;
}

/* Report text where it starts: libxml2 numbers a text node with the line it ends on. */
strata_status_t topo_check_stray_text(topo_check_t *ctx, const xmlNode *text,
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

strata_status_t topo_check_nomem(topo_check_t *ctx)
{
    topo_error(ctx->err, "%s: out of memory while checking hwloc XML", ctx->name);
    return STRATA_ERR_NO_MEMORY;
}

/* The text of an attribute or element: one text node, "" when empty, NULL otherwise. */
const char *topo_check_text(const xmlNode *children)
{
    if (children == NULL) {
        return "";
    }
    if (children->type != XML_TEXT_NODE || children->next != NULL || children->content == NULL) {
        return NULL;
    }
    return (const char *)children->content;
}

bool topo_check_blank(const char *text)
{
    for (; *text != '\0'; ++text) {
        if (!isspace((unsigned char)*text)) {
            return false;
        }
    }
    return true;
}

/* A decimal number of 1-20 digits, no sign, no space, at most max. */
bool topo_check_u64(const char *s, uint64_t max, uint64_t *value_p)
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

bool topo_check_int(const char *s, int64_t min, int64_t max)
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
bool topo_check_busid(const char *s)
{
    return topo_check_hex(&s, 4, 8) && topo_check_char(&s, ':') && topo_check_hex(&s, 2, 2) &&
           topo_check_char(&s, ':') && topo_check_hex(&s, 2, 2) && topo_check_char(&s, '.') &&
           topo_check_hex(&s, 1, 1) && *s == '\0';
}

/* "cccc [vvvv:dddd] [vvvv:dddd] rr", and " pp" (the prog-if) from hwloc 3. */
bool topo_check_pci_type(const char *s)
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
bool topo_check_bridge_pci(const char *s)
{
    return topo_check_hex(&s, 4, 8) && topo_check_char(&s, ':') && topo_check_char(&s, '[') &&
           topo_check_hex(&s, 2, 2) && topo_check_char(&s, '-') && topo_check_hex(&s, 2, 2) &&
           topo_check_char(&s, ']') && *s == '\0';
}

bool topo_check_float(const char *s)
{
    char *end;
    double value;

    if (!isdigit((unsigned char)s[0])) {
        return false;
    }
    value = strtod(s, &end);
    return *end == '\0' && isfinite(value) && value >= 0.0;
}

/*
 * hwloc's bitmap text: "0xf...f" (infinite) alone or before a comma, then comma-separated
 * 32-bit words, most significant first. A word is "0x" and 1 to 8 hex digits, or empty: hwloc
 * writes the zero words between others as empty fields ("0x00000001,,0x00010000") and the
 * last as "0x0", and libhwloc reads an empty field as 0, at the end too. Not at the start:
 * libhwloc counts the words from the second character on, so a text that begins with a
 * comma has one word more than it counted, and its parser aborts on an assertion
 * (",0x00000001"). hwloc never writes one.
 */
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
    } else if (*s == ',') {
        return false;
    }
    for (;;) {
        if (++words > TOPO_CHECK_MAX_BITMAP_WORDS) {
            return false;
        }
        if (*s != ',' && *s != '\0') {
            if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) {
                return false;
            }
            s += 2;
            if (!topo_check_hex(&s, 1, 8)) {
                return false;
            }
        }
        if (*s == '\0') {
            return true;
        }
        if (*s++ != ',') {
            return false;
        }
    }
}

strata_status_t topo_check_bitmap(topo_check_t *ctx, const xmlNode *node,
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

const topo_check_type_t *topo_check_type_find(const char *name)
{
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(topo_check_types); ++i) {
        if (strcmp(topo_check_types[i].name, name) == 0) {
            return &topo_check_types[i];
        }
    }
    return NULL;
}

strata_status_t topo_check_gp_add(topo_check_t *ctx, uint64_t gp_index, long line)
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

strata_status_t topo_check_element_attrs(topo_check_t *ctx, const xmlNode *node,
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
strata_status_t topo_check_leaf(topo_check_t *ctx, const xmlNode *node)
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
strata_status_t topo_check_content(topo_check_t *ctx, const xmlNode *node,
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

strata_status_t topo_check_info(topo_check_t *ctx, const xmlNode *node)
{
    static const topo_check_attr_t attrs[] = {
        {"name", TOPO_VALUE_TEXT, true},
        {"value", TOPO_VALUE_TEXT, false},
    };
    strata_status_t status = topo_check_element_attrs(ctx, node, attrs, UTIL_ARRAY_SIZE(attrs));

    return status == STRATA_OK ? topo_check_leaf(ctx, node) : status;
}

strata_status_t topo_check_userdata(topo_check_t *ctx, const xmlNode *node)
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
