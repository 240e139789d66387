/*
 * hwloc XML written by hwloc 3.x, made readable by the hwloc 2.x library strata builds
 * against: the format differs in the version number and in OS device types, which became
 * a bit mask (storage 1, memory 2, GPU 4, coprocessor 8, network 16, OpenFabrics 32,
 * DMA 64). Everything else is read by hwloc itself, once topo_hwloc_check.c found nothing
 * in the document that hwloc's importer would crash on.
 * Comments are removed as well: without its libxml2 plugin (Debian ships it apart), hwloc
 * reads XML with a minimal parser that accepts only what hwloc itself writes.
 */
#include "topo_internal.h"

#include <hwloc.h>
#include <libxml/tree.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOPO_HWLOC3_OSDEV_STORAGE     (1u << 0)
#define TOPO_HWLOC3_OSDEV_GPU         (1u << 2)
#define TOPO_HWLOC3_OSDEV_COPROC      (1u << 3)
#define TOPO_HWLOC3_OSDEV_NETWORK     (1u << 4)
#define TOPO_HWLOC3_OSDEV_OPENFABRICS (1u << 5)
#define TOPO_HWLOC3_OSDEV_DMA         (1u << 6)

/* The hwloc 2.x type of a 3.x OS device: the most specific bit wins. */
static int topo_hwloc3_osdev_type(unsigned mask, const char *name)
{
    if (mask & TOPO_HWLOC3_OSDEV_OPENFABRICS) {
        return HWLOC_OBJ_OSDEV_OPENFABRICS;
    }
    if (mask & TOPO_HWLOC3_OSDEV_COPROC) {
        /* 2.x filed NVML and ROCm SMI devices as GPUs, CUDA/OpenCL/L0 as coprocessors. */
        bool gpu_backend = name && (strncmp(name, "nvml", 4) == 0 || strncmp(name, "rsmi", 4) == 0);
        return gpu_backend ? HWLOC_OBJ_OSDEV_GPU : HWLOC_OBJ_OSDEV_COPROC;
    }
    if (mask & TOPO_HWLOC3_OSDEV_GPU) {
        return HWLOC_OBJ_OSDEV_GPU;
    }
    if (mask & TOPO_HWLOC3_OSDEV_NETWORK) {
        return HWLOC_OBJ_OSDEV_NETWORK;
    }
    if (mask & TOPO_HWLOC3_OSDEV_DMA) {
        return HWLOC_OBJ_OSDEV_DMA;
    }
    return HWLOC_OBJ_OSDEV_BLOCK; /* storage; 2.x has no memory-device type */
}

static void topo_hwloc3_adapt_node(xmlNode *node)
{
    char buf[16];
    xmlChar *type, *name;

    for (; node != NULL; node = node->next) {
        if (node->type != XML_ELEMENT_NODE) {
            continue;
        }
        type = xmlGetProp(node, BAD_CAST "osdev_type");
        if (type != NULL) {
            name = xmlGetProp(node, BAD_CAST "name");
            snprintf(buf, sizeof(buf), "%d",
                     topo_hwloc3_osdev_type((unsigned)strtoul((const char *)type, NULL, 10),
                                            (const char *)name));
            xmlSetProp(node, BAD_CAST "osdev_type", BAD_CAST buf);
            xmlFree(name);
            xmlFree(type);
        }
        topo_hwloc3_adapt_node(node->children);
    }
}

static void topo_hwloc_strip_comments(xmlNode *node)
{
    xmlNode *next;

    for (; node != NULL; node = next) {
        next = node->next;
        if (node->type == XML_COMMENT_NODE || node->type == XML_PI_NODE) {
            xmlUnlinkNode(node);
            xmlFreeNode(node);
        } else {
            topo_hwloc_strip_comments(node->children);
        }
    }
}

/* Major version of the document's format; 0 when absent (hwloc 1.x wrote none). */
static unsigned topo_hwloc_xml_version(xmlNode *root)
{
    xmlChar *version = xmlGetProp(root, BAD_CAST "version");
    unsigned major = version ? (unsigned)strtoul((const char *)version, NULL, 10) : 0;

    xmlFree(version);
    return major;
}

strata_status_t topo_hwloc_import_xml(topo_t *topo, const char *name, struct _xmlDoc *doc,
                                      char *err)
{
    xmlNode *root = xmlDocGetRootElement(doc);
    unsigned version = topo_hwloc_xml_version(root);
    strata_status_t status;
    xmlChar *adapted = NULL;
    int adapted_size = 0;

    if (version > 3) {
        topo_error(err, "%s: hwloc XML format %u is newer than strata can read (up to 3)", name,
                   version);
        return STRATA_ERR_PARSE;
    }
    status = topo_hwloc_check(name, doc, err);
    if (status != STRATA_OK) {
        return status;
    }
    if (version == 3) {
        if (xmlSetProp(root, BAD_CAST "version", BAD_CAST "2.0") == NULL) {
            topo_error(err, "%s: out of memory", name);
            return STRATA_ERR_NO_MEMORY;
        }
        topo_hwloc3_adapt_node(root->children);
    }
    topo_hwloc_strip_comments(doc->children);
    xmlDocDumpMemory(doc, &adapted, &adapted_size);
    if (adapted == NULL) {
        topo_error(err, "%s: out of memory", name);
        return STRATA_ERR_NO_MEMORY;
    }
    status = topo_hwloc_import_buffer(topo, name, (const char *)adapted, (size_t)adapted_size,
                                      err);
    xmlFree(adapted);
    return status;
}
