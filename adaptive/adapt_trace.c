/*
 * Routing traces: the in-memory form, the text format's reader and writer (docs/adaptive.md
 * "Routing traces"), and the top-k routing a rank's counts stand for.
 */
#include "adaptive/adapt_trace.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bounds that keep every product below in range; far above any real model. */
#define TRACE_MAX_EXPERTS   65536
#define TRACE_MAX_TOKENS    (1 << 20)
#define TRACE_MAX_TOPK      1024
#define TRACE_MAX_ROW_BYTES 1e12
#define TRACE_MAX_CELLS     ((size_t)1 << 28) /* steps * ranks * experts: 1 GiB of counts */
/* Text: a rank's line names at most every expert once (14 bytes each at most), a file at
 * most TRACE_MAX_CELLS such pairs. Past these it is not a trace, and reading on would only
 * grow memory (a line without end) or take forever. */
#define TRACE_MAX_LINE       ((size_t)4 << 20)
#define TRACE_MAX_FILE_BYTES ((uint64_t)4 << 30)

strata_status_t adapt_trace_shape_check(const adapt_trace_shape_t *shape, char *err)
{
    if (shape->experts < 1 || shape->experts > TRACE_MAX_EXPERTS) {
        util_reason(err, "experts %d out of range (1..%d)", shape->experts, TRACE_MAX_EXPERTS);
    } else if (shape->ranks < 1 || shape->experts % shape->ranks != 0) {
        util_reason(err, "ranks %d: need ranks >= 1 dividing experts (%d)", shape->ranks,
                    shape->experts);
    } else if (shape->ranks_per_node < 1 || shape->ranks % shape->ranks_per_node != 0) {
        util_reason(err, "ranks_per_node %d: need ranks_per_node >= 1 dividing ranks (%d)",
                    shape->ranks_per_node, shape->ranks);
    } else if (shape->tokens < 1 || shape->tokens > TRACE_MAX_TOKENS) {
        util_reason(err, "tokens %d out of range (1..%d)", shape->tokens, TRACE_MAX_TOKENS);
    } else if (shape->topk < 1 || shape->topk > shape->experts || shape->topk > TRACE_MAX_TOPK) {
        util_reason(err, "topk %d out of range (1..%d)", shape->topk,
                    shape->experts < TRACE_MAX_TOPK ? shape->experts : TRACE_MAX_TOPK);
    } else if (!(shape->row_bytes > 0.0 && shape->row_bytes <= TRACE_MAX_ROW_BYTES)) {
        util_reason(err, "row_bytes %g out of range (above 0, at most %g)", shape->row_bytes,
                    TRACE_MAX_ROW_BYTES);
    } else {
        return STRATA_OK;
    }
    return STRATA_ERR_INVALID;
}

/* Counts of steps steps, or 0 when too many. */
static size_t trace_cells(const adapt_trace_shape_t *shape, int steps)
{
    size_t per_step = (size_t)shape->ranks * (size_t)shape->experts;

    if (steps < 1 || (size_t)steps > TRACE_MAX_CELLS / per_step) {
        return 0;
    }
    return (size_t)steps * per_step;
}

strata_status_t adapt_trace_create(const adapt_trace_shape_t *shape, int steps,
                                   adapt_trace_t **trace_p, char *err)
{
    strata_status_t status = adapt_trace_shape_check(shape, err);
    adapt_trace_t *trace;
    size_t cells;

    if (status != STRATA_OK) {
        return status;
    }
    cells = trace_cells(shape, steps);
    if (cells == 0) {
        util_reason(err, "steps %d out of range (1.. with steps * ranks * experts <= %zu)", steps,
                    TRACE_MAX_CELLS);
        return STRATA_ERR_INVALID;
    }
    trace = calloc(1, sizeof(*trace));
    if (trace == NULL) {
        goto err_no_memory;
    }
    trace->counts = calloc(cells, sizeof(*trace->counts));
    if (trace->counts == NULL) {
        goto err_free_trace;
    }
    trace->shape = *shape;
    trace->steps = steps;
    *trace_p     = trace;
    return STRATA_OK;

err_free_trace:
    free(trace);
err_no_memory:
    util_reason(err, "out of memory for a trace of %d steps", steps);
    return STRATA_ERR_NO_MEMORY;
}

void adapt_trace_destroy(adapt_trace_t *trace)
{
    if (trace == NULL) {
        return;
    }
    free(trace->counts);
    free(trace);
}

strata_status_t adapt_trace_topk_idx(const adapt_trace_t *trace, int step, int rank,
                                     int64_t *topk_idx)
{
    const adapt_trace_shape_t *shape = &trace->shape;
    const int32_t *counts;
    int64_t total = 0;
    int pos = 0;

    if (step < 0 || step >= trace->steps || rank < 0 || rank >= shape->ranks) {
        return STRATA_ERR_INVALID;
    }
    counts = adapt_trace_counts(trace, step, rank);
    for (int e = 0; e < shape->experts; ++e) {
        if (counts[e] < 0 || counts[e] > shape->tokens) {
            return STRATA_ERR_INVALID;
        }
        total += counts[e];
    }
    if (total > (int64_t)shape->tokens * shape->topk) {
        return STRATA_ERR_INVALID;
    }
    for (int i = 0; i < shape->tokens * shape->topk; ++i) {
        topk_idx[i] = -1;
    }
    for (int e = 0; e < shape->experts; ++e) {
        for (int c = 0; c < counts[e]; ++c, ++pos) {
            topk_idx[(size_t)(pos % shape->tokens) * (size_t)shape->topk +
                     (size_t)(pos / shape->tokens)] = e;
        }
    }
    return STRATA_OK;
}

/* --- Writer ------------------------------------------------------------------------------ */

static void trace_write_step(const adapt_trace_t *trace, int step, FILE *file)
{
    fprintf(file, "step %d\n", step);
    for (int r = 0; r < trace->shape.ranks; ++r) {
        const int32_t *counts = adapt_trace_counts(trace, step, r);

        fprintf(file, "%d", r);
        for (int e = 0; e < trace->shape.experts; ++e) {
            if (counts[e] != 0) {
                fprintf(file, " %d:%d", e, (int)counts[e]);
            }
        }
        fputc('\n', file);
    }
}

strata_status_t adapt_trace_write(const adapt_trace_t *trace, const char *path, char *err)
{
    const adapt_trace_shape_t *shape = &trace->shape;
    FILE *file = fopen(path, "w");
    bool failed;

    if (file == NULL) {
        util_reason(err, "%s: %s", path, strerror(errno));
        return STRATA_ERR_IO;
    }
    fprintf(file, "strata-trace %d\n", ADAPT_TRACE_VERSION);
    fprintf(file, "experts %d ranks %d ranks_per_node %d tokens %d topk %d row_bytes %.17g\n",
            shape->experts, shape->ranks, shape->ranks_per_node, shape->tokens, shape->topk,
            shape->row_bytes);
    for (int t = 0; t < trace->steps; ++t) {
        trace_write_step(trace, t, file);
    }
    failed = ferror(file) != 0;
    if (fclose(file) != 0 || failed) {
        util_reason(err, "%s: write failed: %s", path, strerror(errno));
        return STRATA_ERR_IO;
    }
    return STRATA_OK;
}

/* --- Reader ------------------------------------------------------------------------------ */

typedef struct trace_reader {
    const char     *path;
    FILE           *file;
    char           *line;
    size_t          line_cap;
    uint64_t        bytes;       /* read so far */
    int             line_no;
    char           *err;
    adapt_trace_t *trace;       /* steps counts the steps begun so far */
    int             steps_cap;   /* steps trace->counts has room for */
    int             step_line;   /* line of the current step's 'step' line */
    int             ranks_seen;  /* ranks listed in the current step */
    int            *rank_line;   /* [ranks]: line listing the rank in this step, or 0 */
    int            *expert_line; /* [experts]: line that last named the expert */
} trace_reader_t;

static strata_status_t trace_fail(trace_reader_t *rd, strata_status_t status, const char *fmt,
                                  ...) __attribute__((format(printf, 3, 4)));

/* Set err to "path:line: message" and return status. */
static strata_status_t trace_fail(trace_reader_t *rd, strata_status_t status, const char *fmt,
                                  ...)
{
    int len = snprintf(rd->err, UTIL_REASON_LEN, "%s:%d: ", rd->path, rd->line_no);
    va_list ap;

    if (len >= 0 && len < UTIL_REASON_LEN) {
        va_start(ap, fmt);
        vsnprintf(rd->err + len, UTIL_REASON_LEN - (size_t)len, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* One line into rd->line (without its end), at most TRACE_MAX_LINE bytes and no NUL; *len_p
 * is -1 at the end of the file. */
static strata_status_t trace_read_line(trace_reader_t *rd, ssize_t *len_p)
{
    size_t len = 0;
    int c;

    rd->line_no++;
    while ((c = getc_unlocked(rd->file)) != EOF && c != '\n') {
        if (c == '\0') {
            return trace_fail(rd, STRATA_ERR_PARSE, "a NUL byte (column %zu): binary data, "
                              "not a strata trace", len + 1);
        }
        if (len >= TRACE_MAX_LINE) {
            return trace_fail(rd, STRATA_ERR_PARSE, "line longer than %zu bytes: not a strata "
                              "trace", TRACE_MAX_LINE);
        }
        if (len + 1 >= rd->line_cap) {
            size_t cap = rd->line_cap ? 2 * rd->line_cap : 4096;
            char *grown = realloc(rd->line, cap);

            if (grown == NULL) {
                return trace_fail(rd, STRATA_ERR_NO_MEMORY, "out of memory");
            }
            rd->line     = grown;
            rd->line_cap = cap;
        }
        rd->line[len++] = (char)c;
    }
    if (c == EOF && ferror(rd->file)) {
        return trace_fail(rd, STRATA_ERR_IO, "read failed: %s", strerror(errno));
    }
    rd->bytes += len + (c == '\n');
    if (rd->bytes > TRACE_MAX_FILE_BYTES) {
        return trace_fail(rd, STRATA_ERR_PARSE, "more than %llu bytes: too large for a strata "
                          "trace", (unsigned long long)TRACE_MAX_FILE_BYTES);
    }
    if (len == 0 && c == EOF) {
        rd->line_no--;
        *len_p = -1;
        return STRATA_OK;
    }
    if (rd->line == NULL && (rd->line = malloc(rd->line_cap = 4096)) == NULL) {
        return trace_fail(rd, STRATA_ERR_NO_MEMORY, "out of memory");
    }
    rd->line[len] = '\0';
    *len_p        = (ssize_t)len;
    return STRATA_OK;
}

/* The next line that is not blank or a comment, in *text_p; NULL at the end of the file. */
static strata_status_t trace_next_line(trace_reader_t *rd, char **text_p)
{
    strata_status_t status;
    ssize_t len = -1;

    *text_p = NULL;
    while ((status = trace_read_line(rd, &len)) == STRATA_OK && len >= 0) {
        char *text = rd->line;

        while (len > 0 && text[len - 1] == '\r') {
            text[--len] = '\0';
        }
        text += strspn(text, " \t");
        if (*text != '\0' && *text != '#') {
            *text_p = text;
            return STRATA_OK;
        }
    }
    return status;
}

/* The next word of *cursor (NUL-terminated in place), or NULL at the end of the line. */
static char *trace_word(char **cursor)
{
    char *word = *cursor + strspn(*cursor, " \t");
    char *end;

    if (*word == '\0') {
        *cursor = word;
        return NULL;
    }
    end = word + strcspn(word, " \t");
    if (*end != '\0') {
        *end++ = '\0';
    }
    *cursor = end;
    return word;
}

/* A decimal integer that is all of text. */
static bool trace_parse_long(const char *text, long *value_p)
{
    char *end;
    long value;

    if (!((*text >= '0' && *text <= '9') || *text == '-')) {
        return false;
    }
    errno = 0;
    value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') {
        return false;
    }
    *value_p = value;
    return true;
}

static strata_status_t trace_read_version(trace_reader_t *rd)
{
    strata_status_t status;
    char *text, *word;
    long version;

    if ((status = trace_next_line(rd, &text)) != STRATA_OK) {
        return status;
    }
    if (text == NULL) {
        return trace_fail(rd, STRATA_ERR_PARSE, "empty file: not a strata trace");
    }
    word = trace_word(&text);
    if (strcmp(word, "strata-trace") != 0) {
        return trace_fail(rd, STRATA_ERR_PARSE,
                          "not a strata trace (the first line must be 'strata-trace %d')",
                          ADAPT_TRACE_VERSION);
    }
    word = trace_word(&text);
    if (word == NULL || !trace_parse_long(word, &version) || trace_word(&text) != NULL) {
        return trace_fail(rd, STRATA_ERR_PARSE, "expected 'strata-trace %d'",
                          ADAPT_TRACE_VERSION);
    }
    if (version != ADAPT_TRACE_VERSION) {
        return trace_fail(rd, STRATA_ERR_PARSE, "trace version %ld is not supported (only %d)",
                          version, ADAPT_TRACE_VERSION);
    }
    return STRATA_OK;
}

/* 'experts E ranks R ranks_per_node L tokens T topk K row_bytes B', in this order. */
static strata_status_t trace_read_shape(trace_reader_t *rd, adapt_trace_shape_t *shape)
{
    static const char *const names[] = {"experts", "ranks", "ranks_per_node", "tokens", "topk"};
    int *const fields[] = {&shape->experts, &shape->ranks, &shape->ranks_per_node,
                           &shape->tokens, &shape->topk};
    char *text, *word, *end;
    strata_status_t status;
    long value;

    if ((status = trace_next_line(rd, &text)) != STRATA_OK) {
        return status;
    }
    if (text == NULL) {
        return trace_fail(rd, STRATA_ERR_PARSE, "end of file before the 'experts ...' line");
    }
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
        word = trace_word(&text);
        if (word == NULL || strcmp(word, names[i]) != 0) {
            return trace_fail(rd, STRATA_ERR_PARSE, "expected '%s' in the shape line 'experts "
                              "E ranks R ranks_per_node L tokens T topk K row_bytes B'", names[i]);
        }
        word = trace_word(&text);
        if (word == NULL || !trace_parse_long(word, &value) || value < INT_MIN || value > INT_MAX) {
            return trace_fail(rd, STRATA_ERR_PARSE, "%s: expected an integer, found '%s'",
                              names[i], word ? word : "end of line");
        }
        *fields[i] = (int)value;
    }
    word = trace_word(&text);
    if (word == NULL || strcmp(word, "row_bytes") != 0) {
        return trace_fail(rd, STRATA_ERR_PARSE, "expected 'row_bytes' after topk");
    }
    word = trace_word(&text);
    errno = 0;
    shape->row_bytes = (word != NULL) ? strtod(word, &end) : 0.0;
    if (word == NULL || end == word || *end != '\0' || errno != 0) {
        return trace_fail(rd, STRATA_ERR_PARSE, "row_bytes: expected a number, found '%s'",
                          word ? word : "end of line");
    }
    if ((word = trace_word(&text)) != NULL) {
        return trace_fail(rd, STRATA_ERR_PARSE, "unexpected '%s' after row_bytes", word);
    }
    return STRATA_OK;
}

/* The end of a step (or of the file): every rank must have had its line. */
static strata_status_t trace_end_step(trace_reader_t *rd)
{
    const adapt_trace_t *trace = rd->trace;

    if (trace->steps == 0 || rd->ranks_seen == trace->shape.ranks) {
        return STRATA_OK;
    }
    for (int r = 0; r < trace->shape.ranks; ++r) {
        if (rd->rank_line[r] == 0) {
            return trace_fail(rd, STRATA_ERR_PARSE, "step %d (line %d) has no line for rank %d "
                              "(every step lists every rank, even one without tokens)",
                              trace->steps - 1, rd->step_line, r);
        }
    }
    return STRATA_ERR_INTERNAL;
}

/* Room for one more step, zeroed. */
static strata_status_t trace_grow(trace_reader_t *rd)
{
    adapt_trace_t *trace = rd->trace;
    size_t per_step = (size_t)trace->shape.ranks * (size_t)trace->shape.experts;
    int32_t *counts;
    int cap;

    if (trace_cells(&trace->shape, trace->steps + 1) == 0) {
        return trace_fail(rd, STRATA_ERR_INVALID, "too many steps (steps * ranks * experts "
                          "above %zu)", TRACE_MAX_CELLS);
    }
    if (trace->steps == rd->steps_cap) {
        cap = rd->steps_cap ? rd->steps_cap * 2 : 64;
        while (trace_cells(&trace->shape, cap) == 0) {
            cap = trace->steps + 1 + (cap - trace->steps - 1) / 2;
        }
        counts = realloc(trace->counts, (size_t)cap * per_step * sizeof(*counts));
        if (counts == NULL) {
            return trace_fail(rd, STRATA_ERR_NO_MEMORY, "out of memory at step %d", trace->steps);
        }
        trace->counts = counts;
        rd->steps_cap = cap;
    }
    memset(adapt_trace_counts(trace, trace->steps, 0), 0, per_step * sizeof(int32_t));
    return STRATA_OK;
}

/* 'step t': t must be the next step. */
static strata_status_t trace_read_step_line(trace_reader_t *rd, char *text)
{
    adapt_trace_t *trace = rd->trace;
    strata_status_t status;
    char *word = trace_word(&text);
    long step;

    if (word == NULL || !trace_parse_long(word, &step) || trace_word(&text) != NULL) {
        return trace_fail(rd, STRATA_ERR_PARSE, "expected 'step %d'", trace->steps);
    }
    if (step != trace->steps) {
        return trace_fail(rd, STRATA_ERR_PARSE, "step %ld out of order: expected step %d "
                          "(steps count from 0, one after another)", step, trace->steps);
    }
    if ((status = trace_end_step(rd)) != STRATA_OK || (status = trace_grow(rd)) != STRATA_OK) {
        return status;
    }
    trace->steps++;
    rd->step_line  = rd->line_no;
    rd->ranks_seen = 0;
    memset(rd->rank_line, 0, (size_t)trace->shape.ranks * sizeof(*rd->rank_line));
    return STRATA_OK;
}

/* The rank that begins a rank line, not yet listed in this step. */
static strata_status_t trace_read_rank(trace_reader_t *rd, const char *word, int *rank_p)
{
    const adapt_trace_t *trace = rd->trace;
    long rank;

    if (!trace_parse_long(word, &rank)) {
        return trace_fail(rd, STRATA_ERR_PARSE, "expected 'step N' or a rank number, found '%s'",
                          word);
    }
    if (trace->steps == 0) {
        return trace_fail(rd, STRATA_ERR_PARSE, "rank line before the first 'step 0' line");
    }
    if (rank < 0 || rank >= trace->shape.ranks) {
        return trace_fail(rd, STRATA_ERR_INVALID, "rank %ld out of range (0..%d)", rank,
                          trace->shape.ranks - 1);
    }
    if (rd->rank_line[rank] != 0) {
        return trace_fail(rd, STRATA_ERR_PARSE, "rank %ld listed twice in step %d (first on "
                          "line %d; a missing 'step %d' line?)", rank, trace->steps - 1,
                          rd->rank_line[rank], trace->steps);
    }
    rd->rank_line[rank] = rd->line_no;
    rd->ranks_seen++;
    *rank_p = (int)rank;
    return STRATA_OK;
}

/* One 'expert:tokens' pair of a rank line, added to counts. */
static strata_status_t trace_read_pair(trace_reader_t *rd, char *word, int32_t *counts,
                                       int64_t *total)
{
    const adapt_trace_shape_t *shape = &rd->trace->shape;
    char *colon = strchr(word, ':');
    long expert, count;

    if (colon == NULL) {
        return trace_fail(rd, STRATA_ERR_PARSE, "expected 'expert:tokens', found '%s'", word);
    }
    *colon = '\0';
    if (!trace_parse_long(word, &expert) || !trace_parse_long(colon + 1, &count)) {
        return trace_fail(rd, STRATA_ERR_PARSE, "expected 'expert:tokens' with two integers, "
                          "found '%s:%s'", word, colon + 1);
    }
    if (expert < 0 || expert >= shape->experts) {
        return trace_fail(rd, STRATA_ERR_INVALID, "unknown expert id %ld (experts are 0..%d)",
                          expert, shape->experts - 1);
    }
    if (count < 0 || count > shape->tokens) {
        return trace_fail(rd, STRATA_ERR_INVALID, "expert %ld: %ld tokens out of range "
                          "(0..tokens = %d)", expert, count, shape->tokens);
    }
    if (rd->expert_line[expert] == rd->line_no) {
        return trace_fail(rd, STRATA_ERR_PARSE, "expert %ld listed twice on one line", expert);
    }
    rd->expert_line[expert] = rd->line_no;
    counts[expert] = (int32_t)count;
    *total += count;
    return STRATA_OK;
}

/* '<rank> <expert>:<tokens> ...'. */
static strata_status_t trace_read_rank_line(trace_reader_t *rd, char *text)
{
    const adapt_trace_shape_t *shape = &rd->trace->shape;
    strata_status_t status;
    int64_t total = 0;
    int32_t *counts;
    char *word;
    int rank = -1;

    status = trace_read_rank(rd, trace_word(&text), &rank);
    if (status != STRATA_OK) {
        return status;
    }
    counts = adapt_trace_counts(rd->trace, rd->trace->steps - 1, rank);
    while ((word = trace_word(&text)) != NULL) {
        if ((status = trace_read_pair(rd, word, counts, &total)) != STRATA_OK) {
            return status;
        }
    }
    if (total > (int64_t)shape->tokens * shape->topk) {
        return trace_fail(rd, STRATA_ERR_INVALID, "rank %d routes %lld tokens, more than "
                          "tokens * topk = %lld", rank, (long long)total,
                          (long long)shape->tokens * shape->topk);
    }
    return STRATA_OK;
}

static strata_status_t trace_read_body(trace_reader_t *rd)
{
    strata_status_t status;
    char *text;

    while ((status = trace_next_line(rd, &text)) == STRATA_OK && text != NULL) {
        if (strncmp(text, "step", 4) == 0 && (text[4] == ' ' || text[4] == '\t' ||
                                              text[4] == '\0')) {
            status = trace_read_step_line(rd, text + 4);
        } else {
            status = trace_read_rank_line(rd, text);
        }
        if (status != STRATA_OK) {
            return status;
        }
    }
    if (status != STRATA_OK) {
        return status;
    }
    if (rd->trace->steps == 0) {
        return trace_fail(rd, STRATA_ERR_PARSE, "end of file before 'step 0': a trace has at "
                          "least one step");
    }
    return trace_end_step(rd);
}

/* Header, then the per-reader arrays sized by it, then the steps. */
static strata_status_t trace_read_file(trace_reader_t *rd)
{
    adapt_trace_shape_t shape;
    strata_status_t status;
    char why[UTIL_REASON_LEN];

    if ((status = trace_read_version(rd)) != STRATA_OK ||
        (status = trace_read_shape(rd, &shape)) != STRATA_OK) {
        return status;
    }
    if ((status = adapt_trace_shape_check(&shape, why)) != STRATA_OK) {
        return trace_fail(rd, status, "%s", why);
    }
    rd->trace       = calloc(1, sizeof(*rd->trace));
    rd->rank_line   = calloc((size_t)shape.ranks, sizeof(*rd->rank_line));
    rd->expert_line = calloc((size_t)shape.experts, sizeof(*rd->expert_line));
    if (rd->trace == NULL || rd->rank_line == NULL || rd->expert_line == NULL) {
        return trace_fail(rd, STRATA_ERR_NO_MEMORY, "out of memory");
    }
    rd->trace->shape = shape;
    return trace_read_body(rd);
}

/* A regular file, opened without blocking (a FIFO would wait for a writer forever; a
 * device such as /dev/zero never ends), and not larger than a trace can be. */
static strata_status_t trace_open(const char *path, FILE **file_p, char *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), error;
    struct stat st;

    if (fd < 0) {
        error = errno;
        util_reason(err, "%s: %s", path, strerror(error));
        return (error == ENOENT) ? STRATA_ERR_NOT_FOUND : STRATA_ERR_IO;
    }
    if (fstat(fd, &st) != 0) {
        error = errno;
        util_reason(err, "%s: %s", path, strerror(error));
        close(fd);
        return STRATA_ERR_IO;
    }
    if (!S_ISREG(st.st_mode)) {
        util_reason(err, "%s: not a regular file (a trace is read from a file, not a %s)", path,
                    S_ISFIFO(st.st_mode) ? "FIFO" : S_ISDIR(st.st_mode) ? "directory"
                    : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "device" : "special file");
        close(fd);
        return STRATA_ERR_IO;
    }
    if ((uint64_t)st.st_size > TRACE_MAX_FILE_BYTES) {
        util_reason(err, "%s: %lld bytes is larger than a strata trace can be (%llu)", path,
                    (long long)st.st_size, (unsigned long long)TRACE_MAX_FILE_BYTES);
        close(fd);
        return STRATA_ERR_PARSE;
    }
    *file_p = fdopen(fd, "r");
    if (*file_p == NULL) {
        error = errno;
        util_reason(err, "%s: %s", path, strerror(error));
        close(fd);
        return STRATA_ERR_NO_MEMORY;
    }
    return STRATA_OK;
}

strata_status_t adapt_trace_read(const char *path, adapt_trace_t **trace_p, char *err)
{
    trace_reader_t rd = {.path = path, .err = err};
    strata_status_t status;

    status = trace_open(path, &rd.file, err);
    if (status != STRATA_OK) {
        return status;
    }
    status = trace_read_file(&rd);
    if (status == STRATA_OK) {
        *trace_p = rd.trace;
    } else {
        adapt_trace_destroy(rd.trace);
    }
    free(rd.expert_line);
    free(rd.rank_line);
    free(rd.line);
    fclose(rd.file);
    return status;
}
