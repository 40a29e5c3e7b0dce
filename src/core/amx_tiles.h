/* What every AMX kernel shares (amx_tiles_amx.c): the permission Linux wants a process to ask
 * for before it touches tile data, and the one tile configuration the kernels use.
 *
 * Linux enables the AMX tile state per process only after arch_prctl(ARCH_REQ_XCOMP_PERM,
 * XFEATURE_XTILEDATA); a process that uses a tile before it asked dies of SIGILL. The request
 * is made once per process, whichever AMX kernel comes first. */
#ifndef FX_CORE_AMX_TILES_H
#define FX_CORE_AMX_TILES_H

/* 1 when this process may use AMX tiles (the request succeeded; asked on the first call),
 * 0 otherwise. The caller checks the CPU's AMX feature bits first. */
int fx_amx_tile_state_granted(void);

/* Load the tile configuration of the calling thread: palette 1, tmm0-7 all 16 rows of 64
 * bytes. Only where fx_amx_tile_state_granted said yes; _tile_release() ends it. */
void fx_amx_tiles_configure(void);

/* The same with each tile's own shape: tmm t gets rows[t] rows of colsb[t] bytes (a tile
 * product's K then need not be a whole 64 bytes: the direct bf16 convolution's channel
 * blocks, src/bf16/bf16_conv_amx.c). Rows at most 16, colsb at most 64 and a multiple of 4. */
void fx_amx_tiles_configure_shapes(const unsigned char rows[8], const unsigned short colsb[8]);

/* The rate of one tile product instruction, per second of the calling thread's CPU time, as
 * operations: loop(iters) runs iters iterations of four independent tile products (tmm0-3 +=
 * tmm4 x tmm6) of ops_per_iter operations in all; the best of reps runs, on zero tiles. Only
 * where fx_amx_tile_state_granted said yes. */
double fx_amx_rate(void (*loop)(long iters), long iters, int reps, double ops_per_iter);

#endif
