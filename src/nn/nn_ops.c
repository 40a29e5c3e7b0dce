/* The host whole-op table (nn_ops.h): every line of FX_WHOLE_OPS (src/core/op_table.h), the
 * one list of what a CPU level computes beyond the stage kernels. */
#include "nn_ops.h"

void fx_nn_install_host_ops(fx_backend *b)
{
#define FX_NN_INSTALL(id, name, host) b->run[FX_OP_##id] = host;
    FX_WHOLE_OPS(FX_NN_INSTALL)
#undef FX_NN_INSTALL
}
