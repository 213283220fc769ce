/* base/clock.h - monotonic time. */
#ifndef RP_BASE_CLOCK_H
#define RP_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t rp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline double rp_now_s(void) { return (double)rp_now_ns() * 1e-9; }

#endif
