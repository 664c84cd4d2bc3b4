/* The TSC as a clock of CLOCK_MONOTONIC ns: what the recorder (client/speedups/) and the function tracer
   (client/functions/tracer/) share, compiled into each (tsc_clock.c).

clock_gettime(CLOCK_MONOTONIC) costs about 20 ns where the kernel reads the TSC through the vDSO; rdtsc, a few. Where
the kernel's own clocksource is the TSC (so it has found it invariant and in step across CPUs), ticks read with rdtsc
are turned into CLOCK_MONOTONIC ns by the line through (ticks, ns) anchors: pairs read back to back, the rate
measured between two of them. Within an anchor's span that line is the kernel's own conversion up to its NTP slewing
(parts per million of the span) and the anchors' read jitter (tens of ns), so times line up with time.monotonic_ns().
Elsewhere (another clocksource, another architecture) there are no ticks: the callers read clock_gettime. */

#ifndef RINGTRACE_TSC_CLOCK_H
#define RINGTRACE_TSC_CLOCK_H

#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) && defined(__linux__)
#define RT_TSC 1 /* this build reads the TSC where the kernel's clocksource is the TSC */
#include <x86intrin.h>
#else
#define RT_TSC 0
#endif

/* A tick count and the CLOCK_MONOTONIC ns read at the same moment. */
typedef struct {
    int64_t ticks, ns;
} TscAnchor;

/* CLOCK_MONOTONIC in ns, or -1 where it cannot be read. */
static inline int64_t
tsc_clock_monotonic_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return -1;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#pragma GCC visibility push(hidden)

/* Whether the kernel's clocksource is the TSC (read once per call: callers keep the answer); 0 where RT_TSC is 0. */
int tsc_clock_usable(void);
/* The pair read closest together of a few, ticks taken halfway between the two reads around the clock's; where
   RT_TSC is 0, or use_tsc is 0, ticks are the ns. */
TscAnchor tsc_clock_anchor(int use_tsc);
/* ns per tick on the line from `from` to `to`, or 0 when `to` is not later in both. */
double tsc_clock_rate(TscAnchor from, TscAnchor to);

#pragma GCC visibility pop

#endif
