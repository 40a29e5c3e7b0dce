/* The AMX tile state request and configuration shared by the AMX kernels (amx_tiles.h).
 * Compiled with the AMX flags (the *_amx.c rule of CMakeLists.txt); nothing here runs unless
 * the CPU reported AMX. */
#define _GNU_SOURCE /* syscall */
#include "amx_tiles.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define FX_AMX_ARCH_REQ_XCOMP_PERM 0x1023
#define FX_AMX_XFEATURE_XTILEDATA 18

static int amx_granted;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_request(void)
{
    amx_granted =
        syscall(SYS_arch_prctl, FX_AMX_ARCH_REQ_XCOMP_PERM, FX_AMX_XFEATURE_XTILEDATA) == 0;
}

int fx_amx_tile_state_granted(void)
{
    pthread_once(&amx_once, amx_request);
    return amx_granted;
}

/* The 64-byte operand of ldtilecfg (palette 1). */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tilecfg;

void fx_amx_tiles_configure(void)
{
    amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    /* GCC 12 does not count ldtilecfg as a read of its operand and drops the stores above
     * unless something else reads the bytes: this empty statement does */
    __asm__ volatile("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

void fx_amx_tiles_configure_shapes(const unsigned char rows[8], const unsigned short colsb[8])
{
    amx_tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = colsb[t];
        cfg.rows[t] = rows[t];
    }
    __asm__ volatile("" : : "r"(&cfg) : "memory"); /* as in fx_amx_tiles_configure */
    _tile_loadconfig(&cfg);
}

double fx_amx_rate(void (*loop)(long iters), long iters, int reps, double ops_per_iter)
{
    fx_amx_tiles_configure();
    _tile_zero(4);
    _tile_zero(6);
    double best = 0;
    for (int rep = 0; rep < reps; rep++) {
        struct timespec t0, t1;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        loop(iters);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        const double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        const double r = dt > 0 ? ops_per_iter * (double)iters / dt : 0;
        best = r > best ? r : best;
    }
    _tile_release();
    return best;
}
