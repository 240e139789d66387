/*
 * The chaos transport's held operations (chaos_transport.c says what it does): each post
 * cut into pieces that wait a random time, handed to the inner transport in any order
 * (sends and injects in theirs), and the completions collected from it reported back
 * shuffled, split and batched.
 */
#include "inter/chaos/chaos_internal.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

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

strata_status_t chaos_post(inter_transport_t *tp, const inter_post_t *posts, int count,
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

strata_status_t chaos_inject(inter_transport_t *tp, uint64_t peer, const void *buf, size_t len)
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
    if (*link == NULL) { /* scanned to the end: the last piece may have gone */
        ct->waiting_tail = link;
    } /* else the last piece was not reached, and its link is still the tail */
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

strata_status_t chaos_poll(inter_transport_t *tp, inter_cqe_t *cqes, int max, int *count_p)
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

/* Receives go to the inner transport at once, with a context of ours: every context that
 * comes back from it is then one of ours, whatever the kind an error completion reports. */
strata_status_t chaos_post_recv(inter_transport_t *tp, void *buf, size_t len, void *desc,
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

/* --- Teardown -------------------------------------------------------------------------------- */

void chaos_free_held(chaos_transport_t *ct)
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
