/* The C API of data-parallel training (fx_comm, fx_trainer_new_distributed,
 * fx_trainer_traffic). Run as one process (MPI's singleton start) and, where MPI is built, with
 * 2 ranks (tests/CMakeLists.txt): the distributed trainer of the cnn in flex16_5 and dfp16
 * computes the one-process trainer's weights and losses bit for bit, counts its traffic, and
 * refuses what it cannot split (a device, batch norm, an uneven batch, configurations that
 * differ between ranks). Without MPI the communicator constructors say so. */
#include "testutil.h"
#include "flexpoint_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 12

/* STEPS steps of a one-process trainer and of a distributed one over c: the same losses and
 * weights, bit for bit. */
static void same_as_one_process(fx_comm *c, const fx_dataset *tr, const fx_dataset *te, int fmt)
{
    fx_train_config cfg;
    test_train_config(&cfg, "cnn4-8-16", fmt, 7);
    cfg.batch_size = 8;
    fx_trainer *one = fx_trainer_new(&cfg, tr, te);
    fx_trainer *dist = fx_trainer_new_distributed(&cfg, tr, te, c);
    CHECK(one && dist, "%s: trainers: %s", fmt_name((fmt_t)fmt), flexpoint_last_error());
    if (!one || !dist) {
        fx_trainer_free(one);
        fx_trainer_free(dist);
        return;
    }
    int same_loss = 1;
    for (int s = 0; s < STEPS; s++) {
        float l1 = 0, l2 = 0;
        CHECK_STATUS(fx_trainer_step(one, &l1), FX_OK);
        CHECK_STATUS(fx_trainer_step(dist, &l2), FX_OK);
        same_loss &= test_f32_bits(l1) == test_f32_bits(l2);
    }
    CHECK(same_loss, "%s: the losses differ from one process", fmt_name((fmt_t)fmt));
    const int64_t n = fx_trainer_param_count(one);
    float *w1 = malloc((size_t)n * sizeof *w1), *w2 = malloc((size_t)n * sizeof *w2);
    CHECK(w1 && w2, "out of memory");
    if (w1 && w2) {
        CHECK_STATUS(fx_trainer_get_params(one, w1), FX_OK);
        CHECK_STATUS(fx_trainer_get_params(dist, w2), FX_OK);
        CHECK(memcmp(w1, w2, (size_t)n * sizeof *w1) == 0,
              "%s: weights after %d steps differ from one process", fmt_name((fmt_t)fmt), STEPS);
    }
    free(w1);
    free(w2);
    double a1 = 0, a2 = 0, l1 = 0, l2 = 0;
    CHECK_STATUS(fx_trainer_evaluate(one, te, &a1, &l1), FX_OK);
    CHECK_STATUS(fx_trainer_evaluate(dist, te, &a2, &l2), FX_OK);
    CHECK(a1 == a2 && l1 == l2, "%s: evaluation %.17g/%.17g against %.17g/%.17g",
          fmt_name((fmt_t)fmt), a2, l2, a1, l1);
    fx_dist_traffic t;
    CHECK_STATUS(fx_trainer_traffic(dist, &t), FX_OK);
    CHECK(t.steps == STEPS && t.gradient_bytes > 0 && t.statistics_bytes > 0 &&
              t.gather_bytes > 0 && t.control_bytes > 0,
          "%s: traffic steps %lld, bytes %lld/%lld/%lld/%lld", fmt_name((fmt_t)fmt),
          (long long)t.steps, (long long)t.gradient_bytes, (long long)t.statistics_bytes,
          (long long)t.gather_bytes, (long long)t.control_bytes);
    CHECK_STATUS(fx_trainer_traffic(one, &t), FX_OK);
    CHECK(t.steps == 0 && t.gradient_bytes == 0, "a one-process trainer counts no traffic");
    fx_trainer_free(one);
    fx_trainer_free(dist);
}

/* What a distributed trainer refuses: NULL on every rank, with the reason. */
static void refusals(fx_comm *c, const fx_dataset *tr)
{
    fx_train_config cfg;
    test_train_config(&cfg, "cnn4-8-16", FMT_DFP16, 7);
    cfg.batch_size = 8;
    cfg.device = 0;
    CHECK(!fx_trainer_new_distributed(&cfg, tr, NULL, c) &&
              flexpoint_last_status() == FX_EUNSUPPORTED &&
              strstr(flexpoint_last_error(), "host"),
          "a device: '%s'", flexpoint_last_error());
    test_train_config(&cfg, "resnet8", FMT_DFP16, 7);
    cfg.batch_size = 8;
    CHECK(!fx_trainer_new_distributed(&cfg, tr, NULL, c) &&
              flexpoint_last_status() == FX_EUNSUPPORTED &&
              strstr(flexpoint_last_error(), "batch normalisation"),
          "batch norm: '%s'", flexpoint_last_error());
    const int size = fx_comm_size(c), rank = fx_comm_rank(c);
    test_train_config(&cfg, "cnn4-8-16", FMT_DFP16, 7);
    if (size > 1) {
        cfg.batch_size = 2 * size + 1;
        CHECK(!fx_trainer_new_distributed(&cfg, tr, NULL, c) &&
                  flexpoint_last_status() == FX_EINVAL &&
                  strstr(flexpoint_last_error(), "not a multiple"),
              "an uneven batch: '%s'", flexpoint_last_error());
        /* rank 1 asks for another learning rate: every rank refuses, rank 1 says why */
        cfg.batch_size = 8;
        cfg.lr = rank == 1 ? 0.5 : 0.05;
        fx_trainer *t = fx_trainer_new_distributed(&cfg, tr, NULL, c);
        CHECK(!t && flexpoint_last_status() == FX_EINVAL &&
                  strstr(flexpoint_last_error(), rank == 1 ? "differs from rank 0" : "rank 1"),
              "rank %d: configurations that differ: '%s'", rank, flexpoint_last_error());
        fx_trainer_free(t);
    }
    /* every rank agrees on success, and on a failure of one rank */
    int failed = 7;
    CHECK_STATUS(fx_comm_agree(c, FX_OK, &failed), FX_OK);
    CHECK(failed == -1, "no rank failed, but %d is named", failed);
    int st = fx_comm_agree(c, rank == size - 1 ? FX_ENOMEM : FX_OK, &failed);
    CHECK(st == FX_ENOMEM && failed == size - 1, "rank %d: agreement %d, failed %d", rank, st,
          failed);
}

int main(void)
{
    flexpoint_set_num_threads(1);
    fx_comm *c = NULL;
    CHECK_STATUS(fx_comm_init(NULL, NULL, NULL), FX_EINVAL);
    CHECK_STATUS(fx_comm_rank(NULL), FX_EINVAL);
    CHECK_STATUS(fx_comm_size(NULL), FX_EINVAL);
    CHECK_STATUS(fx_comm_agree(NULL, FX_OK, NULL), FX_EINVAL);
    CHECK_STATUS(fx_comm_from_mpi(NULL, &c), FX_EINVAL);
    CHECK_STATUS(fx_trainer_traffic(NULL, NULL), FX_EINVAL);
    fx_comm_free(NULL);
    fx_comm_abort(NULL, 1); /* nothing to end */
    fx_dataset *tr = fx_dataset_synthetic(160, 3, 16, 16, 10, 3);
    fx_dataset *te = fx_dataset_synthetic(37, 3, 16, 16, 10, 4); /* a short last batch */
    CHECK(tr && te, "datasets: %s", flexpoint_last_error());
    if (!fx_comm_available()) {
        int rc = fx_comm_init(NULL, NULL, &c);
        CHECK(rc == FX_EUNSUPPORTED && !c && strstr(flexpoint_last_error(), "FLEXPOINT_MPI"),
              "without MPI: %d '%s'", rc, flexpoint_last_error());
        /* without a communicator: a one-process trainer */
        fx_train_config cfg;
        test_train_config(&cfg, "cnn4-8-16", FMT_FLEX16_5, 7);
        fx_trainer *t = tr ? fx_trainer_new_distributed(&cfg, tr, te, NULL) : NULL;
        CHECK(t, "NULL comm: %s", flexpoint_last_error());
        fx_trainer_free(t);
        fx_dataset_free(tr);
        fx_dataset_free(te);
        return test_finish("test_distributed_api");
    }
    CHECK_STATUS(fx_comm_init(NULL, NULL, &c), FX_OK);
    if (c && tr && te) {
        same_as_one_process(c, tr, te, FMT_FLEX16_5);
        same_as_one_process(c, tr, te, FMT_DFP16);
        refusals(c, tr);
    }
    fx_dataset_free(tr);
    fx_dataset_free(te);
    int rank = c ? fx_comm_rank(c) : 0;
    fx_comm_free(c);
    /* every rank reports; ctest reads the exit status of each */
    char name[64];
    snprintf(name, sizeof name, "test_distributed_api (rank %d)", rank);
    return test_finish(name);
}
