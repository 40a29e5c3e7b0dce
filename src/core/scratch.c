/* Scratch memory of op calls (dispatch.h), with a cache of large and mid-sized blocks.
 *
 * Why: an op's stage buffer is as large as its output (int64 for the integer formats: 8 bytes
 * per element), and glibc serves blocks above its mmap threshold (at most 32 MiB) with fresh
 * mappings, so every call paid a page fault per 4 KiB touched. Measured with bench_gemm on an
 * 800 x 25088 output, one thread: fp16 27 -> 66 GFLOP/s and DFP16 13 -> 28 GOP/s when those
 * pages are reused. Blocks of 64 KiB to 1 MiB (the convolutions' per-thread copies, norms and
 * partial sums: about 300 a ResNet-20 step) fared the same way through glibc's mmap threshold
 * and heap trimming: about 2,800 page faults a FLEX16_5 step, against 3 for bf16
 * (docs/performance.md). The cache keeps up to FX_SCRATCH_CACHE_SLOTS freed blocks of at
 * least FX_SCRATCH_CACHE_MIN bytes, FX_SCRATCH_CACHE_CAP bytes in all; smaller blocks go
 * straight to malloc/free, whose heap reuses them. When an allocation fails, the cache is
 * released and the allocation tried once more. A spin lock guards the cache: its critical
 * sections are a few comparisons. */
#include "dispatch.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

static struct {
    atomic_flag lock;
    void *p[FX_SCRATCH_CACHE_SLOTS];
    size_t cap[FX_SCRATCH_CACHE_SLOTS];
    size_t total;
} g_cache = {.lock = ATOMIC_FLAG_INIT};

static void cache_lock(void)
{
    while (atomic_flag_test_and_set_explicit(&g_cache.lock, memory_order_acquire)) {
    }
}

static void cache_unlock(void) { atomic_flag_clear_explicit(&g_cache.lock, memory_order_release); }

/* The smallest cached block of at least `bytes` and at most `most` bytes, taken out of the
 * cache; NULL if none. */
static void *cache_take(size_t bytes, size_t most, size_t *cap)
{
    int best = -1;
    cache_lock();
    for (int i = 0; i < FX_SCRATCH_CACHE_SLOTS; i++)
        if (g_cache.p[i] && g_cache.cap[i] >= bytes && g_cache.cap[i] <= most &&
            (best < 0 || g_cache.cap[i] < g_cache.cap[best]))
            best = i;
    void *p = NULL;
    if (best >= 0) {
        p = g_cache.p[best];
        *cap = g_cache.cap[best];
        g_cache.p[best] = NULL;
        g_cache.total -= *cap;
    }
    cache_unlock();
    return p;
}

/* Keep a freed block if there is room (a free slot and the byte cap), making room by releasing
 * smaller cached blocks, smallest first, where that is enough; else release it. Larger blocks
 * are kept first because a fresh one costs its size in page faults: with the slots full of
 * 2 and 8 MB blocks, a 76 MB stage was mapped anew at every call of an fp16 product. */
static void cache_give(void *p, size_t cap)
{
    void *evicted[FX_SCRATCH_CACHE_SLOTS]; /* released after the lock: an munmap is slow */
    int nev = 0;
    cache_lock();
    int slot = -1;
    for (;;) {
        int free_slot = -1, smallest = -1;
        for (int i = 0; i < FX_SCRATCH_CACHE_SLOTS; i++) {
            if (!g_cache.p[i]) {
                if (free_slot < 0) free_slot = i;
            } else if (g_cache.cap[i] < cap &&
                       (smallest < 0 || g_cache.cap[i] < g_cache.cap[smallest]))
                smallest = i;
        }
        if (free_slot >= 0 && g_cache.total + cap <= FX_SCRATCH_CACHE_CAP) {
            slot = free_slot;
            break;
        }
        if (smallest < 0 || cap > FX_SCRATCH_CACHE_CAP) break;
        evicted[nev++] = g_cache.p[smallest];
        g_cache.total -= g_cache.cap[smallest];
        g_cache.p[smallest] = NULL;
    }
    if (slot >= 0) {
        g_cache.p[slot] = p;
        g_cache.cap[slot] = cap;
        g_cache.total += cap;
    }
    cache_unlock();
    for (int i = 0; i < nev; i++) free(evicted[i]);
    if (slot < 0) free(p);
}

/* Give every cached block back to the system (before reporting an allocation failure). */
static void cache_release_all(void)
{
    cache_lock();
    for (int i = 0; i < FX_SCRATCH_CACHE_SLOTS; i++) {
        free(g_cache.p[i]);
        g_cache.p[i] = NULL;
    }
    g_cache.total = 0;
    cache_unlock();
}

void fx_scratch_cache_census(int *blocks, size_t *total, size_t *largest)
{
    cache_lock();
    int n = 0;
    size_t big = 0;
    for (int i = 0; i < FX_SCRATCH_CACHE_SLOTS; i++)
        if (g_cache.p[i]) {
            n++;
            big = g_cache.cap[i] > big ? g_cache.cap[i] : big;
        }
    *blocks = n;
    *total = g_cache.total;
    *largest = big;
    cache_unlock();
}

void fx_scratch_cache_release(void) { cache_release_all(); }

/* A block of `bytes` bytes, from the cache where it holds one of at most `most` bytes, else
 * from the system (after releasing the cache when the system has none left): NULL on failure;
 * *cap receives the block's whole size, which goes back with it (block_give). */
static void *block_take(size_t bytes, size_t most, size_t *cap)
{
    if (bytes < FX_SCRATCH_CACHE_LARGE && most / FX_SCRATCH_SMALL_FIT > bytes)
        most = bytes * FX_SCRATCH_SMALL_FIT;
    void *p = bytes >= FX_SCRATCH_CACHE_MIN ? cache_take(bytes, most, cap) : NULL;
    if (p) return p;
    *cap = bytes;
    /* fx_alloc_array's limits (below 2^46 bytes) decide validity */
    p = fx_alloc_array((int64_t)bytes, 1);
    if (!p && bytes >= FX_SCRATCH_CACHE_MIN) { /* maybe the cache holds what is missing */
        cache_release_all();
        p = fx_alloc_array((int64_t)bytes, 1);
    }
    return p;
}

static void block_give(void *p, size_t cap)
{
    if (cap >= FX_SCRATCH_CACHE_MIN) cache_give(p, cap);
    else free(p);
}

void *fx_scratch_alloc(fx_scratch *t, int64_t n, size_t sz)
{
    return fx_scratch_alloc_fit(t, n, sz, SIZE_MAX);
}

void *fx_scratch_alloc_fit(fx_scratch *t, int64_t n, size_t sz, size_t most)
{
    if (t->n >= FX_SCRATCH_MAX) return NULL;
    if (n < 0 || sz == 0 || (uint64_t)(n ? n : 1) > (uint64_t)(SIZE_MAX / sz)) return NULL;
    size_t cap;
    void *p = block_take((size_t)(n ? n : 1) * sz, most, &cap);
    if (!p) return NULL;
    t->p[t->n] = p;
    t->cap[t->n] = cap;
    t->n++;
    return p;
}

int fx_scratch_exchange(fx_scratch *t, void *p, void *other, size_t cap, size_t max_cap)
{
    for (int i = 0; i < t->n; i++)
        if (t->p[i] == p) {
            if (t->cap[i] > max_cap) return 0;
            t->p[i] = other;
            t->cap[i] = cap;
            return 1;
        }
    return 0;
}

void fx_scratch_free(fx_scratch *t)
{
    for (int i = 0; i < t->n; i++) block_give(t->p[i], t->cap[i]);
    t->n = 0;
}

/* The block fx_scratch_aligned_alloc handed out at p: where it starts and its whole size in
 * bytes from there (a cached block may be larger than was asked for; it goes back to the cache
 * with that size), kept in the two words before p. */
typedef struct {
    void *base;
    size_t cap;
} fx_aligned_head;

void *fx_scratch_aligned_alloc(size_t bytes)
{
    const size_t extra = 64 + sizeof(fx_aligned_head);
    if (bytes > SIZE_MAX - extra) return NULL;
    size_t cap;
    void *base = block_take(bytes + extra, SIZE_MAX, &cap);
    if (!base) return NULL;
    const uintptr_t at = ((uintptr_t)base + sizeof(fx_aligned_head) + 63) & ~(uintptr_t)63;
    fx_aligned_head *h = (fx_aligned_head *)at - 1;
    h->base = base;
    h->cap = cap;
    return (void *)at;
}

void fx_scratch_aligned_free(void *p)
{
    if (!p) return;
    const fx_aligned_head *h = (const fx_aligned_head *)p - 1;
    block_give(h->base, h->cap);
}
