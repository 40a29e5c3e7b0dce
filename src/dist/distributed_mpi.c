/* The communicator over MPI (distributed.h). Each fx_comm holds a duplicate of the program's
 * MPI communicator, so the library's collectives never match a message of the program's, and
 * errors are returned (MPI_ERRORS_RETURN) as FX_EIO with MPI's own text, so that the library
 * never ends the process: ending a job whose rank failed is the program's call
 * (fx_comm_abort). Only the thread that calls the trainer calls MPI (MPI_THREAD_FUNNELED). */
#include "distributed.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fx_comm {
    MPI_Comm comm;
    int rank, size;
    int owns_mpi;    /* fx_comm_init started MPI: fx_comm_free finalises it */
    MPI_Op agree_op; /* FX_DIST_NMAX maxima, then sums (fx_dist_ops.agree) */
    fx_dist_ops ops;
    int64_t bytes[FX_TRAFFIC_KINDS];
};

/* Largest element count handed to one MPI call (its counts are ints). */
#define FX_MPI_CHUNK ((int64_t)1 << 28)

static int fx_mpi_fail(int err, const char *func, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, text, &len) != MPI_SUCCESS)
        len = snprintf(text, sizeof text, "MPI error %d", err);
    return fx_error(FX_EIO, func, "%s failed: %.*s", what, len, text);
}

int fx_comm_available(void) { return 1; }

/* The element-wise combination of fx_dist_ops.agree: a vector of FX_DIST_NSTATS uint64 per
 * element of the MPI count, maxima first (non-negative doubles compare as their bit
 * patterns), then sums. */
static void fx_agree_fn(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const uint64_t *a = in;
    uint64_t *b = inout;
    for (int i = 0; i < *len; i++) {
        const int k = i % FX_DIST_NSTATS;
        if (k < FX_DIST_NMAX) b[i] = a[i] > b[i] ? a[i] : b[i];
        else b[i] += a[i];
    }
}

static int fx_ops_sum_int(void *ctx, int64_t *v, int64_t n, int bytes)
{
    fx_comm *c = ctx;
    if (bytes == 8) {
        for (int64_t lo = 0; lo < n; lo += FX_MPI_CHUNK) {
            const int len = (int)(n - lo < FX_MPI_CHUNK ? n - lo : FX_MPI_CHUNK);
            int err = MPI_Allreduce(MPI_IN_PLACE, v + lo, len, MPI_INT64_T, MPI_SUM, c->comm);
            if (err != MPI_SUCCESS) return fx_mpi_fail(err, "fx_write", "the gradient sum");
        }
        c->bytes[FX_TRAFFIC_GRADIENT] += n * 8;
        return FX_OK;
    }
    /* narrowed: packed, summed in the narrow type (no partial sum overflows it: the caller's
     * bound), widened back */
    void *buf = fx_alloc_array(n < FX_MPI_CHUNK ? n : FX_MPI_CHUNK, (size_t)bytes);
    if (!buf) return fx_error(FX_ENOMEM, "fx_write", "cannot allocate the gradient buffer");
    int rc = FX_OK;
    for (int64_t lo = 0; lo < n && !rc; lo += FX_MPI_CHUNK) {
        const int len = (int)(n - lo < FX_MPI_CHUNK ? n - lo : FX_MPI_CHUNK);
        int16_t *b16 = buf;
        int32_t *b32 = buf;
        for (int i = 0; i < len; i++) {
            if (bytes == 2) b16[i] = (int16_t)v[lo + i];
            else b32[i] = (int32_t)v[lo + i];
        }
        int err = MPI_Allreduce(MPI_IN_PLACE, buf, len, bytes == 2 ? MPI_INT16_T : MPI_INT32_T,
                                MPI_SUM, c->comm);
        if (err != MPI_SUCCESS) {
            rc = fx_mpi_fail(err, "fx_write", "the gradient sum");
            break;
        }
        for (int i = 0; i < len; i++) v[lo + i] = bytes == 2 ? b16[i] : b32[i];
    }
    free(buf);
    if (!rc) c->bytes[FX_TRAFFIC_GRADIENT] += n * bytes;
    return rc;
}

/* An fp32 sum in rank order: every rank gathers every rank's values and adds them from rank
 * 0 up. MPI_Allreduce would be lighter, but MPI does not promise the order in which it adds
 * floats, and the same rank count must give the same bits on every run. */
static int fx_ops_sum_f32(void *ctx, float *v, int64_t n)
{
    fx_comm *c = ctx;
    const int64_t chunk = FX_MPI_CHUNK / c->size;
    float *all = fx_alloc_array((n < chunk ? n : chunk) * c->size, sizeof *all);
    if (!all) return fx_error(FX_ENOMEM, "fx_write", "cannot allocate the gathered gradients");
    int rc = FX_OK;
    for (int64_t lo = 0; lo < n && !rc; lo += chunk) {
        const int len = (int)(n - lo < chunk ? n - lo : chunk);
        int err = MPI_Allgather(v + lo, len, MPI_FLOAT, all, len, MPI_FLOAT, c->comm);
        if (err != MPI_SUCCESS) {
            rc = fx_mpi_fail(err, "fx_write", "the gradient gather");
            break;
        }
        for (int i = 0; i < len; i++) {
            float s = all[i];
            for (int r = 1; r < c->size; r++) s += all[(int64_t)r * len + i];
            v[lo + i] = s;
        }
    }
    free(all);
    if (!rc) c->bytes[FX_TRAFFIC_GRADIENT] += n * (int64_t)sizeof *v;
    return rc;
}

static int fx_ops_agree(void *ctx, uint64_t *v)
{
    fx_comm *c = ctx;
    int err = MPI_Allreduce(MPI_IN_PLACE, v, FX_DIST_NSTATS, MPI_UINT64_T, c->agree_op, c->comm);
    if (err != MPI_SUCCESS) return fx_mpi_fail(err, "fx_write", "the exponent agreement");
    c->bytes[FX_TRAFFIC_STATISTICS] += FX_DIST_NSTATS * (int64_t)sizeof *v;
    return FX_OK;
}

static int fx_comm_wrap(MPI_Comm base, int owns, fx_comm **out, const char *func)
{
    fx_comm *c = calloc(1, sizeof *c);
    if (!c) return fx_error(FX_ENOMEM, func, "out of memory");
    int err = MPI_Comm_dup(base, &c->comm);
    if (err != MPI_SUCCESS) {
        free(c);
        return fx_mpi_fail(err, func, "MPI_Comm_dup");
    }
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    err = MPI_Op_create(fx_agree_fn, 1, &c->agree_op);
    if (err != MPI_SUCCESS) {
        MPI_Comm_free(&c->comm);
        free(c);
        return fx_mpi_fail(err, func, "MPI_Op_create");
    }
    c->owns_mpi = owns;
    c->ops.ctx = c;
    c->ops.nranks = c->size;
    c->ops.sum_int = fx_ops_sum_int;
    c->ops.sum_f32 = fx_ops_sum_f32;
    c->ops.agree = fx_ops_agree;
    *out = c;
    return FX_OK;
}

int fx_comm_init(int *argc, char ***argv, fx_comm **out)
{
    if (!out) return FX_FAIL(FX_EINVAL, "out is NULL");
    *out = NULL;
    int started = 0, finished = 0, owns = 0;
    MPI_Initialized(&started);
    MPI_Finalized(&finished);
    if (finished) return FX_FAIL(FX_EIO, "MPI was already finalised");
    if (!started) {
        int provided = 0;
        int err = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (err != MPI_SUCCESS) return fx_mpi_fail(err, __func__, "MPI_Init_thread");
        owns = 1;
    }
    int rc = fx_comm_wrap(MPI_COMM_WORLD, owns, out, __func__);
    if (rc && owns) MPI_Finalize();
    return rc;
}

int fx_comm_from_mpi(const void *mpi_comm, fx_comm **out)
{
    if (!mpi_comm || !out) return FX_FAIL(FX_EINVAL, "%s is NULL", !out ? "out" : "mpi_comm");
    *out = NULL;
    int started = 0, finished = 0;
    MPI_Initialized(&started);
    MPI_Finalized(&finished);
    if (!started || finished)
        return FX_FAIL(FX_EINVAL, "MPI is %s", finished ? "finalised" : "not initialised");
    return fx_comm_wrap(*(const MPI_Comm *)mpi_comm, 0, out, __func__);
}

int fx_comm_rank(const fx_comm *c) { return c ? c->rank : FX_FAIL(FX_EINVAL, "c is NULL"); }
int fx_comm_size(const fx_comm *c) { return c ? c->size : FX_FAIL(FX_EINVAL, "c is NULL"); }

int fx_comm_agree(fx_comm *c, int local_status, int *failed_rank)
{
    if (failed_rank) *failed_rank = -1;
    if (!c) return FX_FAIL(FX_EINVAL, "c is NULL");
    /* the lowest failing rank, then its status from it */
    int first = local_status != FX_OK ? c->rank : c->size;
    int err = MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, c->comm);
    if (err != MPI_SUCCESS) return fx_mpi_fail(err, __func__, "MPI_Allreduce");
    if (first == c->size) return FX_OK;
    int status = local_status;
    err = MPI_Bcast(&status, 1, MPI_INT, first, c->comm);
    if (err != MPI_SUCCESS) return fx_mpi_fail(err, __func__, "MPI_Bcast");
    if (failed_rank) *failed_rank = first;
    if (local_status != FX_OK) return local_status; /* this rank's own message stands */
    if (status == FX_OK) status = FX_EIO;            /* a failure is never reported as success */
    return FX_FAIL(status, "rank %d of %d failed (%s); its own message says why", first,
                   c->size, flexpoint_status_str(status));
}

void fx_comm_abort(fx_comm *c, int code)
{
    if (c) MPI_Abort(c->comm, code);
}

void fx_comm_free(fx_comm *c)
{
    if (!c) return;
    MPI_Op_free(&c->agree_op);
    MPI_Comm_free(&c->comm);
    int finished = 0;
    MPI_Finalized(&finished);
    if (c->owns_mpi && !finished) MPI_Finalize();
    free(c);
}

const fx_dist_ops *fx_comm_ops(fx_comm *c) { return c ? &c->ops : NULL; }

void fx_comm_bytes(const fx_comm *c, int64_t bytes[FX_TRAFFIC_KINDS])
{
    for (int k = 0; k < FX_TRAFFIC_KINDS; k++) bytes[k] = c ? c->bytes[k] : 0;
}

int fx_comm_allgather(fx_comm *c, const void *local, void *all, size_t bytes, int kind)
{
    if (bytes > (size_t)INT_MAX)
        return FX_FAIL(FX_EUNSUPPORTED, "a gather of %zu bytes per rank exceeds MPI's counts",
                       bytes);
    int err = MPI_Allgather(local, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, c->comm);
    if (err != MPI_SUCCESS) return fx_mpi_fail(err, __func__, "MPI_Allgather");
    c->bytes[kind] += (int64_t)bytes;
    return FX_OK;
}

int fx_comm_sum_i64(fx_comm *c, int64_t *v, int n, int kind)
{
    int err = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_SUM, c->comm);
    if (err != MPI_SUCCESS) return fx_mpi_fail(err, __func__, "MPI_Allreduce");
    c->bytes[kind] += (int64_t)n * (int64_t)sizeof *v;
    return FX_OK;
}

int fx_comm_max_int(fx_comm *c, int *v, int n, int kind)
{
    int err = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT, MPI_MAX, c->comm);
    if (err != MPI_SUCCESS) return fx_mpi_fail(err, __func__, "MPI_Allreduce");
    c->bytes[kind] += (int64_t)n * (int64_t)sizeof *v;
    return FX_OK;
}

int fx_comm_bcast_int(fx_comm *c, int *v, int root)
{
    int err = MPI_Bcast(v, 1, MPI_INT, root, c->comm);
    if (err != MPI_SUCCESS) return fx_mpi_fail(err, __func__, "MPI_Bcast");
    return FX_OK;
}
