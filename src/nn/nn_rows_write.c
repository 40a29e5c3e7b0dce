/* An output made row by row, written without a whole fp32 stage (nn_rows_write.h).
 *
 * Why: the transformer's softmax over attention scores ([128, 4, 128, 128], 8.4 million values)
 * and its gradient computed every row into an fp32 stage of 33.5 MB, which the write then read
 * back to round it into the 16-bit output: 50 MB of memory traffic around a row computation
 * that runs in L1. Here each row is rounded into the output as soon as it is made:
 *   - fp16/bf16: by the write's own conversion (cvt.f32_to_fp16 / f32_to_bf16), element by
 *     element, so the values are the write's;
 *   - FLEX16_5/DFP16: at the write's guessed exponent (fx_guessed_write, as the element-wise
 *     functions in src/core/unary_stream.c), each row by the level's quant_f32 with the write's
 *     rounding at the row's element offset (stochastic rounding included), the statistics
 *     merged over the rows (sums and maxima, so in any order); every row is made again where
 *     the write chooses another exponent. The attention's probabilities, whose largest value
 *     is the first row's 1, keep their exponent from step to step.
 * Rows are computed whole by one thread each and the conversions are element by element, so
 * the results do not depend on the thread count. */
#include "nn_rows_write.h"
#include "nn_stage.h"
#include "../core/backend.h"
#include "../core/dispatch.h"
#include "../flex/flex_math.h"

#include <stdatomic.h>

#ifdef _OPENMP
#include <omp.h>
#endif

static atomic_int direct_on = 1;
static int64_t direct_runs, direct_missed;

void nn_rows_write_set_direct(int on) { atomic_store(&direct_on, on != 0); }
int64_t nn_rows_write_direct_runs(void) { return __atomic_load_n(&direct_runs, __ATOMIC_RELAXED); }
int64_t nn_rows_write_direct_missed(void)
{
    return __atomic_load_n(&direct_missed, __ATOMIC_RELAXED);
}

typedef struct rows_job {
    nn_row_fn fn;
    const void *ctx;
    int64_t rows, len, group;
    int nt;
} rows_job;

/* group g's first row and row count */
static int64_t rows_of(const rows_job *j, int64_t g, int64_t *nr)
{
    const int64_t r0 = g * j->group;
    *nr = j->rows - r0 < j->group ? j->rows - r0 : j->group;
    return r0;
}

/* Every row into its place of v, with the stage's statistics where fn gives them. */
static void rows_to_stage(const rows_job *j, float *v, int stats, float *vmax_out,
                          int64_t *nonfinite_out)
{
    float vmax = 0.0f;
    int64_t nonfinite = 0;
    (void)j->nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(j->nt) if (j->nt > 1) \
    reduction(max : vmax) reduction(+ : nonfinite)
#endif
    for (int64_t g = 0; g < (j->rows + j->group - 1) / j->group; g++) {
        float rmax = 0.0f;
        int64_t rbad = 0, nr;
        const int64_t r0 = rows_of(j, g, &nr);
        j->fn(j->ctx, r0, nr, v + r0 * j->len, stats ? &rmax : NULL, stats ? &rbad : NULL);
        vmax = rmax > vmax ? rmax : vmax;
        nonfinite += rbad;
    }
    *vmax_out = vmax;
    *nonfinite_out = nonfinite;
}

/* Every row converted into dst by cvt. */
static void rows_to_h16(const rows_job *j, uint16_t *dst,
                        void (*cvt)(const float *src, uint16_t *dst, int64_t n))
{
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(j->nt) if (j->nt > 1)
#endif
    for (int64_t g = 0; g < (j->rows + j->group - 1) / j->group; g++) {
        float buf[NN_ROW_MAX];
        int64_t nr;
        const int64_t r0 = rows_of(j, g, &nr);
        j->fn(j->ctx, r0, nr, buf, NULL, NULL);
        cvt(buf, dst + r0 * j->len, nr * j->len);
    }
}

/* Every row rounded at e with rounding rd into dst (NULL: statistics only), the rounding's
 * statistics merged into *q. */
static void rows_to_shared(const rows_job *j, const fx_backend *be, int16_t *dst, int e,
                           const fx_rounding *rd, fx_qstats *q)
{
    fx_qstats_init(q);
#ifdef _OPENMP
#pragma omp parallel num_threads(j->nt) if (j->nt > 1)
#endif
    {
        fx_qstats mine;
        fx_qstats_init(&mine);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t g = 0; g < (j->rows + j->group - 1) / j->group; g++) {
            float buf[NN_ROW_MAX];
            fx_qstats rq;
            int64_t nr;
            const int64_t r0 = rows_of(j, g, &nr);
            j->fn(j->ctx, r0, nr, buf, NULL, NULL);
            be->cvt.quant_f32(buf, dst ? dst + r0 * j->len : NULL, nr * j->len, e, rd,
                              r0 * j->len, &rq);
            fx_qstats_merge(&mine, &rq);
        }
#ifdef _OPENMP
#pragma omp critical(nn_rows_to_shared_merge)
#endif
        fx_qstats_merge(q, &mine);
    }
}

/* fx_round_all_fn: every row made again and rounded at e into dst (NULL: statistics only) */
static int rows_round_all(void *ctx, int16_t *dst, int e, const fx_rounding *r, fx_qstats *q)
{
    rows_to_shared(ctx, fx_backend_active(), dst, e, r, q);
    return FX_OK;
}

int nn_write_rows(tensor_t *y, int64_t rows, int64_t len, int64_t group, nn_row_fn fn,
                  const void *ctx, int has_stats, int shares_input, int nt, const char *func)
{
    const rows_job j = {fn, ctx, rows, len, group > 0 ? group : 1, nt};
    const int direct = atomic_load(&direct_on) && !shares_input && j.group * len <= NN_ROW_MAX &&
                       !y->st->on_device && fx_tensor_is_contiguous(y);
    if (direct && (y->fmt == FMT_FP16 || y->fmt == FMT_BF16) && !y->st->dist) {
        const fx_backend *be = fx_backend_active();
        rows_to_h16(&j, (uint16_t *)fx_tensor_base(y),
                    y->fmt == FMT_FP16 ? be->cvt.f32_to_fp16 : be->cvt.f32_to_bf16);
        __atomic_fetch_add(&direct_runs, 1, __ATOMIC_RELAXED);
        return FX_OK;
    }
    int e;
    if (direct && rows > 0 && fx_guessed_write_ok(y, &e)) {
        rows_job jr = j;
        const int rc = fx_guessed_write(y, e, rows_round_all, &jr, &direct_missed, func);
        if (rc == FX_OK) __atomic_fetch_add(&direct_runs, 1, __ATOMIC_RELAXED);
        return rc;
    }
    fx_scratch s = {.n = 0};
    const int in_place = y->fmt == FMT_FP32 && !shares_input && fx_tensor_is_contiguous(y);
    float *v = in_place ? (float *)fx_tensor_base(y) : fx_scratch_alloc(&s, rows * len, sizeof(float));
    if (!v) return fx_error(FX_ENOMEM, func, "cannot allocate %lld floats", (long long)(rows * len));
    float vmax;
    int64_t nonfinite;
    rows_to_stage(&j, v, has_stats, &vmax, &nonfinite);
    const int rc = has_stats ? fx_write_f32_max(y, v, vmax, nonfinite, func) : fx_write_f32(y, v, func);
    fx_scratch_free(&s);
    return rc;
}
