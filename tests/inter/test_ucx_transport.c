/*
 * The ucx transport through its ops table, two processes over tcp on loopback: writes with
 * immediates (each immediate exactly once, and only after its bytes are visible at the
 * target), reads, messages and injects, an unknown key, a key deregistered while its rkey is
 * cached at the peer, a peer that dies, and bad configuration.
 *
 * On tcp, UCX carries puts and active messages in one ordered stream, so an immediate sent
 * too early would still land after its bytes here: the test also wraps ucp_put_nbx,
 * ucp_ep_flush_nbx and ucp_am_send_nbx to check the order the transport issues them in
 * (every immediate only after a flush that covers its write's put has completed).
 */
#include "inter/ucx_pair.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

/* --- The order of puts, flushes and immediates --------------------------------------------- */

#define UCX_AM_IMM_ID 3 /* inter/ucx/ucx_internal.h */

static uint64_t g_puts;          /* puts issued by this process */
static uint64_t g_flushed;       /* puts covered by a completed flush */
static uint64_t g_early_imm = UINT64_MAX; /* an immediate sent before its put was flushed */

typedef struct flush_wrap {
    ucp_send_nbx_callback_t cb;
    void                   *user_data;
    uint64_t                covers;
} flush_wrap_t;

static void *real_symbol(const char *name)
{
    void *fn = dlsym(RTLD_NEXT, name);

    if (fn == NULL) {
        fprintf(stderr, "dlsym(%s): %s\n", name, dlerror());
        abort();
    }
    return fn;
}

ucs_status_ptr_t ucp_put_nbx(ucp_ep_h ep, const void *buffer, size_t count, uint64_t remote_addr,
                             ucp_rkey_h rkey, const ucp_request_param_t *param)
{
    static ucs_status_ptr_t (*real)(ucp_ep_h, const void *, size_t, uint64_t, ucp_rkey_h,
                                    const ucp_request_param_t *);

    real = real ? real : real_symbol("ucp_put_nbx");
    ++g_puts;
    return real(ep, buffer, count, remote_addr, rkey, param);
}

static void flush_wrap_done(void *request, ucs_status_t status, void *user_data)
{
    flush_wrap_t *wrap = user_data;

    if (status == UCS_OK && wrap->covers > g_flushed) {
        g_flushed = wrap->covers;
    }
    wrap->cb(request, status, wrap->user_data);
    free(wrap);
}

ucs_status_ptr_t ucp_ep_flush_nbx(ucp_ep_h ep, const ucp_request_param_t *param)
{
    static ucs_status_ptr_t (*real)(ucp_ep_h, const ucp_request_param_t *);
    flush_wrap_t *wrap = malloc(sizeof(*wrap));
    ucp_request_param_t mine = *param;
    ucs_status_ptr_t request;

    real = real ? real : real_symbol("ucp_ep_flush_nbx");
    if (wrap == NULL || !(param->op_attr_mask & UCP_OP_ATTR_FIELD_CALLBACK)) {
        free(wrap);
        return real(ep, param);
    }
    *wrap = (flush_wrap_t){.cb = param->cb.send, .covers = g_puts,
                           .user_data = (param->op_attr_mask & UCP_OP_ATTR_FIELD_USER_DATA)
                                            ? param->user_data : NULL};
    mine.op_attr_mask |= UCP_OP_ATTR_FIELD_USER_DATA;
    mine.cb.send   = flush_wrap_done;
    mine.user_data = wrap;
    request = real(ep, &mine);
    if (!UCS_PTR_IS_PTR(request)) { /* done at once, or failed: no callback comes */
        if (request == NULL && wrap->covers > g_flushed) {
            g_flushed = wrap->covers;
        }
        free(wrap);
    }
    return request;
}

/* In the initiator of test_write_imm_read_send, write w is the (w+1)-th put and carries
 * immediate w. */
ucs_status_ptr_t ucp_am_send_nbx(ucp_ep_h ep, unsigned id, const void *header,
                                 size_t header_length, const void *buffer, size_t count,
                                 const ucp_request_param_t *param)
{
    static ucs_status_ptr_t (*real)(ucp_ep_h, unsigned, const void *, size_t, const void *,
                                    size_t, const ucp_request_param_t *);
    uint32_t imm;

    real = real ? real : real_symbol("ucp_am_send_nbx");
    if (id == UCX_AM_IMM_ID && header_length == sizeof(imm)) {
        memcpy(&imm, header, sizeof(imm));
        if (g_flushed < (uint64_t)imm + 1 && g_early_imm == UINT64_MAX) {
            g_early_imm = imm;
        }
    }
    return real(ep, id, header, header_length, buffer, count, param);
}

/* --- Writes with immediates, reads, messages --------------------------------------------- */

typedef struct remote {
    uint64_t addr, key;
} remote_t;

/* The target: every immediate is checked against its region the moment it arrives. */
static void target_main(int sock)
{
    static side_t s;
    unsigned char *buf = calloc(NUM_WRITES, REGION);
    int seen[NUM_WRITES] = {0}, imms = 0, recvs = 0;
    inter_tmr_t mr;
    remote_t remote;
    char byte;

    side_open(&s, 1, sock);
    CHECK(OPS->mem_register(s.tp, buf, (size_t)NUM_WRITES * REGION, INTER_MEM_HOST, 0, 7, &mr) ==
          STRATA_OK, "register");
    remote = (remote_t){.addr = (uint64_t)(uintptr_t)buf, .key = mr.key};
    xwrite(sock, &remote, sizeof(remote));
    while (imms < NUM_WRITES || recvs < 2) {
        inter_cqe_t cqes[32];
        int n = 0;

        CHECK(OPS->poll(s.tp, cqes, 32, &n) == STRATA_OK, "poll");
        for (int i = 0; i < n; ++i) {
            if (cqes[i].kind == INTER_CQE_IMM) {
                int w = (int)cqes[i].imm;

                CHECK(w >= 0 && w < NUM_WRITES && cqes[i].context == NULL, "imm %d", w);
                for (size_t b = 0; b < write_len(w); ++b) {
                    CHECK(buf[(size_t)w * REGION + b] == pattern(w, b),
                          "immediate %d before byte %zu of its write landed", w, b);
                }
                seen[w]++;
                imms++;
            } else if (cqes[i].kind == INTER_CQE_RECV) {
                ctx_t *ctx = cqes[i].context;
                const char *data = s.rx[-1 - ctx->id];

                CHECK(cqes[i].status == STRATA_OK, "receive status");
                CHECK((cqes[i].length == 100 && data[99] == 'm') ||
                      (cqes[i].length == 20 && data[19] == 'i'), "message %zu bytes",
                      cqes[i].length);
                recvs++;
            }
        }
    }
    /* No immediate comes twice: wait a little for extras. */
    for (uint64_t end = util_clock_now_ns() + 300 * UTIL_NSEC_PER_MSEC; util_clock_now_ns() < end;) {
        side_poll(&s);
    }
    CHECK(side_count(&s, INTER_CQE_IMM, STRATA_OK) == 0, "an immediate came again");
    for (int w = 0; w < NUM_WRITES; ++w) {
        CHECK(seen[w] == 1, "immediate %d came %d times", w, seen[w]);
    }
    byte = 'k';
    xwrite(sock, &byte, 1);
    side_read_byte(&s); /* the initiator's reads are done */
    OPS->mem_deregister(s.tp, &mr);
    side_close(&s);
    free(buf);
}

static void initiator_main(int sock)
{
    static side_t s;
    unsigned char *src = malloc((size_t)NUM_WRITES * REGION), *back = calloc(1, REGION);
    char msg[100], beat[20];
    inter_post_t posts[8];
    inter_tmr_t mr, back_mr;
    remote_t remote;
    int posted, w = 0;
    char byte;

    side_open(&s, 0, sock);
    for (int i = 0; i < NUM_WRITES; ++i) {
        for (size_t b = 0; b < write_len(i); ++b) {
            src[(size_t)i * REGION + b] = pattern(i, b);
        }
    }
    CHECK(OPS->mem_register(s.tp, src, (size_t)NUM_WRITES * REGION, INTER_MEM_HOST, 0, 1, &mr) ==
          STRATA_OK, "register");
    CHECK(OPS->mem_register(s.tp, back, REGION, INTER_MEM_HOST, 0, 2, &back_mr) == STRATA_OK,
          "register");
    xread(sock, &remote, sizeof(remote));
    /* In batches of 1 to 8, as the engine posts them. */
    for (int batch = 1; w < NUM_WRITES; batch = batch % 8 + 1) {
        int n = UTIL_MIN(batch, NUM_WRITES - w);

        for (int i = 0; i < n; ++i, ++w) {
            s.ctx[w].id = w;
            posts[i] = (inter_post_t){.kind = INTER_POST_WRITE, .peer = s.other,
                                      .buf = src + (size_t)w * REGION, .len = write_len(w),
                                      .raddr = remote.addr + (uint64_t)w * REGION,
                                      .rkey = remote.key, .with_imm = true, .imm = (uint32_t)w,
                                      .context = &s.ctx[w]};
        }
        CHECK(OPS->post(s.tp, posts, n, &posted) == STRATA_OK && posted == n, "post");
        side_poll(&s);
    }
    CHECK(side_wait(&s, INTER_CQE_LOCAL, STRATA_OK, NUM_WRITES, 30), "writes complete");
    CHECK(g_puts == NUM_WRITES, "%llu puts for %d writes", (unsigned long long)g_puts,
          NUM_WRITES);
    CHECK(g_early_imm == UINT64_MAX, "immediate %llu was sent before a flush covered its put",
          (unsigned long long)g_early_imm);
    memset(msg, 'm', sizeof(msg));
    memset(beat, 'i', sizeof(beat));
    posts[0] = (inter_post_t){.kind = INTER_POST_SEND, .peer = s.other, .buf = msg,
                              .len = sizeof(msg), .context = &s.ctx[NUM_WRITES]};
    CHECK(OPS->post(s.tp, posts, 1, &posted) == STRATA_OK && posted == 1, "send");
    CHECK(OPS->inject(s.tp, s.other, beat, sizeof(beat)) == STRATA_OK, "inject");
    memset(beat, 0, sizeof(beat)); /* inject copied it */
    CHECK(side_wait(&s, INTER_CQE_LOCAL, STRATA_OK, NUM_WRITES + 1, 30), "send completes");
    xread(sock, &byte, 1);
    CHECK(byte == 'k', "the target's verdict");
    /* Read back the largest write. */
    w = 7;
    posts[0] = (inter_post_t){.kind = INTER_POST_READ, .peer = s.other, .buf = back,
                              .len = write_len(w), .raddr = remote.addr + (uint64_t)w * REGION,
                              .rkey = remote.key, .context = &s.ctx[NUM_WRITES + 1]};
    CHECK(OPS->post(s.tp, posts, 1, &posted) == STRATA_OK, "read");
    CHECK(side_wait(&s, INTER_CQE_LOCAL, STRATA_OK, NUM_WRITES + 2, 30), "read completes");
    CHECK(memcmp(back, src + (size_t)w * REGION, write_len(w)) == 0, "read data");
    CHECK(side_count(&s, INTER_CQE_IMM, STRATA_OK) == 0, "no immediate here");
    xwrite(sock, &byte, 1);
    OPS->mem_deregister(s.tp, &back_mr);
    OPS->mem_deregister(s.tp, &mr);
    side_close(&s);
    free(src);
    free(back);
}

static void test_write_imm_read_send(void **state)
{
    (void)state;
    run_pair(initiator_main, target_main);
}

/* --- Keys: unknown, and deregistered while cached at the peer --------------------------------- */

static atomic_bool g_stop_poller;
/* Held around each poll: over tcp, UCX's progress copies a put's bytes into place, so
 * reading them under the same lock orders the read after the copy (as a completion
 * would on hardware). */
static pthread_mutex_t g_poll_lock = PTHREAD_MUTEX_INITIALIZER;

static void *poller_main(void *arg)
{
    while (!atomic_load(&g_stop_poller)) {
        pthread_mutex_lock(&g_poll_lock);
        side_poll(arg);
        pthread_mutex_unlock(&g_poll_lock);
    }
    return NULL;
}

/* Whether the first and last of the 4096 bytes at p hold c. */
static bool filled(const unsigned char *p, unsigned char c)
{
    bool yes;

    pthread_mutex_lock(&g_poll_lock);
    yes = p[0] == c && p[4095] == c;
    pthread_mutex_unlock(&g_poll_lock);
    return yes;
}

/* Until the 4096 bytes at p all hold c (a write completes at its initiator first). */
static bool wait_filled(const unsigned char *p, unsigned char c)
{
    uint64_t end = util_clock_now_ns() + 5 * UTIL_NSEC_PER_SEC;

    while (!filled(p, c)) {
        if (util_clock_now_ns() > end) {
            return false;
        }
        usleep(1000);
    }
    return true;
}

/* Owner: registers A, lets the peer write it, deregisters it (acked by the peer), then
 * checks that the peer's later write to A's key reached nothing. */
static void owner_main(int sock)
{
    static side_t s;
    unsigned char *a = calloc(1, 4096), *b = calloc(1, 4096);
    inter_tmr_t mr_a, mr_b;
    remote_t remotes[2];
    pthread_t poller;
    uint64_t start, took;
    char byte;

    side_open(&s, 1, sock);
    atomic_store(&g_stop_poller, false);
    pthread_create(&poller, NULL, poller_main, &s); /* the proxy's part */
    CHECK(OPS->mem_register(s.tp, a, 4096, INTER_MEM_HOST, 0, 5, &mr_a) == STRATA_OK, "reg A");
    remotes[0] = (remote_t){.addr = (uint64_t)(uintptr_t)a, .key = mr_a.key};
    xwrite(sock, &remotes[0], sizeof(remotes[0]));
    xread(sock, &byte, 1); /* the peer wrote A, so it holds A's rkey */
    CHECK(wait_filled(a, 'w'), "the first write to A");
    start = util_clock_now_ns();
    OPS->mem_deregister(s.tp, &mr_a); /* returns once the peer dropped the rkey */
    took = util_clock_now_ns() - start;
    CHECK(took < 2 * UTIL_NSEC_PER_SEC, "deregistration waited %.2f s for the revoke's ack "
          "(STRATA_UCX_TIMEOUT is 5 s)", (double)took / 1e9);
    pthread_mutex_lock(&g_poll_lock);
    memset(a, 0, 4096);
    pthread_mutex_unlock(&g_poll_lock);
    /* A new registration, maybe at the same address, never gets A's key. */
    CHECK(OPS->mem_register(s.tp, b, 4096, INTER_MEM_HOST, 0, 5, &mr_b) == STRATA_OK, "reg B");
    CHECK(mr_b.key > remotes[0].key, "key %llu after %llu", (unsigned long long)mr_b.key,
          (unsigned long long)remotes[0].key);
    remotes[1] = (remote_t){.addr = (uint64_t)(uintptr_t)b, .key = mr_b.key};
    xwrite(sock, &byte, 1);
    xwrite(sock, &remotes[1], sizeof(remotes[1]));
    xread(sock, &byte, 1); /* the peer tried A again, and wrote B */
    CHECK(wait_filled(b, 'v'), "the write to B");
    CHECK(filled(a, 0), "a write after deregistration reached the memory");
    /* Now no thread polls here (caller progress between waits): the deregistration drives
     * progress itself, or its revoke would never leave. */
    atomic_store(&g_stop_poller, true);
    pthread_join(poller, NULL);
    start = util_clock_now_ns();
    OPS->mem_deregister(s.tp, &mr_b);
    took = util_clock_now_ns() - start;
    CHECK(took < 2 * UTIL_NSEC_PER_SEC, "deregistration with no one polling waited %.2f s",
          (double)took / 1e9);
    xwrite(sock, &byte, 1);
    side_close(&s);
    free(a);
    free(b);
}

static void writer_main(int sock)
{
    static side_t s;
    char *src = malloc(4096);
    inter_post_t post;
    inter_tmr_t mr;
    remote_t a, b;
    int posted;
    char byte = 'x';

    side_open(&s, 0, sock);
    CHECK(OPS->mem_register(s.tp, src, 4096, INTER_MEM_HOST, 0, 1, &mr) == STRATA_OK, "reg");
    xread(sock, &a, sizeof(a));
    /* A key never registered there fails the write, and only it. */
    memset(src, 'w', 4096);
    post = (inter_post_t){.kind = INTER_POST_WRITE, .peer = s.other, .buf = src, .len = 4096,
                          .raddr = a.addr, .rkey = a.key + 1000, .context = &s.ctx[0]};
    CHECK(OPS->post(s.tp, &post, 1, &posted) == STRATA_OK && posted == 1, "post");
    CHECK(side_wait(&s, INTER_CQE_LOCAL, STRATA_ERR_TRANSPORT, 1, 10), "unknown key fails");
    post.rkey    = a.key;
    post.context = &s.ctx[1];
    CHECK(OPS->post(s.tp, &post, 1, &posted) == STRATA_OK, "post");
    CHECK(side_wait(&s, INTER_CQE_LOCAL, STRATA_OK, 1, 10), "write to A");
    xwrite(sock, &byte, 1);
    side_read_byte(&s); /* A is deregistered now (which needed our ack) */
    xread(sock, &b, sizeof(b));
    memset(src, 'v', 4096);
    post.context = &s.ctx[2];
    post.with_imm = true;
    CHECK(OPS->post(s.tp, &post, 1, &posted) == STRATA_OK, "post");
    CHECK(side_wait(&s, INTER_CQE_LOCAL, STRATA_ERR_TRANSPORT, 2, 10),
          "a write to a deregistered key fails");
    post = (inter_post_t){.kind = INTER_POST_WRITE, .peer = s.other, .buf = src, .len = 4096,
                          .raddr = b.addr, .rkey = b.key, .context = &s.ctx[3]};
    CHECK(OPS->post(s.tp, &post, 1, &posted) == STRATA_OK, "post");
    CHECK(side_wait(&s, INTER_CQE_LOCAL, STRATA_OK, 2, 10), "write to B");
    xwrite(sock, &byte, 1);
    side_read_byte(&s); /* the owner is done (its deregistration's revoke needs us) */
    OPS->mem_deregister(s.tp, &mr);
    side_close(&s);
    free(src);
}

static void test_keys(void **state)
{
    (void)state;
    setenv("STRATA_UCX_TIMEOUT", "5s", 1);
    run_pair(writer_main, owner_main);
    unsetenv("STRATA_UCX_TIMEOUT");
}

/* --- A peer that dies ----------------------------------------------------------------------- */

static void dying_main(int sock)
{
    static side_t s;
    char msg[32] = "hello", byte;
    inter_post_t post;
    int posted;

    side_open(&s, 1, sock);
    post = (inter_post_t){.kind = INTER_POST_SEND, .peer = s.other, .buf = msg,
                          .len = sizeof(msg), .context = &s.ctx[0]};
    CHECK(OPS->post(s.tp, &post, 1, &posted) == STRATA_OK, "send");
    CHECK(side_wait(&s, INTER_CQE_LOCAL, STRATA_OK, 1, 10), "send completes");
    xread(sock, &byte, 1);
    raise(SIGKILL); /* no goodbye */
}

static void survivor_main(int sock)
{
    static side_t s;
    char msg[32] = "are you there";
    inter_post_t post;
    uint64_t start;
    int posted, sent = 0;
    char byte = 'd';
    strata_status_t status = STRATA_OK;

    side_open(&s, 0, sock);
    CHECK(side_wait(&s, INTER_CQE_RECV, STRATA_OK, 1, 10), "the peer's message");
    xwrite(sock, &byte, 1);
    start = util_clock_now_ns();
    /* Sends to the dead peer: one fails at post or completes with TRANSPORT. */
    while (status == STRATA_OK && side_count(&s, INTER_CQE_LOCAL, STRATA_ERR_TRANSPORT) == 0) {
        CHECK(util_clock_now_ns() - start < 10 * UTIL_NSEC_PER_SEC,
              "no error 10 s after the peer died");
        post = (inter_post_t){.kind = INTER_POST_SEND, .peer = s.other, .buf = msg,
                              .len = sizeof(msg), .context = &s.ctx[1 + sent % 100]};
        status = OPS->post(s.tp, &post, 1, &posted);
        sent += status == STRATA_OK;
        usleep(10000);
        side_poll(&s);
    }
    CHECK(status == STRATA_OK || status == STRATA_ERR_TRANSPORT, "post: %s",
          strata_status_string(status));
    /* Once the endpoint is known failed, posts and injects to it are refused at once. */
    post.context = &s.ctx[200];
    CHECK(OPS->post(s.tp, &post, 1, &posted) == STRATA_ERR_TRANSPORT && posted == 0,
          "a send after the endpoint failed was not refused");
    CHECK(OPS->inject(s.tp, s.other, msg, 8) == STRATA_ERR_TRANSPORT, "inject after failure");
    /* Nor does a write whose rkey would have to come from the dead peer wait for it. */
    post = (inter_post_t){.kind = INTER_POST_WRITE, .peer = s.other, .buf = msg, .len = 8,
                          .raddr = 4096, .rkey = 42, .with_imm = true, .context = &s.ctx[201]};
    status = OPS->post(s.tp, &post, 1, &posted);
    CHECK(status == STRATA_ERR_TRANSPORT ||
          (status == STRATA_OK && side_wait(&s, INTER_CQE_LOCAL, STRATA_ERR_TRANSPORT, 2, 5)),
          "a write to the dead peer: %s", strata_status_string(status));
    /* Shutdown ends the rest: receives come back cancelled, and it does not hang. */
    start = util_clock_now_ns();
    OPS->shutdown(s.tp);
    CHECK(util_clock_now_ns() - start < 5 * UTIL_NSEC_PER_SEC, "shutdown took %.1f s",
          (double)(util_clock_now_ns() - start) / 1e9);
    OPS->close(s.tp);
}

static void test_peer_dies(void **state)
{
    (void)state;
    run_pair(survivor_main, dying_main);
}

/* --- Configuration ------------------------------------------------------------------------ */

static void test_open_describe(void **state)
{
    inter_transport_params_t params = params_for(0, "lo", false);
    inter_transport_t *tp = NULL;
    inter_probe_t probe = {0};
    char addr[INTER_ADDR_MAX];
    size_t len = sizeof(addr);

    (void)state;
    OPS->probe(&params, &probe);
    /* Here UCX has tcp and shared memory only: it runs, but ofi over tcp outscores it. */
    assert_int_equal(probe.score, INTER_PROBE_EMULATED);
    assert_true(strncmp(probe.why, "ucx 1.", 6) == 0 && strstr(probe.why, "tcp") != NULL);
    assert_non_null(strstr(probe.why, "no RDMA lane"));
    assert_int_equal(OPS->open(&params, &tp), STRATA_OK);
    /* Without shared memory, tcp on the device asked for, and nothing else. */
    assert_string_equal(tp->name, "ucx tcp lo");
    assert_int_equal(tp->addr_size, 2048);
    assert_false(tp->rx_cq_data);
    assert_true(tp->has_read && tp->virt_addr && tp->inject_size >= 20);
    assert_int_equal(OPS->address(tp, addr, &len), STRATA_OK);
    assert_true(len > 8 && len <= tp->addr_size);
    OPS->close(tp);
}

static void test_bad_device(void **state)
{
    inter_transport_params_t params = params_for(0, "nosuchdev0", false);
    inter_transport_t *tp = NULL;

    (void)state;
    assert_int_equal(OPS->open(&params, &tp), STRATA_ERR_CONFIG);
    assert_null(tp);
    /* From the rail plan (not required): a warning, and UCX's default devices. */
    params.required = false;
    assert_int_equal(OPS->open(&params, &tp), STRATA_OK);
    OPS->close(tp);
}

static void test_tls_setting(void **state)
{
    inter_transport_params_t params = params_for(0, "lo", false);
    inter_transport_t *tp = NULL;
    inter_probe_t probe = {0};

    (void)state;
    setenv("STRATA_UCX_TLS", "posix,tcp", 1);
    OPS->probe(&params, &probe);
    /* Shared memory forbidden, and asked for by name: refused, not ignored. */
    assert_int_equal(OPS->open(&params, &tp), STRATA_ERR_CONFIG);
    params.shared_memory = true;
    OPS->probe(&params, &probe);
    assert_int_equal(probe.score, INTER_PROBE_ASKED);
    assert_int_equal(OPS->open(&params, &tp), STRATA_OK);
    assert_non_null(strstr(tp->name, "posix"));
    OPS->close(tp);
    unsetenv("STRATA_UCX_TLS");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_describe),
        cmocka_unit_test(test_bad_device),
        cmocka_unit_test(test_tls_setting),
        cmocka_unit_test(test_write_imm_read_send),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_peer_dies),
    };

    if (argc > 1) {
        cmocka_set_test_filter(argv[1]); /* one test by name, when debugging */
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
