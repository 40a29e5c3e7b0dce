/* The profile's time counters (profile_counters.h). */
#define _POSIX_C_SOURCE 200809L
#include "profile_counters.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

int fx_prof_nsinks = 0;

/* The sink of this thread: only the attached thread writes into it, so no count needs an
 * atomic update. */
static _Thread_local fx_prof_sink *fx_prof_cur = NULL;

fx_prof_sink *fx_prof_attach(fx_prof_sink *s)
{
    fx_prof_sink *prev = fx_prof_cur;
    if (prev == s) return prev;
    if (prev) __atomic_fetch_sub(&fx_prof_nsinks, 1, __ATOMIC_RELAXED);
    fx_prof_cur = s;
    if (s) {
        s->depth = 0;
        s->part = 0;
        __atomic_fetch_add(&fx_prof_nsinks, 1, __ATOMIC_RELAXED);
    }
    return prev;
}

void fx_prof_sink_free(fx_prof_sink *s)
{
    if (!s) return;
    free(s->events);
    memset(s, 0, sizeof *s);
}

uint64_t fx_prof_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const uint64_t ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    return ns ? ns : 1;
}

void fx_prof_enter(fx_prof_span *sp)
{
    fx_prof_sink *s = fx_prof_cur;
    if (!s) return;
    sp->s = s;
    if (s->depth++ > 0) {
        sp->on = 2;
        return;
    }
    sp->on = 1;
    s->part = 0;
    sp->t0 = fx_prof_clock_ns();
}

void fx_prof_leave(fx_prof_span *sp, int cat, int part_cat)
{
    fx_prof_sink *s = sp->s;
    s->depth--;
    if (sp->on != 1) return;
    const uint64_t total = fx_prof_clock_ns() - sp->t0;
    const uint64_t part = s->part < total ? s->part : total;
    fx_prof_event ev = {sp->t0, {0}};
    ev.ns[cat] += total - part;
    ev.ns[part_cat] += part;
    s->part = 0;
    for (int c = 0; c < FX_PROF_NCAT; c++) s->ns[c] += ev.ns[c];
    if (!s->log) return;
    if (s->nevents == s->cap) {
        /* grows rarely: a step's spans number in the hundreds for the library's models */
        const int64_t cap = s->cap ? 2 * s->cap : 1024;
        fx_prof_event *e = realloc(s->events, (size_t)cap * sizeof *e);
        if (!e) {
            s->dropped++;
            return;
        }
        s->events = e;
        s->cap = cap;
    }
    s->events[s->nevents++] = ev;
}

uint64_t fx_prof_part_start(void)
{
    if (!__atomic_load_n(&fx_prof_nsinks, __ATOMIC_RELAXED)) return 0;
    const fx_prof_sink *s = fx_prof_cur;
    return s && s->depth > 0 ? fx_prof_clock_ns() : 0;
}

void fx_prof_part_stop(uint64_t t0)
{
    if (!t0) return;
    fx_prof_sink *s = fx_prof_cur;
    if (s && s->depth > 0) s->part += fx_prof_clock_ns() - t0;
}
