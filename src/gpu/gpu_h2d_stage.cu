// Host-to-device copies that do not wait for the device. cudaMemcpy from pageable host memory
// first waits for all work queued on the device (it must not overwrite memory a queued kernel
// still reads), so every batch uploaded in a training step used to drain the device. Copies of
// up to FX_STAGE_BYTES now go through a small ring of pinned staging buffers per device: the
// caller's bytes are copied into the next buffer at once (so the caller may reuse its memory
// when the call returns), a cudaMemcpyAsync on the legacy default stream moves them to the
// device in order with all other work, and an event recorded behind it tells when the buffer
// may be refilled. With FX_STAGE_RING buffers, refilling one waits only if the device is still
// FX_STAGE_RING uploads behind, which a training step (one batch, a few small arrays) never is.
//
// Buffers are allocated on a device's first staged copy and kept until
// flexpoint_gpu_release_cache (pinned memory is slow to allocate and cudaFreeHost waits for the
// device). If pinned memory or an event cannot be had, copies fall back to cudaMemcpy: the
// same result, with the wait; so do copies from managed memory (fx_stageable).
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "gpu_common.cuh"

namespace {

const size_t FX_STAGE_BYTES = (size_t)4 << 20;
const int FX_STAGE_RING = 4;

struct fx_stage_buf {
    void *host = nullptr;
    cudaEvent_t event = nullptr;
    bool queued = false; // a copy out of it was queued (its event was recorded)
};

struct fx_stage_ring {
    std::mutex lock;
    bool failed = false; // pinned memory or events could not be had: never staged again
    fx_stage_buf buf[FX_STAGE_RING];
    int next = 0;
};

std::mutex fx_rings_lock;
std::vector<fx_stage_ring *> fx_rings; // per device, never freed

fx_stage_ring *fx_ring_of(int device)
{
    std::lock_guard<std::mutex> g(fx_rings_lock);
    try {
        if (fx_rings.size() <= (size_t)device) fx_rings.resize((size_t)device + 1, nullptr);
    } catch (...) {
        return nullptr; // no memory for the table: copy synchronously
    }
    if (!fx_rings[(size_t)device]) fx_rings[(size_t)device] = new (std::nothrow) fx_stage_ring;
    return fx_rings[(size_t)device];
}

// Give a ring's buffers back (the ring's lock held, its device current): after their copies.
void fx_ring_free(fx_stage_ring *r)
{
    for (int i = 0; i < FX_STAGE_RING; i++) {
        fx_stage_buf &b = r->buf[i];
        if (b.queued) (void)cudaEventSynchronize(b.event);
        if (b.event) (void)cudaEventDestroy(b.event);
        if (b.host) (void)cudaFreeHost(b.host);
        b = fx_stage_buf();
    }
    r->next = 0;
    (void)cudaGetLastError(); // releasing is best effort
}

// The ring's buffers, made on first use (the ring's lock held). False if they cannot be: then
// whatever was made is given back (pinned memory is a shared, limited budget) and the ring is
// not tried again.
bool fx_ring_ready(fx_stage_ring *r)
{
    if (r->failed) return false;
    if (r->buf[0].host) return true;
    for (int i = 0; i < FX_STAGE_RING; i++) {
        if (cudaMallocHost(&r->buf[i].host, FX_STAGE_BYTES) != cudaSuccess ||
            cudaEventCreateWithFlags(&r->buf[i].event, cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError(); // a fallback, not a failure of the caller's op
            fx_ring_free(r);
            r->failed = true;
            return false;
        }
    }
    return true;
}

// Staging is for ordinary host memory into device memory. A managed source may be written by
// work still queued (the CPU must not read it before that work ends), and a managed or host
// destination is not what the staged path is for: those copy synchronously, as cudaMemcpy.
bool fx_stageable(void *dst, const void *src)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, src) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    if (a.type != cudaMemoryTypeUnregistered && a.type != cudaMemoryTypeHost) return false;
    if (cudaPointerGetAttributes(&a, dst) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeDevice;
}

} // namespace

// flexpoint_gpu_release_cache: every ring's pinned buffers back to CUDA (they are made again on
// the next staged copy), so that nothing of the library's is left in a context the caller is
// about to reset.
extern "C" void fx_gr_stage_release(void)
{
    const fx_device_restorer keep;
    if (!keep.ok()) return;
    std::lock_guard<std::mutex> g(fx_rings_lock);
    for (size_t d = 0; d < fx_rings.size(); d++) {
        fx_stage_ring *r = fx_rings[d];
        if (!r) continue;
        std::lock_guard<std::mutex> rg(r->lock);
        if (cudaSetDevice((int)d) != cudaSuccess) continue;
        fx_ring_free(r);
        r->failed = false;
    }
}

// Stage a copy of `bytes` from host src to device dst of the current device: *staged = 1 when
// it was queued (FX_OK or a CUDA failure), 0 when the caller must copy synchronously itself
// (too large, or no staging buffers).
extern "C" int fx_gr_h2d_staged(void *dst, const void *src, size_t bytes, int *staged,
                                const char *func)
{
    *staged = 0;
    if (bytes > FX_STAGE_BYTES || !fx_stageable(dst, src)) return FX_OK;
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
        (void)cudaGetLastError();
        return FX_OK;
    }
    fx_stage_ring *r = fx_ring_of(device);
    if (!r) return FX_OK;
    std::lock_guard<std::mutex> g(r->lock);
    if (!fx_ring_ready(r)) return FX_OK;
    fx_stage_buf &b = r->buf[r->next];
    r->next = (r->next + 1) % FX_STAGE_RING;
    *staged = 1;
    if (b.queued) {
        // its previous copy must have left before the bytes are overwritten
        const int rc = fx_gr_event_wait((void *)b.event, "waiting for a staging buffer", func);
        if (rc) return rc;
        b.queued = false;
    }
    std::memcpy(b.host, src, bytes);
    cudaError_t err = cudaMemcpyAsync(dst, b.host, bytes, cudaMemcpyHostToDevice, 0);
    if (err != cudaSuccess) return fx_cuda_fail(err, func, "cudaMemcpyAsync (host to device)");
    err = cudaEventRecord(b.event, 0);
    if (err != cudaSuccess) {
        // the copy out of b is queued but cannot be tracked: let it finish, stage no more
        (void)cudaDeviceSynchronize();
        r->failed = true;
        return fx_cuda_fail(err, func, "cudaEventRecord");
    }
    b.queued = true;
    return FX_OK;
}
