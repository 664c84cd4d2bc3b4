/* The TSC's calibration against CLOCK_MONOTONIC (see tsc_clock.h): the kernel's clocksource, anchors, rates. */

#include "tsc_clock.h"

#include <stdio.h>
#include <string.h>

int
tsc_clock_usable(void)
{
#if RT_TSC
    FILE *file = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (file == NULL) return 0;
    char name[32] = {0};
    int found = fgets(name, sizeof(name), file) != NULL && strncmp(name, "tsc", 3) == 0 &&
                (name[3] == '\n' || name[3] == '\0');
    fclose(file);
    return found;
#else
    return 0;
#endif
}

TscAnchor
tsc_clock_anchor(int use_tsc)
{
    TscAnchor anchor;
#if RT_TSC
    if (use_tsc) {
        /* the pair read closest together of a few: the least chance of an interruption between its two reads */
        int64_t best = INT64_MAX;
        anchor.ticks = anchor.ns = 0;
        for (int i = 0; i < 5; i++) {
            int64_t before = (int64_t)__rdtsc();
            int64_t ns = tsc_clock_monotonic_ns();
            int64_t after = (int64_t)__rdtsc();
            if (after - before < best) {
                best = after - before;
                anchor.ticks = before + (after - before) / 2;
                anchor.ns = ns;
            }
        }
        return anchor;
    }
#endif
    (void)use_tsc;
    anchor.ns = anchor.ticks = tsc_clock_monotonic_ns();
    return anchor;
}

double
tsc_clock_rate(TscAnchor from, TscAnchor to)
{
    if (to.ticks <= from.ticks || to.ns <= from.ns) return 0.0;
    return (double)(to.ns - from.ns) / (double)(to.ticks - from.ticks);
}
