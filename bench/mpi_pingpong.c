/*
 * mpi_pingpong.c - the MPI reference of bench/run.sh: a ping-pong and a windowed bandwidth
 * test between ranks 0 and 1, measured the way ferry_perf measures, so that the figures of
 * Open MPI and MPICH sit beside ferry's on equal terms.
 *
 *   mpirun -np 2 mpi_pingpong -t lat|bw [-s 8,64,1k] [-n iters] [-w warmup] [-W window]
 *                             [-C cpu0,cpu1]
 *
 *   lat  MPI_Send / MPI_Recv ping-pong; one sample per iteration (one clock read), one-way
 *        latency = round trip / 2; prints the median, the minimum and the mean in us.
 *   bw   the osu_bw scheme: rank 0 posts W MPI_Isend and waits for them, rank 1 posts W
 *        MPI_Irecv and waits, then sends a 0-byte acknowledgement; MB/s (10^6 bytes) and
 *        messages/s from the end of warm-up to the last acknowledgement.
 *
 * Output, one CSV line per size on rank 0:
 *   lat,<size>,<iters>,<median_us>,<min_us>,<avg_us>
 *   bw,<size>,<iters>,<window>,<MBps>,<msgs_per_s>
 *
 * -C pins rank i to the i-th cpu with sched_setaffinity, exactly as ferry_perf -C does, so
 * every system in a comparison is pinned the same way whatever its launcher does.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'k' || *end == 'K')
        v *= 1024;
    else if (*end == 'm' || *end == 'M')
        v *= 1024 * 1024;
    return (size_t)v;
}

static long clamp(long long v, long lo, long hi)
{
    return v < lo ? lo : v > hi ? hi : (long)v;
}

static void pin(const char *list, int rank)
{
    int cpus[64], n = 0;
    char *copy = strdup(list), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t && n < 64; t = strtok_r(NULL, ",", &save))
        cpus[n++] = atoi(t);
    free(copy);
    if (n == 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[rank % n], &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
        perror("mpi_pingpong: sched_setaffinity");
}

static void lat(int rank, char *buf, size_t size, long iters, long warmup)
{
    double *samples = malloc(sizeof(double) * (size_t)iters), t_prev;
    int peer = 1 - rank;
    MPI_Barrier(MPI_COMM_WORLD);
    t_prev = now_us();
    for (long i = 0; i < warmup + iters; i++) {
        if (rank == 0) {
            MPI_Send(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            double t = now_us();
            if (i >= warmup)
                samples[i - warmup] = (t - t_prev) / 2;
            t_prev = t;
        } else {
            MPI_Recv(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)size, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) {
        double sum = 0;
        for (long i = 0; i < iters; i++)
            sum += samples[i];
        qsort(samples, (size_t)iters, sizeof(double), cmp_double);
        printf("lat,%zu,%ld,%.4f,%.4f,%.4f\n", size, iters, samples[(iters - 1) / 2], samples[0],
               sum / (double)iters);
        fflush(stdout);
    }
    free(samples);
}

static void bw(int rank, char *buf, size_t size, long iters, long warmup, int window)
{
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)window);
    MPI_Status *sts = malloc(sizeof(MPI_Status) * (size_t)window); /* as osu_bw */
    long nwin = (warmup + iters) / window, wwin = warmup / window;
    double t0 = 0;
    int peer = 1 - rank;
    MPI_Barrier(MPI_COMM_WORLD);
    for (long w = 0; w < nwin; w++) {
        if (w == wwin)
            t0 = now_us();
        for (int j = 0; j < window; j++) {
            if (rank == 0)
                MPI_Isend(buf, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[j]);
            else
                MPI_Irecv(buf, (int)size, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[j]);
        }
        MPI_Waitall(window, req, sts);
        if (rank == 0)
            MPI_Recv(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else
            MPI_Send(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
    }
    if (rank == 0) {
        double sec = (now_us() - t0) / 1e6;
        long n = (nwin - wwin) * window;
        printf("bw,%zu,%ld,%d,%.2f,%.0f\n", size, n, window, (double)size * (double)n / sec / 1e6,
               (double)n / sec);
        fflush(stdout);
    }
    free(req);
    free(sts);
}

int main(int argc, char **argv)
{
    const char *test = "lat", *cpus = NULL;
    char sizes_arg[256] = "8";
    long iters = 0, warmup = -1;
    int window = 64, rank, nranks, c;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    while ((c = getopt(argc, argv, "t:s:n:w:W:C:")) != -1) {
        switch (c) {
        case 't':
            test = optarg;
            break;
        case 's':
            snprintf(sizes_arg, sizeof(sizes_arg), "%s", optarg);
            break;
        case 'n':
            iters = atol(optarg);
            break;
        case 'w':
            warmup = atol(optarg);
            break;
        case 'W':
            window = atoi(optarg);
            break;
        case 'C':
            cpus = optarg;
            break;
        default:
            if (rank == 0)
                fprintf(stderr, "usage: mpi_pingpong -t lat|bw [-s sizes] [-n iters] [-w warmup] "
                                "[-W window] [-C cpus]\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (nranks != 2 || window < 1 || (strcmp(test, "lat") != 0 && strcmp(test, "bw") != 0)) {
        if (rank == 0)
            fprintf(stderr, "mpi_pingpong: needs 2 ranks and -t lat or bw\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (cpus != NULL)
        pin(cpus, rank);

    for (char *save = NULL, *t = strtok_r(sizes_arg, ",", &save); t;
         t = strtok_r(NULL, ",", &save)) {
        size_t size = parse_size(t);
        long n = iters;
        if (n <= 0) /* the same defaults as ferry_perf */
            n = strcmp(test, "bw") == 0
                    ? clamp((1ll << 30) / (long long)(size ? size : 1), 100, 1000000)
                    : clamp((256ll << 20) / (long long)(size ? size : 1), 100, 100000);
        long w = warmup >= 0 ? warmup : (n / 10 > 10 ? n / 10 : 10);
        char *buf = malloc(size ? size : 1);
        memset(buf, 1, size ? size : 1);
        if (strcmp(test, "lat") == 0) {
            lat(rank, buf, size, n, w);
        } else {
            n = (n + window - 1) / window * window;
            w = (w + window - 1) / window * window;
            bw(rank, buf, size, n, w, window);
        }
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
