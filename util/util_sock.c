/*
 * TCP helpers with deadlines.
 */
#include "util_sock.h"
#include "util_clock.h"
#include "util_log.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define UTIL_SOCK_RETRY_NS (50 * UTIL_NSEC_PER_MSEC)

/* Milliseconds until deadline for poll(), at least 0. */
static int util_sock_remaining_ms(uint64_t deadline_ns)
{
    uint64_t now = util_clock_now_ns();

    if (now >= deadline_ns) {
        return 0;
    }
    return (int)UTIL_MIN((deadline_ns - now + UTIL_NSEC_PER_MSEC - 1) / UTIL_NSEC_PER_MSEC,
                         (uint64_t)INT32_MAX);
}

strata_status_t util_sock_wait(int fd, short events, uint64_t deadline_ns)
{
    struct pollfd pfd = {.fd = fd, .events = events};
    int rc;

    do {
        rc = poll(&pfd, 1, util_sock_remaining_ms(deadline_ns));
    } while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        UTIL_LOG_ERROR("socket: poll failed: %s", strerror(errno));
        return STRATA_ERR_IO;
    }
    return (rc == 0) ? STRATA_ERR_TIMEOUT : STRATA_OK;
}

static strata_status_t util_sock_resolve(const char *addr, uint16_t port, bool passive,
                                         struct addrinfo **res_p)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    char service[8];
    int rc;

    hints.ai_flags = passive ? AI_PASSIVE : 0;
    snprintf(service, sizeof(service), "%u", port);
    rc = getaddrinfo((addr && addr[0]) ? addr : NULL, service, &hints, res_p);
    if (rc != 0) {
        UTIL_LOG_ERROR("socket: cannot resolve '%s': %s", addr ? addr : "", gai_strerror(rc));
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

static void util_sock_tune(int fd)
{
    int one = 1;

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fd, F_SETFD, FD_CLOEXEC);
}

/* Bind and listen on one resolved address; -1 with errno set on failure. */
static int util_sock_listen_one(const struct addrinfo *ai)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0), one = 1, saved;

    if (fd < 0) {
        return -1;
    }
    /* An IPv6 wildcard takes the port of both families (dual stack), so that no other
     * process can take it in the family this one left out. */
    if (ai->ai_family == AF_INET6 &&
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &(int){0}, sizeof(int)) != 0) {
        saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
        saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

strata_status_t util_sock_listen(const char *addr, uint16_t port, int *fd_p, uint16_t *port_p)
{
    struct sockaddr_storage bound;
    socklen_t len = sizeof(bound);
    struct addrinfo *res;
    strata_status_t status;
    int fd = -1;

    status = util_sock_resolve(addr, port, true, &res);
    if (status != STRATA_OK) {
        return status;
    }
    /* Every address: IPv6's wildcard first, which with dual stack covers IPv4 too (a
     * listener on IPv4 alone would leave the port's IPv6 side to anyone); else the first
     * family this host can listen on (a namespace may lack IPv6). */
    for (const struct addrinfo *ai = res; ai != NULL && fd < 0 && (addr == NULL || !addr[0]);
         ai = ai->ai_next) {
        if (ai->ai_family == AF_INET6) {
            fd = util_sock_listen_one(ai);
        }
    }
    for (const struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = util_sock_listen_one(ai);
    }
    freeaddrinfo(res);
    if (fd < 0 || getsockname(fd, (struct sockaddr *)&bound, &len) != 0) {
        UTIL_LOG_ERROR("socket: cannot listen on %s:%u: %s", (addr && addr[0]) ? addr : "*",
                       port, strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return STRATA_ERR_IO;
    }
    *port_p = ntohs((bound.ss_family == AF_INET6) ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                   : ((struct sockaddr_in *)&bound)->sin_port);
    *fd_p = fd;
    return STRATA_OK;
}

/* Whether a failed connect is worth retrying: nobody listens yet, or the path is not up. */
static bool util_sock_retryable(int err)
{
    return err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH ||
           err == EHOSTUNREACH || err == EINTR || err == ECONNRESET;
}

/*
 * One non-blocking connection attempt bounded by deadline. STRATA_ERR_BUSY when it is
 * worth retrying; *err_p gets the system's reason.
 */
static strata_status_t util_sock_try_connect(const struct addrinfo *ai, uint64_t deadline_ns,
                                             int *fd_p, int *err_p)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    socklen_t len = sizeof(*err_p);
    strata_status_t status;

    if (fd < 0) {
        *err_p = errno;
        return STRATA_ERR_IO;
    }
    *err_p = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        *err_p = errno;
        if (*err_p == EINPROGRESS) {
            status = util_sock_wait(fd, POLLOUT, deadline_ns);
            *err_p = ETIMEDOUT;
            if (status == STRATA_OK && getsockopt(fd, SOL_SOCKET, SO_ERROR, err_p, &len) != 0) {
                *err_p = errno;
            }
        }
    }
    if (*err_p == 0) {
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        util_sock_tune(fd);
        *fd_p = fd;
        return STRATA_OK;
    }
    close(fd);
    return util_sock_retryable(*err_p) ? STRATA_ERR_BUSY : STRATA_ERR_IO;
}

strata_status_t util_sock_connect(const char *addr, uint16_t port, uint64_t deadline_ns,
                                  int *fd_p)
{
    strata_status_t status = STRATA_ERR_BUSY;
    struct addrinfo *res;
    int last_errno = 0;

    status = util_sock_resolve(addr, port, false, &res);
    if (status != STRATA_OK) {
        return status;
    }
    for (;;) {
        /* Each address the name resolves to, until one answers. */
        for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
            status = util_sock_try_connect(ai, deadline_ns, fd_p, &last_errno);
            if (status != STRATA_ERR_BUSY) {
                break;
            }
        }
        if (status != STRATA_ERR_BUSY || util_clock_now_ns() >= deadline_ns) {
            break;
        }
        usleep(UTIL_SOCK_RETRY_NS / UTIL_NSEC_PER_USEC);
    }
    freeaddrinfo(res);
    if (status == STRATA_ERR_BUSY) {
        UTIL_LOG_ERROR("socket: nobody answered at %s:%u before the timeout (%s)", addr, port,
                       strerror(last_errno));
        return STRATA_ERR_TIMEOUT;
    }
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("socket: cannot connect to %s:%u: %s", addr, port, strerror(last_errno));
    }
    return status;
}

strata_status_t util_sock_accept(int listen_fd, uint64_t deadline_ns, int *fd_p)
{
    strata_status_t status;
    int fd;

    for (;;) {
        status = util_sock_wait(listen_fd, POLLIN, deadline_ns);
        if (status != STRATA_OK) {
            return status;
        }
        fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            util_sock_tune(fd);
            *fd_p = fd;
            return STRATA_OK;
        }
        if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN) {
            UTIL_LOG_ERROR("socket: accept failed: %s", strerror(errno));
            return STRATA_ERR_IO;
        }
    }
}

/*
 * Wait for events until deadline, in slices of UTIL_SOCK_CHECK_NS when there is a check to
 * ask between them: its verdict when it gives one, else util_sock_wait's.
 */
static strata_status_t util_sock_wait_checked(int fd, short events, uint64_t deadline_ns,
                                              util_sock_check_fn_t check, void *arg)
{
    strata_status_t status;
    uint64_t slice;

    if (check == NULL) {
        return util_sock_wait(fd, events, deadline_ns);
    }
    for (;;) {
        slice  = UTIL_MIN(deadline_ns, util_clock_now_ns() + UTIL_SOCK_CHECK_NS);
        status = util_sock_wait(fd, events, slice);
        if (status != STRATA_ERR_TIMEOUT) {
            return status;
        }
        status = check(arg);
        if (status != STRATA_OK) {
            return status;
        }
        if (slice >= deadline_ns) {
            return STRATA_ERR_TIMEOUT;
        }
    }
}

strata_status_t util_sock_send_all_checked(int fd, const void *buf, size_t len,
                                           uint64_t deadline_ns, util_sock_check_fn_t check,
                                           void *arg)
{
    const char *p = buf;
    strata_status_t status;
    ssize_t sent;

    while (len > 0) {
        status = util_sock_wait_checked(fd, POLLOUT, deadline_ns, check, arg);
        if (status != STRATA_OK) {
            return status;
        }
        sent = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (sent <= 0) {
            return STRATA_ERR_IO; /* the peer closed: the caller knows who it was */
        }
        p += sent;
        len -= (size_t)sent;
    }
    return STRATA_OK;
}

strata_status_t util_sock_recv_all_checked(int fd, void *buf, size_t len, uint64_t deadline_ns,
                                           util_sock_check_fn_t check, void *arg)
{
    char *p = buf;
    strata_status_t status;
    ssize_t got;

    while (len > 0) {
        status = util_sock_wait_checked(fd, POLLIN, deadline_ns, check, arg);
        if (status != STRATA_OK) {
            return status;
        }
        got = recv(fd, p, len, MSG_DONTWAIT);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (got <= 0) {
            return STRATA_ERR_IO;
        }
        p += got;
        len -= (size_t)got;
    }
    return STRATA_OK;
}

strata_status_t util_sock_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns)
{
    return util_sock_send_all_checked(fd, buf, len, deadline_ns, NULL, NULL);
}

strata_status_t util_sock_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
    return util_sock_recv_all_checked(fd, buf, len, deadline_ns, NULL, NULL);
}

void util_sock_close(int fd)
{
    if (fd >= 0) {
        close(fd);
    }
}
