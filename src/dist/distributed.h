/* Data parallelism over MPI: the communicator behind fx_comm (flexpoint_train.h) and the
 * collectives the trainer and the write path use. distributed_mpi.c implements it with MPI;
 * distributed_none.c, built without MPI, refuses to create a communicator, so that the other
 * functions are never reached there (they return FX_EUNSUPPORTED all the same). */
#ifndef FX_DIST_DISTRIBUTED_H
#define FX_DIST_DISTRIBUTED_H

#include "flexpoint_train.h" /* fx_comm and its public functions */
#include "../core/internal.h"

#include <stddef.h>

/* Traffic categories (fx_dist_traffic). */
enum { FX_TRAFFIC_GRADIENT, FX_TRAFFIC_STATISTICS, FX_TRAFFIC_GATHER, FX_TRAFFIC_CONTROL,
       FX_TRAFFIC_KINDS };

/* The write path's collectives over c (src/core/internal.h); valid while c lives. */
const fx_dist_ops *fx_comm_ops(fx_comm *c);

/* Bytes handed to MPI so far, per FX_TRAFFIC_* category. */
void fx_comm_bytes(const fx_comm *c, int64_t bytes[FX_TRAFFIC_KINDS]);

/* all[r * bytes .. (r + 1) * bytes) = rank r's local[0 .. bytes), on every rank. */
int fx_comm_allgather(fx_comm *c, const void *local, void *all, size_t bytes, int kind);

/* Exact sums of n int64 values over the ranks, in place. */
int fx_comm_sum_i64(fx_comm *c, int64_t *v, int n, int kind);

/* Maximum of n ints over the ranks, in place. */
int fx_comm_max_int(fx_comm *c, int *v, int n, int kind);

/* Rank root's *v on every rank. */
int fx_comm_bcast_int(fx_comm *c, int *v, int root);

#endif
