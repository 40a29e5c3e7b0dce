// Device memory of the CUDA backend: a caching allocator behind fx_gr_malloc / fx_gr_free.
//
// Why: every device op allocates its temporaries (stages, statistics, the integer GEMM's split
// buffers) and frees them when it returns. Plain cudaMalloc/cudaFree cost tens to hundreds of
// microseconds each, and cudaFree waits for the whole device, so on the first H100 runs they
// were most of a small op's time. Freed blocks are therefore kept per device and size class and
// handed out again.
//
// Why reuse is safe without events: all of the backend's work (kernels, cuBLAS, cudaMemcpy,
// cudaMemset) is issued on the legacy default stream of its device, which orders it across
// host threads. A block freed while kernels that use it are still queued is only written by
// work queued after them.
//
// Size classes: requests up to 1 MiB are rounded up to a power of two (at least 512 bytes),
// larger ones to a multiple of 2 MiB, so the shapes of one training step map onto a few classes
// and a block is reused only for its own class. The cache keeps at most FLEXPOINT_GPU_CACHE_MB
// (environment, read once; default 4096; 0 turns caching off) per device; beyond that, freed
// blocks go back to CUDA. When cudaMalloc fails, the device's cached blocks are released and
// the allocation is tried once more.
#include <map>
#include <mutex>
#include <unordered_map>

#include "gpu_common.cuh"

namespace {

struct fx_block_info {
    size_t size; // the size class actually allocated
    int device;
    bool cached; // in the free lists (not handed out)
};

std::mutex fx_alloc_lock;
std::unordered_map<void *, fx_block_info> fx_blocks;          // every block the cache owns
std::multimap<std::pair<int, size_t>, void *> fx_free_blocks; // (device, class) -> block
std::map<int, size_t> fx_cached_bytes;                         // per device
long long fx_cache_limit = -1;                                 // bytes; -1: not read yet

size_t fx_size_class(size_t bytes)
{
    if (bytes <= 512) return 512;
    if (bytes <= ((size_t)1 << 20)) {
        size_t c = 1024;
        while (c < bytes) c <<= 1;
        return c;
    }
    const size_t step = (size_t)2 << 20;
    return (bytes + step - 1) / step * step;
}

size_t fx_cache_limit_bytes()
{
    if (fx_cache_limit < 0) {
        const char *env = getenv("FLEXPOINT_GPU_CACHE_MB");
        long long mb = env && *env ? atoll(env) : 4096;
        if (mb < 0) mb = 0;
        if (mb > (1LL << 40)) mb = 1LL << 40; // no overflow below
        fx_cache_limit = mb * 1024LL * 1024LL;
    }
    return (size_t)fx_cache_limit;
}

// Release the cached blocks of one device (all devices: device < 0). Caller holds the lock.
// Each block is freed with its own device current (cudaFree then waits for that device's
// queued work, which may still use the block); the caller's device is restored.
void fx_release_cached(int device)
{
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) {
        cudaGetLastError();
        prev = -1;
    }
    int current = prev;
    for (auto it = fx_free_blocks.begin(); it != fx_free_blocks.end();) {
        if (device >= 0 && it->first.first != device) {
            ++it;
            continue;
        }
        if (it->first.first != current && cudaSetDevice(it->first.first) == cudaSuccess)
            current = it->first.first;
        if (cudaFree(it->second) != cudaSuccess) cudaGetLastError();
        fx_cached_bytes[it->first.first] -= it->first.second;
        fx_blocks.erase(it->second);
        it = fx_free_blocks.erase(it);
    }
    if (prev >= 0 && current != prev && cudaSetDevice(prev) != cudaSuccess) cudaGetLastError();
}

} // namespace

extern "C" int fx_gr_malloc(size_t bytes, void **p, const char *func)
{
    *p = NULL;
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return fx_error(FX_EDEVICE, func, "cudaGetDevice failed: %s", cudaGetErrorString(err));
    }
    const size_t cls = fx_size_class(bytes);
    std::lock_guard<std::mutex> guard(fx_alloc_lock);
    auto hit = fx_free_blocks.find(std::make_pair(device, cls));
    if (hit != fx_free_blocks.end()) {
        *p = hit->second;
        fx_free_blocks.erase(hit);
        fx_cached_bytes[device] -= cls;
        fx_blocks[*p].cached = false;
        return FX_OK;
    }
    err = cudaMalloc(p, cls);
    if (err == cudaErrorMemoryAllocation) { // give the cache back and try once more
        cudaGetLastError();
        fx_release_cached(device);
        err = cudaMalloc(p, cls);
    }
    if (err != cudaSuccess) {
        *p = NULL;
        cudaGetLastError();
        return fx_error(FX_EDEVICE, func, "cudaMalloc of %zu bytes failed: %s", bytes,
                        cudaGetErrorString(err));
    }
    fx_blocks[*p] = fx_block_info{cls, device, false};
    return FX_OK;
}

extern "C" void fx_gr_free(void *p)
{
    if (!p) return;
    std::lock_guard<std::mutex> guard(fx_alloc_lock);
    auto it = fx_blocks.find(p);
    if (it == fx_blocks.end()) { // not the cache's (cannot happen through the library)
        if (cudaFree(p) != cudaSuccess) cudaGetLastError();
        return;
    }
    if (it->second.cached) return; // freed twice: already in the cache, keep it there once
    const fx_block_info b = it->second;
    if (fx_cached_bytes[b.device] + b.size > fx_cache_limit_bytes()) {
        if (cudaFree(p) != cudaSuccess) cudaGetLastError();
        fx_blocks.erase(it);
        return;
    }
    it->second.cached = true;
    fx_free_blocks.emplace(std::make_pair(b.device, b.size), p);
    fx_cached_bytes[b.device] += b.size;
}

extern "C" void fx_gr_release_cache(void)
{
    {
        std::lock_guard<std::mutex> guard(fx_alloc_lock);
        fx_release_cached(-1);
    }
    fx_gr_stage_release(); // the upload staging buffers (gpu_h2d_stage.cu)
    fx_gr_slot_release();  // unused statistics slots (gpu_stats_slot.cu)
}
