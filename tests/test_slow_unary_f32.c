/* The fp32 cores of the element-wise functions (src/fp32/f32_math.h) on a dense sweep: 2^24
 * fp32 bit patterns a core (every 256th, from an odd offset, so every binade and both signs
 * are covered, tails, subnormals, Inf and NaN included), every ISA level the CPU runs. The
 * levels must agree bit for bit, forward and backward, and the forward error must stay within
 * the bound stated in f32_math.h (the checks of tests/unary_common.h). Every core, erf and
 * erfc included, also runs on all 65,536 fp16 and all 65,536 bf16 patterns widened to fp32.
 *
 * FX_UNARY_EXHAUSTIVE=1 in the environment checks every one of the 2^32 patterns instead: the
 * measurement behind docs/math.md (about an hour on one core). */
#include "unary_common.h"

int main(void)
{
    const char *all = getenv("FX_UNARY_EXHAUSTIVE");
    const int exhaustive = all && all[0] == '1';
    f32_sweep(exhaustive ? 1u : 256u, exhaustive ? 0u : 77u);
    return test_finish("test_slow_unary_f32");
}
