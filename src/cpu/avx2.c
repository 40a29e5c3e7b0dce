/* The AVX2 level (AVX2 + FMA + F16C): a copy of the scalar level (src/cpu/scalar.c) with the
 * entries below overwritten by 256-bit kernels that give the scalar level's bits (the fp32
 * MATMUL excepted: one FMA per step, src/fp32/f32_kernels.h). Entries not named here keep the
 * scalar kernel. Installed only on a CPU that has the three features (src/core/backend.c), so
 * no condition below tests them again. This file assigns function pointers only and is
 * compiled without ISA flags. */
#include "core/backend.h"
#include "core/half_binary.h"
#include "core/layout_kernels.h"
#include "bf16/bf16_kernels.h"
#include "flex/conv_i16.h"
#include "flex/flex_kernels.h"
#include "fp16/fp16_kernels.h"
#include "fp32/conv_f32_direct.h"
#include "fp32/f32_kernels.h"
#include "fp32/f32_math.h"
#include "nn/bn_kernels.h"
#include "nn/ln_kernels.h"
#include "nn/conv_panels.h"
#include "nn/pool_kernels.h"
#include "nn/softmax_kernels.h"

void fx_cpu_install_avx2(fx_backend *b, const fx_cpu_features *cpu)
{
    (void)cpu; /* the level's features are its precondition; nothing optional is used */

    /* fp32 compute (COPY stays the scalar memcpy, which libc already vectorises) */
    b->kernels[FX_OP_ADD][FMT_FP32] = fx_f32_add_avx2;
    b->kernels[FX_OP_SUB][FMT_FP32] = fx_f32_sub_avx2;
    b->kernels[FX_OP_MUL][FMT_FP32] = fx_f32_mul_avx2;
    b->kernels[FX_OP_SCALE][FMT_FP32] = fx_f32_scale_avx2;
    b->kernels[FX_OP_RELU][FMT_FP32] = fx_f32_relu_avx2;
    b->kernels[FX_OP_SUM][FMT_FP32] = fx_f32_sum_avx2;
    b->kernels[FX_OP_MATMUL][FMT_FP32] = fx_f32_matmul_avx2;
    /* element-wise math (f32_math.h): fp32 cores for every input format */
    b->kernels[FX_OP_UNARY][FMT_FP32] = fx_f32_k_unary_avx2;
    b->kernels[FX_OP_UNARY_BACKWARD][FMT_FP32] = fx_f32_k_unary_avx2;
    b->unary_f32 = fx_f32_math_avx2; /* 16-bit tensors block by block (unary_stream.c) */
    /* the fused convolution epilogue */
    b->conv.bias_relu_f32 = fx_f32_bias_relu_avx2;
    /* fp32 GEMM tuning: its 6 x 16 tile takes a convolution's pre-packed A panels of 6 rows,
     * built by the AVX2 panel builder (src/nn/conv_panels_avx2.c) */
    b->gemm.f32_panel_mr = FX_F32_MR_AVX2;
    b->conv.panels_f32 = fx_conv_panels_f32_avx2;
    b->conv.wpanels_f32 = fx_conv_wpanels_f32_avx2;
    /* fp32 forward convolutions without the panels: the same chains, the taps broadcast from
     * the padded input (conv_f32_fwd_avx2.c); AVX-512 has its own (conv_f32_fwd_avx512.c) */
    b->conv.f32_fwd = fx_f32_fwd_direct_avx2;
    b->conv.f32_dgrad = fx_f32_dgrad_direct_avx2;
    /* the direct input gradient against the GEMM and col2im at this level on the Xeon reporting
     * model 167 (FLEXPOINT_CPU=avx2, batch 128, one thread): 1.13x and 1.20x faster on
     * ResNet-20's 16- and 32-channel 3 x 3 layers, 1.08x and 1.02x on its stride-2 openers,
     * but 0.99x at 64 channels, 0.94x on the CNN's 5 x 5 conv2 (O = 64) and 0.81-0.84x on the
     * 1 x 1 projections: its 3-pixel by 16-channel tile is narrow for deep chains */
    b->conv.f32_dgrad_min_c = 8;
    b->conv.f32_dgrad_max_o = 32;
    b->conv.f32_dgrad_min_taps = 2;

    /* fp16 and bf16 x same-format MATMUL: the fp32 GEMM, the operands widened exactly while
     * packed (the same products as the fp32 GEMM of the widened operands, without a widening
     * pass over each operand first) */
    b->kernels[FX_OP_MATMUL][FMT_FP16] = fx_f32_matmul_avx2;
    b->kernels[FX_OP_MATMUL][FMT_BF16] = fx_f32_matmul_avx2;
    /* fp16 and bf16 SUM: fp32's trees, each vector widened as it is loaded (the same bits as
     * the fallback's widened copy, which they do not write) */
    b->kernels[FX_OP_SUM][FMT_FP16] = fx_fp16_sum_avx2;
    b->kernels[FX_OP_SUM][FMT_BF16] = fx_bf16_sum_avx2;

    /* fp16: F16C vcvtps2ph / vcvtph2ps with NaN fix-ups */
    b->cvt.f32_to_fp16 = fx_cvt_f32_to_fp16_avx2;
    b->cvt.fp16_to_f32 = fx_cvt_fp16_to_f32_avx2;

    /* bf16: the definition's integer rounding on 8 lanes (no bf16 instruction at this level) */
    b->cvt.f32_to_bf16 = fx_cvt_f32_to_bf16_avx2;
    b->cvt.bf16_to_f32 = fx_cvt_bf16_to_f32_avx2;

    /* flex16_5 and dfp16: quantisation, statistics and aligned sums */
    b->cvt.quant_f32 = fx_flex_quant_f32_avx2;
    b->cvt.dequant = fx_flex_dequant_avx2;
    b->cvt.scaled_i16_f32 = fx_flex_scaled_f32_avx2;
    b->cvt.quant_i64 = fx_flex_quant_i64_avx2;
    b->cvt.quant_i64_t = fx_flex_quant_i64_t_avx2;
    b->cvt.round_odd_i64 = fx_flex_round_odd_i64_avx2;
    b->cvt.maxabs_i64 = fx_flex_maxabs_i64_avx2;
    b->cvt.scale_quant = fx_flex_scale_quant_avx2;
    b->cvt.maxabs_f32 = fx_flex_maxabs_f32_avx2;
    b->cvt.sum2_quant = fx_flex_sum2_quant_avx2;
    b->cvt.sum2_maxabs = fx_flex_sum2_maxabs_avx2;

    /* flex16_5 and dfp16: integer kernels (COPY, ADD, SUB, MUL, SCALE, RELU stay scalar) */
    fx_flex_set_kernel(b, FX_OP_SUM, fx_flex_sum_avx2);
    fx_flex_set_kernel(b, FX_OP_MATMUL, fx_flex_matmul_avx2);
    b->gemm.i16_rounds = fx_flex_matmul_avx2_rounds;
    /* int16 GEMM tuning: a convolution's patch rows on demand (src/nn/conv_panels.h,
     * fx_conv_rows_i16); B is packed per product, so that the norm-tested fast kernel, which
     * is what pays on AVX2, can take its tiles */
    b->gemm.i16_row_source = 1;
    b->gemm.i16_tile_nr = 16; /* FX_NR of intops_avx2.c */
    /* the forward convolution (and the input gradient, a forward pass of dy) without a patch
     * matrix, in the exact sums (conv_i16_fwd_avx2.c); a convolution whose data it
     * declines, and every other geometry, takes the patch rows above; AVX-512 sets its own */
    b->conv.i16_fwd = fx_i16_fwd_direct_avx2;
    b->conv.i16_fwd_unpadded = 1;
    b->conv.i16_fwd_round = fx_i16_fwd_direct_avx2_round; /* rounded in its epilogue */
    b->conv.i16_dgrad_s2_round = fx_i16_dgrad_s2_round_avx2; /* the stride-2 phases too */
    /* the CNN's conv2 in DFP16 at this level on the Xeon reporting model 167: its runs again
     * (22 ms each) and int64 stages gone, the step's mean 4 % shorter (docs/performance.md) */
    b->conv.i16_round_odd_keep = 1;
    b->conv.i16_wgrad = fx_i16_wgrad_direct_avx2; /* likewise the weight gradient */
    b->conv.i16_wgrad_max_stride = FX_I16_WGRAD_MAX_STRIDE; /* a column-deinterleaved copy */
    b->bn = &fx_bn_kernels_avx2; /* batch norm: the portable sums, four lanes and channels at once */
    b->ln = &fx_ln_kernels_avx2; /* layer norm: eight rows side by side, one a lane */
    /* fp16/bf16 same-shape adds (residual adds, gradient sums) in registers */
    b->half_add = fx_half_add_avx2;

    /* layout: 8 x 8 register transposes of 16- and 32-bit elements (64-bit: the portable loop) */
    b->cvt.transpose16 = fx_transpose16_avx2;
    b->cvt.transpose32 = fx_transpose32_avx2;

    /* pooling: 2x2 / stride-2 max pooling of int16, fp32 and fp16/bf16 planes, 8 windows per
     * step, and the gradients' 2x2 scatters */
    b->cvt.maxpool2x2_i16 = fx_maxpool2x2_i16_avx2;
    b->cvt.maxpool2x2_f32 = fx_maxpool2x2_f32_avx2;
    b->cvt.maxpool2x2_half = fx_maxpool2x2_half_avx2; /* fp16/bf16 read as they are */
    b->cvt.maxunpool2x2_u16 = fx_maxunpool2x2_u16_avx2;
    b->cvt.maxunpool2x2_f32 = fx_maxunpool2x2_f32_avx2;
    b->cvt.exp_f32 = fx_exp_f32_avx2;
    b->cvt.softmax_row_f32 = fx_softmax_row_f32_avx2;
    b->cvt.softmax_backward_row_f32 = fx_softmax_backward_row_f32_avx2;
}
