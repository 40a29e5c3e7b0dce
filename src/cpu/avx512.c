/* The AVX-512 level (AVX-512 F/BW/VL/DQ on top of the AVX2 level's features): a copy of the
 * AVX2 level (src/cpu/avx2.c) with the entries below overwritten by 512-bit kernels. Entries
 * not named here keep the AVX2 (or scalar) kernel. Installed only on a CPU that has these
 * features (src/core/backend.c); the conditions below test the optional ones (AVX512_VNNI,
 * AVX512_BF16). This file assigns function pointers only and is compiled without ISA flags. */
#include "core/backend.h"
#include "core/half_binary.h"
#include "core/layout_kernels.h"
#include "bf16/bf16_gemm.h"
#include "bf16/bf16_kernels.h"
#include "flex/conv_i16.h"
#include "flex/flex_kernels.h"
#include "flex/gemm_i16.h"
#include "fp16/fp16_kernels.h"
#include "fp32/f32_kernels.h"
#include "fp32/conv_f32_direct.h"
#include "fp32/f32_math.h"
#include "nn/bn_kernels.h"
#include "nn/ln_kernels.h"
#include "nn/conv_panels.h"
#include "nn/pool_kernels.h"
#include "nn/softmax_kernels.h"

void fx_cpu_avx512_bf16_gemm_route(fx_backend *b, int route)
{
    b->conv.bf16_wgrad = NULL;
    b->conv.bf16_wgrad_fits = NULL;
    b->conv.bf16_wgrad_scratch = NULL;
    b->conv.bf16_fwd = NULL;
    b->conv.bf16_fwd_fits = NULL;
    b->conv.bf16_dgrad_s2 = NULL;
    b->conv.bf16_dgrad_s2_fits = NULL;
    b->gemm.bf16_plain_min_k = 0;
    b->gemm.bf16_row_source = 0;
    if (route == FX_BF16_GEMM_DPBF16) {
        /* vdpbf16ps on bf16 pairs, A panels in the integer GEMM's pair layout */
        b->kernels[FX_OP_MATMUL][FMT_BF16] = fx_bf16_matmul_avx512bf16;
        b->gemm.bf16_pair_panel_mr = FX_BF16_PAIR_MR;
        b->conv.bf16_wgrad = fx_bf16_wgrad_direct; /* the same pairs, no patch matrix */
        b->conv.bf16_wgrad_fits = fx_bf16_wgrad_direct_fits;
        b->conv.bf16_wgrad_scratch = fx_bf16_wgrad_direct_scratch;
        b->conv.bf16_fwd = fx_bf16_fwd_direct;     /* channel pairs per tap */
        b->conv.bf16_fwd_fits = fx_bf16_fwd_direct_fits;
        b->conv.bf16_dgrad_s2 = fx_bf16_dgrad_s2_direct; /* the same tiles, by phases */
        b->conv.bf16_dgrad_s2_fits = fx_bf16_dgrad_s2_fits;
    } else if (route == FX_BF16_GEMM_AMX) {
        /* AMX tiles; the kernel packs plain bf16 operands itself. From one whole tile of 32 k
         * values: below it every A tile is a packed tail, and the CNN's first layer (K = 25)
         * ran its forward pass in 5.2 ms on AMX against 4.1 on fp32 panels (bench_conv_peer,
         * 1 thread, the Xeon reporting model 167) */
        b->kernels[FX_OP_MATMUL][FMT_BF16] = fx_bf16_matmul_amx;
        b->gemm.bf16_pair_panel_mr = 0;
        b->gemm.bf16_plain_min_k = 32;
        b->gemm.bf16_row_source = 1; /* a convolution's patch rows, without a patch matrix */
        /* from 16 channels each way, the direct tile kernel on the pair-last copy instead:
         * nothing gathered per tile (bf16_conv_amx.c) */
        b->conv.bf16_fwd = fx_bf16_fwd_amx;
        b->conv.bf16_fwd_fits = fx_bf16_fwd_amx_fits;
        /* the weight gradient's tiles likewise from the padded chunk and dy's pair words
         * (bf16_wgrad_amx.c) */
        b->conv.bf16_wgrad = fx_bf16_wgrad_amx;
        b->conv.bf16_wgrad_fits = fx_bf16_wgrad_amx_fits;
        b->conv.bf16_wgrad_scratch = fx_bf16_wgrad_amx_scratch;
        /* stride-2 input gradients by phases on the forward kernel's tiles */
        b->conv.bf16_dgrad_s2 = fx_bf16_dgrad_s2_amx;
        b->conv.bf16_dgrad_s2_fits = fx_bf16_dgrad_s2_amx_fits;
    } else {
        /* the fp32 GEMM, bf16 widened exactly while packed */
        b->kernels[FX_OP_MATMUL][FMT_BF16] = fx_f32_matmul_avx512;
        b->gemm.bf16_pair_panel_mr = 0;
    }
}

void fx_cpu_install_avx512(fx_backend *b, const fx_cpu_features *cpu)
{
    /* fp32 compute (COPY stays the scalar memcpy) */
    b->kernels[FX_OP_ADD][FMT_FP32] = fx_f32_add_avx512;
    b->kernels[FX_OP_SUB][FMT_FP32] = fx_f32_sub_avx512;
    b->kernels[FX_OP_MUL][FMT_FP32] = fx_f32_mul_avx512;
    b->kernels[FX_OP_SCALE][FMT_FP32] = fx_f32_scale_avx512;
    b->kernels[FX_OP_RELU][FMT_FP32] = fx_f32_relu_avx512;
    b->kernels[FX_OP_SUM][FMT_FP32] = fx_f32_sum_avx512;
    /* fp16/bf16 SUM read in their storage, on this level's own trees (the AVX2 level's
     * instances follow its trees): at every level a 16-bit sum has the bits of that level's
     * fp32 sum of its widened values */
    b->kernels[FX_OP_SUM][FMT_FP16] = fx_fp16_sum_avx512;
    b->kernels[FX_OP_SUM][FMT_BF16] = fx_bf16_sum_avx512;
    /* likewise the fp16/bf16 max pool: widened planes on this level's fp32 kernel (the AVX2
     * one reads the 16-bit planes, with the same values and indices, but was not measured
     * here) */
    b->cvt.maxpool2x2_half = NULL;
    b->kernels[FX_OP_MATMUL][FMT_FP32] = fx_f32_matmul_avx512;
    /* element-wise math (f32_math.h): fp32 cores for every input format */
    b->kernels[FX_OP_UNARY][FMT_FP32] = fx_f32_k_unary_avx512;
    b->kernels[FX_OP_UNARY_BACKWARD][FMT_FP32] = fx_f32_k_unary_avx512;
    b->unary_f32 = fx_f32_math_avx512; /* 16-bit tensors block by block (unary_stream.c) */
    /* the fused convolution epilogue */
    b->conv.bias_relu_f32 = fx_f32_bias_relu_avx512;
    /* fp32 GEMM tuning: its 12 x 32 tile takes pre-packed A panels of 12 rows (AVX-512
     * builder) */
    b->gemm.f32_panel_mr = FX_F32_MR_AVX512;
    b->conv.panels_f32 = fx_conv_panels_f32_avx512;
    /* the weight gradient's 12-row A panels straight from the padded chunk
     * (conv_wpanels_avx512.c) */
    b->conv.wpanels_f32 = fx_conv_wpanels_f32_avx512;
    /* the direct fp32 forward convolution (conv_f32_fwd_avx512.c): on the Xeon reporting model
     * 167, one thread, batch 128, it took ResNet-20's 16-channel layer from 10.7 to 4.9 ms and
     * the CNN's conv2 from 17.4 to 14.4 against the 12-row panels (docs/performance.md) */
    b->conv.f32_fwd = fx_f32_fwd_direct_avx512;
    b->conv.f32_dgrad = fx_f32_dgrad_direct_avx512;
    /* against the GEMM and col2im (batch 128, one thread, the Xeon reporting model 167):
     * 1.25-1.58x faster on ResNet-20's 3 x 3 layers, 1.35x on the CNN's conv2, 1.05-1.11x on
     * the 1 x 1 projections */
    b->conv.f32_dgrad_min_c = 16;
    b->conv.f32_dgrad_max_o = 0;
    b->conv.f32_dgrad_min_taps = 1;
    /* the direct weight gradient against the panels and the GEMM (batch 128, one thread, the
     * Xeon reporting model 167, bench_conv with BENCH_F32_WGRAD=off|on): 1.4-1.7x faster on
     * ResNet-20's 16- and 32-channel 3 x 3 layers and 2.4x on its stride-2 opener, but no
     * faster from 64 output channels (its 64-channel layer 0.98-1.02x, the CNN's conv2
     * 0.97-0.99x), where the GEMM's 12 x 32 tile is as well fed */
    b->conv.f32_wgrad = fx_f32_wgrad_direct_avx512;
    b->conv.f32_wgrad_min_o = 16;
    b->conv.f32_wgrad_max_o = 32;

    /* fp16 x fp16 MATMUL: the fp32 GEMM, widened while packed */
    b->kernels[FX_OP_MATMUL][FMT_FP16] = fx_f32_matmul_avx512;
    /* bf16 x bf16 MATMUL: the widening fp32 GEMM; with AVX512_BF16 the registry then installs
     * the route the per-microarchitecture table (src/bf16/bf16_route.c) or a measurement
     * (src/core/kernel_choice.h) prefers, through fx_bf16_gemm_route_set, which
     * FLEXPOINT_KERNEL_BF16_GEMM and flexpoint_set_kernel also use */
    fx_cpu_avx512_bf16_gemm_route(b, FX_BF16_GEMM_WIDEN);

    /* fp16: vcvtps2ph / vcvtph2ps on 16 lanes, NaN fix-ups and tails under masks */
    b->cvt.f32_to_fp16 = fx_cvt_f32_to_fp16_avx512;
    b->cvt.fp16_to_f32 = fx_cvt_fp16_to_f32_avx512;

    /* bf16: AVX512_BF16 vcvtneps2bf16 with lane fix-ups where the CPU has it, else the integer
     * rounding on 16 lanes; widening is a shift either way */
    b->cvt.f32_to_bf16 = cpu->avx512bf16 ? fx_cvt_f32_to_bf16_avx512bf16
                                         : fx_cvt_f32_to_bf16_avx512;
    b->cvt.bf16_to_f32 = fx_cvt_bf16_to_f32_avx512;

    /* flex16_5 and dfp16: quantisation, statistics and aligned sums */
    b->cvt.sum2_maxabs = fx_flex_sum2_maxabs_avx512;
    b->cvt.sum2_quant = fx_flex_sum2_quant_avx512;
    b->cvt.sum2_quant_gated = fx_flex_sum2_quant_gated_avx512;
    b->cvt.quant_f32 = fx_flex_quant_f32_avx512;
    b->cvt.dequant = fx_flex_dequant_avx512;
    b->cvt.scaled_i16_f32 = fx_flex_scaled_f32_avx512;
    b->cvt.quant_i64 = fx_flex_quant_i64_avx512;
    b->cvt.quant_i64_t = fx_flex_quant_i64_t_avx512;
    b->cvt.maxabs_f32 = fx_flex_maxabs_f32_avx512;
    b->cvt.maxabs_i64 = fx_flex_maxabs_i64_avx512;
    b->cvt.scale_quant = fx_flex_scale_quant_avx512;

    /* flex16_5 and dfp16: integer kernels (COPY, MUL, SCALE stay scalar) */
    fx_flex_set_kernel(b, FX_OP_RELU, fx_flex_relu_avx512);
    fx_flex_set_kernel(b, FX_OP_ADD, fx_flex_add_avx512);
    fx_flex_set_kernel(b, FX_OP_SUB, fx_flex_sub_avx512);
    fx_flex_set_kernel(b, FX_OP_SUM, fx_flex_sum_avx512);
    /* the int16 GEMM: vpdpwssd where the CPU has AVX512_VNNI, else vpmaddwd + vpaddd */
    fx_flex_set_kernel(b, FX_OP_MATMUL,
                       cpu->avx512vnni ? fx_flex_matmul_avx512vnni : fx_flex_matmul_avx512bw);
    b->gemm.i16_rounds = cpu->avx512vnni ? fx_flex_matmul_avx512vnni_rounds
                                         : fx_flex_matmul_avx512bw_rounds;
    /* unsteady guesses rounded by the register tiles too, where it was measured to pay
     * (shared_matmul.c: the transformer's dfp16 steps on the Zen 4); the AVX2 level's
     * alternations were within the VM's noise, so it keeps the dispatcher */
    b->gemm.i16_unsteady_rounds = 1;
    /* VNNI: the forward convolution (and the input gradient, a forward pass of dy) and the
     * weight gradient without a patch matrix, their chains cut by norms as the GEMM's fast
     * kernel's (conv_i16_avx512.c, conv_i16_wgrad_avx512.c) */
    b->conv.i16_fwd = cpu->avx512vnni ? fx_i16_fwd_direct : NULL;
    b->conv.i16_fwd_unpadded = 1; /* the kernel pads while it makes its pair copy */
    b->conv.i16_fwd_round = cpu->avx512vnni ? fx_i16_fwd_direct_round : NULL;
    b->conv.i16_dgrad_s2_round = cpu->avx512vnni ? fx_i16_dgrad_s2_round : NULL;
    /* the CNN's conv2 in DFP16 on the Zen 4: its summed steps 2-3 % shorter, its median steps
     * unchanged (docs/performance.md); the AMX kernels round their chunks in their epilogue
     * and keep no sums, so there it does not apply */
    b->conv.i16_round_odd_keep = 1;
    b->conv.i16_wgrad = cpu->avx512vnni ? fx_i16_wgrad_direct : NULL; /* likewise */
    b->conv.i16_wgrad_max_stride = FX_I16_WGRAD_MAX_STRIDE; /* a column-deinterleaved copy */
    /* AMX-INT8 where this process may use it: the AMX kernel, which hands what it does not
     * take (and everything while fx_gemm_i16_amx_on() is off) to the vpdpwssd one */
    if (cpu->avx512vnni && fx_amx_int8_usable(cpu)) {
        fx_flex_set_kernel(b, FX_OP_MATMUL, fx_flex_matmul_amx);
        b->gemm.i16_amx = 1;
        b->gemm.i16_rounds = fx_flex_matmul_amx_rounds;
        /* a convolution then hands it its A tiles made from byte planes of its input */
        b->conv.tiles_i16 = fx_conv_tiles_i16_avx512;
        b->conv.byte_planes_i16 = fx_conv_byte_planes_avx512;
        b->conv.wtiles_i16 = fx_conv_wtiles_i16_avx512;
        /* and from 16 channels each way its forward passes on tiles read in place */
        b->conv.i16_fwd_amx = fx_i16_fwd_amx;
        b->conv.i16_fwd_amx_round = fx_i16_fwd_amx_round;
        b->conv.i16_wgrad_amx = fx_i16_wgrad_amx; /* and its stride-1 weight gradients */
    }
    /* int16 GEMM tuning: pre-packed A panels of its 6 x 32 tile; B is packed per product, as
     * on AVX2, so that the norm-tested fast kernel (its folds in registers), which is what
     * pays, can take its tiles. The norms of pre-packed A panels are SIMD too
     * (fx_gemm_i16_norms_a_6; without them the norms took a third of a CNN step on a Zen 4). */
    b->gemm.i16_panel_mr = FX_FLEX_MR_AVX512;
    b->gemm.i16_tile_nr = FX_FLEX_NR_AVX512;
    /* half a tile of 32 pays already: ResNet-20's 16-channel input gradients, 2.5x faster than
     * col2im (bench_conv_peer, 1 thread, docs/performance.md) */
    b->gemm.i16_bwd_fwd_min_c = FX_FLEX_NR_AVX512 / 2;
    /* batch norm: eight-lane element-wise passes, the AVX2 channel sums (the portable bits) */
    b->bn = &fx_bn_kernels_avx512;
    b->ln = &fx_ln_kernels_avx512; /* layer norm: sixteen rows side by side, one a lane */
    /* fp16/bf16 same-shape adds (residual adds, gradient sums) in registers */
    b->half_add = fx_half_add_avx512;
    b->conv.panels_i16 = fx_conv_panels_i16_avx512;
    /* the AVX2 level's rows on demand are not taken over: geometries its panel builder
     * declines keep im2row here, as measured (the driver would take rows on this level too,
     * and test_conv_panels checks that it gives the same sums, but no AVX-512 machine has
     * timed it) */
    b->gemm.i16_row_source = 0;
    /* VNNI: the wrap kernel takes the split kernel's tiles where it pays (its own B layout) */
    b->gemm.i16_b_layout = cpu->avx512vnni ? FX_GEMM_I16_B_WRAP : FX_GEMM_I16_B_SPLIT;

    /* layout: register transposes of 16-, 32- and 64-bit elements */
    b->cvt.transpose16 = fx_transpose16_avx512;
    b->cvt.transpose32 = fx_transpose32_avx512;
    b->cvt.transpose64 = fx_transpose64_avx512;

    /* pooling: 2x2 / stride-2 max pooling, 16 windows per step */
    b->cvt.maxpool2x2_i16 = fx_maxpool2x2_i16_avx512;
    b->cvt.maxpool2x2_f32 = fx_maxpool2x2_f32_avx512;
    b->cvt.maxunpool2x2_u16 = fx_maxunpool2x2_u16_avx512;
    b->cvt.maxunpool2x2_f32 = fx_maxunpool2x2_f32_avx512;
    b->cvt.exp_f32 = fx_exp_f32_avx512;
    b->cvt.softmax_row_f32 = fx_softmax_row_f32_avx512;
    b->cvt.softmax_backward_row_f32 = fx_softmax_backward_row_f32_avx512;
}
