/*
 * ucx transport: the owning side of the rkey exchange (docs/transports.md, "ucx"). The active
 * message handlers queue what a peer asked for, and the proxy's poll sends it: rkey replies
 * to the peers that asked, and revokes of deregistered keys to every peer that was given
 * one. The asking side and the registrations are ucx_memory.c (the same poll has it retire
 * the keys peers revoked).
 */
#include "inter/ucx/ucx_internal.h"

#include <stdlib.h>
#include <string.h>

/* Remember who was given the rkey (lock held); false when out of memory. */
static bool ucx_fetcher_add(ucx_mr_t *mr, ucp_ep_h ep, uint64_t cookie)
{
    for (int i = 0; i < mr->num_fetchers; ++i) {
        if (mr->fetchers[i].ep == ep && mr->fetchers[i].cookie == cookie) {
            return true;
        }
    }
    if (mr->num_fetchers == mr->max_fetchers) {
        int max = mr->max_fetchers ? 2 * mr->max_fetchers : 4;
        ucx_fetcher_t *fetchers = realloc(mr->fetchers, (size_t)max * sizeof(*fetchers));

        if (fetchers == NULL) {
            return false;
        }
        mr->fetchers     = fetchers;
        mr->max_fetchers = max;
    }
    mr->fetchers[mr->num_fetchers++] = (ucx_fetcher_t){.ep = ep, .cookie = cookie};
    return true;
}

/* A peer asks for an rkey: the reply is queued here and sent from poll. */
ucs_status_t ucx_rkey_req_handler(void *arg, const void *header, size_t header_length,
                                  void *data, size_t length,
                                  const ucp_am_recv_param_t *param)
{
    ucx_transport_t *ucx = arg;
    ucx_rkey_req_t req;
    ucx_reply_t *reply;
    ucx_mr_t *mr;
    size_t rkey_len;

    if (header_length != sizeof(req) || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
        UTIL_LOG_WARN("ucx: %s: dropped a malformed rkey request", ucx->base.name);
        return UCS_OK;
    }
    memcpy(&req, header, sizeof(req));
    pthread_mutex_lock(&ucx->lock);
    mr       = ucx_map_get(&ucx->mrs, req.key);
    rkey_len = mr ? mr->rkey_len : 0;
    reply    = malloc(sizeof(*reply) + rkey_len);
    if (reply != NULL && mr != NULL && !ucx_fetcher_add(mr, param->reply_ep, req.cookie)) {
        free(reply);
        reply = NULL;
    }
    if (reply != NULL) {
        *reply = (ucx_reply_t){.ep = param->reply_ep, .am_id = UCX_AM_RKEY_REP,
                               .header.rkey = {.key = req.key, .cookie = req.cookie,
                                               .found = mr != NULL},
                               .header_len = sizeof(ucx_rkey_rep_t), .data_len = rkey_len};
        if (mr != NULL) {
            memcpy(reply->data, mr->rkey_buf, rkey_len);
        }
    }
    pthread_mutex_unlock(&ucx->lock);
    if (reply == NULL) {
        /* The asker's operations wait until its peer timeout fails this rank. */
        UTIL_LOG_ERROR("ucx: %s: out of memory answering a request for key %llu",
                       ucx->base.name, (unsigned long long)req.key);
        return UCS_OK;
    }
    *ucx->replies_tail = reply;
    ucx->replies_tail  = &reply->next;
    return UCS_OK;
}

/* The peer dropped the rkey: the deregistration waiting for it may go on. */
ucs_status_t ucx_revoke_ack_handler(void *arg, const void *header, size_t header_length,
                                    void *data, size_t length,
                                    const ucp_am_recv_param_t *param)
{
    ucx_transport_t *ucx = arg;
    ucx_revoke_t **link, *revoke;
    ucx_revoke_msg_t msg;

    if (header_length != sizeof(msg)) {
        return UCS_OK;
    }
    memcpy(&msg, header, sizeof(msg));
    pthread_mutex_lock(&ucx->lock);
    for (link = &ucx->revokes; (revoke = *link) != NULL; link = &revoke->next) {
        if (revoke->msg.id == msg.id) {
            *link = revoke->next;
            if (revoke->wait != NULL) {
                revoke->wait->remaining--;
            }
            free(revoke);
            break;
        }
    }
    /* Proxy publishes the ack (mutex); the deregistering thread consumes it. */
    pthread_cond_broadcast(&ucx->revoked);
    pthread_mutex_unlock(&ucx->lock);
    return UCS_OK;
}

static void ucx_reply_done(void *request, ucs_status_t status, void *user_data)
{
    free(user_data);
    ucp_request_free(request);
}

/* Send one reply; it frees itself once sent. */
static void ucx_reply_send(ucx_transport_t *ucx, ucx_reply_t *reply)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .cb.send      = ucx_reply_done,
        .user_data    = reply,
        .flags        = UCP_AM_SEND_FLAG_EAGER,
    };
    ucs_status_ptr_t request = ucp_am_send_nbx(reply->ep, reply->am_id, &reply->header,
                                               reply->header_len, reply->data, reply->data_len,
                                               &param);

    if (request == NULL || UCS_PTR_IS_ERR(request)) {
        if (UCS_PTR_IS_ERR(request)) {
            UTIL_LOG_DEBUG("ucx: %s: answering a peer: %s", ucx->base.name,
                           ucs_status_string(UCS_PTR_STATUS(request)));
        }
        free(reply);
    }
}

/* The endpoint of a live peer that is ep, or NULL: revokes go only where they can. */
static bool ucx_ep_alive(const ucx_transport_t *ucx, ucp_ep_h ep)
{
    for (size_t i = 0; i < ucx->num_peers; ++i) {
        if (ucx->peers[i]->ep == ep) {
            return ucx->peers[i]->error == UCS_OK;
        }
    }
    return false;
}

/* Revokes queued by deregistrations: sent, or given up where the peer is gone (lock). */
static int ucx_revokes_send(ucx_transport_t *ucx)
{
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags        = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER};
    ucx_revoke_t **link = &ucx->revokes, *revoke;
    ucs_status_ptr_t request;
    int n = 0;

    pthread_mutex_lock(&ucx->lock);
    while ((revoke = *link) != NULL) {
        if (revoke->sent) {
            link = &revoke->next;
            continue;
        }
        atomic_fetch_sub_explicit(&ucx->revokes_unsent, 1, memory_order_relaxed);
        request = ucx_ep_alive(ucx, revoke->ep)
                      ? ucp_am_send_nbx(revoke->ep, UCX_AM_REVOKE, &revoke->msg,
                                        sizeof(revoke->msg), NULL, 0, &param)
                      : UCS_STATUS_PTR(UCS_ERR_UNREACHABLE);
        ++n;
        if (UCS_PTR_IS_ERR(request)) {
            *link = revoke->next; /* the peer is gone: nothing to revoke there */
            if (revoke->wait != NULL) {
                revoke->wait->remaining--;
            }
            free(revoke);
            pthread_cond_broadcast(&ucx->revoked);
            continue;
        }
        if (request != NULL) {
            ucp_request_free(request); /* the header lives in the record until the ack */
        }
        revoke->sent = true;
        link         = &revoke->next;
    }
    pthread_mutex_unlock(&ucx->lock);
    return n;
}

int ucx_memory_progress(ucx_transport_t *ucx)
{
    ucx_reply_t *reply = ucx->replies, *next;
    int n = 0;

    ucx->replies      = NULL;
    ucx->replies_tail = &ucx->replies;
    for (; reply != NULL; reply = next, ++n) {
        next = reply->next;
        ucx_reply_send(ucx, reply);
    }
    /* Deregistration publishes queued revokes (release); the list is read under the lock. */
    if (atomic_load_explicit(&ucx->revokes_unsent, memory_order_acquire) > 0) {
        n += ucx_revokes_send(ucx);
    }
    if (ucx->retire_pending) {
        n += ucx_rkeys_retire(ucx);
    }
    return n;
}

void ucx_revokes_abandon(ucx_transport_t *ucx)
{
    pthread_mutex_lock(&ucx->lock);
    for (ucx_revoke_t *revoke = ucx->revokes; revoke != NULL; revoke = revoke->next) {
        if (revoke->wait != NULL) {
            revoke->wait->remaining--;
            revoke->wait = NULL;
        }
    }
    pthread_cond_broadcast(&ucx->revoked);
    pthread_mutex_unlock(&ucx->lock);
}
