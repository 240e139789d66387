/*
 * What the engine knows of failed peers, and who it tells: the proxy marks a peer failed
 * (inter_proxy_fail_peer), and every word watching it learns of it at once.
 */
#include "inter_internal.h"

#include <stdlib.h>
#include <string.h>

uint64_t inter_engine_peer_timeout_ns(const inter_engine_t *engine)
{
    return engine->params.peer_timeout_ns;
}

size_t inter_engine_msg_size(const inter_engine_t *engine)
{
    return engine->params.msg_size;
}

bool inter_engine_peer_failed(const inter_engine_t *engine, int peer)
{
    return peer >= 0 && peer < engine->params.world_size &&
           atomic_load_explicit(&engine->peer_failed[peer], memory_order_acquire);
}

/* Whether the watch is for peer: it watches every rank, or peer among its ranks. */
static bool inter_watch_covers(const inter_watch_t *watch, int peer)
{
    if (watch->ranks == NULL) {
        return true;
    }
    for (int i = 0; i < watch->num_ranks; ++i) {
        if (watch->ranks[i] == peer) {
            return true;
        }
    }
    return false;
}

static bool inter_watch_any_failed(const inter_engine_t *engine, const inter_watch_t *watch)
{
    for (int p = 0; p < engine->params.world_size; ++p) {
        if (inter_engine_peer_failed(engine, p) && inter_watch_covers(watch, p)) {
            return true;
        }
    }
    return false;
}

static void inter_watch_set(const inter_watch_t *watch)
{
    atomic_store_explicit((_Atomic int32_t *)watch->word, STRATA_ERR_PEER_FAILED,
                          memory_order_release);
}

/* A free entry takes word (and ranks, owned from now on); a failure the proxy saw before
 * is not announced again, so the word learns of it here. */
static strata_status_t inter_watch_add(inter_engine_t *engine, int32_t *word, int *ranks, int n)
{
    strata_status_t status = STRATA_ERR_BUSY;

    pthread_mutex_lock(&engine->watch_lock);
    for (int w = 0; w < INTER_MAX_FAILURE_WATCHES && status != STRATA_OK; ++w) {
        inter_watch_t *watch = &engine->watches[w];

        if (watch->word == NULL) {
            *watch = (inter_watch_t){.word = word, .ranks = ranks, .num_ranks = n};
            status = STRATA_OK;
            if (inter_watch_any_failed(engine, watch)) {
                inter_watch_set(watch);
            }
        }
    }
    pthread_mutex_unlock(&engine->watch_lock);
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("engine: %d failure watches already", INTER_MAX_FAILURE_WATCHES);
        free(ranks);
    }
    return status;
}

strata_status_t inter_engine_watch_failures(inter_engine_t *engine, int32_t *word)
{
    return inter_watch_add(engine, word, NULL, 0);
}

strata_status_t inter_engine_watch_failures_of(inter_engine_t *engine, int32_t *word,
                                               const int *ranks, int n)
{
    int *copy;

    for (int i = 0; i < n; ++i) {
        if (ranks == NULL || ranks[i] < 0 || ranks[i] >= engine->params.world_size) {
            UTIL_LOG_ERROR("engine: a failure watch over rank %d, not one of the %d ranks",
                           ranks ? ranks[i] : -1, engine->params.world_size);
            return STRATA_ERR_INVALID;
        }
    }
    copy = malloc(sizeof(int) * (size_t)UTIL_MAX(n, 1));
    if (copy == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    if (n > 0) {
        memcpy(copy, ranks, sizeof(int) * (size_t)n);
    }
    return inter_watch_add(engine, word, copy, n);
}

void inter_engine_unwatch_failures(inter_engine_t *engine, int32_t *word)
{
    pthread_mutex_lock(&engine->watch_lock);
    for (int w = 0; w < INTER_MAX_FAILURE_WATCHES; ++w) {
        inter_watch_t *watch = &engine->watches[w];

        if (watch->word == word) {
            free(watch->ranks);
            *watch = (inter_watch_t){0};
        }
    }
    pthread_mutex_unlock(&engine->watch_lock);
}

void inter_engine_unwatch_all(inter_engine_t *engine)
{
    for (int w = 0; w < INTER_MAX_FAILURE_WATCHES; ++w) {
        free(engine->watches[w].ranks);
        engine->watches[w] = (inter_watch_t){0};
    }
}

void inter_engine_announce_failure(inter_engine_t *engine, int peer)
{
    pthread_mutex_lock(&engine->watch_lock);
    for (int w = 0; w < INTER_MAX_FAILURE_WATCHES; ++w) {
        const inter_watch_t *watch = &engine->watches[w];

        if (watch->word != NULL && inter_watch_covers(watch, peer)) {
            inter_watch_set(watch);
        }
    }
    pthread_mutex_unlock(&engine->watch_lock);
}
