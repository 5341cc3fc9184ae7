/*
 * fuzz_boot_client.c - libFuzzer target for the messages ferryrun's bootstrap server sends to
 * a rank (src/boot/boot_builtin.c, protocol in src/boot/builtin_wire.h): WELCOME, FENCE_DONE,
 * GET_REPLY, STATUS_REPLY, ERROR, and anything else.  A thread plays the server on a
 * loopback listening socket: for each input it accepts the rank's connection, writes the
 * input (after one selector byte) as the server's whole stream and, unless the selector asks
 * to hold the connection open (for 5 ms), ends it.  The rank side runs init, a put, a fence, two
 * gets and finalize against it.  Held open, the fence times out at once, so the rank asks the
 * server who is missing and parses the STATUS_REPLY the input holds.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "boot/boot_int.h"
#include "boot/builtin_wire.h"
#include "fuzz_common.h"

static int lfd;
static const uint8_t *in_data;
static size_t in_size;
static int in_hold;
static sem_t go, written, finish, done;

static void *server(void *arg)
{
    for (;;) {
        sem_wait(&go);
        int fd = accept(lfd, NULL, NULL);
        if (fd >= 0) {
            size_t off = 0;
            while (off < in_size) {
                ssize_t w = send(fd, in_data + off, in_size - off, MSG_NOSIGNAL);
                if (w <= 0)
                    break;
                off += (size_t)w;
            }
            if (!in_hold)
                shutdown(fd, SHUT_WR);
        }
        sem_post(&written);
        if (in_hold) {
            /* held open for 5 ms: long enough for the fence's 1 ms timeout, short enough
             * that the STATUS wait (seconds) ends with the stream, not with its deadline */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 5000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            sem_timedwait(&finish, &ts);
            if (fd >= 0)
                shutdown(fd, SHUT_WR);
        }
        if (fd >= 0) {
            char sink[4096];
            while (recv(fd, sink, sizeof(sink), 0) > 0) {
            }
            close(fd);
        }
        sem_post(&done);
    }
    return NULL;
}

static void seeds(void)
{
    fy_wire_buf_t m = {0};
    uint8_t sel = 0;
    fy_wire_begin(&m, FY_WIRE_WELCOME);
    fy_wire_u32(&m, FY_WIRE_VERSION);
    fy_wire_u32(&m, 2);
    fy_wire_u32(&m, 0);
    fy_wire_end(&m);
    size_t welcome = m.len;
    fy_wire_begin(&m, FY_WIRE_FENCE_DONE);
    fy_wire_u32(&m, 0);
    fy_wire_end(&m);
    fy_wire_begin(&m, FY_WIRE_GET_REPLY);
    fy_wire_u32(&m, 0);
    fy_wire_u32(&m, 5);
    fy_wire_bytes(&m, "hello", 5);
    fy_wire_end(&m);
    fy_wire_begin(&m, FY_WIRE_GET_REPLY);
    fy_wire_u32(&m, (uint32_t)FERRY_ERR_NO_ELEM);
    fy_wire_u32(&m, 0);
    fy_wire_end(&m);
    fz_seed("normal_job", &sel, 1, m.data, m.len);

    m.len = welcome; /* a fence that never completes: the rank asks for the status */
    fy_wire_begin(&m, FY_WIRE_STATUS_REPLY);
    fy_wire_u32(&m, 0);
    fy_wire_u32(&m, 2);
    fy_wire_u32(&m, 1);
    fy_wire_u32(&m, 1);
    fy_wire_u8(&m, FY_WIRE_RANK_GONE);
    fy_wire_end(&m);
    sel = 1;
    fz_seed("fence_status", &sel, 1, m.data, m.len);

    m.len = 0;
    fy_wire_begin(&m, FY_WIRE_ERROR);
    fy_wire_u32(&m, (uint32_t)FERRY_ERR_BOOTSTRAP);
    fy_wire_u16(&m, 9);
    fy_wire_bytes(&m, "wrong key", 9);
    fy_wire_end(&m);
    sel = 0;
    fz_seed("refused", &sel, 1, m.data, m.len);
    fy_wire_buf_free(&m);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_quiet();
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FZ_CHECK(lfd >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sin);
    FZ_CHECK(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) == 0 && listen(lfd, 16) == 0 &&
             getsockname(lfd, (struct sockaddr *)&sin, &sl) == 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)ntohs(sin.sin_port));
    setenv("FERRY_BOOT_ADDR", addr, 1);
    setenv("FERRY_SIZE", "2", 1);
    setenv("FERRY_RANK", "1", 1);
    setenv("FERRY_JOB_KEY", "fuzz", 1);
    sem_init(&go, 0, 0);
    sem_init(&written, 0, 0);
    sem_init(&finish, 0, 0);
    sem_init(&done, 0, 0);
    pthread_t t;
    FZ_CHECK(pthread_create(&t, NULL, server, NULL) == 0);
    pthread_detach(t);
    seeds();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    in_hold = data[0] & 1;
    in_data = data + 1;
    in_size = size - 1;
    sem_post(&go);

    fy_boot_t boot;
    memset(&boot, 0, sizeof(boot));
    boot.ops = &fy_boot_builtin_ops;
    boot.timeout_ns = 5000000000ull; /* the stream ends (or holds the answer) long before */
    ferry_status_t st = boot.ops->init(&boot);
    sem_wait(&written); /* the whole input is in the rank's socket now */
    if (st == FERRY_OK) {
        char out[64];
        size_t n = sizeof(out);
        boot.ops->put(&boot, "x", "hello", 5);
        if (in_hold)
            boot.timeout_ns = 1000000; /* 1 ms: no FENCE_DONE in the input = a timeout */
        boot.ops->fence(&boot);
        boot.ops->get(&boot, 0, "x", out, &n);
        n = 2;
        boot.ops->get(&boot, 1, "x", out, &n);
        boot.ops->finalize(&boot);
    }
    if (in_hold)
        sem_post(&finish);
    sem_wait(&done);
    if (in_hold)
        while (sem_trywait(&finish) == 0) { /* not taken by a thread that timed out */
        }
    return 0;
}
