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
