/*
 * Blocking TCP helpers bounded by deadlines (util_clock_now_ns() values), for the bootstrap
 * rendezvous. Errors are logged once with the address and the system's reason.
 */
#ifndef STRATA_UTIL_SOCK_H
#define STRATA_UTIL_SOCK_H

#include <strata/types.h>

#include "util_clock.h"

#include <stddef.h>
#include <stdint.h>

/** Listen on addr ("" or NULL: every address) and port (0: any); *port_p gets the port. */
strata_status_t util_sock_listen(const char *addr, uint16_t port, int *fd_p, uint16_t *port_p);

/**
 * Connect, retrying while nobody listens yet (the root may start later) until deadline:
 * STRATA_ERR_TIMEOUT then, naming the address.
 */
strata_status_t util_sock_connect(const char *addr, uint16_t port, uint64_t deadline_ns,
                                  int *fd_p);

strata_status_t util_sock_accept(int listen_fd, uint64_t deadline_ns, int *fd_p);

/** Whole buffers or an error: STRATA_ERR_TIMEOUT, or STRATA_ERR_IO when the peer is gone. */
strata_status_t util_sock_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns);
strata_status_t util_sock_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns);

/** Asked while a transfer waits; any status but STRATA_OK ends the wait with that status. */
typedef strata_status_t (*util_sock_check_fn_t)(void *arg);
#define UTIL_SOCK_CHECK_NS (100 * UTIL_NSEC_PER_MSEC) /* how often */

/** util_sock_send_all and util_sock_recv_all that call check(arg) (when not NULL) while waiting. */
strata_status_t util_sock_send_all_checked(int fd, const void *buf, size_t len,
                                           uint64_t deadline_ns, util_sock_check_fn_t check,
                                           void *arg);
strata_status_t util_sock_recv_all_checked(int fd, void *buf, size_t len, uint64_t deadline_ns,
                                           util_sock_check_fn_t check, void *arg);

/** Wait until fd is ready for events (POLLIN, POLLOUT); STRATA_ERR_TIMEOUT at the deadline. */
strata_status_t util_sock_wait(int fd, short events, uint64_t deadline_ns);

/** Tolerates -1. */
void util_sock_close(int fd);

#endif
