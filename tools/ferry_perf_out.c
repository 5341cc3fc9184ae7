/*
 * ferry_perf_out.c - ferry_perf's clock, statistics and output.
 *
 * The clock: on x86-64 with an invariant TSC (constant_tsc + nonstop_tsc in /proc/cpuinfo)
 * the cycle counter, calibrated once against CLOCK_MONOTONIC; it costs a few nanoseconds,
 * a fraction of a clock_gettime(), which matters when a whole ping-pong is 0.5 us.
 * Elsewhere CLOCK_MONOTONIC itself.
 *
 * Statistics: latency tests keep one sample per iteration; the figures are order statistics
 * (nearest rank) of the sorted samples, and the mean.  Units: microseconds; MB/s is 10^6
 * bytes per second (as OSU and MPI benchmarks report; ucx_perftest's "MB/s" is 2^20 bytes).
 *
 * Output: a table for people (one block per test, a header line saying what the columns
 * are), CSV (one header line, one row per measurement) and JSON (one document, streamed:
 * results are printed as they come, and the document is closed at the end).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ferry_perf.h"

/* ---- clock -------------------------------------------------------------------------------- */

static int perf_use_tsc;
static double perf_ns_per_tick = 1.0;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#if defined(__x86_64__)
static inline uint64_t rdtsc(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

static int tsc_invariant(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096];
    int constant = 0, nonstop = 0;
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "flags", 5) != 0)
            continue;
        constant = strstr(line, " constant_tsc") != NULL;
        nonstop = strstr(line, " nonstop_tsc") != NULL;
        break;
    }
    fclose(f);
    return constant && nonstop;
}
#endif

void perf_clock_init(void)
{
#if defined(__x86_64__)
    const char *e = getenv("FERRY_PERF_CLOCK");
    if ((e == NULL || strcmp(e, "monotonic") != 0) && tsc_invariant()) {
        uint64_t n0 = mono_ns(), c0 = rdtsc(), n1, c1;
        do { /* 20 ms: the ratio is then good to about 1e-5 */
            n1 = mono_ns();
            c1 = rdtsc();
        } while (n1 - n0 < 20000000ull);
        if (c1 > c0) {
            perf_ns_per_tick = (double)(n1 - n0) / (double)(c1 - c0);
            perf_use_tsc = 1;
        }
    }
#endif
}

uint64_t perf_ticks(void)
{
#if defined(__x86_64__)
    if (perf_use_tsc)
        return rdtsc();
#endif
    return mono_ns();
}

double perf_ticks_to_ns(uint64_t ticks)
{
    return (double)ticks * perf_ns_per_tick;
}

/* ---- statistics ----------------------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void perf_stats_latency(perf_result_t *r, uint64_t *ticks, uint64_t n, double divisor)
{
    r->has_lat = 1;
    if (n == 0)
        return;
    qsort(ticks, n, sizeof(*ticks), cmp_u64);
    double sum = 0, us = 1.0 / (1000.0 * divisor);
    for (uint64_t i = 0; i < n; i++)
        sum += (double)ticks[i];
#define PCT(q) (perf_ticks_to_ns(ticks[(uint64_t)((double)(n - 1) * (q) + 0.5)]) * us)
    r->lat_p50 = PCT(0.50);
    r->lat_p90 = PCT(0.90);
    r->lat_p99 = PCT(0.99);
#undef PCT
    r->lat_min = perf_ticks_to_ns(ticks[0]) * us;
    r->lat_max = perf_ticks_to_ns(ticks[n - 1]) * us;
    r->lat_avg = perf_ticks_to_ns(1) * sum / (double)n * us;
}

/* ---- output --------------------------------------------------------------------------------- */

static const char *lat_kind(perf_test_id_t t)
{
    return perf_tests[t].kind == PERF_KIND_PINGPONG ? "one-way" : "round-trip";
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

void perf_out_begin(perf_out_t *o)
{
    o->last_test = -1;
    o->nresults = 0;
    if (o->fmt == PERF_FMT_CSV) {
        fprintf(o->f, "test,size,iters,window,lat_kind,lat_avg_us,lat_p50_us,lat_p90_us,"
                      "lat_p99_us,lat_min_us,lat_max_us,bw_MBps,rate_per_s\n");
    } else if (o->fmt == PERF_FMT_JSON) {
        fprintf(o->f, "{\"tool\":\"ferry_perf\",\"version\":");
        json_str(o->f, ferry_version());
        fprintf(o->f, ",\"mode\":");
        json_str(o->f, o->mode);
        fprintf(o->f, ",\"tls\":");
        json_str(o->f, o->tls);
        fprintf(o->f,
                ",\"check\":%s,\"units\":{\"lat\":\"us\",\"bw\":\"MB/s (1e6 B/s)\","
                "\"rate\":\"per second\"},\n\"results\":[",
                o->check ? "true" : "false");
    } else {
        fprintf(o->f, "# ferry_perf %s   %s   FERRY_TLS=%s%s\n", ferry_version(), o->mode, o->tls,
                o->check ? "   (checked: every payload verified; timings include the checks)" : "");
        if (o->demo)
            fprintf(o->f,
                    "# Two processes: one measures, the other answers; both busy-poll.\n"
                    "#   am_lat  how long one message takes to arrive: one-way, in microseconds\n"
                    "#           (the median of all round trips / 2; lower is better)\n"
                    "#   am_bw   how fast a stream of messages flows: MB/s = 10^6 bytes/s, and\n"
                    "#           messages/s (a window of messages in flight; higher is better)\n");
    }
    fflush(o->f);
}

static void table_header(perf_out_t *o, perf_test_id_t t)
{
    const perf_test_desc_t *d = &perf_tests[t];
    fprintf(o->f, "#\n# %s: %s\n", d->name, d->doc);
    if (d->kind == PERF_KIND_BW)
        fprintf(o->f, "#%11s %10s %7s %12s %14s\n", "size", "iters", "window", "MB/s", "msgs/s");
    else
        fprintf(o->f, "#%11s %10s %10s %10s %10s %10s %10s   %s latency, us\n", "size", "iters",
                "median", "p90", "p99", "min", "avg", lat_kind(t));
}

static void size_str(char *buf, size_t len, size_t size)
{
    if (size >= (1u << 20) && size % (1u << 20) == 0)
        snprintf(buf, len, "%zuM", size >> 20);
    else if (size >= 1024 && size % 1024 == 0)
        snprintf(buf, len, "%zuK", size >> 10);
    else
        snprintf(buf, len, "%zu", size);
}

void perf_out_result(perf_out_t *o, const perf_result_t *r)
{
    const perf_test_desc_t *d = &perf_tests[r->test];
    char sz[32];
    if (o->fmt == PERF_FMT_TABLE) {
        if (o->last_test != (int)r->test)
            table_header(o, r->test);
        o->last_test = (int)r->test;
        size_str(sz, sizeof(sz), r->size);
        if (r->has_bw)
            fprintf(o->f, " %11s %10llu %7u %12.1f %14.0f\n", sz, (unsigned long long)r->iters,
                    r->window, r->bw_mbs, r->rate);
        else
            fprintf(o->f, " %11s %10llu %10.3f %10.3f %10.3f %10.3f %10.3f\n", sz,
                    (unsigned long long)r->iters, r->lat_p50, r->lat_p90, r->lat_p99, r->lat_min,
                    r->lat_avg);
    } else if (o->fmt == PERF_FMT_CSV) {
        fprintf(o->f, "%s,%zu,%llu,%u,", d->name, r->size, (unsigned long long)r->iters, r->window);
        if (r->has_lat)
            fprintf(o->f, "%s,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,,\n", lat_kind(r->test), r->lat_avg,
                    r->lat_p50, r->lat_p90, r->lat_p99, r->lat_min, r->lat_max);
        else
            fprintf(o->f, ",,,,,,,%.2f,%.0f\n", r->bw_mbs, r->rate);
    } else {
        fprintf(o->f,
                "%s\n {\"test\":\"%s\",\"available\":true,\"size\":%zu,\"iters\":%llu,"
                "\"window\":%u,",
                o->nresults ? "," : "", d->name, r->size, (unsigned long long)r->iters, r->window);
        if (r->has_lat)
            fprintf(o->f,
                    "\"lat_kind\":\"%s\",\"lat_us\":{\"avg\":%.4f,\"p50\":%.4f,"
                    "\"median\":%.4f,\"p90\":%.4f,\"p99\":%.4f,\"min\":%.4f,\"max\":%.4f}}",
                    lat_kind(r->test), r->lat_avg, r->lat_p50, r->lat_p50, r->lat_p90, r->lat_p99,
                    r->lat_min, r->lat_max);
        else
            fprintf(o->f, "\"bw_MBps\":%.2f,\"rate_per_s\":%.0f}", r->bw_mbs, r->rate);
    }
    o->nresults++;
    fflush(o->f);
}

void perf_out_unavailable(perf_out_t *o, perf_test_id_t test, const char *why)
{
    const char *name = perf_tests[test].name;
    if (o->fmt == PERF_FMT_TABLE) {
        fprintf(o->f, "#\n# %s: not available (%s)\n", name, why);
        o->last_test = -1;
    } else if (o->fmt == PERF_FMT_CSV) {
        fprintf(stderr, "ferry_perf: %s: not available (%s)\n", name, why);
    } else {
        fprintf(o->f,
                "%s\n {\"test\":\"%s\",\"available\":false,\"reason\":", o->nresults ? "," : "",
                name);
        json_str(o->f, why);
        fputc('}', o->f);
        o->nresults++;
    }
    fflush(o->f);
}

void perf_out_end(perf_out_t *o, int errors)
{
    if (o->fmt == PERF_FMT_JSON)
        fprintf(o->f, "\n],\"verification_errors\":%d}\n", errors);
    else if (o->fmt == PERF_FMT_TABLE && o->check)
        fprintf(o->f, "#\n# verification: %s (%d errors)\n", errors ? "FAILED" : "passed", errors);
    if (o->fmt == PERF_FMT_TABLE && o->demo)
        fprintf(
            o->f,
            "#\n# More: ferry_perf -h (tests: am_rate, put/get, atomics, ...), FERRY_TLS=tcp or\n"
            "# udp to change transport, -f csv|json, docs/perf.md; ferry_info for the host.\n");
    fflush(o->f);
}
