/* The clock of call records: ticks on the hot path, ns on the monotonic clock in what drain() hands over. The
kernel's clocksource, the anchors and the rates are the recorder's too (client/clock/tsc_clock.c).

clock_gettime(CLOCK_MONOTONIC) costs about as much as the rest of a traced call together where the kernel reads the
TSC through the vDSO, and a call reads the clock twice. Where the kernel's own clocksource is the TSC (so it has found
it invariant and in step across CPUs), a record holds the TSC as it is read (rdtsc, a few ns), and drain() turns
ticks into CLOCK_MONOTONIC ns by the line through two anchors, (ticks, ns) pairs read back to back: the last anchor at
least ANCHOR_SPAN_NS old, and one read at the drain. Within a drain's span that line is the kernel's own conversion,
up to its NTP slewing (parts per million of the span), so records line up with time.monotonic_ns() to well under a
microsecond; when the span is shorter, the rate of the last long span (or of a short measure at the first start())
is used. Elsewhere (another clocksource, another architecture) ticks are ns from clock_gettime and nothing is turned.
*/

#include "tracer.h"

#if RT_TSC
int rt_use_tsc = -1;
#endif

/* An anchor spans at least this before it is replaced: shorter, and the read-to-read jitter of its two clocks shows. */
#define ANCHOR_SPAN_NS 50000000
/* The first start()'s measure of the rate: this long. */
#define CALIBRATION_NS 2000000

typedef TscAnchor Anchor;

static Anchor
read_anchor(void)
{
#if RT_TSC
    return tsc_clock_anchor(rt_use_tsc);
#else
    return tsc_clock_anchor(0);
#endif
}

static double tsc_ns_per_tick = 1.0; /* the last rate measured, kept for short spans and the next tracer */

void
rt_clock_init(void)
{
#if RT_TSC
    if (rt_use_tsc < 0) {
        rt_use_tsc = tsc_clock_usable();
        if (rt_use_tsc) {
            Anchor first = read_anchor(), last;
            do {
                last = read_anchor();
            } while (last.ns - first.ns < CALIBRATION_NS);
            tsc_ns_per_tick = tsc_clock_rate(first, last);
            if (tsc_ns_per_tick == 0.0) {
                tsc_ns_per_tick = 1.0;
                rt_use_tsc = 0;
            }
        }
    }
#endif
}

void
rt_clock_start(Tracer *self)
{
    Anchor anchor = read_anchor();
    self->anchor_ticks = anchor.ticks;
    self->anchor_ns = anchor.ns;
    self->ns_per_tick = tsc_ns_per_tick;
#if RT_TSC
    if (rt_use_tsc) {
        self->min_duration_ticks = (int64_t)((double)self->min_duration_ns / tsc_ns_per_tick);
        return;
    }
#endif
    self->min_duration_ticks = self->min_duration_ns;
}

void
rt_clock_line(Tracer *self, int64_t *ticks, int64_t *ns, double *ns_per_tick)
{
#if RT_TSC
    if (rt_use_tsc) {
        Anchor now = read_anchor();
        Anchor last = {self->anchor_ticks, self->anchor_ns};
        double rate = tsc_clock_rate(last, now);
        if (now.ns - self->anchor_ns >= ANCHOR_SPAN_NS && rate != 0.0) {
            self->ns_per_tick = rate;
            tsc_ns_per_tick = self->ns_per_tick;
            *ticks = self->anchor_ticks;
            *ns = self->anchor_ns;
            *ns_per_tick = self->ns_per_tick;
            self->anchor_ticks = now.ticks; /* the next span starts here */
            self->anchor_ns = now.ns;
            return;
        }
        *ticks = self->anchor_ticks;
        *ns = self->anchor_ns;
        *ns_per_tick = self->ns_per_tick;
        return;
    }
#endif
    *ticks = *ns = 0;
    *ns_per_tick = 0.0; /* ticks are ns */
}

void
rt_ticks_to_ns(char *records, Py_ssize_t size, int64_t ticks, int64_t ns, double ns_per_tick)
{
    if (ns_per_tick == 0.0) {
        return;
    }
    for (Py_ssize_t offset = 0; offset + RT_RECORD_SIZE <= size; offset += RT_RECORD_SIZE) {
        for (int field = 0; field < 2; field++) {
            int64_t value;
            memcpy(&value, records + offset + field * 8, 8);
            value = ns + (int64_t)((double)(value - ticks) * ns_per_tick);
            memcpy(records + offset + field * 8, &value, 8);
        }
    }
}
