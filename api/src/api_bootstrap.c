/*
 * Built-in bootstrap: a TCP star around rank 0 (strata_bootstrap_tcp_create; the launchers'
 * variables are read in api_bootstrap_env.c, the rendezvous' handshakes are
 * api_bootstrap_handshake.c): its settings and secret, its allgather and barrier.
 */
#include "api/api.h"
#include "api/src/api_bootstrap.h"
#include "api/src/api_bootstrap_tcp.h"
#include "util/util_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


static const util_config_field_t api_bootstrap_config_fields[] = {
    {.name = "BOOTSTRAP_ADDR", .default_value = "",
     .doc = "Address of rank 0's rendezvous (default: MASTER_ADDR).",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(api_bootstrap_config_t, addr)},
    {.name = "BOOTSTRAP_PORT", .default_value = "0",
     .doc = "Port of rank 0's rendezvous (0: MASTER_PORT + 1).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(api_bootstrap_config_t, port)},
    {.name = "BOOTSTRAP_TIMEOUT", .default_value = "30s",
     .doc = "Longest wait for the rendezvous and for each bootstrap collective.",
     .type = UTIL_CONFIG_TIME, .offset = offsetof(api_bootstrap_config_t, timeout_ns)},
    {.name = "BOOTSTRAP_SECRET", .default_value = "",
     .doc = "Shared secret every rank must prove to join (HMAC challenge; never sent).",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(api_bootstrap_config_t, secret)},
    {.name = "BOOTSTRAP_SECRET_FILE", .default_value = "",
     .doc = "File holding that secret (trailing newlines dropped); keep it mode 0600.",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(api_bootstrap_config_t, secret_file)},
};

const util_config_table_t api_bootstrap_config_table = {
    .layer       = "bootstrap",
    .fields      = api_bootstrap_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(api_bootstrap_config_fields),
    .struct_size = sizeof(api_bootstrap_config_t),
};

static api_tcp_bootstrap_t *api_tcp_of(void *ctx)
{
    return (api_tcp_bootstrap_t *)ctx;
}

/* The communicator's verdict on its peers, when one watches this bootstrap. */
static strata_status_t api_bootstrap_check(void *ctx)
{
    api_tcp_bootstrap_t *bs = api_tcp_of(ctx);

    return bs->check != NULL ? bs->check(bs->check_arg) : STRATA_OK;
}

static strata_status_t api_bootstrap_lost(api_tcp_bootstrap_t *bs, int peer,
                                          strata_status_t status, const char *what)
{
    /* A connection lost because some rank failed: say that, as every rank will. */
    if (status != STRATA_OK && status != STRATA_ERR_PEER_FAILED &&
        api_bootstrap_check(bs) == STRATA_ERR_PEER_FAILED) {
        status = STRATA_ERR_PEER_FAILED;
    }
    UTIL_LOG_ERROR("bootstrap: %s rank %d failed: %s", what, peer,
                   status == STRATA_ERR_TIMEOUT       ? "timed out"
                   : status == STRATA_ERR_PEER_FAILED ? "a rank has failed (gave up early)"
                                                      : "connection lost");
    return (status == STRATA_ERR_TIMEOUT || status == STRATA_ERR_PEER_FAILED)
               ? status : STRATA_ERR_BOOTSTRAP;
}

static strata_status_t api_bootstrap_send(api_tcp_bootstrap_t *bs, int fd, const void *buf,
                                          size_t len, uint64_t deadline)
{
    return util_sock_send_all_checked(fd, buf, len, deadline,
                                      bs->check ? api_bootstrap_check : NULL, bs);
}

static strata_status_t api_bootstrap_recv(api_tcp_bootstrap_t *bs, int fd, void *buf,
                                          size_t len, uint64_t deadline)
{
    return util_sock_recv_all_checked(fd, buf, len, deadline,
                                      bs->check ? api_bootstrap_check : NULL, bs);
}

/* Root: gather every block, then send the whole buffer back to every rank. */
static strata_status_t api_bootstrap_root_allgather(api_tcp_bootstrap_t *bs, char *recv_buf,
                                                    size_t size, uint64_t deadline)
{
    api_bootstrap_header_t header;
    strata_status_t status;

    for (int peer = 1; peer < bs->base.world_size; ++peer) {
        status = api_bootstrap_recv(bs, bs->peer_fds[peer], &header, sizeof(header), deadline);
        if (status == STRATA_OK) {
            if (!api_bootstrap_header_ok(&header, bs->seq, size)) {
                UTIL_LOG_ERROR("bootstrap: rank %d is in another collective (seq %u size %llu, "
                               "expected seq %u size %zu)", peer, header.seq,
                               (unsigned long long)header.size, bs->seq, size);
                return STRATA_ERR_BOOTSTRAP;
            }
            status = api_bootstrap_recv(bs, bs->peer_fds[peer], recv_buf + (size_t)peer * size,
                                        size, deadline);
        }
        if (status != STRATA_OK) {
            return api_bootstrap_lost(bs, peer, status, "gathering from");
        }
    }
    for (int peer = 1; peer < bs->base.world_size; ++peer) {
        status = api_bootstrap_send(bs, bs->peer_fds[peer], recv_buf,
                                    size * (size_t)bs->base.world_size, deadline);
        if (status != STRATA_OK) {
            return api_bootstrap_lost(bs, peer, status, "sending to");
        }
    }
    return STRATA_OK;
}

static strata_status_t api_bootstrap_allgather(void *ctx, const void *send_buf, void *recv_buf,
                                               size_t size)
{
    api_tcp_bootstrap_t *bs = api_tcp_of(ctx);
    api_bootstrap_header_t header = {.magic = API_BOOTSTRAP_MAGIC, .seq = bs->seq, .size = size};
    uint64_t deadline = api_bootstrap_deadline(bs);
    strata_status_t status;

    if (size > 0) {
        memcpy((char *)recv_buf + (size_t)bs->base.rank * size, send_buf, size);
    }
    if (bs->base.rank == 0) {
        status = api_bootstrap_root_allgather(bs, recv_buf, size, deadline);
        if (status != STRATA_OK) {
            /* The star is broken: let every other rank see it now, not at its timeout. */
            for (int peer = 1; peer < bs->base.world_size; ++peer) {
                util_sock_close(bs->peer_fds[peer]);
                bs->peer_fds[peer] = -1;
            }
        }
    } else {
        status = api_bootstrap_send(bs, bs->root_fd, &header, sizeof(header), deadline);
        if (status == STRATA_OK && size > 0) {
            status = api_bootstrap_send(bs, bs->root_fd, send_buf, size, deadline);
        }
        if (status == STRATA_OK) {
            status = api_bootstrap_recv(bs, bs->root_fd, recv_buf,
                                        size * (size_t)bs->base.world_size, deadline);
        }
        if (status != STRATA_OK) {
            status = api_bootstrap_lost(bs, 0, status, "exchange with");
        }
    }
    bs->seq++;
    return status;
}

static strata_status_t api_bootstrap_barrier(void *ctx)
{
    api_tcp_bootstrap_t *bs = api_tcp_of(ctx);
    char token = 0, *all = malloc((size_t)bs->base.world_size);
    strata_status_t status;

    if (all == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = api_bootstrap_allgather(ctx, &token, all, 1);
    free(all);
    return status;
}

/*
 * The secret in the file STRATA_BOOTSTRAP_SECRET_FILE names, into buf (API_SECRET_MAX + 1
 * bytes), without its line end. Only a regular file of a bounded size is read, opened
 * without blocking: a FIFO no one writes would otherwise hold the job past every timeout, and
 * a directory would read as an empty secret.
 */
static strata_status_t api_bootstrap_read_secret_file(const char *path, unsigned char *buf,
                                                      size_t *len_p)
{
    char err[UTIL_FILE_ERR_LEN], *data = NULL;
    size_t len = 0;
    struct stat st;
    strata_status_t status;

    /* Room for "\r\n" after the longest secret; past that, "too long". */
    status = util_file_read(path, API_SECRET_MAX + 2, &data, &len, err);
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("bootstrap: cannot read STRATA_BOOTSTRAP_SECRET_FILE: %s%s", err,
                       status == STRATA_ERR_PARSE ? " (a secret is 1 to 4096 bytes)" : "");
        return STRATA_ERR_CONFIG;
    }
    if (stat(path, &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO))) {
        UTIL_LOG_WARN("bootstrap: %s is open to other users (mode %03o): chmod 600 it", path,
                      (unsigned)(st.st_mode & 0777));
    }
    while (len > 0 && (data[len - 1] == '\n' || data[len - 1] == '\r')) {
        --len; /* `echo secret > file` and the variable then mean the same */
    }
    memcpy(buf, data, UTIL_MIN(len, (size_t)API_SECRET_MAX + 1));
    *len_p = len;
    util_crypto_wipe(data, len);
    free(data);
    return STRATA_OK;
}

/* The secret from STRATA_BOOTSTRAP_SECRET or the file STRATA_BOOTSTRAP_SECRET_FILE names. */
static strata_status_t api_bootstrap_read_secret(const api_bootstrap_config_t *config,
                                                 api_tcp_bootstrap_t *bs)
{
    unsigned char buf[API_SECRET_MAX + 1];
    size_t len = 0;
    strata_status_t status;

    if (config->secret[0] != '\0' && config->secret_file[0] != '\0') {
        UTIL_LOG_ERROR("bootstrap: both STRATA_BOOTSTRAP_SECRET and STRATA_BOOTSTRAP_SECRET_FILE "
                       "are set: set one");
        return STRATA_ERR_CONFIG;
    }
    if (config->secret[0] != '\0') {
        len = strlen(config->secret);
        memcpy(buf, config->secret, UTIL_MIN(len, sizeof(buf)));
    } else if (config->secret_file[0] != '\0') {
        status = api_bootstrap_read_secret_file(config->secret_file, buf, &len);
        if (status != STRATA_OK) {
            return status;
        }
    } else {
        return STRATA_OK;
    }
    if (len == 0 || len > API_SECRET_MAX) {
        UTIL_LOG_ERROR("bootstrap: the bootstrap secret is %s (1 to %d bytes)",
                       len == 0 ? "empty" : "too long", API_SECRET_MAX);
        util_crypto_wipe(buf, sizeof(buf));
        return STRATA_ERR_CONFIG;
    }
    bs->secret = malloc(len);
    if (bs->secret == NULL) {
        util_crypto_wipe(buf, sizeof(buf));
        return STRATA_ERR_NO_MEMORY;
    }
    memcpy(bs->secret, buf, len);
    bs->secret_len = len;
    util_crypto_wipe(buf, sizeof(buf));
    return STRATA_OK;
}

static void api_bootstrap_forget_secret(api_tcp_bootstrap_t *bs)
{
    if (bs->secret != NULL) {
        util_crypto_wipe(bs->secret, bs->secret_len);
        free(bs->secret);
        bs->secret = NULL;
    }
}

void api_bootstrap_set_check(strata_bootstrap_t *bootstrap, api_bootstrap_check_fn_t check,
                             void *arg)
{
    api_tcp_bootstrap_t *bs = (api_tcp_bootstrap_t *)bootstrap;

    if (bootstrap == NULL || bootstrap->allgather != api_bootstrap_allgather) {
        return; /* the caller's own: strata cannot interrupt its waits */
    }
    if (check != NULL) {
        bs->check     = check;
        bs->check_arg = arg;
    } else if (bs->check_arg == arg) {
        bs->check     = NULL;
        bs->check_arg = NULL;
    }
}

STRATA_API void strata_bootstrap_destroy(strata_bootstrap_t *bootstrap)
{
    api_tcp_bootstrap_t *bs = (api_tcp_bootstrap_t *)bootstrap;

    if (bs == NULL) {
        return;
    }
    api_bootstrap_forget_secret(bs);
    util_sock_close(bs->root_fd);
    for (int i = 0; bs->peer_fds != NULL && i < bs->base.world_size; ++i) {
        util_sock_close(bs->peer_fds[i]);
    }
    free(bs->peer_fds);
    free(bs);
}

uint64_t api_bootstrap_timeout_ns(void)
{
    api_bootstrap_config_t config;
    char err[UTIL_REASON_LEN];
    uint64_t timeout_ns = 0;

    if (util_config_read_quiet(&api_bootstrap_config_table, &config, err) == STRATA_OK) {
        timeout_ns = config.timeout_ns;
        util_config_release(&api_bootstrap_config_table, &config);
    }
    return timeout_ns > 0 ? timeout_ns : 60 * UTIL_NSEC_PER_SEC;
}

/* The timeout (0: STRATA_BOOTSTRAP_TIMEOUT) and the secret from the environment. */
static strata_status_t api_bootstrap_configure(api_tcp_bootstrap_t *bs, uint64_t timeout_ms)
{
    api_bootstrap_config_t config;
    strata_status_t status;

    status = util_config_read(&api_bootstrap_config_table, &config);
    if (status != STRATA_OK) {
        return status;
    }
    bs->timeout_ns = timeout_ms ? timeout_ms * UTIL_NSEC_PER_MSEC : config.timeout_ns;
    status = api_bootstrap_read_secret(&config, bs);
    if (config.secret != NULL) {
        util_crypto_wipe(config.secret, strlen(config.secret));
    }
    util_config_release(&api_bootstrap_config_table, &config);
    return status;
}

STRATA_API strata_status_t strata_bootstrap_tcp_create(const char *root_addr, uint16_t port,
                                                       int rank, int world_size,
                                                       uint64_t timeout_ms,
                                                       strata_bootstrap_t **bootstrap_p)
{
    api_tcp_bootstrap_t *bs;
    strata_status_t status;

    if (bootstrap_p == NULL || world_size <= 0 || rank < 0 || rank >= world_size ||
        (world_size > 1 && (root_addr == NULL || root_addr[0] == '\0' || port == 0))) {
        UTIL_LOG_ERROR("bootstrap: invalid arguments: rank %d of %d, root '%s' port %u", rank,
                       world_size, root_addr ? root_addr : "(null)", port);
        return STRATA_ERR_INVALID;
    }
    bs = calloc(1, sizeof(*bs));
    if (bs == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    bs->base = (strata_bootstrap_t){.rank = rank, .world_size = world_size,
                                    .allgather = api_bootstrap_allgather,
                                    .barrier = api_bootstrap_barrier, .ctx = bs};
    bs->root_fd = -1;
    status      = api_bootstrap_configure(bs, timeout_ms);
    if (status == STRATA_OK && world_size > 1) {
        status = rank == 0 ? api_bootstrap_root_start(bs, root_addr, port)
                           : api_bootstrap_join(bs, root_addr, port);
    }
    api_bootstrap_forget_secret(bs); /* collectives run on the connections it admitted */
    if (status != STRATA_OK) {
        strata_bootstrap_destroy(&bs->base);
        return status;
    }
    *bootstrap_p = &bs->base;
    return STRATA_OK;
}
