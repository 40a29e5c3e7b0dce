/* Opening files without blocking, and whole-file reads through zlib, which decompresses gzip
 * and passes plain files through, so the loaders accept both. zlib reports a truncated gzip
 * stream only through gzerror (gzread returns the bytes it got), so the error state is checked
 * after the last read too. */
#define _POSIX_C_SOURCE 200809L

#include "data_internal.h"
#include "../core/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

enum { READ_CHUNK = 1 << 20 };

static int gz_failure(gzFile gz, const char *func, const char *path)
{
    int errnum = Z_OK;
    const char *msg = gzerror(gz, &errnum);
    if (errnum == Z_ERRNO)
        return fx_error(FX_EIO, func, "%s: read error: %s", path, strerror(errno));
    if (!msg || !msg[0]) msg = "unknown";
    /* zlib prefixes the name it was opened with, "<fd:N>" after gzdopen: drop it, the message
     * already names the path. */
    const char *sep = strstr(msg, ": ");
    if (strncmp(msg, "<fd:", 4) == 0 && sep) msg = sep + 2;
    return fx_error(FX_EIO, func, "%s: gzip error: %s", path, msg);
}

static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a plain file";
}

static int open_failure(const char *func, const char *path, int e)
{
    /* strerror's wording varies (and is capitalised); say the one callers test for plainly */
    if (e == ELOOP)
        return fx_error(FX_EIO, func, "%s: cannot open: too many levels of symbolic links", path);
    return fx_error(FX_EIO, func, "%s: cannot open: %s", path, strerror(e));
}

int fx_file_open_regular(const char *path, const char *func, int *fd_out, int64_t *size_out)
{
    if (fd_out) *fd_out = -1;
    if (size_out) *size_out = 0;
    if (!path || !fd_out) return fx_error(FX_EINVAL, func, "NULL path or output");
    /* stat first so that a device is never opened at all (opening one can have effects); the
     * fstat after the open catches a file replaced in between */
    struct stat st;
    if (stat(path, &st) != 0) return open_failure(func, path, errno);
    if (!S_ISREG(st.st_mode))
        return fx_error(FX_EIO, func, "%s: not a regular file (%s)", path, file_kind(st.st_mode));
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return open_failure(func, path, errno);
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return fx_error(FX_EIO, func, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return fx_error(FX_EIO, func, "%s: not a regular file (%s)", path, file_kind(st.st_mode));
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return fx_error(FX_EIO, func, "%s: cannot set blocking reads: %s", path, strerror(e));
    }
    *fd_out = fd;
    if (size_out) *size_out = (int64_t)st.st_size;
    return FX_OK;
}

int fx_data_read_file(const char *path, const char *func, int64_t max_bytes, uint8_t **buf,
                      size_t *len)
{
    if (!path || !buf || !len) return fx_error(FX_EINVAL, func, "NULL path or output");
    *buf = NULL;
    *len = 0;
    if (max_bytes < 0 || (uint64_t)max_bytes >= SIZE_MAX)
        return fx_error(FX_EINVAL, func, "%s: bad size limit %lld", path, (long long)max_bytes);

    int fd = -1;
    int64_t file_size = 0;
    int orc = fx_file_open_regular(path, func, &fd, &file_size);
    if (orc != FX_OK) return orc;
    gzFile gz = gzdopen(fd, "rb"); /* owns fd from here on */
    if (!gz) {
        close(fd);
        return fx_error(FX_ENOMEM, func, "%s: cannot set up the zlib reader", path);
    }
    gzbuffer(gz, 1u << 17);

    /* Start from the on-disk size (exact for plain files) and double as needed. */
    size_t cap = (uint64_t)file_size < READ_CHUNK ? READ_CHUNK : (size_t)file_size;
    if ((uint64_t)cap > (uint64_t)max_bytes) cap = (size_t)max_bytes;
    uint8_t *data = cap ? malloc(cap) : NULL;
    size_t have = 0;
    int rc = FX_OK;
    if (cap && !data) rc = fx_error(FX_ENOMEM, func, "%s: cannot allocate %zu bytes", path, cap);
    while (rc == FX_OK) {
        if (have == cap) {
            /* Full: peek one byte to tell the end of the file from more data. */
            uint8_t probe;
            int got = gzread(gz, &probe, 1);
            if (got < 0) {
                rc = gz_failure(gz, func, path);
                break;
            }
            if (got == 0) break;
            if ((uint64_t)have >= (uint64_t)max_bytes) {
                rc = fx_error(FX_ECORRUPT, func, "%s: more than %lld bytes after decompression",
                              path, (long long)max_bytes);
                break;
            }
            size_t ncap = cap > (size_t)max_bytes / 2 ? (size_t)max_bytes : 2 * cap;
            if (ncap < READ_CHUNK && (uint64_t)max_bytes >= READ_CHUNK) ncap = READ_CHUNK;
            uint8_t *bigger = realloc(data, ncap);
            if (!bigger) {
                rc = fx_error(FX_ENOMEM, func, "%s: cannot allocate %zu bytes", path, ncap);
                break;
            }
            data = bigger;
            cap = ncap;
            data[have++] = probe;
            continue;
        }
        size_t want = cap - have < READ_CHUNK ? cap - have : READ_CHUNK;
        int got = gzread(gz, data + have, (unsigned)want);
        if (got < 0) {
            rc = gz_failure(gz, func, path);
            break;
        }
        if (got == 0) break;
        have += (size_t)got;
    }
    if (rc == FX_OK) {
        int errnum = Z_OK;
        gzerror(gz, &errnum);
        if (errnum != Z_OK) rc = gz_failure(gz, func, path); /* e.g. truncated gzip stream */
    }
    int close_rc = gzclose_r(gz);
    if (rc == FX_OK && close_rc != Z_OK)
        rc = fx_error(FX_EIO, func, "%s: gzip error on close (code %d)", path, close_rc);
    if (rc != FX_OK) {
        free(data);
        return rc;
    }
    if (have == 0) {
        free(data);
        data = NULL;
    }
    *buf = data;
    *len = have;
    return FX_OK;
}
