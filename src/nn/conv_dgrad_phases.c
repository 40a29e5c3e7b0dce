/* The exact int16 input gradient of a strided convolution by phases (conv_dgrad_phases.h says
 * why the sums are the col2im route's). */
#include "conv_dgrad_phases.h"
#include "flexpoint.h"
#include "../core/backend.h"
#include "../core/compose.h" /* fx_maxabs_i64 */
#include "../core/dispatch.h"
#include "../flex/conv_i16.h"
#include "../flex/conv_i16_direct.h"
#include "../flex/flex_math.h" /* fx_qstats */
#include "../flex/gemm_i16.h"

#include <stdatomic.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_STRIDE 4 /* per axis: at most 16 phases */
/* A chunk's buffers (kernel scratch, int64 sums, padded dy) within half of a 512 KiB L2, the
 * smallest here (the Zen 3's) */
#define CHUNK_BYTES ((int64_t)256 << 10)
#define MIN_CHUNKS 16 /* work for up to 16 threads, whatever the thread count */
/* The col2im route's GEMM has depth O (dy's channels). Below 64 it runs well under its rate
 * and the phases win; from 64 it does not, and the phases' small convolutions on int64 sums
 * (each with its own copy of dy) lose, except for a 1 x 1 kernel (a projection): then one
 * phase is a 1 x 1 convolution of dy and the others are zeros, so the phases make the GEMM's
 * products without col2im's int64 patch product and its scatter into dx. Measured, batch 128,
 * one thread, phases over col2im in one process: ResNet-20's 16 -> 32 stride-2 3 x 3 input
 * gradient 0.74, its 1 x 1 projection 0.69; 32 -> 64 3 x 3 1.13, 1 x 1 0.92 on the AVX2 EPYC
 * (Zen 3); 32 -> 64 3 x 3 1.15-1.21, 1 x 1 0.87-0.91 on the Zen 5 (vpdpwssd). The epilogue
 * routes (AMX's, and the AVX-512 register tiles' at stride 2) copy dy once and store no int64
 * sums, and take dy of 64 channels too (0.56-0.58x col2im's time on the Zen 5). */
#define MAX_DY_CHANNELS 63

static atomic_int phases_enabled = 1;
static atomic_llong phases_runs;
static atomic_llong phases_rounded;
static atomic_llong phases_rounded2;
static atomic_llong phases_rounded_partial;

void fx_conv_dgrad_phases_set_enabled(int on) { atomic_store(&phases_enabled, on != 0); }
int64_t fx_conv_dgrad_phases_runs(void) { return atomic_load(&phases_runs); }
int64_t fx_conv_dgrad_phases_rounded(void) { return atomic_load(&phases_rounded); }
int64_t fx_conv_dgrad_phases_rounded2(void) { return atomic_load(&phases_rounded2); }
int64_t fx_conv_dgrad_phases_rounded_partial(void) { return atomic_load(&phases_rounded_partial); }

typedef struct dgrad_phase {
    fx_conv_geom g; /* the phase's stride-1 convolution of dy; KH or KW 0: no taps */
    uint32_t *wq;   /* its packed weights */
    int64_t scr_n;  /* kernel scratch words per thread */
    int64_t out_n;  /* int64 sums per thread */
    int64_t pad_n;  /* padded dy per thread (a kernel that takes it padded) */
} dgrad_phase;

/* Phase (rh, rw) of g as a stride-1 convolution: input dy (O channels, OH x OW), output dx's
 * C channels at rows a = (h + ph) div sh, full padding J - 1 */
static void phase_geom(const fx_conv_geom *g, int64_t rh, int64_t rw, fx_conv_geom *p)
{
    const int64_t Jh = rh < g->KH ? (g->KH - rh + g->sh - 1) / g->sh : 0;
    const int64_t Jw = rw < g->KW ? (g->KW - rw + g->sw - 1) / g->sw : 0;
    *p = (fx_conv_geom){.N = g->N, .C = g->O, .H = g->OH, .W = g->OW, .O = g->C, .KH = Jh,
                        .KW = Jw, .OH = g->OH + Jh - 1, .OW = g->OW + Jw - 1, .sh = 1, .sw = 1,
                        .ph = Jh - 1, .pw = Jw - 1, .dh = 1, .dw = 1};
}

/* Whether the phases run on the AMX forward kernel (fx_i16_fwd_amx: tiles read in place from
 * byte planes of dy): where the level has it, the AMX kernels are on, and every live phase
 * fits it. The same exact sums as the vpdpwssd kernel's, so the same bits. It never declines,
 * and it also takes dy with 64 or more channels (as the AVX-512 register tiles' stride-2
 * epilogue route does), where col2im would otherwise run: on the Xeon
 * reporting model 167 (bench_conv_peer 5 2, flex16_5), ResNet-20's 32 -> 64 stride-2 layers'
 * input gradients took 1.50 ms against 2.48 through col2im (the 3 x 3) and 0.81 against 1.04
 * (the 1 x 1 projection); the 16 -> 32 ones, already on phases, 2.94 against 3.01. */
static int phases_amx(const fx_conv_geom *g, const fx_backend *be)
{
    if (!be->conv.i16_fwd_amx || !fx_gemm_i16_amx_on()) return 0;
    for (int64_t rh = 0; rh < g->sh; rh++)
        for (int64_t rw = 0; rw < g->sw; rw++) {
            fx_conv_geom p;
            phase_geom(g, rh, rw, &p);
            if (p.KH > 0 && p.KW > 0 && !fx_i16_fwd_amx_fits(&p)) return 0;
        }
    return 1;
}

/* dy of 64 channels or more that a kernel other than 1 x 1 takes by phases off AMX: on int64
 * sums col2im is the faster there (MAX_DY_CHANNELS), so only the epilogue route takes it */
static int wide_dy(const fx_conv_geom *g, int amx)
{
    return g->O > MAX_DY_CHANNELS && !amx && !(g->KH == 1 && g->KW == 1);
}

int fx_conv_dgrad_phases_needs_rounding(const fx_conv_geom *g, const fx_backend *be)
{
    return wide_dy(g, phases_amx(g, be));
}

int fx_conv_dgrad_phases_fit(const fx_conv_geom *g, const fx_backend *be)
{
    if (!atomic_load(&phases_enabled) || !be || !be->conv.i16_fwd || !fx_i16_fwd_direct_enabled())
        return 0;
    /* with AMX too: col2im's product then runs on the tile kernel, but its int64 patch matrix
     * and the scatter into dx cost more than the phases' register tiles (ResNet-20's 16 -> 32
     * channel stride-2 layers, batch 128, on an Emerald Rapids: 0.79-0.97x col2im's time) */
    if ((g->sh == 1 && g->sw == 1) || g->sh > MAX_STRIDE || g->sw > MAX_STRIDE || g->dh != 1 ||
        g->dw != 1)
        return 0;
    const int amx = phases_amx(g, be);
    /* where the chunks may be rounded in the register tiles' epilogue (stride 2, even H and
     * W), from 64 channels too: that route copies dy once, computes only dx's windows and
     * stores no int64 sums (ResNet-20's 32 -> 64 stride-2 3 x 3 input gradient, batch 128,
     * one thread on the Zen 5: 0.56-0.58x col2im's time) */
    const int s2_epilogue = be->conv.i16_dgrad_s2_round && g->sh == 2 && g->sw == 2 &&
                            g->H % 2 == 0 && g->W % 2 == 0;
    if (wide_dy(g, amx) && !s2_epilogue) return 0;
    for (int64_t rh = 0; rh < g->sh; rh++)
        for (int64_t rw = 0; rw < g->sw; rw++) {
            fx_conv_geom p;
            phase_geom(g, rh, rw, &p);
            if (p.KH > 0 && p.KW > 0 && !amx && !fx_i16_fwd_direct_fits(&p)) return 0;
        }
    return 1;
}

/* The phase's kernel: w'[c][o][jh][jw] = w[o][c][sh (Jh - 1 - jh) + rh][sw (Jw - 1 - jw) + rw] */
static void phase_weights(const fx_conv_geom *g, const fx_conv_geom *p, int64_t rh, int64_t rw,
                          const int16_t *w, int16_t *wp)
{
    for (int64_t c = 0; c < g->C; c++)
        for (int64_t o = 0; o < g->O; o++)
            for (int64_t jh = 0; jh < p->KH; jh++)
                for (int64_t jw = 0; jw < p->KW; jw++) {
                    const int64_t kh = g->sh * (p->KH - 1 - jh) + rh;
                    const int64_t kw = g->sw * (p->KW - 1 - jw) + rw;
                    wp[((c * g->O + o) * p->KH + jh) * p->KW + jw] =
                        w[((o * g->C + c) * g->KH + kh) * g->KW + kw];
                }
}

/* dx rows of samples [n0, n0 + nbc) from the phases' sums, into dxc (sample n0's first
 * element): element (c, h, w) is phase
 * ((h + ph) mod sh, (w + pw) mod sw)'s sum at row (h + ph) div sh, column (w + pw) div sw, or 0
 * where that phase has no taps or no such row or column (no product reaches it). src: W
 * pointers and row: W C int64 of scratch. */
static void gather_chunk(const fx_conv_geom *g, const dgrad_phase *ph, int64_t *const *out,
                         int64_t nbc, int64_t *dxc, const int64_t **src, int64_t *row)
{
    const int64_t C = g->C, H = g->H, W = g->W, HW = H * W;
    for (int64_t n = 0; n < nbc; n++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t rh = (h + g->ph) % g->sh, a = (h + g->ph) / g->sh;
            int64_t *drow = dxc + n * C * HW + h * W;
            int any = 0;
            for (int64_t w = 0; w < W; w++) {
                const int64_t rw = (w + g->pw) % g->sw, b = (w + g->pw) / g->sw;
                const int64_t k = rh * g->sw + rw;
                const dgrad_phase *p = &ph[k];
                const int live = p->wq && a < p->g.OH && b < p->g.OW;
                src[w] = live ? out[k] + ((n * p->g.OH + a) * p->g.OW + b) * C : NULL;
                any |= live;
            }
            if (any) {
                fx_conv_dgrad_gather_rows_avx2(src, W, C, row, drow, HW);
                continue;
            }
            for (int64_t c = 0; c < C; c++) memset(drow + c * HW, 0, sizeof(int64_t) * (size_t)W);
        }
}

/* The stride-2 route rounded in the epilogue (fx_i16_dgrad_amx_s2_round on AMX,
 * fx_i16_dgrad_s2_round and fx_i16_dgrad_s2_round_avx2 on the register tiles): whether it
 * takes g (both strides 2, H and W even, and every live phase's window of H/2 x W/2 outputs,
 * the ones dx takes, inside its correlation over planes padded for the widest phase), and
 * then its description in *d, pointing at planes and win[]. dx's row h takes the window row
 * h / 2 of phase rh = (h + ph) mod 2, which is that phase's correlation row
 * h / 2 + ceil((ph - rh) / 2); columns likewise. */
static int s2_round_setup(const fx_conv_geom *g, const dgrad_phase *ph, fx_conv_geom *planes,
                          fx_conv_geom win[4], fx_i16_dgrad_s2 *d)
{
    if (g->sh != 2 || g->sw != 2 || g->H % 2 || g->W % 2 || g->H < 2 || g->W < 2) return 0;
    int64_t Ph = 0, Pw = 0, KH = 1, KW = 1;
    for (int k = 0; k < 4; k++) {
        if (!ph[k].wq) continue;
        Ph = ph[k].g.KH - 1 > Ph ? ph[k].g.KH - 1 : Ph;
        Pw = ph[k].g.KW - 1 > Pw ? ph[k].g.KW - 1 : Pw;
        KH = ph[k].g.KH > KH ? ph[k].g.KH : KH;
        KW = ph[k].g.KW > KW ? ph[k].g.KW : KW;
    }
    *planes = (fx_conv_geom){.N = g->N, .C = g->O, .H = g->OH, .W = g->OW, .O = g->C, .KH = KH,
                             .KW = KW, .sh = 1, .sw = 1, .ph = Ph, .pw = Pw, .dh = 1, .dw = 1,
                             .OH = g->H / 2, .OW = g->W / 2};
    memset(d, 0, sizeof *d);
    d->planes = planes;
    d->dx_C = g->C;
    d->dx_H = g->H;
    d->dx_W = g->W;
    d->dx_ph = g->ph;
    d->dx_pw = g->pw;
    const int64_t Hp = g->OH + 2 * Ph, Wp = g->OW + 2 * Pw;
    for (int k = 0; k < 4; k++) {
        if (!ph[k].wq) continue;
        const int64_t rh = k / 2, rw = k % 2, Jh = ph[k].g.KH, Jw = ph[k].g.KW;
        win[k] = *planes;
        win[k].KH = Jh;
        win[k].KW = Jw;
        /* the correlation's first row dx takes (ceil((ph - rh) / 2), ph - rh >= -1), moved
         * by the planes' extra padding */
        const int64_t oy = (g->ph - rh + 1) / 2 + Ph - (Jh - 1);
        const int64_t ox = (g->pw - rw + 1) / 2 + Pw - (Jw - 1);
        if (g->ph - rh < -1 || g->pw - rw < -1 || oy < 0 || ox < 0 ||
            oy + g->H / 2 - 1 + Jh - 1 > Hp - 1 || ox + g->W / 2 - 1 + Jw - 1 > Wp - 1)
            return 0;
        d->phase[k] = &win[k];
        d->wq[k] = ph[k].wq;
        d->oy0[k] = oy;
        d->ox0[k] = ox;
    }
    return 1;
}

/* The stride-2 epilogue route's kernel: AMX's where the phases run on it, else the level's
 * register tiles' (NULL: none, or switched off) */
typedef int (*s2_round_fn)(const fx_i16_dgrad_s2 *, const int16_t *, int64_t, uint32_t *, int,
                           int16_t *, fx_qstats *, int, int16_t *, fx_qstats *);

static s2_round_fn s2_kernel_of(const fx_backend *be, int amx)
{
    if (amx) return fx_i16_fwd_amx_round_enabled() ? fx_i16_dgrad_amx_s2_round : NULL;
    return fx_i16_fwd_direct_round_enabled() ? be->conv.i16_dgrad_s2_round : NULL;
}

int fx_conv_dgrad_phases_i16(const fx_conv_geom *g, const fx_backend *be, const int16_t *dy,
                             const int16_t *w, int64_t *dx, uint64_t *imax,
                             const fx_dgrad_sink *sink, const char *func)
{
    const int64_t chw = g->C * g->H * g->W;
    /* without a stage each thread gathers its chunk into a buffer of its own */
    const int chunk_buf = sink && !sink->keep_stage;
    const int64_t nph = g->sh * g->sw;
    dgrad_phase ph[MAX_STRIDE * MAX_STRIDE];
    fx_scratch s = {.n = 0};
    int16_t *wtmp = fx_scratch_alloc(&s, g->C * g->O * g->KH * g->KW, sizeof(int16_t));
    if (!wtmp) {
        fx_scratch_free(&s);
        return fx_error(FX_ENOMEM, func, "cannot allocate the phases' kernels");
    }
    /* the phases' kernel (the AMX one takes dy unpadded, as the AVX kernels do) */
    const int amx = phases_amx(g, be);
    const fx_i16_fwd_kernel kern = fx_i16_fwd_kernel_of(be, amx);
    /* per sample: what each live phase holds */
    int64_t per_sample = 0;
    for (int64_t k = 0; k < nph; k++) {
        dgrad_phase *p = &ph[k];
        phase_geom(g, k / g->sw, k % g->sw, &p->g);
        p->wq = NULL;
        if (p->g.KH == 0 || p->g.KW == 0) continue;
        phase_weights(g, &p->g, k / g->sw, k % g->sw, w, wtmp);
        const int64_t wn = kern.weights_numel(&p->g) + 16;
        uint32_t *wraw = fx_scratch_alloc(&s, wn, sizeof(uint32_t));
        if (!wraw) {
            fx_scratch_free(&s);
            return fx_error(FX_ENOMEM, func, "cannot allocate the phases' packed kernels");
        }
        p->wq = wraw + ((16 - ((uintptr_t)wraw / 4) % 16) % 16); /* 64-byte aligned */
        kern.pack_weights(&p->g, wtmp, p->wq);
        per_sample += kern.scratch(&p->g, 1) * 4 + p->g.OH * p->g.OW * g->C * 8 +
                      (kern.unpadded ? 0 : fx_conv_padded_numel(&p->g, 1) * 2);
    }
    if (chunk_buf) per_sample += chw * 8;
    /* without a stage, at stride 2: each chunk rounded in the kernels' epilogue, on AMX or
     * on the level's register tiles */
    const fx_dgrad_round *rnd = chunk_buf ? sink->round : NULL;
    fx_conv_geom s2planes, s2win[4];
    fx_i16_dgrad_s2 s2;
    const s2_round_fn s2round = s2_kernel_of(be, amx);
    /* (off AMX every phase's window fits the register tiles: fx_conv_dgrad_phases_fit
     * checked the phases' geometry, whose channels, taps and strides the windows share) */
    int s2fast = rnd && s2round && s2_round_setup(g, ph, &s2planes, s2win, &s2);
    const int s2two = rnd && rnd->out2 != NULL;
    int64_t nb = CHUNK_BYTES / (per_sample > 0 ? per_sample : 1);
    const int64_t most = (g->N + MIN_CHUNKS - 1) / MIN_CHUNKS;
    nb = nb < 1 ? 1 : nb > most ? most : nb;
    const int64_t nchunks = (g->N + nb - 1) / nb;
    const int nt = flexpoint_num_threads();
    const int outer = nchunks < nt ? (int)nchunks : nt, inner = outer > 1 ? 1 : nt;
    /* the epilogue route runs a chunk on one thread: not where the threads share one chunk */
    s2fast = s2fast && inner == 1;
    /* each thread's buffers, phase by phase */
    int64_t per_thread = 0;
    for (int64_t k = 0; k < nph; k++) {
        dgrad_phase *p = &ph[k];
        if (!p->wq) continue;
        p->scr_n = kern.scratch(&p->g, nb);
        p->out_n = nb * p->g.OH * p->g.OW * g->C;
        /* the padded copy in int64 units, with a vector of slack */
        p->pad_n = kern.unpadded ? 0 : (fx_conv_padded_numel(&p->g, nb) + 64) / 4;
        per_thread += (p->scr_n + 1) / 2 + p->out_n + p->pad_n + 8;
    }
    per_thread += g->W + g->W * g->C; /* the gather's pointers and pixel-major row */
    if (chunk_buf) per_thread += nb * chw;
    /* the epilogue route's planes and windows, at the start of the thread's buffer (a chunk
     * it declines takes the route below, which reuses the buffer) */
    const int64_t s2words =
        s2fast ? fx_i16_dgrad_s2_scratch(kern.scratch(&s2planes, nb), nb, chw, s2two) : 0;
    if ((s2words + 1) / 2 > per_thread) per_thread = (s2words + 1) / 2;
    int64_t *buf = fx_scratch_alloc(&s, per_thread * outer, sizeof(int64_t));
    uint64_t *cmax = fx_scratch_alloc(&s, nchunks, sizeof(uint64_t)); /* each chunk's max |sum| */
    if (!buf || !cmax) {
        fx_scratch_free(&s);
        return fx_error(FX_ENOMEM, func, "cannot allocate %lld bytes for the phases' sums",
                        (long long)(per_thread * outer * 8));
    }
    memset(cmax, 0, sizeof(uint64_t) * (size_t)nchunks);
    atomic_int declined = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(outer) if (outer > 1)
#endif
    for (int64_t ch = 0; ch < nchunks; ch++) {
        if (atomic_load_explicit(&declined, memory_order_relaxed)) continue;
#ifdef _OPENMP
        const int tid = omp_get_thread_num();
#else
        const int tid = 0;
#endif
        const int64_t n0 = ch * nb, nbc = nb < g->N - n0 ? nb : g->N - n0;
        int64_t *mine = buf + tid * per_thread;
        if (s2fast) {
            const int want = s2two ? FX_I16_ROUND_FIRST | FX_I16_ROUND_SECOND : FX_I16_ROUND_FIRST;
            const int got = s2round(
                &s2, dy + n0 * g->O * g->OH * g->OW, nbc, (uint32_t *)(void *)mine, rnd->shift,
                rnd->out + n0 * chw, &rnd->part[ch], s2two ? rnd->shift2 : 0,
                s2two ? rnd->out2 + n0 * chw : NULL, s2two ? &rnd->part2[ch] : NULL);
            fx_i16_round_mark_broken(got, s2two, rnd->broken);
            if (got) {
                cmax[ch] = (uint64_t)rnd->part[ch].max_abs_in;
                atomic_fetch_add_explicit(&phases_rounded, 1, memory_order_relaxed);
                if (s2two)
                    atomic_fetch_add_explicit(got == want ? &phases_rounded2
                                                          : &phases_rounded_partial,
                                              1, memory_order_relaxed);
                continue;
            }
            /* no rounding whole (a saturating sum): the int64 route below, whose chunk()
             * rounds it again */
        }
        const int64_t **srcp = (const int64_t **)(void *)(mine + per_thread - g->W);
        int64_t *rowbuf = mine + per_thread - g->W - g->W * g->C;
        int64_t *dxc = chunk_buf ? rowbuf - nb * chw : dx + n0 * chw;
        int64_t *out[MAX_STRIDE * MAX_STRIDE] = {NULL};
        int took = 1;
        for (int64_t k = 0; k < nph && took; k++) {
            const dgrad_phase *p = &ph[k];
            if (!p->wq) continue;
            uint32_t *scr = (uint32_t *)(void *)mine;
            out[k] = mine + (p->scr_n + 1) / 2;
            int16_t *pad = (int16_t *)(void *)(out[k] + p->out_n);
            mine += (p->scr_n + 1) / 2 + p->out_n + p->pad_n + 8;
            const int16_t *src = dy + n0 * g->O * g->OH * g->OW;
            if (!kern.unpadded) {
                fx_conv_pad(&p->g, dy, n0, nbc, pad, sizeof(int16_t));
                src = pad;
            }
            /* no maximum wanted: the gathered chunk's is taken below */
            took = kern.run(&p->g, src, nbc, p->wq, scr, out[k], inner, NULL);
        }
        if (!took) {
            atomic_store(&declined, 1);
            continue;
        }
        gather_chunk(g, ph, out, nbc, dxc, srcp, rowbuf);
        /* the largest |sum| of what was gathered, while it is in cache: the kernels' own
         * maxima also count outputs that fall into x's padding, which no dx element takes */
        cmax[ch] = sink ? sink->chunk(sink->ctx, dxc, n0, nbc, ch)
                        : fx_maxabs_i64(be, dxc, nbc * chw);
    }
    *imax = 0;
    for (int64_t ch = 0; ch < nchunks; ch++) *imax = cmax[ch] > *imax ? cmax[ch] : *imax;
    fx_scratch_free(&s);
    if (atomic_load(&declined)) return 0;
    atomic_fetch_add(&phases_runs, 1);
    return 1;
}
