/* The public side of the per-write trace of shared-exponent tensors (tensor_trace_*): reading
 * a storage's trace buffer (src/autoflex/trace.c) and writing it as CSV for plotting the
 * exponent and the maxima over training (docs/autoflex.md, "What to expose"). It lives in the
 * core because it settles pending writes and writes files; the buffer itself is autoflex's. */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* getpid */
#endif

#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#include <io.h>
#include <process.h>
#define fx_getpid() ((long)_getpid())
#define fx_fsync_file(f) _commit(_fileno(f))
#else
#include "file_atomic.h" /* fx_remove_stale_temps */

#include <fcntl.h>
#include <unistd.h>
#define fx_getpid() ((long)getpid())
#define fx_fsync_file(f) fsync(fileno(f))
#endif

/* The trace lives in the storage, shared by all views of it. */
static int check_shared(const tensor_t *t, const char *func)
{
    if (!t) return fx_error(FX_EINVAL, func, "tensor is NULL");
    if (t->st->fmt != FMT_FLEX16_5 && t->st->fmt != FMT_DFP16) {
        const char *name = fmt_name(t->st->fmt);
        return fx_error(FX_EFORMAT, func,
                        "write traces exist for shared-exponent formats only, got %s",
                        name ? name : "an unknown format");
    }
    /* every caller reads or resets the trace, which a pending write still has to extend */
    return fx_storage_settle(t->st, func);
}

int tensor_trace_enable(tensor_t *t, int on)
{
    int rc = check_shared(t, __func__);
    if (rc != FX_OK) return rc;
    fx_trace *tr = &t->st->trace;
    if (on) tr->len = 0; /* starting clears; the allocation is reused */
    tr->enabled = on != 0;
    return FX_OK;
}

int64_t tensor_trace_len(const tensor_t *t)
{
    int rc = check_shared(t, __func__);
    if (rc != FX_OK) return rc;
    return t->st->trace.len;
}

int tensor_trace_get(const tensor_t *t, int64_t i, fx_trace_record *rec)
{
    int rc = check_shared(t, __func__);
    if (rc != FX_OK) return rc;
    if (!rec) return FX_FAIL(FX_EINVAL, "rec is NULL");
    const fx_trace *tr = &t->st->trace;
    if (i < 0 || i >= tr->len)
        return FX_FAIL(FX_ERANGE, "record %" PRId64 " is outside [0, %" PRId64 ")", i, tr->len);
    *rec = tr->rec[i];
    return FX_OK;
}

/* The first line of every trace file; also how a stale temporary of one is recognised. */
static const char trace_header[] = "write,exp,clamped,overflow,recomputed,saturated,nonfinite,"
                                   "underflow,true_max,stored_max\n";

static int write_rows(FILE *f, const fx_trace *tr)
{
    if (fputs(trace_header, f) == EOF) return -1;
    for (int64_t i = 0; i < tr->len; i++) {
        const fx_trace_record *r = &tr->rec[i];
        if (fprintf(f, "%" PRId64 ",%d,%d,%d,%d,%" PRId64 ",%" PRId64 ",%" PRId64 ",%.17g,%.17g\n",
                    r->write, r->exp, r->clamped, r->overflow, r->recomputed, r->saturated,
                    r->nonfinite, r->underflow, r->true_max, r->stored_max) < 0)
            return -1;
    }
    return 0;
}

/* Make the rename into path's folder durable. A folder that cannot be opened or synced (no
 * read permission; EINVAL on file systems without directory sync) is passed over: the file
 * itself is complete either way. */
static int sync_folder(const char *path)
{
#ifdef _WIN32
    (void)path;
    return FX_OK;
#else
    const char *slash = strrchr(path, '/');
    size_t n = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);
    char *dir = malloc(n + 1);
    if (!dir) return FX_OK;
    if (slash) memcpy(dir, path, n);
    else dir[0] = '.';
    dir[n] = '\0';
    int rc = FX_OK;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP && errno != EROFS)
            rc = FX_FAIL(FX_EIO, "wrote '%s', but syncing its folder failed: %s", path,
                         strerror(errno));
        close(fd);
    }
    free(dir);
    return rc;
#endif
}

int tensor_trace_write_csv(const tensor_t *t, const char *path)
{
    int rc = check_shared(t, __func__);
    if (rc != FX_OK) return rc;
    if (!path || !path[0]) return FX_FAIL(FX_EINVAL, "path is NULL or empty");

    /* Write next to the target and rename, so that a reader never sees a half-written file. */
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp) return FX_FAIL(FX_ENOMEM, "cannot allocate a temporary file name for '%s'", path);
    snprintf(tmp, n, "%s.tmp.%ld", path, fx_getpid());
#ifndef _WIN32
    /* temporaries of this target left by writers that were killed (the checkpoint scheme) */
    fx_remove_stale_temps(path, trace_header, sizeof trace_header - 1);
#endif

    /* "x" (C11): created exclusively, so that a FIFO, link or file planted under the
     * temporary name is refused instead of waited on or written through */
    FILE *f = fopen(tmp, "wx");
    if (!f) {
        int err = errno;
        rc = FX_FAIL(FX_EIO, "cannot create '%s': %s", tmp, strerror(err));
        free(tmp);
        return rc;
    }
    errno = 0;
    /* synced before the rename, so that after a crash the name holds a complete file */
    int bad = write_rows(f, &t->st->trace) != 0 || ferror(f) || fflush(f) != 0 ||
              fx_fsync_file(f) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    if (bad) {
        rc = FX_FAIL(FX_EIO, "cannot write '%s': %s", tmp, err ? strerror(err) : "write error");
        remove(tmp);
        free(tmp);
        return rc;
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        rc = FX_FAIL(FX_EIO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(err));
        remove(tmp);
        free(tmp);
        return rc;
    }
    free(tmp);
    return sync_folder(path);
}
