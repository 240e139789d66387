/*
 * Helpers shared by the libFuzzer targets: the input as a C string, or as a file for the
 * readers that take a path (an anonymous memory file, named through /proc/self/fd), or
 * taken a field at a time.
 */
#ifndef STRATA_TESTS_FUZZ_INPUT_H
#define STRATA_TESTS_FUZZ_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The input with a NUL after it, NULL when it holds a NUL (text readers stop there). */
static inline char *fuzz_input_text(const uint8_t *data, size_t size)
{
    char *text;

    if (memchr(data, '\0', size) != NULL || (text = malloc(size + 1)) == NULL) {
        return NULL;
    }
    memcpy(text, data, size);
    text[size] = '\0';
    return text;
}

/* A file holding the input; path receives its name. Returns the descriptor or -1. */
static inline int fuzz_input_file(const uint8_t *data, size_t size, char *path, size_t len)
{
    int fd = memfd_create("fuzz-input", MFD_CLOEXEC);

    if (fd < 0) {
        return -1;
    }
    if (size > 0 && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return -1;
    }
    snprintf(path, len, "/proc/self/fd/%d", fd);
    return fd;
}

/* The next len bytes of the input from *at on into out, zeros past its end; *at moves on. */
static inline void fuzz_take(const uint8_t *data, size_t size, size_t *at, void *out, size_t len)
{
    size_t have = *at < size ? (size - *at < len ? size - *at : len) : 0;

    memset(out, 0, len);
    if (have > 0) {
        memcpy(out, data + *at, have);
    }
    *at += have;
}

/* Stop the run: a property the code promises did not hold. */
#define FUZZ_CHECK(cond)                                                             \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

#endif
