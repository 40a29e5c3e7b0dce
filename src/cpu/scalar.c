/* The scalar level: everything a backend has, in portable C. It is the definition the other
 * levels reproduce bit for bit (except the fp32 MATMUL, whose FMA levels differ from its
 * multiply-then-add in the last bits: src/fp32/f32_kernels.h), and the base they start from:
 * src/cpu/avx2.c begins with a copy of this table. Every entry is installed here, so a reader
 * sees the whole level; an entry left NULL takes the dispatcher's portable loop (backend.h).
 * This file assigns function pointers only and is compiled without ISA flags. */
#include "core/backend.h"
#include "bf16/bf16_kernels.h"
#include "flex/flex_kernels.h"
#include "fp16/fp16_kernels.h"
#include "fp32/f32_kernels.h"
#include "fp32/f32_math.h"
#include "nn/nn_ops.h"

void fx_cpu_install_scalar(fx_backend *b, const fx_cpu_features *cpu)
{
    (void)cpu; /* portable C: no CPU feature is used */

    /* fp32 compute; fp16 and bf16 operands come here converted to fp32 wherever a level has no
     * kernel of their own format (src/core/dispatch.c) */
    b->kernels[FX_OP_COPY][FMT_FP32] = fx_f32_copy_scalar;
    b->kernels[FX_OP_ADD][FMT_FP32] = fx_f32_add_scalar;
    b->kernels[FX_OP_SUB][FMT_FP32] = fx_f32_sub_scalar;
    b->kernels[FX_OP_MUL][FMT_FP32] = fx_f32_mul_scalar;
    b->kernels[FX_OP_SCALE][FMT_FP32] = fx_f32_scale_scalar;
    b->kernels[FX_OP_RELU][FMT_FP32] = fx_f32_relu_scalar;
    b->kernels[FX_OP_SUM][FMT_FP32] = fx_f32_sum_scalar;
    b->kernels[FX_OP_MATMUL][FMT_FP32] = fx_f32_matmul_scalar;
    /* element-wise math (f32_math.h): fp32 cores for every input format */
    b->kernels[FX_OP_UNARY][FMT_FP32] = fx_f32_k_unary_scalar;
    b->kernels[FX_OP_UNARY_BACKWARD][FMT_FP32] = fx_f32_k_unary_scalar;
    b->unary_f32 = fx_f32_math_scalar; /* 16-bit tensors block by block (unary_stream.c) */
    /* the fused convolution epilogue */
    b->conv.bias_relu_f32 = fx_f32_bias_relu_scalar;

    /* fp16: the conversions' definitions */
    b->cvt.f32_to_fp16 = fx_cvt_f32_to_fp16_scalar;
    b->cvt.fp16_to_f32 = fx_cvt_fp16_to_f32_scalar;

    /* bf16: the conversions' definitions */
    b->cvt.f32_to_bf16 = fx_cvt_f32_to_bf16_scalar;
    b->cvt.bf16_to_f32 = fx_cvt_bf16_to_f32_scalar;

    /* flex16_5 and dfp16: quantisation, statistics and aligned sums (docs/formats.md) */
    b->cvt.quant_f32 = fx_flex_quant_f32_scalar;
    b->cvt.dequant = fx_flex_dequant_scalar;
    b->cvt.scaled_i16_f32 = fx_flex_scaled_f32_scalar;
    b->cvt.quant_i64 = fx_flex_quant_i64_scalar;
    b->cvt.round_odd_i64 = fx_flex_round_odd_i64_scalar;
    b->cvt.maxabs_f32 = fx_flex_maxabs_f32_scalar;
    b->cvt.sum2_maxabs = fx_flex_sum2_maxabs_scalar;
    b->cvt.sum2_quant = fx_flex_sum2_quant_scalar;
    /* maxabs_i64 stays NULL: the portable loop of fx_par_maxabs_i64 */

    /* flex16_5 and dfp16: the exact integer kernels (one set for both formats) */
    fx_flex_set_kernel(b, FX_OP_COPY, fx_flex_copy_scalar);
    fx_flex_set_kernel(b, FX_OP_ADD, fx_flex_add_scalar);
    fx_flex_set_kernel(b, FX_OP_SUB, fx_flex_sub_scalar);
    fx_flex_set_kernel(b, FX_OP_MUL, fx_flex_mul_scalar);
    fx_flex_set_kernel(b, FX_OP_SCALE, fx_flex_scale_scalar);
    fx_flex_set_kernel(b, FX_OP_RELU, fx_flex_relu_scalar);
    fx_flex_set_kernel(b, FX_OP_SUM, fx_flex_sum_scalar);
    fx_flex_set_kernel(b, FX_OP_MATMUL, fx_flex_matmul_scalar);

    /* layout and pooling (transpose*, maxpool2x2_*) and the convolution panel builders stay
     * NULL: the portable loops of src/nn. GEMM tuning values stay 0: the scalar GEMMs take
     * neither pre-packed panels nor rows on demand. */

    /* the whole ops (FX_WHOLE_OPS, src/core/op_table.h): one host implementation each, which
     * reaches the level's kernels through fx_backend_active(), so the vector levels keep these
     * entries; and the question the dispatcher asks every level */
    fx_nn_install_host_ops(b);
    b->supports_op = fx_cpu_supports_op;
}
