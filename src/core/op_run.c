/* The dispatcher of whole ops (op_table.h) and the op descriptors: the one place where an op is
 * sent to a backend.
 *
 * Rule: the placement of the op's tensors picks the backend. Host tensors go to the active CPU
 * level (fx_backend_active), tensors on one device to the device backend
 * (fx_device_backend_get); tensors in two places are refused naming both. The backend's
 * supports_op(op, format of the first tensor) then decides: yes, its run[op] computes the op;
 * no, the op's fallback (a composite of other table ops, which the dispatcher sends on by the
 * same rule) computes it, and an op without one is refused with FX_EUNSUPPORTED naming the
 * backend. No op decides any of this itself.
 */
#include "device_backend.h"
#include "dispatch.h"

#include <stdio.h>

#include "../nn/nn_ops.h"

/* The one composite fallback so far: the fused convolution as its three unfused ops. */
#define FX_FALLBACK(id)                                                                        \
    (FX_OP_##id == FX_OP_CONV2D_BIAS_RELU ? fx_nn_conv2d_bias_relu_unfused : NULL)
#define FX_OP_INFO_STAGE(id, name) [FX_OP_##id] = {name, NULL},
#define FX_OP_INFO_WHOLE(id, name, host) [FX_OP_##id] = {name, FX_FALLBACK(id)},
static const fx_op_info fx_ops[FX_OP_COUNT] = {FX_STAGE_OPS(FX_OP_INFO_STAGE)
                                                   FX_WHOLE_OPS(FX_OP_INFO_WHOLE)};
#undef FX_OP_INFO_STAGE
#undef FX_OP_INFO_WHOLE
#undef FX_FALLBACK

const fx_op_info *fx_op_info_of(int op)
{
    return op >= 0 && op < FX_OP_COUNT && fx_ops[op].name ? &fx_ops[op] : NULL;
}

int fx_cpu_supports_op(const fx_backend *b, int op, fmt_t fmt)
{
    if (op < 0 || op >= FX_OP_COUNT || fmt < 0 || fmt >= FMT_COUNT) return 0;
    if (op < FX_OP_STAGE_COUNT) /* any format: the dispatcher widens to fp32 where needed */
        return b->kernels[op][fmt] != NULL || b->kernels[op][FMT_FP32] != NULL;
    return b->run[op] != NULL;
}

int fx_op_placement(const fx_op_args *a, int *device)
{
    const fx_storage *ref = NULL;
    const char *ref_name = NULL;
    char ref_buf[32] = "", name_buf[32];
    const int n = a->nt + a->tlist_n;
    for (int i = 0; i < n; i++) {
        const tensor_t *t = i < a->nt ? a->t[i] : a->tlist[i - a->nt];
        if (!t) continue;
        const char *name = a->tn[i < a->nt ? i : 0];
        if (i >= a->nt) {
            snprintf(name_buf, sizeof name_buf, "%s[%d]", a->tlist_name, i - a->nt);
            name = name_buf;
        }
        if (!ref) {
            ref = t->st;
            snprintf(ref_buf, sizeof ref_buf, "%s", name);
            ref_name = ref_buf;
            continue;
        }
        const fx_storage *b = t->st;
        if (ref->on_device == b->on_device && (!ref->on_device || ref->device == b->device))
            continue;
        char wa[32], wb[32];
        snprintf(wa, sizeof wa, ref->on_device ? "CUDA device %d" : "the host", ref->device);
        snprintf(wb, sizeof wb, b->on_device ? "CUDA device %d" : "the host", b->device);
        return fx_error(FX_EINVAL, a->func, "%s lives on %s but %s lives on %s; all tensors of "
                        "an op must live in one place (move them with tensor_to_device / "
                        "tensor_to_host, flexpoint_gpu.h)", ref_name, wa, name, wb);
    }
    *device = ref && ref->on_device ? ref->device : -1;
    return FX_OK;
}

/* The format supports_op is asked about: the first tensor's, which decides the compute. */
static fmt_t fx_op_format(const fx_op_args *a)
{
    for (int i = 0; i < a->nt; i++)
        if (a->t[i]) return a->t[i]->fmt;
    return a->tlist_n > 0 && a->tlist[0] ? a->tlist[0]->fmt : FMT_FP32;
}

int fx_op_run(const fx_op_args *a)
{
    const fx_op_info *info = fx_op_info_of(a->op);
    if (!info || a->op < FX_OP_STAGE_COUNT)
        return fx_error(FX_EINVAL, a->func, "internal: op %d is not a whole op", a->op);
    int device = -1;
    int rc = fx_op_placement(a, &device);
    if (rc) return rc;
    const fmt_t fmt = fx_op_format(a);
    if (device < 0) {
        const fx_backend *be = fx_backend_active();
        if (be->supports_op(be, a->op, fmt)) return be->run[a->op](a);
        if (info->fallback) return info->fallback(a);
        return fx_error(FX_EUNSUPPORTED, a->func, "the %s backend has no %s for %s tensors",
                        be->name, info->name, fmt_name(fmt));
    }
    const fx_device_backend *d = fx_device_backend_get();
    if (!d)
        return fx_error(FX_EDEVICE, a->func, "the tensors live on CUDA device %d, but "
                        FX_NO_DEVICE_BACKEND, device);
    if (d->supports_op(a->op, fmt)) return d->run[a->op](a);
    if (info->fallback) return info->fallback(a);
    return fx_error(FX_EUNSUPPORTED, a->func, "the %s backend has no %s for %s tensors; they "
                    "live on CUDA device %d (move them with tensor_to_host)", d->name,
                    info->name, fmt_name(fmt), device);
}

int fx_op_host_readable(const fx_op_args *a, const void *p, const char *name)
{
    int device = -1;
    int rc = fx_op_placement(a, &device);
    if (rc || device < 0) return rc;
    const fx_device_backend *d = fx_device_backend_get();
    return d ? d->host_readable(p, name, a->func) : FX_OK;
}
