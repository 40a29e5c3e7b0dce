/* The scratch cache of large blocks (src/core/scratch.c), through its census hook:
 * 1. freed blocks of at least FX_SCRATCH_CACHE_MIN bytes are kept, up to
 *    FX_SCRATCH_CACHE_SLOTS of them, and a later allocation of at most a kept block's size is
 *    served from it (the census loses it);
 * 2. with every slot full, a larger freed block displaces the smallest cached ones, and a
 *    smaller one is released (the census does not move);
 * 3. the cached bytes never pass FX_SCRATCH_CACHE_CAP: a freed block that would pass it
 *    displaces smaller blocks until it fits, and one larger than the cap is released;
 * 4. fx_scratch_exchange hands out a block no larger than its bound, in exchange for the
 *    caller's, which the cache then keeps with the size given; a block beyond the bound, or
 *    one that is not the scratch's, is refused and nothing changes.
 * 5. fx_scratch_alloc_fit leaves a cached block larger than its bound in the cache (a fresh
 *    block instead) and takes one within it.
 * 6. a request below FX_SCRATCH_CACHE_LARGE leaves a cached block of more than
 *    FX_SCRATCH_SMALL_FIT times its size alone, takes one within that, and one below
 *    FX_SCRATCH_CACHE_MIN never takes a cached block.
 * The blocks are never written: untouched pages cost no memory. */
#include "core/dispatch.h"
#include "testutil.h"

#include <stdlib.h>

enum { MB = 1 << 20 };

/* allocate `count` blocks of `bytes` (all held at once, in as many scratches as that takes),
 * then free them */
static void churn(int count, size_t bytes)
{
    enum { NS = (FX_SCRATCH_CACHE_SLOTS + FX_SCRATCH_MAX - 1) / FX_SCRATCH_MAX + 1 };
    fx_scratch s[NS];
    for (int k = 0; k < NS; k++) s[k].n = 0;
    CHECK(count <= NS * FX_SCRATCH_MAX, "churn of %d blocks", count);
    for (int i = 0; i < count && i < NS * FX_SCRATCH_MAX; i++)
        CHECK(fx_scratch_alloc(&s[i / FX_SCRATCH_MAX], (int64_t)bytes, 1) != NULL,
              "alloc %d of %zu bytes", i, bytes);
    for (int k = 0; k < NS; k++) fx_scratch_free(&s[k]);
}

/* a request below FX_SCRATCH_CACHE_LARGE takes a cached block of at most FX_SCRATCH_SMALL_FIT
 * times its size, and leaves a larger one for a request of its own size */
static void check_small_fit(void)
{
    int n;
    size_t total, largest;
    fx_scratch_cache_release();
    churn(1, 8 * (size_t)MB);
    fx_scratch s = {.n = 0};
    CHECK(fx_scratch_alloc(&s, 100 << 10, 1) != NULL, "alloc of 100 KiB");
    fx_scratch_cache_census(&n, &total, &largest);
    CHECK(n == 1 && largest == 8 * (size_t)MB,
          "100 KiB with an 8 MiB block cached: %d cached, largest %zu (the block should stay)", n,
          largest);
    CHECK(s.cap[0] == (size_t)100 << 10, "the 100 KiB request got a block of %zu", s.cap[0]);
    fx_scratch_free(&s);
    /* the freed 100 KiB block (at least FX_SCRATCH_CACHE_MIN) is kept, and serves 40 KiB
     * requests no more than 100 KiB ones: 40 KiB is below the cache's minimum */
    fx_scratch_cache_census(&n, &total, &largest);
    CHECK(n == 2 && total == 8 * (size_t)MB + ((size_t)100 << 10),
          "after freeing 100 KiB: %d cached, %zu bytes", n, total);
    CHECK(fx_scratch_alloc(&s, 90 << 10, 1) != NULL, "alloc of 90 KiB");
    CHECK(s.cap[0] == (size_t)100 << 10, "90 KiB took a block of %zu (want the 100 KiB one)",
          s.cap[0]);
    fx_scratch_free(&s);
    CHECK(fx_scratch_alloc(&s, 20 << 10, 1) != NULL, "alloc of 20 KiB");
    CHECK(s.cap[0] == (size_t)20 << 10, "20 KiB took a block of %zu (below the cache's minimum)",
          s.cap[0]);
    fx_scratch_free(&s);
}

static void check_slots(void)
{
    int n;
    size_t total, largest;
    fx_scratch_cache_release();
    churn(FX_SCRATCH_CACHE_SLOTS, MB);
    fx_scratch_cache_census(&n, &total, &largest);
    CHECK(n == FX_SCRATCH_CACHE_SLOTS && total == (size_t)FX_SCRATCH_CACHE_SLOTS * MB &&
              largest == MB,
          "after %d blocks of 1 MiB: %d cached, %zu bytes, largest %zu", FX_SCRATCH_CACHE_SLOTS,
          n, total, largest);
    /* a larger block displaces one of them */
    churn(1, 4 * (size_t)MB);
    fx_scratch_cache_census(&n, &total, &largest);
    CHECK(n == FX_SCRATCH_CACHE_SLOTS && largest == 4 * (size_t)MB &&
              total == (size_t)(FX_SCRATCH_CACHE_SLOTS - 1) * MB + 4 * (size_t)MB,
          "a 4 MiB block into full slots: %d cached, %zu bytes, largest %zu", n, total, largest);
    /* and serves the next allocation of its size */
    fx_scratch s = {.n = 0};
    CHECK(fx_scratch_alloc(&s, 3 * MB, 1) != NULL, "alloc of 3 MiB");
    fx_scratch_cache_census(&n, &total, &largest);
    CHECK(n == FX_SCRATCH_CACHE_SLOTS - 1 && largest == MB,
          "3 MiB taken: %d cached, largest %zu (the 4 MiB block should be out)", n, largest);
    CHECK(s.cap[0] == 4 * (size_t)MB, "the block handed out has %zu bytes", s.cap[0]);
    fx_scratch_free(&s);
    /* slots full of 2 MiB blocks turn a 1 MiB one away */
    fx_scratch_cache_release();
    churn(FX_SCRATCH_CACHE_SLOTS, 2 * (size_t)MB);
    churn(1, MB);
    fx_scratch_cache_census(&n, &total, &largest);
    CHECK(n == FX_SCRATCH_CACHE_SLOTS && total == (size_t)FX_SCRATCH_CACHE_SLOTS * 2 * MB,
          "a 1 MiB block into slots of 2 MiB: %d cached, %zu bytes", n, total);
}

static void check_byte_cap(void)
{
    int n;
    size_t total, largest;
    fx_scratch_cache_release();
    const size_t big = FX_SCRATCH_CACHE_CAP / 5; /* five fit, the sixth does not */
    churn(6, big);
    fx_scratch_cache_census(&n, &total, &largest);
    CHECK(n == 5 && total == 5 * big, "six blocks of a fifth of the cap: %d cached, %zu bytes",
          n, total);
    /* twice as large: displaces two of them (the cap allows three of big and one of 2 big) */
    churn(1, 2 * big);
    fx_scratch_cache_census(&n, &total, &largest);
    CHECK(n == 4 && total == 5 * big && largest == 2 * big,
          "a block of two fifths: %d cached, %zu bytes, largest %zu", n, total, largest);
    CHECK(total <= FX_SCRATCH_CACHE_CAP, "%zu cached bytes above the cap", total);
    /* larger than the cap: released, nothing displaced */
    churn(1, FX_SCRATCH_CACHE_CAP + MB);
    size_t total2, largest2;
    fx_scratch_cache_census(&n, &total2, &largest2);
    CHECK(n == 4 && total2 == total && largest2 == largest,
          "a block above the cap: %d cached, %zu bytes, largest %zu", n, total2, largest2);
    fx_scratch_cache_release();
    fx_scratch_cache_census(&n, &total, &largest);
    CHECK(n == 0 && total == 0, "released: %d cached, %zu bytes", n, total);
}

static void check_exchange(void)
{
    int n;
    size_t total, largest;
    fx_scratch_cache_release();
    fx_scratch s = {.n = 0};
    void *p = fx_scratch_alloc(&s, 3 * MB, 1);
    void *mine = malloc(5 * (size_t)MB);
    CHECK(p && mine, "allocations");
    CHECK(!fx_scratch_exchange(&s, p, mine, 5 * (size_t)MB, 2 * (size_t)MB),
          "a 3 MiB block exchanged under a bound of 2 MiB");
    CHECK(!fx_scratch_exchange(&s, mine, p, 3 * (size_t)MB, 8 * (size_t)MB),
          "a block that is not the scratch's exchanged");
    CHECK(fx_scratch_exchange(&s, p, mine, 5 * (size_t)MB, 4 * (size_t)MB),
          "the 3 MiB block not exchanged under a bound of 4 MiB");
    fx_scratch_free(&s); /* caches mine */
    fx_scratch_cache_census(&n, &total, &largest);
    CHECK(n == 1 && total == 5 * (size_t)MB && largest == 5 * (size_t)MB,
          "after the exchange: %d cached, %zu bytes, largest %zu", n, total, largest);
    free(p); /* the caller's now */
    fx_scratch_cache_release();
}

static void check_fit(void)
{
    int n;
    size_t total, largest;
    fx_scratch_cache_release();
    churn(1, 8 * (size_t)MB); /* one 8 MiB block cached */
    fx_scratch s = {.n = 0};
    CHECK(fx_scratch_alloc_fit(&s, 2 * MB, 1, 3 * (size_t)MB) != NULL, "a fitted 2 MiB block");
    fx_scratch_cache_census(&n, &total, &largest);
    CHECK(n == 1 && largest == 8 * (size_t)MB,
          "a 2 MiB block bound to 3 MiB took the cached 8 MiB one: %d cached, largest %zu", n,
          largest);
    CHECK(fx_scratch_alloc_fit(&s, 6 * MB, 1, 8 * (size_t)MB) != NULL, "a fitted 6 MiB block");
    fx_scratch_cache_census(&n, &total, &largest);
    CHECK(n == 0, "a 6 MiB block bound to 8 MiB left the cached 8 MiB one: %d cached", n);
    fx_scratch_free(&s);
    fx_scratch_cache_census(&n, &total, &largest);
    CHECK(n == 2 && total == 10 * (size_t)MB, "after the free: %d cached, %zu bytes", n, total);
    fx_scratch_cache_release();
}

int main(void)
{
    check_slots();
    check_byte_cap();
    check_exchange();
    check_fit();
    check_small_fit();
    return test_finish("test_scratch_cache");
}
