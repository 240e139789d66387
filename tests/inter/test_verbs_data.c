/*
 * The verbs transport's data path over a made-up device: libibverbs posts and polls through
 * the context's ops table, so a fake one records every work request and hands back the
 * completions a test scripts. Chaining per peer, the immediate in network order, the send
 * queue's accounting (signaled and unsignaled), a full queue, a failed peer, receives, and
 * the completions the engine sees.
 */
#include "inter/verbs/verbs.h"

#include "common/log_capture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define FAKE_QPS   5
#define FAKE_LOG   256

typedef struct fake_wr {
    uint32_t qp_num;
    int      call;    /* which ibv_post_send call carried it */
    uint64_t wr_id;
    int      opcode;
    unsigned flags;
    uint32_t imm;     /* as posted (network order) */
    uint64_t addr;
    uint32_t length;
    uint32_t lkey;
    int      num_sge;
    uint64_t raddr;
    uint32_t rkey;
} fake_wr_t;

static struct {
    struct ibv_context ctx;
    struct ibv_qp      qps[FAKE_QPS];
    struct ibv_cq      cq;
    struct ibv_srq     srq;
    fake_wr_t          log[FAKE_LOG];
    int                num_logged, calls;
    int                fail_at, fail_rc; /* the post_send of the fail_at-th request fails */
    int                posted_total;
    struct ibv_recv_wr recv;
    int                recv_rc;
    struct ibv_wc      wcs[64];
    int                num_wcs, poll_rc;
} fake;

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    fake.calls++;
    for (; wr != NULL; wr = wr->next) {
        fake_wr_t *log = &fake.log[fake.num_logged % FAKE_LOG];

        if (fake.posted_total == fake.fail_at) {
            *bad = wr;
            return fake.fail_rc;
        }
        fake.posted_total++;
        *log = (fake_wr_t){.qp_num = qp->qp_num, .call = fake.calls, .wr_id = wr->wr_id,
                           .opcode = wr->opcode, .flags = wr->send_flags, .imm = wr->imm_data,
                           .num_sge = wr->num_sge, .raddr = wr->wr.rdma.remote_addr,
                           .rkey = wr->wr.rdma.rkey};
        if (wr->num_sge > 0) {
            log->addr   = wr->sg_list[0].addr;
            log->length = wr->sg_list[0].length;
            log->lkey   = wr->sg_list[0].lkey;
        }
        fake.num_logged++;
    }
    return 0;
}

static int fake_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
                              struct ibv_recv_wr **bad)
{
    (void)srq;
    if (fake.recv_rc != 0) {
        *bad = wr;
        return fake.recv_rc;
    }
    fake.recv         = *wr;
    fake.recv.sg_list = NULL;
    fake.recv.num_sge = wr->num_sge ? (int)wr->sg_list[0].lkey : 0; /* lkey, for the check */
    return 0;
}

static int fake_poll_cq(struct ibv_cq *cq, int max, struct ibv_wc *wc)
{
    int n = fake.num_wcs < max ? fake.num_wcs : max;

    (void)cq;
    if (fake.poll_rc != 0) {
        return fake.poll_rc;
    }
    memcpy(wc, fake.wcs, (size_t)n * sizeof(*wc));
    memmove(fake.wcs, fake.wcs + n, (size_t)(fake.num_wcs - n) * sizeof(*wc));
    fake.num_wcs -= n;
    return n;
}

/* A connected transport of world ranks (rank 0 here) over the fake device. */
static verbs_transport_t *fake_transport(int world, uint32_t sq_depth)
{
    verbs_transport_t *vt = calloc(1, sizeof(*vt));

    memset(&fake, 0, sizeof(fake));
    fake.fail_at               = -1;
    fake.ctx.ops.post_send     = fake_post_send;
    fake.ctx.ops.post_srq_recv = fake_post_srq_recv;
    fake.ctx.ops.poll_cq       = fake_poll_cq;
    fake.cq.context            = &fake.ctx;
    fake.srq.context           = &fake.ctx;
    snprintf(vt->base.name, sizeof(vt->base.name), "verbs fake0:1");
    vt->base.has_read     = true;
    vt->base.max_msg_size = 1u << 30;
    vt->base.max_rma_size = 1u << 30;
    vt->base.inject_size  = 64;
    vt->world             = world;
    vt->ctx               = &fake.ctx;
    vt->cq                = &fake.cq;
    vt->srq               = &fake.srq;
    vt->sq_depth          = sq_depth;
    vt->signal_every      = sq_depth / 2;
    vt->next_async_ns     = UINT64_MAX; /* no async events from a fake device */
    vt->peers             = calloc((size_t)world, sizeof(*vt->peers));
    for (int i = 0; i < FAKE_QPS; ++i) {
        fake.qps[i].context = &fake.ctx;
        fake.qps[i].qp_num  = 100u + (uint32_t)i;
    }
    for (int p = 0; p < world; ++p) {
        vt->peers[p].qp        = &fake.qps[p];
        vt->peers[p].connected = true;
    }
    vt->self_rx = &fake.qps[world]; /* the receiving half of rank 0's loopback pair */
    return vt;
}

static void fake_free(verbs_transport_t *vt)
{
    free(vt->peers);
    free(vt);
}

/* Engine operations: the transport's context space comes first, aligned as inter_op_t's
 * (which holds pointers). */
typedef struct test_op {
    _Alignas(8) char context[INTER_CONTEXT_SPACE];
    int  id;
} test_op_t;

static struct ibv_mr test_mr = {.lkey = 0x1234, .rkey = 0x5678};
static char test_buf[4096];

static inter_post_t test_write(uint64_t peer, test_op_t *op, bool with_imm, uint32_t imm)
{
    return (inter_post_t){.kind = INTER_POST_WRITE, .peer = peer, .buf = test_buf, .len = 100,
                          .desc = &test_mr, .raddr = 0x7000, .rkey = 0x99,
                          .with_imm = with_imm, .imm = imm, .context = op};
}

static struct ibv_wc test_wc(const void *ctx, enum ibv_wc_status status, enum ibv_wc_opcode op,
                             uint32_t qp_num)
{
    struct ibv_wc wc;

    memset(&wc, 0, sizeof(wc));
    wc.wr_id  = (uintptr_t)ctx;
    wc.status = status;
    wc.opcode = op;
    wc.qp_num = qp_num;
    return wc;
}

static void test_post_chains_per_peer(void **state)
{
    verbs_transport_t *vt = fake_transport(3, 64);
    test_op_t ops[5];
    inter_post_t posts[5] = {
        test_write(1, &ops[0], false, 0), test_write(1, &ops[1], true, 0x40000007u),
        test_write(1, &ops[2], true, 3),
        {.kind = INTER_POST_READ, .peer = 2, .buf = test_buf, .len = 300, .desc = &test_mr,
         .raddr = 0x9000, .rkey = 0x77, .context = &ops[3]},
        {.kind = INTER_POST_SEND, .peer = 1, .buf = test_buf, .len = 16, .desc = &test_mr,
         .context = &ops[4]},
    };
    int posted = -1;

    (void)state;
    assert_int_equal(verbs_post(&vt->base, posts, 5, &posted), STRATA_OK);
    assert_int_equal(posted, 5);
    assert_int_equal(fake.num_logged, 5);
    /* Consecutive posts to one peer share one ibv_post_send. */
    assert_int_equal(fake.calls, 3);
    assert_int_equal(fake.log[0].call, 1);
    assert_int_equal(fake.log[2].call, 1);
    assert_int_equal(fake.log[3].call, 2);
    assert_int_equal(fake.log[4].call, 3);
    assert_int_equal(fake.log[0].qp_num, 101);
    assert_int_equal(fake.log[3].qp_num, 102);
    assert_int_equal(fake.log[0].opcode, IBV_WR_RDMA_WRITE);
    assert_int_equal(fake.log[1].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
    assert_int_equal(fake.log[1].imm, htonl(0x40000007u));
    assert_int_equal(fake.log[2].imm, htonl(3));
    assert_int_equal(fake.log[3].opcode, IBV_WR_RDMA_READ);
    assert_int_equal(fake.log[4].opcode, IBV_WR_SEND);
    for (int i = 0; i < 5; ++i) {
        assert_int_equal(fake.log[i].wr_id, (uintptr_t)&ops[i]);
        assert_true(fake.log[i].flags & IBV_SEND_SIGNALED);
        assert_int_equal(fake.log[i].lkey, 0x1234);
        assert_int_equal(fake.log[i].addr, (uintptr_t)test_buf);
    }
    assert_int_equal(fake.log[1].raddr, 0x7000);
    assert_int_equal(fake.log[1].rkey, 0x99);
    assert_int_equal(fake.log[3].raddr, 0x9000);
    assert_int_equal(fake.log[3].length, 300);
    assert_int_equal(vt->peers[1].posted, 4);
    assert_int_equal(vt->peers[2].posted, 1);
    fake_free(vt);
}

static void test_post_full_queue(void **state)
{
    verbs_transport_t *vt = fake_transport(2, 16);
    test_op_t ops[20];
    inter_post_t posts[20];
    inter_cqe_t cqes[4];
    int posted = -1, count = -1;

    (void)state;
    for (int i = 0; i < 20; ++i) {
        posts[i] = test_write(1, &ops[i], true, (uint32_t)i);
    }
    /* The send queue holds 16: the rest waits for completions. */
    assert_int_equal(verbs_post(&vt->base, posts, 20, &posted), STRATA_ERR_BUSY);
    assert_int_equal(posted, 16);
    assert_int_equal(verbs_post(&vt->base, posts + 16, 4, &posted), STRATA_ERR_BUSY);
    assert_int_equal(posted, 0);
    /* The fourth one's completion frees four slots (and the requests before it). */
    fake.wcs[fake.num_wcs++] = test_wc(&ops[3], IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 101);
    assert_int_equal(verbs_poll(&vt->base, cqes, 4, &count), STRATA_OK);
    assert_int_equal(count, 1);
    assert_ptr_equal(cqes[0].context, &ops[3]);
    assert_int_equal(vt->peers[1].retired, 4);
    assert_int_equal(verbs_post(&vt->base, posts + 16, 4, &posted), STRATA_OK);
    assert_int_equal(posted, 4);
    assert_int_equal(fake.num_logged, 20);
    fake_free(vt);
}

static void test_post_refused_midway(void **state)
{
    verbs_transport_t *vt = fake_transport(3, 64);
    test_op_t ops[4];
    inter_post_t posts[4] = {test_write(1, &ops[0], false, 0), test_write(1, &ops[1], false, 0),
                             test_write(1, &ops[2], false, 0), test_write(2, &ops[3], false, 0)};
    int posted = -1;

    (void)state;
    /* The device's queue is full at the third (ENOMEM): two went, busy. */
    fake.fail_at = 2;
    fake.fail_rc = ENOMEM;
    assert_int_equal(verbs_post(&vt->base, posts, 4, &posted), STRATA_ERR_BUSY);
    assert_int_equal(posted, 2);
    assert_int_equal(vt->peers[1].posted, 2);
    /* Any other error: that operation failed, none after it went. */
    fake.fail_at = fake.posted_total + 1;
    fake.fail_rc = EIO;
    log_capture_start();
    assert_int_equal(verbs_post(&vt->base, posts + 2, 2, &posted), STRATA_ERR_TRANSPORT);
    log_capture_stop();
    assert_int_equal(posted, 1);
    assert_true(log_capture.count > 0 && strstr(log_capture.lines[0], "ibv_post_send to QP 102"));
    /* A descriptor missing, a length past the limit, a peer not connected: invalid. */
    fake.fail_at = -1;
    posts[0].desc = NULL;
    log_capture_start();
    assert_int_equal(verbs_post(&vt->base, posts, 1, &posted), STRATA_ERR_INVALID);
    assert_int_equal(posted, 0);
    posts[0].desc = &test_mr;
    posts[0].len  = (1u << 30) + 1;
    assert_int_equal(verbs_post(&vt->base, posts, 1, &posted), STRATA_ERR_INVALID);
    posts[0].len  = 100;
    posts[0].peer = 3;
    assert_int_equal(verbs_post(&vt->base, posts, 1, &posted), STRATA_ERR_INVALID);
    log_capture_stop();
    fake_free(vt);
}

/* An error completion fails its peer: later posts to it fail at once, others go on. */
static void test_error_fails_peer(void **state)
{
    verbs_transport_t *vt = fake_transport(3, 64);
    test_op_t ops[4];
    inter_post_t posts[2] = {test_write(2, &ops[0], false, 0), test_write(1, &ops[1], false, 0)};
    inter_cqe_t cqes[4];
    int posted = -1, count = -1;

    (void)state;
    assert_int_equal(verbs_post(&vt->base, posts + 1, 1, &posted), STRATA_OK);
    fake.wcs[fake.num_wcs++] = test_wc(&ops[1], IBV_WC_RETRY_EXC_ERR, 0, 101);
    log_capture_start();
    assert_int_equal(verbs_poll(&vt->base, cqes, 4, &count), STRATA_OK);
    log_capture_stop();
    assert_int_equal(count, 1);
    assert_int_equal(cqes[0].kind, INTER_CQE_LOCAL);
    assert_int_equal(cqes[0].status, STRATA_ERR_TRANSPORT);
    assert_true(vt->peers[1].failed);
    assert_false(vt->peers[2].failed);
    assert_true(log_capture.count == 1 && strstr(log_capture.lines[0], "rank 1's QP 101"));
    assert_int_equal(verbs_post(&vt->base, posts, 2, &posted), STRATA_ERR_TRANSPORT);
    assert_int_equal(posted, 1);
    assert_int_equal(verbs_inject(&vt->base, 1, test_buf, 16), STRATA_ERR_TRANSPORT);
    /* A receive's error names no peer in its context: the QP number does. */
    fake.wcs[fake.num_wcs++] = test_wc(&ops[2], IBV_WC_LOC_LEN_ERR, 0, 102);
    ((verbs_ctx_t *)ops[2].context)->kind = VERBS_CTX_RX;
    log_capture_start();
    assert_int_equal(verbs_poll(&vt->base, cqes, 4, &count), STRATA_OK);
    log_capture_stop();
    assert_int_equal(cqes[0].kind, INTER_CQE_RECV);
    assert_true(vt->peers[2].failed);
    /* The loopback pair's receiving half belongs to this rank. */
    assert_int_equal(verbs_peer_of_qpn(vt, 103), 0);
    assert_int_equal(verbs_peer_of_qpn(vt, 100), 0);
    assert_int_equal(verbs_peer_of_qpn(vt, 102), 2);
    assert_int_equal(verbs_peer_of_qpn(vt, 999), -1);
    fake_free(vt);
}

/* Injected sends go inline and unsignaled, but every signal_every-th is signaled so that
 * the send queue frees its slots; its completion is the transport's own. */
static void test_inject_signals_periodically(void **state)
{
    verbs_transport_t *vt = fake_transport(2, 16); /* signal every 8 */
    inter_cqe_t cqes[4];
    int count = -1;

    (void)state;
    for (int i = 1; i <= 15; ++i) {
        assert_int_equal(verbs_inject(&vt->base, 1, test_buf, 16), STRATA_OK);
        assert_true(fake.log[i - 1].flags & IBV_SEND_INLINE);
        assert_int_equal(fake.log[i - 1].opcode, IBV_WR_SEND);
        assert_int_equal(fake.log[i - 1].wr_id, (uintptr_t)&vt->peers[1].inject_ctx);
        assert_int_equal((fake.log[i - 1].flags & IBV_SEND_SIGNALED) != 0, i == 8);
    }
    /* The 16th must be signaled, but the 8th's completion is still out. */
    assert_int_equal(verbs_inject(&vt->base, 1, test_buf, 16), STRATA_ERR_BUSY);
    fake.wcs[fake.num_wcs++] = test_wc(&vt->peers[1].inject_ctx, IBV_WC_SUCCESS, IBV_WC_SEND, 101);
    assert_int_equal(verbs_poll(&vt->base, cqes, 4, &count), STRATA_OK);
    assert_int_equal(count, 0); /* not the engine's */
    assert_int_equal(vt->peers[1].retired, 8);
    assert_false(vt->peers[1].inject_out);
    assert_int_equal(verbs_inject(&vt->base, 1, test_buf, 16), STRATA_OK);
    assert_true(fake.log[15].flags & IBV_SEND_SIGNALED);
    /* Larger than what goes inline: refused. */
    log_capture_start();
    assert_int_equal(verbs_inject(&vt->base, 1, test_buf, 65), STRATA_ERR_INVALID);
    log_capture_stop();
    fake_free(vt);
}

/* Engine posts are signaled: injects after them start their count again. */
static void test_inject_after_posts(void **state)
{
    verbs_transport_t *vt = fake_transport(2, 16);
    test_op_t op;
    inter_post_t post = test_write(1, &op, true, 1);
    int posted;

    (void)state;
    for (int i = 0; i < 7; ++i) {
        assert_int_equal(verbs_inject(&vt->base, 1, test_buf, 16), STRATA_OK);
    }
    assert_int_equal(verbs_post(&vt->base, &post, 1, &posted), STRATA_OK);
    assert_int_equal(verbs_inject(&vt->base, 1, test_buf, 16), STRATA_OK);
    assert_false(fake.log[8].flags & IBV_SEND_SIGNALED);
    fake_free(vt);
}

static void test_recv_and_poll(void **state)
{
    verbs_transport_t *vt = fake_transport(2, 16);
    test_op_t rx[3];
    inter_cqe_t cqes[8];
    int count = -1;

    (void)state;
    for (int i = 0; i < 3; ++i) {
        assert_int_equal(verbs_post_recv(&vt->base, test_buf, 1024, &test_mr, &rx[i]), STRATA_OK);
        assert_int_equal(fake.recv.wr_id, (uintptr_t)&rx[i]);
        assert_int_equal(fake.recv.num_sge, 0x1234); /* the lkey, as the fake keeps it */
    }
    fake.recv_rc = ENOMEM;
    assert_int_equal(verbs_post_recv(&vt->base, test_buf, 1024, &test_mr, &rx[0]), STRATA_ERR_BUSY);
    fake.wcs[0] = test_wc(&rx[0], IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, 101);
    fake.wcs[0].imm_data = htonl(42);
    fake.wcs[1] = test_wc(&rx[1], IBV_WC_SUCCESS, IBV_WC_RECV, 101);
    fake.wcs[1].byte_len = 77;
    fake.wcs[2] = test_wc(&rx[2], IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 101);
    fake.num_wcs = 3;
    log_capture_start();
    assert_int_equal(verbs_poll(&vt->base, cqes, 8, &count), STRATA_OK);
    log_capture_stop();
    assert_int_equal(count, 3);
    assert_int_equal(cqes[0].kind, INTER_CQE_IMM);
    assert_int_equal(cqes[0].imm, 42);
    assert_ptr_equal(cqes[0].context, &rx[0]);
    assert_int_equal(cqes[1].kind, INTER_CQE_RECV);
    assert_int_equal(cqes[1].length, 77);
    assert_int_equal(cqes[2].kind, INTER_CQE_RECV);
    assert_int_equal(cqes[2].status, STRATA_ERR_CANCELLED);
    /* No more than asked for. */
    for (int i = 0; i < 3; ++i) {
        fake.wcs[fake.num_wcs++] = test_wc(&rx[i], IBV_WC_SUCCESS, IBV_WC_RECV, 101);
    }
    assert_int_equal(verbs_poll(&vt->base, cqes, 2, &count), STRATA_OK);
    assert_int_equal(count, 2);
    assert_int_equal(fake.num_wcs, 1);
    /* A completion queue that cannot be read breaks the rail. */
    fake.poll_rc = -EIO;
    log_capture_start();
    assert_int_equal(verbs_poll(&vt->base, cqes, 8, &count), STRATA_ERR_TRANSPORT);
    log_capture_stop();
    assert_int_equal(count, 0);
    fake_free(vt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_post_chains_per_peer),
        cmocka_unit_test(test_post_full_queue),
        cmocka_unit_test(test_post_refused_midway),
        cmocka_unit_test(test_error_fails_peer),
        cmocka_unit_test(test_inject_signals_periodically),
        cmocka_unit_test(test_inject_after_posts),
        cmocka_unit_test(test_recv_and_poll),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
