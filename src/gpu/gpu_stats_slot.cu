// Statistics slots: where a FLEX16_5 device write that does not wait for its own statistics
// (gpu_dispatch.c, "deferred writes") has them delivered. A slot is a small block of pinned
// host memory plus a CUDA event: the write queues an asynchronous copy of its statistics into
// the block and records the event behind it; whoever later needs the statistics waits for
// that event only, not for the whole device, so work queued after the write keeps the device
// busy meanwhile.
//
// Why a pool: pinned memory is expensive to allocate (cudaMallocHost maps pages; cudaFreeHost
// waits for the device), and tensors are created and freed every training step. Slots come
// from pinned chunks of FX_SLOTS_PER_CHUNK and are never given back to CUDA; a freed tensor's
// slot is reused by the next one on the same device.
//
// Why reuse needs no wait: a slot's copies are all queued on its device's legacy default
// stream (as is all of the backend's work), so a copy queued by a later owner lands after any
// copy of an earlier owner, and the later owner waits for its own event.
#include <mutex>
#include <vector>

#include "gpu_common.cuh"

namespace {

const size_t FX_SLOT_BYTES = 256;
const int FX_SLOTS_PER_CHUNK = 64;

struct fx_slot {
    void *host;
    cudaEvent_t event;
};

std::mutex fx_slot_lock;
std::vector<std::vector<fx_slot>> fx_free_slots; // per device
std::vector<std::vector<void *>> fx_slot_chunks; // per device: every chunk allocated
std::vector<size_t> fx_slot_count;               // per device: slots made

// A new chunk of slots for `device` (the current device) into the free list; lock held.
int fx_slot_grow(int device, const char *func)
{
    void *chunk = nullptr;
    cudaError_t err = cudaMallocHost(&chunk, FX_SLOT_BYTES * FX_SLOTS_PER_CHUNK);
    if (err != cudaSuccess) return fx_cuda_fail(err, func, "cudaMallocHost (statistics slots)");
    if (fx_slot_chunks.size() <= (size_t)device) {
        fx_slot_chunks.resize((size_t)device + 1);
        fx_slot_count.resize((size_t)device + 1, 0);
    }
    fx_slot_chunks[(size_t)device].push_back(chunk);
    std::vector<fx_slot> &list = fx_free_slots[(size_t)device];
    for (int i = 0; i < FX_SLOTS_PER_CHUNK; i++) {
        fx_slot s;
        s.host = (char *)chunk + (size_t)i * FX_SLOT_BYTES;
        err = cudaEventCreateWithFlags(&s.event, cudaEventDisableTiming);
        if (err != cudaSuccess) {
            // the chunk's remaining slots stay unused; the ones made so far are kept
            return list.empty() ? fx_cuda_fail(err, func, "cudaEventCreate") : FX_OK;
        }
        list.push_back(s);
        fx_slot_count[(size_t)device]++;
    }
    return FX_OK;
}

} // namespace

// flexpoint_gpu_release_cache: a device's slots go back to CUDA when none is in use (no live
// device tensor holds one), so that none is left in a context the caller resets; otherwise
// they stay (and a reset must wait until those tensors are freed, as the API says).
extern "C" void fx_gr_slot_release(void)
{
    const fx_device_restorer keep;
    if (!keep.ok()) return;
    std::lock_guard<std::mutex> g(fx_slot_lock);
    for (size_t d = 0; d < fx_slot_chunks.size(); d++) {
        if (fx_slot_chunks[d].empty() || fx_free_slots[d].size() != fx_slot_count[d]) continue;
        if (cudaSetDevice((int)d) != cudaSuccess) continue;
        (void)cudaDeviceSynchronize(); // the slots' last copies have landed
        for (const fx_slot &sl : fx_free_slots[d]) (void)cudaEventDestroy(sl.event);
        for (void *c : fx_slot_chunks[d]) (void)cudaFreeHost(c);
        fx_free_slots[d].clear();
        fx_slot_chunks[d].clear();
        fx_slot_count[d] = 0;
    }
}

extern "C" int fx_gr_slot_get(size_t bytes, void **host, void **event, const char *func)
{
    *host = nullptr;
    *event = nullptr;
    if (bytes > FX_SLOT_BYTES)
        return fx_error(FX_EINVAL, func, "statistics of %zu bytes do not fit a %zu-byte slot",
                        bytes, FX_SLOT_BYTES);
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return fx_cuda_fail(err, func, "cudaGetDevice");
    std::lock_guard<std::mutex> g(fx_slot_lock);
    if (fx_free_slots.size() <= (size_t)device) fx_free_slots.resize((size_t)device + 1);
    if (fx_free_slots[(size_t)device].empty()) {
        int rc = fx_slot_grow(device, func);
        if (rc) return rc;
    }
    fx_slot s = fx_free_slots[(size_t)device].back();
    fx_free_slots[(size_t)device].pop_back();
    *host = s.host;
    *event = (void *)s.event;
    return FX_OK;
}

extern "C" void fx_gr_slot_put(int device, void *host, void *event)
{
    if (!host || device < 0) return;
    fx_slot s;
    s.host = host;
    s.event = (cudaEvent_t)event;
    std::lock_guard<std::mutex> g(fx_slot_lock);
    if (fx_free_slots.size() <= (size_t)device) fx_free_slots.resize((size_t)device + 1);
    fx_free_slots[(size_t)device].push_back(s);
}

extern "C" int fx_gr_slot_fill(void *host, const void *dev, size_t bytes, void *event,
                               const char *func)
{
    cudaError_t err = cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, 0);
    if (err != cudaSuccess) return fx_cuda_fail(err, func, "cudaMemcpyAsync (statistics)");
    err = cudaEventRecord((cudaEvent_t)event, 0);
    return err == cudaSuccess ? FX_OK : fx_cuda_fail(err, func, "cudaEventRecord");
}

extern "C" int fx_gr_event_wait(void *event, const char *what, const char *func)
{
    cudaError_t err = cudaEventQuery((cudaEvent_t)event);
    if (err == cudaErrorNotReady) {
        // "not ready" is an answer, not a failure: keep it from being reported by the next
        // launch check as the last error
        (void)cudaGetLastError();
        fx_gr_count_wait(what, func);
        err = cudaEventSynchronize((cudaEvent_t)event);
    }
    return err == cudaSuccess ? FX_OK : fx_cuda_fail(err, func, what);
}

extern "C" int fx_gr_slot_wait(void *event, const char *func)
{
    return fx_gr_event_wait(event, "waiting for statistics", func);
}
