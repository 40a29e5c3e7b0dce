/* Durable, atomic file writes and the cleanup of temporaries that killed writers left behind
 * (file_atomic.h): shared by checkpoints, weights files and Autoflex trace files, so they live
 * with the tensor library rather than with the trainer. */
#define _POSIX_C_SOURCE 200809L
#include "file_atomic.h"
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* read() until n bytes, EOF or an error: the count read, or -1 with errno. */
ssize_t fx_io_read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, (uint8_t *)buf + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

int fx_io_write_full(int fd, const void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = write(fd, (const uint8_t *)buf + done, n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        done += (size_t)k;
    }
    return 0;
}

/* The pid in `name` when it is `base`.tmp.PID (PID decimal without leading zeros, at most
 * INT_MAX), the name the library's writers give the temporary of the target `base`; else -1.
 * Only a temporary of the very target being written qualifies, never one of another file
 * that happens to end in .tmp.PID. */
static long fx_tmp_name_pid(const char *name, const char *base)
{
    size_t blen = strlen(base);
    if (strncmp(name, base, blen) != 0 || strncmp(name + blen, ".tmp.", 5) != 0) return -1;
    const char *digits = name + blen + 5;
    size_t n = strlen(digits);
    if (n == 0 || n > 10 || digits[0] == '0') return -1;
    for (size_t i = 0; i < n; i++)
        if (digits[i] < '0' || digits[i] > '9') return -1;
    long pid = strtol(digits, NULL, 10);
    return pid > 0 && pid <= INT_MAX ? pid : -1;
}

/* A regular file (not followed through a link) that starts as the file being written does:
 * with head[0..head_len), or a prefix of it (a writer killed before its first write leaves an
 * empty file, one killed mid-write a partial one). */
static int fx_is_own_temp(int dfd, const char *name, const void *head, size_t head_len)
{
    int fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat st;
    int ours = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        char got_head[64];
        size_t want = head_len < sizeof got_head ? head_len : sizeof got_head;
        if ((uint64_t)st.st_size < want) want = (size_t)st.st_size;
        ssize_t got = fx_io_read_full(fd, got_head, want);
        ours = got == (ssize_t)want && memcmp(got_head, head, want) == 0;
    }
    close(fd);
    return ours;
}

void fx_remove_stale_temps(const char *path, const void *head, size_t head_len)
{
    if (!path || !head) return;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!base[0]) return;
    char dir[4096];
    size_t dlen = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
    if (dlen >= sizeof dir) return;
    if (slash) {
        memcpy(dir, path, dlen);
        dir[dlen] = '\0';
    } else {
        snprintf(dir, sizeof dir, ".");
    }
    DIR *d = opendir(dir);
    if (!d) return;
    int dfd = dirfd(d);
    long self = (long)getpid();
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid = fx_tmp_name_pid(e->d_name, base);
        if (pid < 0 || pid == self) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        if (fx_is_own_temp(dfd, e->d_name, head, head_len)) unlinkat(dfd, e->d_name, 0);
    }
    closedir(d);
}

/* Make a rename in `dir` durable. Folders that cannot be opened for reading or synced
 * (EACCES, EINVAL: some file systems) are passed over: the rename itself has happened. */
static int fx_sync_dir(const char *dir, const char *path, const char *func)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return FX_OK;
    int rc = FX_OK;
    if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP && errno != EROFS)
        rc = fx_error(FX_EIO, func, "%s: written, but syncing its folder %s failed: %s", path, dir,
                       strerror(errno));
    close(fd);
    return rc;
}

int fx_write_file_atomic(const char *path, const uint8_t *data, size_t len, const char *func)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!base[0]) return fx_error(FX_EINVAL, func, "%s: the path names a folder, not a file", path);
    char dir[4096], tmp[4096];
    size_t dlen = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
    if (dlen >= sizeof dir ||
        (size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp)
        return fx_error(FX_EINVAL, func, "%s: path is too long", path);
    if (slash) {
        memcpy(dir, path, dlen);
        dir[dlen] = '\0';
    } else {
        snprintf(dir, sizeof dir, ".");
    }
    /* a temporary of this target starts with the same magic as the file being written */
    fx_remove_stale_temps(path, data, len < 8 ? len : 8);

    /* O_EXCL | O_NOFOLLOW: never write through a link or into a FIFO planted under the name */
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int fd = open(tmp, flags, 0666);
    if (fd < 0 && errno == EEXIST) {
        /* the name carries this process's pid: a leftover of an earlier process that had it */
        struct stat st;
        if (lstat(tmp, &st) == 0 && S_ISREG(st.st_mode) && unlink(tmp) == 0)
            fd = open(tmp, flags, 0666);
        else
            errno = EEXIST;
    }
    if (fd < 0) return fx_error(FX_EIO, func, "%s: cannot create: %s", tmp, strerror(errno));
    int rc = FX_OK;
    if (fx_io_write_full(fd, data, len) != 0)
        rc = fx_error(FX_EIO, func, "%s: write failed: %s", tmp, strerror(errno));
    else if (fsync(fd) != 0)
        rc = fx_error(FX_EIO, func, "%s: sync failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !rc)
        rc = fx_error(FX_EIO, func, "%s: close failed: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0)
        rc = fx_error(FX_EIO, func, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    if (rc) {
        unlink(tmp);
        return rc;
    }
    return fx_sync_dir(dir, path, func);
}

