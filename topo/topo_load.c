/*
 * Entry points: discovery, loading a topology file with its format detected from content,
 * and the STRATA_TOPO_* configuration.
 */
#include "topo_internal.h"

#include <libxml/parser.h>
#include <libxml/xmlerror.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct topo_config {
    char *file;
    char *overlay;
} topo_config_t;

static const util_config_field_t topo_config_fields[] = {
    {
        .name          = "TOPO_FILE",
        .default_value = "",
        .doc           = "Topology file (hwloc XML or NCCL topology XML) used instead of "
                         "discovering this machine.",
        .type          = UTIL_CONFIG_STRING,
        .offset        = offsetof(topo_config_t, file),
    },
    {
        .name          = "TOPO_OVERLAY",
        .default_value = "",
        .doc           = "NCCL topology XML applied onto the topology (discovery or "
                         "STRATA_TOPO_FILE): devices matched by PCI bus id take its PCIe "
                         "switches, NUMA node, link speeds and NIC names, as NCCL_TOPO_FILE.",
        .type          = UTIL_CONFIG_STRING,
        .offset        = offsetof(topo_config_t, overlay),
    },
};

const util_config_table_t topo_config_table = {
    .layer       = "topo",
    .fields      = topo_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(topo_config_fields),
    .struct_size = sizeof(topo_config_t),
};

/* Trim libxml2's message to one line without its trailing newline. */
static void topo_xml_message(const xmlError *error, char *buf, size_t size)
{
    snprintf(buf, size, "%s", (error && error->message) ? error->message : "malformed XML");
    buf[strcspn(buf, "\n")] = '\0';
}

static strata_status_t topo_import_doc(topo_t **topo_p, const char *name, xmlDocPtr doc,
                                       char *err)
{
    const xmlNode *root = xmlDocGetRootElement(doc);
    strata_status_t status;
    topo_source_t source;
    topo_t *topo;

    if (root == NULL) {
        topo_error(err, "%s: XML document has no root element", name);
        return STRATA_ERR_PARSE;
    }
    if (xmlStrcmp(root->name, BAD_CAST "topology") == 0) {
        source = TOPO_SOURCE_HWLOC_XML;
    } else if (xmlStrcmp(root->name, BAD_CAST "system") == 0) {
        source = TOPO_SOURCE_NCCL_XML;
    } else {
        topo_error(err, "%s: not a topology file: root element is <%s>, expected <topology> "
                   "(hwloc XML) or <system> (NCCL topology XML)", name, (const char *)root->name);
        return STRATA_ERR_PARSE;
    }
    topo = topo_alloc(source, name);
    if (topo == NULL) {
        topo_error(err, "%s: out of memory", name);
        return STRATA_ERR_NO_MEMORY;
    }
    status = (source == TOPO_SOURCE_HWLOC_XML)
                 ? topo_hwloc_import_xml(topo, name, doc, err)
                 : topo_nccl_import(topo, name, doc, err);
    if (status != STRATA_OK) {
        topo_destroy(topo);
        return status;
    }
    *topo_p = topo;
    return STRATA_OK;
}

/* Parse data[size] (NUL-terminated) as XML; *doc_p is the caller's to free with xmlFreeDoc. */
static strata_status_t topo_xml_parse(const char *name, const char *data, size_t size,
                                      xmlDocPtr *doc_p, char *err)
{
    const int options = XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING |
                        XML_PARSE_BIG_LINES; /* line numbers past 65535 in messages */
    char message[UTIL_REASON_LEN];
    const xmlError *error;
    xmlParserCtxtPtr ctxt;
    strata_status_t status = STRATA_OK;
    xmlDocPtr doc;

    if (size == 0) {
        topo_error(err, "%s: empty file", name);
        return STRATA_ERR_PARSE;
    }
    if (size > TOPO_FILE_MAX_BYTES || data[size] != '\0') {
        topo_error(err, "%s: larger than %u MiB or not a text buffer", name,
                   TOPO_FILE_MAX_BYTES >> 20);
        return STRATA_ERR_PARSE;
    }
    ctxt = xmlNewParserCtxt();
    if (ctxt == NULL) {
        topo_error(err, "%s: out of memory", name);
        return STRATA_ERR_NO_MEMORY;
    }
    doc = xmlCtxtReadMemory(ctxt, data, (int)size, name, NULL, options);
    if (doc == NULL || !ctxt->wellFormed) {
        error = xmlCtxtGetLastError(ctxt);
        topo_xml_message(error, message, sizeof(message));
        topo_error(err, "%s:%d: malformed or truncated XML: %s", name, error ? error->line : 0,
                   message);
        xmlFreeDoc(doc);
        status = STRATA_ERR_PARSE;
    } else {
        *doc_p = doc;
    }
    xmlFreeParserCtxt(ctxt);
    return status;
}

strata_status_t topo_load_buffer(const char *name, const char *data, size_t size,
                                 topo_t **topo_p, char *err)
{
    strata_status_t status;
    xmlDocPtr doc;

    status = topo_xml_parse(name, data, size, &doc, err);
    if (status != STRATA_OK) {
        return status;
    }
    status = topo_import_doc(topo_p, name, doc, err);
    xmlFreeDoc(doc);
    return status;
}

static strata_status_t topo_read_file(const char *path, char **data_p, size_t *size_p, char *err)
{
    struct stat st;
    ssize_t got;
    size_t done = 0;
    char *data;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), saved; /* a FIFO must not block */

    if (fd < 0) {
        saved = errno;
        topo_error(err, "%s: %s", path, strerror(saved));
        return (saved == ENOENT) ? STRATA_ERR_NOT_FOUND : STRATA_ERR_IO;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        topo_error(err, "%s: not a regular file", path);
        close(fd);
        return STRATA_ERR_IO;
    }
    if ((uint64_t)st.st_size > TOPO_FILE_MAX_BYTES) {
        topo_error(err, "%s: %lld bytes is larger than the %u MiB a topology file may be", path,
                   (long long)st.st_size, TOPO_FILE_MAX_BYTES >> 20);
        close(fd);
        return STRATA_ERR_PARSE;
    }
    data = malloc((size_t)st.st_size + 1);
    if (data == NULL) {
        topo_error(err, "%s: out of memory", path);
        close(fd);
        return STRATA_ERR_NO_MEMORY;
    }
    while (done < (size_t)st.st_size) {
        got = read(fd, data + done, (size_t)st.st_size - done);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            topo_error(err, "%s: read failed: %s", path, got ? strerror(errno) : "file shrank");
            free(data);
            close(fd);
            return STRATA_ERR_IO;
        }
        done += (size_t)got;
    }
    close(fd);
    data[done] = '\0';
    *data_p    = data;
    *size_p    = done;
    return STRATA_OK;
}

strata_status_t topo_xml_read_file(const char *path, struct _xmlDoc **doc_p, char *err)
{
    strata_status_t status;
    char *data;
    size_t size;

    if (path == NULL || path[0] == '\0') {
        topo_error(err, "no topology file named");
        return STRATA_ERR_INVALID;
    }
    status = topo_read_file(path, &data, &size, err);
    if (status != STRATA_OK) {
        return status;
    }
    if (memchr(data, '\0', size) != NULL) {
        topo_error(err, "%s: binary data, not a topology file", path);
        status = STRATA_ERR_PARSE;
    } else {
        status = topo_xml_parse(path, data, size, doc_p, err);
    }
    free(data);
    return status;
}

strata_status_t topo_load_file(const char *path, topo_t **topo_p, char *err)
{
    strata_status_t status;
    xmlDocPtr doc;

    status = topo_xml_read_file(path, &doc, err);
    if (status != STRATA_OK) {
        return status;
    }
    status = topo_import_doc(topo_p, path, doc, err);
    xmlFreeDoc(doc);
    return status;
}

strata_status_t topo_discover(const char *sysfs_root, topo_t **topo_p, char *err)
{
    char host[256] = "this machine";
    strata_status_t status;
    topo_t *topo;

    if (sysfs_root == NULL) {
        sysfs_root = "";
    }
    gethostname(host, sizeof(host) - 1);
    topo = topo_alloc(TOPO_SOURCE_DISCOVERY, host);
    if (topo == NULL) {
        topo_error(err, "discovery: out of memory");
        return STRATA_ERR_NO_MEMORY;
    }
    status = topo_hwloc_discover(topo, sysfs_root, err);
    if (status != STRATA_OK) {
        topo_destroy(topo);
        return status;
    }
    topo_nvml_add_links(topo);
    if (!topo_rsmi_add_links(topo)) {
        topo_kfd_add_links(topo, sysfs_root);
    }
    *topo_p = topo;
    return STRATA_OK;
}

/*
 * The base topology: a file, or discovery. A file that is only an overlay (NCCL_TOPO_FILE
 * as AWS publishes it) describes no machine: it goes onto discovery, as NCCL does with it.
 */
static strata_status_t topo_open_base(const char *file, topo_t **topo_p, char *err)
{
    strata_status_t status;
    topo_t *topo;

    if (file == NULL || file[0] == '\0') {
        return topo_discover(NULL, topo_p, err);
    }
    status = topo_load_file(file, &topo, err);
    if (status != STRATA_OK) {
        return status;
    }
    if (!topo_is_overlay(topo)) {
        *topo_p = topo;
        return STRATA_OK;
    }
    topo_destroy(topo);
    status = topo_discover(NULL, &topo, err);
    if (status == STRATA_OK) {
        status = topo_overlay_apply(topo, file, err);
    }
    if (status != STRATA_OK) {
        topo_destroy(topo);
        return status;
    }
    *topo_p = topo;
    return STRATA_OK;
}

strata_status_t topo_open_with_overlay(const char *file, const char *overlay, topo_t **topo_p,
                                       char *err)
{
    char reason[UTIL_REASON_LEN];
    strata_status_t status;
    topo_config_t config;
    topo_t *topo = NULL;

    status = util_config_read_quiet(&topo_config_table, &config, reason);
    if (status != STRATA_OK) {
        topo_error(err, "%s", reason);
        return status;
    }
    file    = (file != NULL) ? file : config.file;
    overlay = (overlay != NULL) ? overlay : config.overlay;
    status  = topo_open_base(file, &topo, err);
    if (status == STRATA_OK && overlay[0] != '\0') {
        status = topo_overlay_apply(topo, overlay, err);
    }
    util_config_release(&topo_config_table, &config);
    if (status != STRATA_OK) {
        topo_destroy(topo);
        return status;
    }
    *topo_p = topo;
    return STRATA_OK;
}

strata_status_t topo_open(const char *file, topo_t **topo_p, char *err)
{
    return topo_open_with_overlay(file, NULL, topo_p, err);
}

strata_status_t topo_create(topo_t **topo_p)
{
    char err[UTIL_REASON_LEN];
    strata_status_t status = topo_open(NULL, topo_p, err);

    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("topology: %s", err);
    }
    return status;
}
