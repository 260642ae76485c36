/*
 * Shared by the benchmark programs, with no device state: a monotonic wall
 * clock, the comparisons qsort needs for doubles and floats, and the
 * median.
 */
#ifndef TK_BENCH_STATS_H
#define TK_BENCH_STATS_H

#include <stdlib.h>
#include <time.h>

/* Monotonic wall clock, seconds. */
static inline double bench_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The same, milliseconds. */
static inline double bench_now_ms(void)
{
    return bench_wall_s() * 1e3;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline int bench_cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (n > 0); sorts v in place. */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif /* TK_BENCH_STATS_H */
