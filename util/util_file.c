/*
 * Whole-file reads with the checks every reader of an input file needs (util_file.h).
 */
#include "util_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *util_file_kind(mode_t mode)
{
    return S_ISFIFO(mode) ? "a FIFO" : S_ISDIR(mode) ? "a directory"
           : S_ISCHR(mode) || S_ISBLK(mode) ? "a device" : S_ISSOCK(mode) ? "a socket"
                                                         : "a special file";
}

strata_status_t util_file_read(const char *path, size_t max_bytes, char **data_p,
                               size_t *size_p, char *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), error;
    strata_status_t status = STRATA_ERR_IO;
    size_t done = 0;
    struct stat st;
    char *data = NULL;

    if (fd < 0) {
        error = errno;
        snprintf(err, UTIL_FILE_ERR_LEN, "%s: %s", path, strerror(error));
        return error == ENOENT ? STRATA_ERR_NOT_FOUND : STRATA_ERR_IO;
    }
    if (fstat(fd, &st) != 0) {
        snprintf(err, UTIL_FILE_ERR_LEN, "%s: %s", path, strerror(errno));
        goto err_close;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, UTIL_FILE_ERR_LEN, "%s: not a regular file but %s", path,
                 util_file_kind(st.st_mode));
        goto err_close;
    }
    if ((unsigned long long)st.st_size > max_bytes) {
        snprintf(err, UTIL_FILE_ERR_LEN, "%s: %lld bytes is larger than the %zu such a file "
                 "may be", path, (long long)st.st_size, max_bytes);
        status = STRATA_ERR_PARSE;
        goto err_close;
    }
    data = malloc((size_t)st.st_size + 1);
    if (data == NULL) {
        snprintf(err, UTIL_FILE_ERR_LEN, "%s: out of memory", path);
        status = STRATA_ERR_NO_MEMORY;
        goto err_close;
    }
    /* Up to the size fstat gave: a file that grows meanwhile is read as it was. */
    while (done < (size_t)st.st_size) {
        ssize_t got = read(fd, data + done, (size_t)st.st_size - done);

        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got <= 0) {
            snprintf(err, UTIL_FILE_ERR_LEN, "%s: read failed: %s", path,
                     got < 0 ? strerror(errno) : "the file shrank");
            goto err_close;
        }
        done += (size_t)got;
    }
    close(fd);
    data[done] = '\0';
    *data_p    = data;
    *size_p    = done;
    return STRATA_OK;

err_close:
    free(data);
    close(fd);
    return status;
}
