/*
 * The chaos transport (STRATA_INTER_TRANSPORT=chaos:<inner>), built into test and fuzz builds
 * only: another transport (ofi, ucx or verbs) wrapped so that it behaves as the least
 * ordered fabric the transport interface allows (transport.h: reliable, unordered delivery).
 * Over tcp, which delivers everything in order, it shows whether the layers above rely on
 * an order that EFA's SRD or a multi-path fabric does not keep:
 *
 *   - every write, read, send and inject waits a random time (up to STRATA_CHAOS_DELAY)
 *     before it reaches the inner transport, so operations to the same peer overtake one
 *     another; writes and reads are also cut into up to four pieces, posted in any order;
 *   - a write with an immediate is cut the same way, but its immediate rides on its last
 *     piece, posted only once every other piece has completed: its data is always there
 *     before its immediate, never after (the one order the interface promises);
 *   - completions come back in random order, some held over to later polls and several
 *     reported at once; a post sometimes answers "busy".
 *
 * Sends and injects keep their order among themselves: the engine's messages are matched in
 * order, as they are on every transport strata has. Receives go straight to the inner
 * transport; the immediates that land are reported in random order, the messages in theirs. Everything random comes from STRATA_CHAOS_SEED (logged at open; 0 takes one
 * from the clock), mixed with the rank and the rail, so a failing run can be replayed.
 */
#include "inter/transport.h"
#include "util/util.h"

#include <pthread.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHAOS_MAX_PIECES   4    /* a write or read is cut into at most this many */
#define CHAOS_SPLIT_MIN    256  /* bytes; shorter operations stay whole */
#define CHAOS_MAX_WAITING  4096 /* pieces held back before a post answers busy */
#define CHAOS_RELEASE_MAX  64   /* pieces handed to the inner transport per poll */

typedef struct chaos_config {
    int64_t  seed;
    uint64_t delay_ns;
} chaos_config_t;

static const util_config_field_t chaos_config_fields[] = {
    {.name = "CHAOS_SEED", .default_value = "0",
     .doc = "Test builds, chaos transport: the seed of its delays, splits and orders (0: one "
            "from the clock, logged).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(chaos_config_t, seed)},
    {.name = "CHAOS_DELAY", .default_value = "200us",
     .doc = "Test builds, chaos transport: the longest an operation is held back.",
     .type = UTIL_CONFIG_TIME, .offset = offsetof(chaos_config_t, delay_ns)},
};

const util_config_table_t chaos_config_table = {
    .layer       = "inter chaos",
    .fields      = chaos_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(chaos_config_fields),
    .struct_size = sizeof(chaos_config_t),
};

typedef struct chaos_op chaos_op_t;

/* One piece of an operation: what the inner transport is handed, with this as its context. */
typedef struct chaos_piece {
    alignas(max_align_t) unsigned char space[INTER_CONTEXT_SPACE]; /* the inner transport's */
    struct chaos_piece *next;  /* in the waiting list */
    chaos_op_t         *op;
    inter_post_t        post;
    uint64_t            due_ns; /* not handed over before */
    uint64_t            seq;    /* in the order pieces started waiting */
} chaos_piece_t;

/* One operation the engine posted (or injected), and its pieces. */
struct chaos_op {
    chaos_op_t     *prev, *next; /* every live operation, freed at shutdown */
    void           *context;     /* the engine's */
    size_t          len;
    bool            inject;      /* no completion; data below */
    bool            recv;        /* a posted receive: its completion goes up as it is */
    bool            imm_held;    /* the last piece waits for the others */
    int             pieces_left; /* not completed */
    int             num_pieces;
    strata_status_t status;
    chaos_piece_t   pieces[CHAOS_MAX_PIECES];
    unsigned char   data[];      /* an inject's copy */
};

typedef struct chaos_cqes {
    inter_cqe_t *cqes;
    int          count, cap;
} chaos_cqes_t;

typedef struct chaos_transport {
    inter_transport_t            base;
    const inter_transport_ops_t *inner_ops;
    inter_transport_t           *inner;
    pthread_mutex_t              lock;
    uint64_t                     rng;
    uint64_t                     max_delay_ns;
    uint64_t                     last_ordered_due; /* of the latest send or inject */
    chaos_piece_t               *waiting, **waiting_tail;
    int                          num_waiting;
    chaos_op_t                  *live;
    uint64_t                     next_seq;     /* of the next piece to wait */
    uint64_t                     highest_seq;  /* of the pieces handed over */
    /* What the chaos did, logged at close: operations, the pieces they were cut into,
     * pieces handed over after one that started waiting later, polls that held back. */
    uint64_t                     num_ops, num_pieces, num_overtaken, num_held_polls;
    strata_status_t              inject_status; /* a held inject that failed: the next says */
    chaos_cqes_t                 done; /* completions not yet reported, any order */
    chaos_cqes_t                 msgs; /* messages received not yet reported, in order */
} chaos_transport_t;

static uint64_t chaos_next(chaos_transport_t *ct)
{
    uint64_t z = (ct->rng += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A random number in [0, n). */
static uint64_t chaos_below(chaos_transport_t *ct, uint64_t n)
{
    return n == 0 ? 0 : chaos_next(ct) % n;
}

static chaos_transport_t *chaos_of(inter_transport_t *tp)
{
    return (chaos_transport_t *)tp;
}

/* --- The waiting list and the completions held back --------------------------------------- */

static void chaos_wait_piece(chaos_transport_t *ct, chaos_piece_t *piece, uint64_t now)
{
    bool ordered = piece->op->inject || piece->post.kind == INTER_POST_SEND;

    piece->due_ns = now + chaos_below(ct, ct->max_delay_ns + 1);
    if (ordered) { /* never before the send or inject posted ahead of it */
        if (piece->due_ns < ct->last_ordered_due) {
            piece->due_ns = ct->last_ordered_due;
        }
        ct->last_ordered_due = piece->due_ns;
    }
    piece->seq        = ct->next_seq++;
    piece->next       = NULL;
    *ct->waiting_tail = piece;
    ct->waiting_tail  = &piece->next;
    ct->num_waiting++;
}

static strata_status_t chaos_cqes_add(chaos_cqes_t *list, const inter_cqe_t *cqe)
{
    if (list->count == list->cap) {
        int cap = list->cap ? 2 * list->cap : 64;
        inter_cqe_t *grown = realloc(list->cqes, (size_t)cap * sizeof(*grown));

        if (grown == NULL) {
            return STRATA_ERR_NO_MEMORY;
        }
        list->cqes = grown;
        list->cap  = cap;
    }
    list->cqes[list->count++] = *cqe;
    return STRATA_OK;
}

/* Hold a completion back: a message behind the messages before it, the rest anywhere. */
static strata_status_t chaos_add_done(chaos_transport_t *ct, const inter_cqe_t *cqe)
{
    return chaos_cqes_add(cqe->kind == INTER_CQE_RECV ? &ct->msgs : &ct->done, cqe);
}

static void chaos_unlink(chaos_transport_t *ct, chaos_op_t *op)
{
    if (op->prev != NULL) {
        op->prev->next = op->next;
    } else {
        ct->live = op->next;
    }
    if (op->next != NULL) {
        op->next->prev = op->prev;
    }
}

/* One piece of op is over (status): the held immediate may go, or the operation completes. */
static strata_status_t chaos_piece_done(chaos_transport_t *ct, chaos_op_t *op,
                                        strata_status_t status, uint64_t now)
{
    inter_cqe_t cqe;

    if (status != STRATA_OK && op->status == STRATA_OK) {
        op->status = status;
    }
    if (--op->pieces_left == 1 && op->imm_held) {
        op->imm_held = false;
        if (op->status == STRATA_OK) {
            chaos_wait_piece(ct, &op->pieces[op->num_pieces - 1], now);
            return STRATA_OK;
        }
        --op->pieces_left; /* the data failed: the immediate is never sent */
    }
    if (op->pieces_left > 0) {
        return STRATA_OK;
    }
    chaos_unlink(ct, op);
    cqe = (inter_cqe_t){.kind = INTER_CQE_LOCAL, .status = op->status, .context = op->context,
                        .length = op->len};
    status = op->inject ? STRATA_OK : chaos_add_done(ct, &cqe);
    free(op);
    return status;
}

/* --- Posting ------------------------------------------------------------------------------- */

static chaos_op_t *chaos_new_op(chaos_transport_t *ct, size_t data_len)
{
    chaos_op_t *op = calloc(1, sizeof(*op) + data_len);

    if (op != NULL) {
        op->next = ct->live;
        if (ct->live != NULL) {
            ct->live->prev = op;
        }
        ct->live = op;
    }
    return op;
}

/* Where post is cut: up to CHAOS_MAX_PIECES pieces at random points; the count. */
static int chaos_cut(chaos_transport_t *ct, const inter_post_t *post, size_t *ends)
{
    int pieces = 1;

    if (post->kind != INTER_POST_SEND && post->len >= CHAOS_SPLIT_MIN) {
        pieces = 1 + (int)chaos_below(ct, CHAOS_MAX_PIECES);
    }
    for (int i = 0; i < pieces - 1; ++i) { /* increasing, each piece at least one byte */
        size_t from = i == 0 ? 0 : ends[i - 1];
        size_t room = post->len - from - (size_t)(pieces - 1 - i);

        ends[i] = from + 1 + (size_t)chaos_below(ct, room / 2 + 1);
    }
    ends[pieces - 1] = post->len;
    return pieces;
}

static strata_status_t chaos_add_post(chaos_transport_t *ct, const inter_post_t *post,
                                      uint64_t now)
{
    size_t ends[CHAOS_MAX_PIECES];
    chaos_op_t *op = chaos_new_op(ct, 0);
    int pieces;

    if (op == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    ct->num_ops++;
    pieces          = chaos_cut(ct, post, ends);
    op->context     = post->context;
    op->len         = post->len;
    op->num_pieces  = op->pieces_left = pieces;
    op->imm_held    = post->kind == INTER_POST_WRITE && post->with_imm && pieces > 1;
    for (int i = 0; i < pieces; ++i) {
        chaos_piece_t *piece = &op->pieces[i];
        size_t from = i == 0 ? 0 : ends[i - 1];

        piece->op           = op;
        piece->post         = *post;
        piece->post.buf     = (char *)post->buf + from;
        piece->post.len     = ends[i] - from;
        piece->post.raddr   = post->raddr + from;
        piece->post.with_imm = post->with_imm && i == pieces - 1;
        piece->post.context = piece;
        if (!(op->imm_held && i == pieces - 1)) {
            chaos_wait_piece(ct, piece, now);
        }
    }
    return STRATA_OK;
}

static strata_status_t chaos_post(inter_transport_t *tp, const inter_post_t *posts, int count,
                                  int *posted_p)
{
    chaos_transport_t *ct = chaos_of(tp);
    strata_status_t status = STRATA_OK;
    uint64_t now = util_clock_now_ns();
    int i;

    pthread_mutex_lock(&ct->lock);
    for (i = 0; i < count; ++i) {
        /* Busy now and then, and when much is held back: completions will come. */
        if (ct->num_waiting > 0 &&
            (ct->num_waiting >= CHAOS_MAX_WAITING || chaos_below(ct, 16) == 0)) {
            status = STRATA_ERR_BUSY;
            break;
        }
        if ((status = chaos_add_post(ct, &posts[i], now)) != STRATA_OK) {
            break;
        }
    }
    pthread_mutex_unlock(&ct->lock);
    *posted_p = i;
    return status;
}

static strata_status_t chaos_inject(inter_transport_t *tp, uint64_t peer, const void *buf,
                                    size_t len)
{
    chaos_transport_t *ct = chaos_of(tp);
    chaos_op_t *op;

    if (len > tp->inject_size) {
        return STRATA_ERR_INVALID;
    }
    pthread_mutex_lock(&ct->lock);
    if (ct->inject_status != STRATA_OK) { /* an earlier one failed when handed over */
        strata_status_t status = ct->inject_status;

        ct->inject_status = STRATA_OK;
        pthread_mutex_unlock(&ct->lock);
        return status;
    }
    op = chaos_new_op(ct, len);
    if (op == NULL) {
        pthread_mutex_unlock(&ct->lock);
        return STRATA_ERR_NO_MEMORY;
    }
    memcpy(op->data, buf, len);
    ct->num_ops++;
    op->inject     = true;
    op->len        = len;
    op->num_pieces = op->pieces_left = 1;
    op->pieces[0]  = (chaos_piece_t){
        .op = op, .post = {.kind = INTER_POST_SEND, .peer = peer, .buf = op->data, .len = len}};
    chaos_wait_piece(ct, &op->pieces[0], util_clock_now_ns());
    pthread_mutex_unlock(&ct->lock);
    return STRATA_OK;
}

/* --- Handing pieces over, and polling ------------------------------------------------------ */

/* Hand piece to the inner transport: STRATA_ERR_BUSY leaves it waiting. */
static strata_status_t chaos_hand_over(chaos_transport_t *ct, chaos_piece_t *piece, uint64_t now)
{
    strata_status_t status;
    int posted = 0;

    if (piece->seq < ct->highest_seq) {
        ct->num_overtaken++;
    } else {
        ct->highest_seq = piece->seq;
    }
    ct->num_pieces++;
    if (piece->op->inject) {
        status = ct->inner_ops->inject(ct->inner, piece->post.peer, piece->post.buf,
                                       piece->post.len);
    } else {
        status = ct->inner_ops->post(ct->inner, &piece->post, 1, &posted);
    }
    if (status == STRATA_ERR_BUSY) {
        return status;
    }
    if (piece->op->inject && status != STRATA_OK && ct->inject_status == STRATA_OK) {
        ct->inject_status = status; /* the engine learns it from its next inject */
    }
    if (piece->op->inject || status != STRATA_OK) {
        /* An inject is over once handed over; a refused post completes with its error. */
        return chaos_piece_done(ct, piece->op, status, now);
    }
    return STRATA_OK;
}

/*
 * Take the due pieces out of the waiting list: sends and injects in their order (into
 * ordered), writes and reads shuffled (into shuffled); at most CHAOS_RELEASE_MAX in all.
 */
static void chaos_take_due(chaos_transport_t *ct, uint64_t now, chaos_piece_t **ordered,
                           int *num_ordered, chaos_piece_t **shuffled, int *num_shuffled)
{
    chaos_piece_t **link = &ct->waiting;

    *num_ordered = *num_shuffled = 0;
    while (*link != NULL && *num_ordered + *num_shuffled < CHAOS_RELEASE_MAX) {
        chaos_piece_t *piece = *link;
        bool in_order = piece->op->inject || piece->post.kind == INTER_POST_SEND;

        if (piece->due_ns > now) {
            link = &piece->next;
            continue;
        }
        *link = piece->next;
        ct->num_waiting--;
        if (in_order) {
            ordered[(*num_ordered)++] = piece;
        } else {
            int at = (int)chaos_below(ct, (uint64_t)*num_shuffled + 1);

            shuffled[(*num_shuffled)++] = shuffled[at];
            shuffled[at]               = piece;
        }
    }
    ct->waiting_tail = link;
    while (*ct->waiting_tail != NULL) {
        ct->waiting_tail = &(*ct->waiting_tail)->next;
    }
}

/* Put pieces back at the head of the waiting list, in their order, due at once. */
static void chaos_put_back(chaos_transport_t *ct, chaos_piece_t **pieces, int count)
{
    for (int i = count - 1; i >= 0; --i) {
        pieces[i]->next = ct->waiting;
        if (ct->waiting == NULL) {
            ct->waiting_tail = &pieces[i]->next;
        }
        ct->waiting = pieces[i];
        ct->num_waiting++;
    }
}

static strata_status_t chaos_release(chaos_transport_t *ct, uint64_t now)
{
    chaos_piece_t *ordered[CHAOS_RELEASE_MAX], *shuffled[CHAOS_RELEASE_MAX];
    int num_ordered, num_shuffled, i = 0, j = 0;
    strata_status_t status = STRATA_OK;

    chaos_take_due(ct, now, ordered, &num_ordered, shuffled, &num_shuffled);
    for (; i < num_ordered && status == STRATA_OK; ++i) {
        status = chaos_hand_over(ct, ordered[i], now);
    }
    if (status == STRATA_ERR_BUSY) {
        --i; /* that one and the rest wait, in order */
    }
    for (; j < num_shuffled && status == STRATA_OK; ++j) {
        status = chaos_hand_over(ct, shuffled[j], now);
    }
    if (status == STRATA_ERR_BUSY && j > 0) {
        --j;
    }
    chaos_put_back(ct, shuffled + j, num_shuffled - j);
    chaos_put_back(ct, ordered + i, num_ordered - i);
    return status == STRATA_ERR_BUSY ? STRATA_OK : status;
}

/* What the inner transport completed: ours finish pieces, the rest wait to be reported. */
static strata_status_t chaos_collect(chaos_transport_t *ct, uint64_t now)
{
    inter_cqe_t cqes[CHAOS_RELEASE_MAX];
    strata_status_t status;
    int n = 0;

    status = ct->inner_ops->poll(ct->inner, cqes, CHAOS_RELEASE_MAX, &n);
    for (int i = 0; i < n; ++i) { /* every one, even after a failure: each frees its op */
        chaos_piece_t *piece = cqes[i].context;
        chaos_op_t *op = piece != NULL ? piece->op : NULL;
        strata_status_t handled;

        if (op == NULL || op->recv) { /* an immediate, or a receive's: up as it is */
            if (op != NULL) {
                cqes[i].context = op->context;
                chaos_unlink(ct, op);
                free(op);
            }
            handled = chaos_add_done(ct, &cqes[i]);
        } else {
            handled = chaos_piece_done(ct, op, cqes[i].status, now);
        }
        status = status != STRATA_OK ? status : handled;
    }
    return status;
}

/* One completion held back: the first message or any other, at random. */
static inter_cqe_t chaos_take_done(chaos_transport_t *ct)
{
    int total = ct->done.count + ct->msgs.count;
    int at    = (int)chaos_below(ct, (uint64_t)total);
    inter_cqe_t cqe;

    if (at >= ct->done.count) {
        cqe = ct->msgs.cqes[0];
        memmove(ct->msgs.cqes, ct->msgs.cqes + 1, (size_t)--ct->msgs.count * sizeof(cqe));
    } else {
        cqe               = ct->done.cqes[at];
        ct->done.cqes[at] = ct->done.cqes[--ct->done.count];
    }
    return cqe;
}

/* Report some of what is held, in random order: none now and then, else 1..max. */
static int chaos_report(chaos_transport_t *ct, inter_cqe_t *cqes, int max)
{
    int held = ct->done.count + ct->msgs.count;
    int n    = held < max ? held : max;

    if (n == 0 || chaos_below(ct, 4) == 0) {
        ct->num_held_polls += n > 0;
        return 0;
    }
    n = 1 + (int)chaos_below(ct, (uint64_t)n);
    for (int i = 0; i < n; ++i) {
        cqes[i] = chaos_take_done(ct);
    }
    return n;
}

static strata_status_t chaos_poll(inter_transport_t *tp, inter_cqe_t *cqes, int max,
                                  int *count_p)
{
    chaos_transport_t *ct = chaos_of(tp);
    uint64_t now = util_clock_now_ns();
    strata_status_t status;

    pthread_mutex_lock(&ct->lock);
    status = chaos_release(ct, now);
    if (status == STRATA_OK) {
        status = chaos_collect(ct, now);
    }
    *count_p = status == STRATA_OK ? chaos_report(ct, cqes, max) : 0;
    pthread_mutex_unlock(&ct->lock);
    return status;
}

/* --- What passes straight through ---------------------------------------------------------- */

static strata_status_t chaos_address(inter_transport_t *tp, void *addr, size_t *len_p)
{
    return chaos_of(tp)->inner_ops->address(chaos_of(tp)->inner, addr, len_p);
}

static strata_status_t chaos_insert_peer(inter_transport_t *tp, const void *addr, size_t len,
                                         uint64_t *peer_p)
{
    return chaos_of(tp)->inner_ops->insert_peer(chaos_of(tp)->inner, addr, len, peer_p);
}

static strata_status_t chaos_mem_register(inter_transport_t *tp, void *addr, size_t len,
                                          inter_mem_kind_t kind, int device,
                                          uint64_t requested_key, inter_tmr_t *mr)
{
    return chaos_of(tp)->inner_ops->mem_register(chaos_of(tp)->inner, addr, len, kind, device,
                                                 requested_key, mr);
}

static void chaos_mem_deregister(inter_transport_t *tp, inter_tmr_t *mr)
{
    chaos_of(tp)->inner_ops->mem_deregister(chaos_of(tp)->inner, mr);
}

/* Receives go to the inner transport at once, with a context of ours: every context that
 * comes back from it is then one of ours, whatever the kind an error completion reports. */
static strata_status_t chaos_post_recv(inter_transport_t *tp, void *buf, size_t len, void *desc,
                                       void *context)
{
    chaos_transport_t *ct = chaos_of(tp);
    strata_status_t status;
    chaos_op_t *op;

    pthread_mutex_lock(&ct->lock);
    op = chaos_new_op(ct, 0);
    if (op == NULL) {
        pthread_mutex_unlock(&ct->lock);
        return STRATA_ERR_NO_MEMORY;
    }
    op->recv       = true;
    op->context    = context;
    op->num_pieces = op->pieces_left = 1;
    op->pieces[0].op = op;
    status = ct->inner_ops->post_recv(ct->inner, buf, len, desc, &op->pieces[0]);
    if (status != STRATA_OK) {
        chaos_unlink(ct, op);
        free(op);
    }
    pthread_mutex_unlock(&ct->lock);
    return status;
}

/* --- Opening and closing ------------------------------------------------------------------- */

static void chaos_free_held(chaos_transport_t *ct)
{
    while (ct->live != NULL) {
        chaos_op_t *op = ct->live;

        ct->live = op->next;
        free(op);
    }
    ct->waiting      = NULL;
    ct->waiting_tail = &ct->waiting;
    ct->num_waiting  = 0;
    ct->done.count   = 0;
    ct->msgs.count   = 0;
}

static void chaos_shutdown(inter_transport_t *tp)
{
    chaos_transport_t *ct = chaos_of(tp);

    pthread_mutex_lock(&ct->lock);
    ct->inner_ops->shutdown(ct->inner);
    chaos_free_held(ct);
    pthread_mutex_unlock(&ct->lock);
}

static void chaos_close(inter_transport_t *tp)
{
    chaos_transport_t *ct = chaos_of(tp);

    UTIL_LOG_INFO("chaos: %s: %llu operations handed over in %llu pieces, %llu of them after "
                  "a later one; completions held back on %llu polls", ct->inner->name,
                  (unsigned long long)ct->num_ops, (unsigned long long)ct->num_pieces,
                  (unsigned long long)ct->num_overtaken, (unsigned long long)ct->num_held_polls);
    ct->inner_ops->close(ct->inner);
    chaos_free_held(ct);
    free(ct->done.cqes);
    free(ct->msgs.cqes);
    pthread_mutex_destroy(&ct->lock);
    free(ct);
}

static strata_status_t chaos_read_config(chaos_config_t *config)
{
    strata_status_t status = util_config_read(&chaos_config_table, config);

    if (status == STRATA_OK && config->seed == 0) {
        config->seed = (int64_t)(util_clock_now_ns() ^ ((uint64_t)getpid() << 32));
    }
    return status;
}

static strata_status_t chaos_open(const inter_transport_ops_t *inner_ops,
                                  const inter_transport_params_t *params,
                                  inter_transport_t **tp_p)
{
    chaos_config_t config;
    chaos_transport_t *ct;
    strata_status_t status = chaos_read_config(&config);

    if (status != STRATA_OK) {
        return status;
    }
    if ((ct = calloc(1, sizeof(*ct))) == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = inner_ops->open(params, &ct->inner);
    if (status != STRATA_OK) {
        free(ct);
        return status;
    }
    ct->base           = *ct->inner;
    ct->base.ops       = NULL; /* set by the ops table's open */
    ct->inner_ops      = inner_ops;
    ct->max_delay_ns   = config.delay_ns;
    ct->rng            = (uint64_t)config.seed ^ ((uint64_t)params->rank << 20) ^
                         (uint64_t)(params->rail + 1);
    ct->waiting_tail   = &ct->waiting;
    pthread_mutex_init(&ct->lock, NULL);
    snprintf(ct->base.name, sizeof(ct->base.name), "chaos %.80s", ct->inner->name);
    UTIL_LOG_INFO("chaos: rail %d over %s, seed %lld (STRATA_CHAOS_SEED replays it), "
                  "operations held up to %llu us", params->rail, ct->inner->name,
                  (long long)config.seed, (unsigned long long)(config.delay_ns / 1000));
    *tp_p = &ct->base;
    return STRATA_OK;
}

static void chaos_probe(const inter_transport_ops_t *inner_ops,
                        const inter_transport_params_t *params, inter_probe_t *probe)
{
    inner_ops->probe(params, probe);
}

/*
 * One ops table per inner transport: the registry finds "chaos:ofi" as it finds "ofi". The
 * table's own functions know their inner transport; the rest reach it through the object.
 */
#define CHAOS_WRAP(inner)                                                                      \
    extern const inter_transport_ops_t inner##_transport_ops;                                  \
    extern const inter_transport_ops_t chaos_##inner##_transport_ops;                          \
    static void chaos_probe_##inner(const inter_transport_params_t *params,                    \
                                    inter_probe_t *probe)                                      \
    {                                                                                          \
        chaos_probe(&inner##_transport_ops, params, probe);                                    \
    }                                                                                          \
    static strata_status_t chaos_open_##inner(const inter_transport_params_t *params,          \
                                              inter_transport_t **tp_p)                        \
    {                                                                                          \
        strata_status_t status = chaos_open(&inner##_transport_ops, params, tp_p);             \
                                                                                               \
        if (status == STRATA_OK) {                                                             \
            (*tp_p)->ops = &chaos_##inner##_transport_ops;                                     \
        }                                                                                      \
        return status;                                                                         \
    }                                                                                          \
    const inter_transport_ops_t chaos_##inner##_transport_ops = {                              \
        .name           = "chaos:" #inner,                                                     \
        .config         = &chaos_config_table,                                                 \
        .probe          = chaos_probe_##inner,                                                 \
        .open           = chaos_open_##inner,                                                  \
        .shutdown       = chaos_shutdown,                                                      \
        .close          = chaos_close,                                                         \
        .address        = chaos_address,                                                       \
        .insert_peer    = chaos_insert_peer,                                                   \
        .mem_register   = chaos_mem_register,                                                  \
        .mem_deregister = chaos_mem_deregister,                                                \
        .post           = chaos_post,                                                          \
        .inject         = chaos_inject,                                                        \
        .post_recv      = chaos_post_recv,                                                     \
        .poll           = chaos_poll,                                                          \
        .preview        = NULL,                                                                \
    };

CHAOS_WRAP(ofi)
#ifdef STRATA_HAVE_UCX
CHAOS_WRAP(ucx)
#endif
#ifdef STRATA_HAVE_VERBS
CHAOS_WRAP(verbs)
#endif
