/*
 * What the engine knows of failed peers, and who it tells: the proxy marks a peer failed
 * (inter_proxy_fail_peer), and every watched word learns of it at once.
 */
#include "inter_internal.h"

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

static bool inter_engine_any_failed(const inter_engine_t *engine)
{
    for (int p = 0; p < engine->params.world_size; ++p) {
        if (inter_engine_peer_failed(engine, p)) {
            return true;
        }
    }
    return false;
}

strata_status_t inter_engine_watch_failures(inter_engine_t *engine, int32_t *word)
{
    strata_status_t status = STRATA_ERR_BUSY;

    pthread_mutex_lock(&engine->watch_lock);
    for (int w = 0; w < INTER_MAX_FAILURE_WATCHES && status != STRATA_OK; ++w) {
        if (engine->watches[w] == NULL) {
            engine->watches[w] = word;
            status             = STRATA_OK;
        }
    }
    /* A failure the proxy saw before the word was watched is not announced again. */
    if (status == STRATA_OK && inter_engine_any_failed(engine)) {
        atomic_store_explicit((_Atomic int32_t *)word, STRATA_ERR_PEER_FAILED,
                              memory_order_release);
    }
    pthread_mutex_unlock(&engine->watch_lock);
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("engine: %d failure watches already", INTER_MAX_FAILURE_WATCHES);
    }
    return status;
}

void inter_engine_unwatch_failures(inter_engine_t *engine, int32_t *word)
{
    pthread_mutex_lock(&engine->watch_lock);
    for (int w = 0; w < INTER_MAX_FAILURE_WATCHES; ++w) {
        if (engine->watches[w] == word) {
            engine->watches[w] = NULL;
        }
    }
    pthread_mutex_unlock(&engine->watch_lock);
}

void inter_engine_announce_failure(inter_engine_t *engine)
{
    pthread_mutex_lock(&engine->watch_lock);
    for (int w = 0; w < INTER_MAX_FAILURE_WATCHES; ++w) {
        if (engine->watches[w] != NULL) {
            atomic_store_explicit((_Atomic int32_t *)engine->watches[w], STRATA_ERR_PEER_FAILED,
                                  memory_order_release);
        }
    }
    pthread_mutex_unlock(&engine->watch_lock);
}
