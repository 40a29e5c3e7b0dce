/* Durable, atomic file writes (file_atomic.c). */
#ifndef FX_CORE_FILE_ATOMIC_H
#define FX_CORE_FILE_ATOMIC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "internal_export.h" /* FX_INTERNAL */

/* read() until n bytes, EOF or an error: the count read, or -1 with errno. */
FX_INTERNAL ssize_t fx_io_read_full(int fd, void *buf, size_t n);
/* write() all n bytes (retrying after EINTR): 0, or -1 with errno. */
int fx_io_write_full(int fd, const void *buf, size_t n);

/* Write data to path durably and atomically: a temporary PATH.tmp.PID created with O_EXCL |
 * O_NOFOLLOW (stale temporaries of path, fx_remove_stale_temps with data's first 8 bytes, are
 * removed first), fsync, rename over path, fsync of the folder. FX_EIO / FX_EINVAL with a message reported as func's.
 * (docs/robustness.md, "Checkpoints: saving".) */
FX_INTERNAL int fx_write_file_atomic(const char *path, const uint8_t *data, size_t len, const char *func);

/* Remove the temporaries that writers of `path` killed before their rename left behind: in
 * path's folder, the regular files (links are not followed) named BASE.tmp.PID, BASE being
 * path's last component, whose process PID no longer exists (kill(PID, 0) fails with ESRCH; a
 * process of another user answers EPERM and is left alone), and whose bytes start as a prefix
 * of head[0..head_len) (up to 64 bytes compared: the magic or header of the kind of file
 * being written; an empty file qualifies). Nothing else is touched: not the temporaries of
 * other targets, of live processes or of this one, nor files holding something else.
 * Best effort: a folder that cannot be listed is skipped. Checkpoint and weights-file saves
 * (fx_write_file_atomic) and Autoflex trace files (tensor_trace_write_csv) call it. */
void fx_remove_stale_temps(const char *path, const void *head, size_t head_len);

#endif
