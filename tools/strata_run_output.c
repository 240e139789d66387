/*
 * strata-run: the ranks' output on ours, each line after its rank's prefix ("[r3] "), and
 * the terminal rank 0 may be given so that a line it redraws in place (a progress line)
 * shows through.
 */
#include "strata_run.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

/* Characters of the line that rank 0, on a terminal, redraws in place (its progress) and
 * that is shown on ours after its prefix until a whole line replaces it; 0: none shown.
 * Only one rank is given a terminal, so there is one such line. */
static int run_redrawn_width;

/*
 * A pseudo-terminal for rank 0's stderr when ours is a terminal, so that a tool in it that
 * draws a progress line on a terminal (tools/tool_cli.c) still does: fds[0] the side we
 * read, fds[1] the rank's. Without output processing, so "\n" stays "\n". false (and no
 * descriptor left open) where one cannot be had: the rank then gets a pipe.
 */
bool run_open_tty(int fds[2])
{
    struct termios mode;
    const char *name;

    fds[0] = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fds[0] < 0) {
        return false;
    }
    name   = (grantpt(fds[0]) == 0 && unlockpt(fds[0]) == 0) ? ptsname(fds[0]) : NULL;
    fds[1] = name != NULL ? open(name, O_RDWR | O_NOCTTY | O_CLOEXEC) : -1;
    if (fds[1] >= 0 && tcgetattr(fds[1], &mode) == 0) {
        mode.c_oflag &= ~(tcflag_t)OPOST;
        if (tcsetattr(fds[1], TCSANOW, &mode) == 0) {
            return true;
        }
    }
    if (fds[1] >= 0) {
        close(fds[1]);
    }
    close(fds[0]);
    return false;
}

void run_clear_redrawn(void)
{
    if (run_redrawn_width > 0) {
        fprintf(stderr, "\r%*s\r", run_redrawn_width, "");
        run_redrawn_width = 0;
    }
}

static void run_emit(int rank, run_stream_t *s)
{
    run_clear_redrawn(); /* a whole line takes the place of a redrawn one */
    fprintf(s->out, "[r%d] %.*s\n", rank, (int)s->len, s->line);
    s->len     = 0;
    s->redrawn = false;
}

/* Show the line a rank on a terminal is redrawing, in place of the one shown before, or
 * clear it when the rank blanked it. */
static void run_show_redrawn(int rank, const run_stream_t *s)
{
    size_t blank = 0;
    int width;

    while (blank < s->len && s->line[blank] == ' ') {
        ++blank;
    }
    if (s->len == 0) {
        return;
    }
    if (blank == s->len) {
        run_clear_redrawn();
    } else {
        width = snprintf(NULL, 0, "[r%d] ", rank) + (int)s->len;
        fprintf(stderr, "\r[r%d] %.*s%*s", rank, (int)s->len, s->line,
                run_redrawn_width > width ? run_redrawn_width - width : 0, "");
        run_redrawn_width = width;
    }
    fflush(stderr);
}

void run_stream_drain(int rank, run_stream_t *s)
{
    char buf[RUN_LINE_MAX];
    ssize_t got = read(s->fd, buf, sizeof(buf));

    if (got <= 0) {
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
            return;
        }
        if (s->len > 0) {
            run_emit(rank, s);
        }
        close(s->fd);
        s->fd = -1;
        return;
    }
    for (ssize_t i = 0; i < got; ++i) {
        if (buf[i] == '\r' && s->tty) {
            run_show_redrawn(rank, s);
            s->len     = 0;
            s->redrawn = true;
            continue;
        }
        if (buf[i] == '\n' && s->len == 0 && s->redrawn && run_redrawn_width > 0) {
            /* "\r\n": the line the carriage return showed ends there, as on a terminal */
            fputc('\n', stderr);
            run_redrawn_width = 0;
            s->redrawn        = false;
            continue;
        }
        if (buf[i] == '\n' || s->len == sizeof(s->line)) {
            run_emit(rank, s);
            if (buf[i] == '\n') {
                continue;
            }
        }
        s->line[s->len++] = buf[i];
    }
    if (s->redrawn) {
        run_show_redrawn(rank, s);
    }
    fflush(s->out);
}
