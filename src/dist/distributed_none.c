/* The communicator of a build without MPI (CMake: FLEXPOINT_MPI off or MPI not found): none
 * can be created, so a distributed run fails at its start with a status that says why. */
#include "distributed.h"

#define FX_NO_MPI "this build of flexpoint has no MPI: install an MPI (e.g. Debian's " \
                  "libopenmpi-dev) and configure with -DFLEXPOINT_MPI=ON"

int fx_comm_available(void) { return 0; }

int fx_comm_init(int *argc, char ***argv, fx_comm **out)
{
    (void)argc;
    (void)argv;
    if (!out) return FX_FAIL(FX_EINVAL, "out is NULL");
    *out = NULL;
    return FX_FAIL(FX_EUNSUPPORTED, FX_NO_MPI);
}

int fx_comm_from_mpi(const void *mpi_comm, fx_comm **out)
{
    if (!mpi_comm || !out) return FX_FAIL(FX_EINVAL, "%s is NULL", !out ? "out" : "mpi_comm");
    *out = NULL;
    return FX_FAIL(FX_EUNSUPPORTED, FX_NO_MPI);
}

/* No fx_comm exists in this build: every function below can only be handed NULL. */
int fx_comm_rank(const fx_comm *c) { return FX_FAIL(FX_EINVAL, "%s", c ? FX_NO_MPI : "c is NULL"); }
int fx_comm_size(const fx_comm *c) { return FX_FAIL(FX_EINVAL, "%s", c ? FX_NO_MPI : "c is NULL"); }

int fx_comm_agree(fx_comm *c, int local_status, int *failed_rank)
{
    (void)local_status;
    if (failed_rank) *failed_rank = -1;
    return FX_FAIL(FX_EINVAL, "%s", c ? FX_NO_MPI : "c is NULL");
}

void fx_comm_abort(fx_comm *c, int code)
{
    (void)c;
    (void)code;
}

void fx_comm_free(fx_comm *c) { (void)c; }

const fx_dist_ops *fx_comm_ops(fx_comm *c)
{
    (void)c;
    return NULL;
}

void fx_comm_bytes(const fx_comm *c, int64_t bytes[FX_TRAFFIC_KINDS])
{
    (void)c;
    for (int k = 0; k < FX_TRAFFIC_KINDS; k++) bytes[k] = 0;
}

int fx_comm_allgather(fx_comm *c, const void *local, void *all, size_t bytes, int kind)
{
    (void)c, (void)local, (void)all, (void)bytes, (void)kind;
    return FX_FAIL(FX_EUNSUPPORTED, FX_NO_MPI);
}

int fx_comm_sum_i64(fx_comm *c, int64_t *v, int n, int kind)
{
    (void)c, (void)v, (void)n, (void)kind;
    return FX_FAIL(FX_EUNSUPPORTED, FX_NO_MPI);
}

int fx_comm_max_int(fx_comm *c, int *v, int n, int kind)
{
    (void)c, (void)v, (void)n, (void)kind;
    return FX_FAIL(FX_EUNSUPPORTED, FX_NO_MPI);
}

int fx_comm_bcast_int(fx_comm *c, int *v, int root)
{
    (void)c, (void)v, (void)root;
    return FX_FAIL(FX_EUNSUPPORTED, FX_NO_MPI);
}
