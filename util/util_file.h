/*
 * Reading a whole input file (policy and mode files, ...) safely: only a regular file, opened
 * without blocking, of bounded size.
 */
#ifndef STRATA_UTIL_FILE_H
#define STRATA_UTIL_FILE_H

#include <strata/types.h>

#include <stddef.h>

#define UTIL_FILE_ERR_LEN 256

/**
 * The contents of the regular file at path, NUL-terminated, in *data_p (free it) and its
 * length in *size_p. A FIFO, device or directory is refused at once (STRATA_ERR_IO: opening
 * does not block, and /dev/zero would never end), as is a file above max_bytes
 * (STRATA_ERR_PARSE); a missing file is STRATA_ERR_NOT_FOUND. err (UTIL_FILE_ERR_LEN) says
 * why, naming the file; nothing is logged.
 */
strata_status_t util_file_read(const char *path, size_t max_bytes, char **data_p,
                               size_t *size_p, char *err);

#endif
