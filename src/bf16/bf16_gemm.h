/* The bf16 x bf16 MATMUL kernel on bf16 pairs (AVX512_BF16 vdpbf16ps; the arithmetic is the
 * fp32 GEMM framework's pair mode, src/fp32/f32_kernels.h). Installed in the AVX-512 level's
 * [MATMUL][BF16] slot only on CPUs with AVX512_BF16 and where the route table
 * (src/bf16/bf16_route.c), FLEXPOINT_KERNEL_BF16_GEMM or flexpoint_set_kernel picks the
 * "dpbf16" route (src/core/backend.c), with 6-row pre-packed A panels in the integer GEMM's
 * pair layout (fx_backend.gemm.bf16_pair_panel_mr). */
#ifndef FX_BF16_GEMM_H
#define FX_BF16_GEMM_H

#include "core/backend.h"

#define FX_BF16_PAIR_MR 6

int fx_bf16_matmul_avx512bf16(const fx_op_call *c);

/* The AMX route (src/bf16/bf16_gemm_amx.c): the [MATMUL][BF16] kernel on AMX tiles, for
 * plain bf16 operands (anything else, pre-packed A panels included, goes to the widening
 * fp32 GEMM); whether this process may run it (the CPU's amx_bf16 and the kernel's
 * permission, asked once); and tdpbf16ps's rate in operations per second of the calling
 * thread's CPU time (only where usable). */
int fx_bf16_matmul_amx(const fx_op_call *c);
/* B (K x N bf16, strides sbk and sbn) packed in that kernel's tiles once, for many products
 * with it (fx_op_call.b_amx): fx_bf16_amx_b_numel(K, N) bf16 at bpk, 64-byte aligned. */
int64_t fx_bf16_amx_b_numel(int64_t K, int64_t N);
void fx_bf16_amx_pack_b(const uint16_t *b, int64_t sbk, int64_t sbn, int64_t K, int64_t N,
                        uint16_t *bpk);
int fx_amx_bf16_usable(const fx_cpu_features *cpu);
double fx_amx_bf16_rate(long iters, int reps);

/* Test and benchmark hook, process-wide: 0 runs the exact FMA pair kernel everywhere instead of
 * vdpbf16ps (the same bits by construction, which the tests check); 1 (the default) lets the
 * driver pick vdpbf16ps wherever it is exact. */
void fx_bf16_dot_set_enabled(int on);
int fx_bf16_dot_enabled(void);

/* fx_bf16_minkey_fn of the AVX512_BF16 file (smallest biased exponent of the nonzero bf16
 * values of x[0, n), 0x7FFF when all are zero) */
uint32_t fx_bf16_minkey_avx512(const uint16_t *x, int64_t n);

/* The weight gradient of one convolution chunk on bf16 pairs, without a patch matrix
 * (src/bf16/bf16_conv_avx512bf16.c): dwt[r * O + o] = the GEMM route's pair-mode chain of
 * patches x dy^T over the chunk's pixels, the same bits. xp: the chunk's padded input
 * (fx_conv_pad, nbc images, FX_CONV_PAD_SLACK initialised elements after it); dy: the chunk's
 * output gradient, nbc NCHW images; scratch: fx_bf16_wgrad_direct_scratch(g, nbc) words.
 * Only for geometries where fx_bf16_wgrad_direct_fits (dilation 1, strides 1 and 2 with KH >=
 * sh and KW >= sw, OW even: the GEMM's pixel pairs then never straddle a row; at a horizontal
 * stride of 2 the kernel reads a copy of xp in column runs from its scratch). Installed as the
 * AVX-512 level's conv.bf16_wgrad on the dpbf16 route. */
struct fx_conv_geom;
int fx_bf16_wgrad_direct_fits(const struct fx_conv_geom *g);
int64_t fx_bf16_wgrad_direct_scratch(const struct fx_conv_geom *g, int64_t nb);
void fx_bf16_wgrad_direct(const struct fx_conv_geom *g, const uint16_t *xp, const uint16_t *dy,
                          int64_t nbc, uint32_t *scratch, float *dwt);
/* Test and benchmark switch, process-wide: 0 sends the weight gradient back to the GEMM route
 * (patch matrix and pair GEMM), so that tests can compare the two */
void fx_bf16_wgrad_direct_set_enabled(int on);
int fx_bf16_wgrad_direct_enabled(void);
long long fx_bf16_wgrad_direct_calls(void); /* chunks computed by fx_bf16_wgrad_direct */

/* The forward convolution of one chunk on bf16 pairs of input channels, without a patch matrix
 * (src/bf16/bf16_conv_avx512bf16.c), in this route's own order: per output a chain over the
 * taps (kh, kw) and, within each, the channel pairs (2cp, 2cp + 1), odd channel first (an odd
 * C pairs its last channel with zero); vdpbf16ps where conditions (i) and (ii) of
 * src/fp32/f32_kernels.h hold for the chunk and the weights, the FMA chain otherwise (the same
 * bits). y[(n P + oh OW + ow) O + o]: the pixel-major stage of the GEMM routes; or, where
 * ybf is not NULL, the sums rounded to bf16 (the definition's rounding) straight into ybf, the
 * chunk's first image of a bf16 y in NCHW (y is then not written). x: the chunk's input,
 * unpadded (nbc images of C x H x W; the kernel pads while it copies); wq: the weights from
 * fx_bf16_fwd_direct_pack_weights
 * (fx_bf16_fwd_direct_weights_numel words, 64-byte aligned) and wkey, the key it returned; scratch:
 * fx_bf16_fwd_direct_scratch(g, nbc) words; up to nthreads OpenMP threads split the output
 * rows. For geometries where fx_bf16_fwd_direct_fits
 * (any stride the taps cover, KH >= sh and KW >= sw; dilation 1; at least 8 input and 16
 * output channels; at most 64 taps). Installed as the
 * AVX-512 level's conv.bf16_fwd on the dpbf16 route. */
int fx_bf16_fwd_direct_fits(const struct fx_conv_geom *g);
int64_t fx_bf16_fwd_direct_scratch(const struct fx_conv_geom *g, int64_t nb);
int64_t fx_bf16_fwd_direct_weights_numel(const struct fx_conv_geom *g);
uint32_t fx_bf16_fwd_direct_pack_weights(const struct fx_conv_geom *g, const uint16_t *w,
                                         uint32_t *wq); /* returns the weights' minkey */
void fx_bf16_fwd_direct(const struct fx_conv_geom *g, const uint16_t *x, int64_t nbc,
                        const uint32_t *wq, uint32_t wkey, uint32_t *scratch, float *y,
                        uint16_t *ybf, int nthreads);
/* The dpbf16 kernel's copy of a chunk (the first nbc images of x, unpadded): xq[n][ih][iw][cp]
 * = (x[n][2cp][ih][iw], x[n][2cp + 1][ih][iw]) over the padded image, zero words in the padding
 * and a zero second half past C. */
void fx_bf16_pair_nhwc(const struct fx_conv_geom *g, const uint16_t *x, int64_t nbc, uint32_t *xq);
/* The input gradient of a stride-2 convolution by phases (src/bf16/bf16_conv_avx512bf16.c, the
 * dpbf16 route's kernel conv.bf16_dgrad_s2). dx's rows 2a + r of parity r (a < n) take the
 * kernel rows k with r + p - k even, at dy row a + d(k), d(k) = (r + p - k) / 2: one axis of a
 * phase is the stride-1 correlation of dy with those taps in order of rising d (falling k), the
 * first at dy row a + d0; likewise the columns. */
#define FX_BF16_S2_MAX_TAPS 8
typedef struct fx_bf16_s2_axis {
    int64_t n, taps, d0;                /* dx rows of the phase, its taps, the first tap's d */
    int64_t k[FX_BF16_S2_MAX_TAPS];     /* kernel row of tap j (d = d0 + j) */
} fx_bf16_s2_axis;

static inline void fx_bf16_s2_axis_make(int64_t r, int64_t K, int64_t p, int64_t len,
                                        fx_bf16_s2_axis *ax)
{
    ax->n = (len - r + 1) / 2;
    ax->taps = 0;
    ax->d0 = 0;
    for (int64_t k = K - 1; k >= 0; k--) /* falling k: rising d, one apart */
        if ((r + p - k) % 2 == 0) {
            if (ax->taps == 0) ax->d0 = (r + p - k) / 2;
            ax->k[ax->taps++] = k;
        }
}

/* Per dx value one chain over its phase's taps (row-major) and, within each, dy's channel pairs
 * in order, odd channel first (the forward kernel's order on the phase's problem), vdpbf16ps
 * where conditions (i) and (ii) hold for the chunk and the weights, the FMA chain otherwise
 * (the same bits), rounded once to bf16 (the definition's rounding). For g (the forward
 * geometry: x [N, C, H, W], dy [N, O, OH, OW]) where fx_bf16_dgrad_s2_fits: stride 2 both
 * ways, dilation 1, KH and KW from 2 to 2 FX_BF16_S2_MAX_TAPS (every phase has taps), H and W
 * even, at least 8 channels in dy and 16 in dx. The weights (w [O, C, KH, KW] bf16) packed by
 * fx_bf16_dgrad_s2_pack_weights into fx_bf16_dgrad_s2_weights_numel words (64-byte aligned),
 * which returns their minkey; per chunk of nbc images, dy's first and dx's first (NCHW, dx's
 * nbc C H W values written), with fx_bf16_dgrad_s2_scratch(g, nbc) words of scratch; one
 * thread. */
int fx_bf16_dgrad_s2_fits(const struct fx_conv_geom *g);
int64_t fx_bf16_dgrad_s2_weights_numel(const struct fx_conv_geom *g);
uint32_t fx_bf16_dgrad_s2_pack_weights(const struct fx_conv_geom *g, const uint16_t *w,
                                       uint32_t *wq);
int64_t fx_bf16_dgrad_s2_scratch(const struct fx_conv_geom *g, int64_t nb);
void fx_bf16_dgrad_s2_direct(const struct fx_conv_geom *g, const uint16_t *dy, int64_t nbc,
                             const uint32_t *wq, uint32_t wkey, uint32_t *scratch,
                             uint16_t *dx);
/* What both stride-2 routes share (fx_bf16_dgrad_s2_direct, fx_bf16_dgrad_s2_amx): the chunk's
 * phases (ah, aw: rows r = 0, 1 and columns), dy's pair-last copy xq padded by (ph, pw) on each
 * side (Op channel pairs per pixel, Wp pixels a row, HWp an image), dx's channels padded to
 * whole vectors (cpad), and each phase's quarter planes q[rh][rw] ([nbc][C][ah[rh].n][aw[rw].n]
 * bf16), all in the caller's scratch (fx_bf16_dgrad_s2_scratch). fx_bf16_dgrad_s2_copy makes
 * the copy and lays out the planes; fx_bf16_dgrad_s2_interleave makes dx's rows from the
 * quarter planes of their parity, columns alternating between the two phases. */
typedef struct fx_bf16_s2_chunk {
    fx_bf16_s2_axis ah[2], aw[2];
    int64_t ph, pw, Op, cpad, Wp, HWp;
    const uint32_t *xq;
    uint16_t *q[2][2];
} fx_bf16_s2_chunk;
void fx_bf16_dgrad_s2_copy(const struct fx_conv_geom *g, const uint16_t *dy, int64_t nbc,
                           uint32_t *scratch, fx_bf16_s2_chunk *k);
void fx_bf16_dgrad_s2_interleave(const struct fx_conv_geom *g, const fx_bf16_s2_chunk *k,
                                 int64_t nbc, uint16_t *dx);
/* The AMX route's input gradient at stride 2 by phases (src/bf16/bf16_conv_amx.c): the dpbf16
 * route's interface, copy, weights (fx_bf16_dgrad_s2_pack_weights; wkey is not used) and
 * scratch, each phase on tdpbf16ps tiles as fx_bf16_fwd_amx computes a forward pass: per dx
 * value over its phase's taps (row-major) and, within each, dy's channel pairs in blocks of 16,
 * one tile product per (tap, block) as tdpbf16ps sums, rounded once to bf16; the AMX GEMM's
 * bits on the phase's tap-major patch matrix whose taps each fill whole 32-value tiles; a
 * phase without taps (a 1 x 1 kernel's) zero. For geometries where fx_bf16_dgrad_s2_amx_fits
 * (fx_bf16_dgrad_s2_fits's, 1 x 1 kernels too, with at least 16 channels in dy, dy's channel
 * pairs at most 16 or a multiple of 16, and W / 2 at most 16 or a multiple of 16). Runs only
 * where the AMX route is installed; fx_bf16_dgrad_s2_amx_calls counts its calls. */
int fx_bf16_dgrad_s2_amx_fits(const struct fx_conv_geom *g);
void fx_bf16_dgrad_s2_amx(const struct fx_conv_geom *g, const uint16_t *dy, int64_t nbc,
                          const uint32_t *wq, uint32_t wkey, uint32_t *scratch, uint16_t *dx);
long long fx_bf16_dgrad_s2_amx_calls(void);
/* The AMX route's direct forward (src/bf16/bf16_conv_amx.c): fx_bf16_fwd_direct's interface,
 * scratch (fx_bf16_fwd_direct_scratch) and weights (fx_bf16_fwd_direct_pack_weights; wkey is
 * not used), on tdpbf16ps tiles read in place from the pair copy. Its order: per output over
 * the taps (kh, kw) and, within each, the channel pairs in blocks of 16, one tile product per
 * (tap, block) as tdpbf16ps sums (subnormals flushed): the AMX GEMM's bits on a tap-major patch
 * matrix whose taps each fill whole 32-value tiles. For geometries where fx_bf16_fwd_amx_fits (fx_bf16_fwd_direct_fits's, with at
 * least 16 input and output channels and C / 2 rounded up at most 16 or a multiple of 16).
 * Runs only where the AMX route is installed. fx_bf16_fwd_amx_calls counts its calls. */
int fx_bf16_fwd_amx_fits(const struct fx_conv_geom *g);
void fx_bf16_fwd_amx(const struct fx_conv_geom *g, const uint16_t *x, int64_t nbc,
                     const uint32_t *wq, uint32_t wkey, uint32_t *scratch, float *y,
                     uint16_t *ybf, int nthreads);
long long fx_bf16_fwd_amx_calls(void);
long long fx_bf16_fwd_amx_span_calls(void); /* the calls in span blocks (conv_tile_blocks.h) */
/* The AMX route's weight gradient of one chunk (src/bf16/bf16_wgrad_amx.c): fx_bf16_wgrad_direct's
 * interface (xp the padded chunk, dy its output gradient, dwt[r O + o] written), scratch
 * fx_bf16_wgrad_amx_scratch(g, nbc) words, on tdpbf16ps tiles read in place from xp and from
 * dy's pixel-pair words. Its order: per weight over the chunk's pixels in order, blocks of up
 * to 16 pixel pairs within one output row, one tile product each as tdpbf16ps sums (its own
 * bits; at a stride the same, on rows regrouped by column phase). For geometries where
 * fx_bf16_wgrad_amx_fits (dilation 1, strides up to 4 but not for a 1 x 1 kernel, C and O
 * multiples of 16, OW even and at most 32 or a multiple of 32). fx_bf16_wgrad_amx_calls counts
 * chunks. */
int fx_bf16_wgrad_amx_fits(const struct fx_conv_geom *g);
int64_t fx_bf16_wgrad_amx_scratch(const struct fx_conv_geom *g, int64_t nb);
void fx_bf16_wgrad_amx(const struct fx_conv_geom *g, const uint16_t *xp, const uint16_t *dy,
                       int64_t nbc, uint32_t *scratch, float *dwt);
long long fx_bf16_wgrad_amx_calls(void);
/* Test switch and counter as for the weight gradient (0: the GEMM routes' panels); the switch
 * covers both routes' direct forward kernels */
void fx_bf16_fwd_direct_set_enabled(int on);
int fx_bf16_fwd_direct_enabled(void);
long long fx_bf16_fwd_direct_calls(void);

#endif
