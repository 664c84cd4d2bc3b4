/* The recorder's clock: the TSC read as CLOCK_MONOTONIC ns where the kernel's clocksource is the TSC (see
   client/clock/tsc_clock.h), the monotonic clock as read elsewhere; and clock_ns(), clock_source() and
   clock_offset(), for the tests and the benchmark to hold it to time.monotonic_ns().

An event's time is taken where it happens and kept as a Python int, so the ticks are turned into ns as they are read:
ns = anchor_ns + (ticks - anchor_ticks) * rate, one multiply. The anchor, a (ticks, ns) pair read back to back, is read
again once it is REFRESH_NS old (by the first read past that, on the recording thread: ~150 ns each REFRESH_NS), so
the line never runs further than that from the clock it stands for; the rate is measured again between anchors at
least RATE_SPAN_NS apart, so it follows the kernel's NTP slewing. The first rate is measured between the anchor read
at the module's start and the first read at least CALIBRATION_NS later: until then the clock is the monotonic clock
as read, so that importing costs no wait. A time is never earlier than the last one handed out (now_ns, speedups.h):
where a new anchor puts the line a few ns back, the clock stands still for those. */

#include "speedups.h"

/* The anchor is read again this long after the last one: the drift between two reads is at most the rate's error
   times this (measured: benchmarks/bench_scope_floor.py). */
#define REFRESH_NS 100000000
/* The rate is measured between anchors at least this far apart: their read jitter (tens of ns) is then parts per
   hundred million of the span. */
#define RATE_SPAN_NS 1000000000
/* The first rate: measured over at least this. */
#define CALIBRATION_NS 10000000

/* Takes `rate` (ns per tick) as the clock's, or returns 0 when it is not a TSC's (between 10 MHz and 100 GHz). */
static int
set_rate(RecorderClock *clock, double rate)
{
    if (!(rate > 0.01 && rate < 100.0)) return 0;
    clock->ns_per_tick_q32 = (uint64_t)(rate * 4294967296.0 + 0.5);
    clock->refresh_ticks = (uint64_t)(REFRESH_NS / rate);
    return 1;
}

int64_t
recorder_clock_reanchor(RecorderClock *clock)
{
    TscAnchor now = tsc_clock_anchor(1);
    if (now.ns - clock->rate_from.ns >= RATE_SPAN_NS) {
        set_rate(clock, tsc_clock_rate(clock->rate_from, now)); /* a bad measure keeps the last rate */
        clock->rate_from = now;
    }
    clock->anchor_ticks = now.ticks;
    clock->anchor_ns = now.ns;
    return now.ns;
}

int64_t
recorder_clock_calibrate(RecorderClock *clock, int64_t now_ns)
{
    TscAnchor now = tsc_clock_anchor(1);
    clock->calibrate_at_ns = 0;
    if (!set_rate(clock, tsc_clock_rate(clock->rate_from, now))) return now_ns; /* the monotonic clock it stays */
    clock->rate_from = now;
    clock->anchor_ticks = now.ticks;
    clock->anchor_ns = now.ns;
    clock->use_tsc = 1;
    return now.ns;
}

void
recorder_clock_start(RecorderClock *clock)
{
    memset(clock, 0, sizeof(*clock));
    if (tsc_clock_usable()) {
        clock->rate_from = tsc_clock_anchor(1);
        clock->calibrate_at_ns = clock->rate_from.ns + CALIBRATION_NS;
    }
}

/* clock_ns(): the recorder's clock now, as an event would be stamped. */
PyObject *
module_clock_ns(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return now_ns_object(PyModule_GetState(module));
}

/* clock_source(): "tsc" once the recorder reads the TSC, else "monotonic". */
PyObject *
module_clock_source(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    ModuleState *state = PyModule_GetState(module);
    return PyUnicode_FromString(state->clock.use_tsc ? "tsc" : "monotonic");
}

/* clock_offset(): (low, high), ns between which the recorder's clock less CLOCK_MONOTONIC lies now: the recorder's
   clock read just before and just after the monotonic clock, each less that reading. */
PyObject *
module_clock_offset(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    ModuleState *state = PyModule_GetState(module);
    int64_t before, after, monotonic;
    if (now_ns(state, &before) < 0) return NULL;
    monotonic = tsc_clock_monotonic_ns();
    if (now_ns(state, &after) < 0) return NULL;
    return Py_BuildValue("(LL)", (long long)(before - monotonic), (long long)(after - monotonic));
}
