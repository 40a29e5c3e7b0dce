/* Where a profiled training step spends its time outside the kernels: conversions of operands
 * between formats, rounding of results into their format, and the exponent bookkeeping of the
 * shared-exponent formats (Autoflex's trials, history and statistics, DFP16's exact exponent,
 * and the maximum scans both decide from).
 *
 * A profiler (the trainer, fx_trainer_profile_enable) attaches a sink to its own thread for the
 * length of a step. The hooks (src/core/store.c, src/core/parallel_cvt.c) open a span around
 * their work; a span counts only on a thread with a sink, so concurrent trainers each count
 * their own work, and worker threads of a parallel region count nothing: the attached thread
 * is thread 0 of every region it starts, and its own share of the region stands for the
 * region's wall time. Spans do not nest: an inner span's time belongs to the outer one, so
 * every nanosecond is counted once. Within a split span (a shared-exponent write) the time of
 * its parts (the quantisation that stores the result, fx_prof_part_start/stop) goes to one
 * category and the rest to another.
 *
 * Off, a hook costs one relaxed load of fx_prof_nsinks and a branch: no clock is read. */
#ifndef FX_CORE_PROFILE_COUNTERS_H
#define FX_CORE_PROFILE_COUNTERS_H

#include <stdint.h>

#include "internal_export.h"

enum {
    FX_PROF_CONVERSION, /* operands widened or quantised into the compute format */
    FX_PROF_ROUNDING,   /* results rounded or quantised into the output's format */
    FX_PROF_AUTOFLEX,   /* shared-exponent bookkeeping: the exponent's choice and statistics */
    FX_PROF_NCAT
};

/* One counted span: its start on CLOCK_MONOTONIC and its nanoseconds per category. */
typedef struct fx_prof_event {
    uint64_t start_ns;
    uint64_t ns[FX_PROF_NCAT];
} fx_prof_event;

/* A thread's counts while attached. ns: totals since the profiler last cleared them. events:
 * with log set, every span in order (the trainer attributes them to layers by time); a span
 * that cannot be logged (no memory) counts in dropped, and in ns all the same. depth and part
 * belong to the hooks. */
typedef struct fx_prof_sink {
    uint64_t ns[FX_PROF_NCAT];
    int log;
    fx_prof_event *events;
    int64_t nevents, cap, dropped;
    int depth;
    uint64_t part;
} fx_prof_sink;

/* Number of attached sinks in the process: the hooks' cheap test. */
extern int fx_prof_nsinks;

/* Attach s to the calling thread (NULL: detach) and return the sink it replaces, to be attached
 * again afterwards. A thread holds one sink. This and fx_prof_sink_free are called from
 * libflexpoint_train (the trainer), hence FX_INTERNAL. */
FX_INTERNAL fx_prof_sink *fx_prof_attach(fx_prof_sink *s);

/* Free s's event log and clear it (s itself is the caller's). */
FX_INTERNAL void fx_prof_sink_free(fx_prof_sink *s);

/* CLOCK_MONOTONIC in nanoseconds (never 0). */
uint64_t fx_prof_clock_ns(void);

/* A span: on = 0 not counting, 1 the outermost span of the thread, 2 nested (counts nothing). */
typedef struct fx_prof_span {
    fx_prof_sink *s;
    uint64_t t0;
    int on;
} fx_prof_span;

void fx_prof_enter(fx_prof_span *sp);
void fx_prof_leave(fx_prof_span *sp, int cat, int part_cat);

static inline void fx_prof_begin(fx_prof_span *sp)
{
    sp->on = 0;
    if (__atomic_load_n(&fx_prof_nsinks, __ATOMIC_RELAXED)) fx_prof_enter(sp);
}

/* End a span: all of its time to cat. */
static inline void fx_prof_end(fx_prof_span *sp, int cat)
{
    if (sp->on) fx_prof_leave(sp, cat, cat);
}

/* End a split span: the time of its parts to part_cat, the rest to cat. */
static inline void fx_prof_end_split(fx_prof_span *sp, int cat, int part_cat)
{
    if (sp->on) fx_prof_leave(sp, cat, part_cat);
}

/* A part of the open span of the calling thread (any depth): start returns 0 when no span is
 * open, and stop(0) does nothing. */
uint64_t fx_prof_part_start(void);
void fx_prof_part_stop(uint64_t t0);

#endif
