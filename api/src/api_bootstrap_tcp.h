/*
 * api: the built-in TCP bootstrap's object and wire format, shared by its rendezvous
 * (api_bootstrap_handshake.c) and its collectives (api_bootstrap.c).
 */
#ifndef STRATA_API_SRC_API_BOOTSTRAP_TCP_H
#define STRATA_API_SRC_API_BOOTSTRAP_TCP_H

#include "api/api.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define API_BOOTSTRAP_MAGIC   0x53545241u /* "STRA" */
#define API_BOOTSTRAP_VERSION 3u          /* 3: the rank proves first, bound to its connection */
#define API_HELLO_NS          (2 * UTIL_NSEC_PER_SEC)
#define API_NONCE_LEN         32
#define API_SECRET_MAX        4096

/* Rank 0's answers to a hello. */
#define API_ANSWER_REFUSED   0
#define API_ANSWER_ACCEPTED  1 /* with a secret: followed by rank 0's MAC */
#define API_ANSWER_CHALLENGE 2 /* followed by rank 0's nonce; the rank proves first */

typedef struct api_bootstrap_hello {
    uint32_t      magic;
    uint32_t      version;
    int32_t       rank;
    int32_t       world_size;
    uint32_t      secret;   /* 1: this rank has a secret and wants rank 0's proof of it */
    uint32_t      reserved;
    unsigned char nonce[API_NONCE_LEN];
} api_bootstrap_hello_t;

/*
 * With a secret, after the hello and rank 0's nonce, each side proves it with
 *   HMAC(secret, label | its nonce | the other's | hello | the rank's end of the connection)
 * the rank first ("strata-bootstrap-rank"), then rank 0 ("strata-bootstrap-root") with its
 * acceptance. The rank's end (address and port, as it sees its socket and as rank 0 sees
 * the peer) binds the proofs to the one connection: a process that relays a rank to rank 0
 * holds two connections, and the rank's proof does not match the second.
 */
typedef struct api_bootstrap_endpoint {
    uint8_t  family; /* 4 or 6; an IPv4-mapped IPv6 address counts as 4 */
    uint8_t  pad;
    uint16_t port;   /* network order */
    uint8_t  addr[16];
} api_bootstrap_endpoint_t;

/* Precedes every block a rank sends for a collective. */
typedef struct api_bootstrap_header {
    uint32_t magic;
    uint32_t seq;
    uint64_t size;
} api_bootstrap_header_t;

typedef struct api_tcp_bootstrap {
    strata_bootstrap_t base;
    uint64_t           timeout_ns;
    uint32_t           seq;       /* collectives done so far; every rank counts alike */
    int                root_fd;   /* non-root: the connection to rank 0 */
    int               *peer_fds;  /* root: connection of each rank (index 0 unused) */
    unsigned char     *secret;    /* during the rendezvous only; NULL without one */
    size_t             secret_len;
    api_bootstrap_check_fn_t check; /* asked while a collective waits (a communicator's) */
    void                    *check_arg;
} api_tcp_bootstrap_t;

static inline uint64_t api_bootstrap_deadline(const api_tcp_bootstrap_t *bs)
{
    return util_clock_now_ns() + bs->timeout_ns;
}

/* --- What arrives, checked before use (api_bootstrap_wire.c; pure) --------------------- */

/** Rank 0: NULL where a hello may go on to be admitted (to the proofs, with a secret), else
 *  why not. */
const char *api_bootstrap_hello_refusal(const api_bootstrap_hello_t *hello, int world_size,
                                        bool have_secret);
/** A joining rank: NULL where rank 0's answer lets it go on, with *prove_p true when the
 *  proofs follow (a challenge to a rank with a secret); else why it cannot join. */
const char *api_bootstrap_answer_refusal(uint8_t answer, bool have_secret, bool *prove_p);
/** Rank 0: whether a rank's block header is that of the collective in progress. */
bool api_bootstrap_header_ok(const api_bootstrap_header_t *header, uint32_t seq, size_t size);

/** Rank 0: listen on every address, admit every other rank once (with a secret, only after
 *  both sides proved it); bs->peer_fds holds their connections. */
strata_status_t api_bootstrap_root_start(api_tcp_bootstrap_t *bs, const char *addr, uint16_t port);
/** Another rank: reach rank 0 at addr:port and be admitted; bs->root_fd holds the connection. */
strata_status_t api_bootstrap_join(api_tcp_bootstrap_t *bs, const char *addr, uint16_t port);

#endif
