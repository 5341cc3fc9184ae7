/*
 * fuzz_boot_server.c - libFuzzer target for the messages ranks send to ferryrun's bootstrap
 * server (tools/ferryrun_server.c, protocol in src/boot/builtin_wire.h): HELLO, PUT, FENCE,
 * GET, STATUS, FINALIZE, and anything else, from anyone who can connect to its port.  For
 * each input a server for a job of two ranks is created on its own epoll set; two clients
 * connect and send their part of the input (the first byte says where the input is split and
 * whether rank 0's process is reported gone midway), then end their streams, and the server's
 * events are handled until it has nothing left to do.  The server must answer or drop each
 * client, never crash, leak or spin.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "boot/builtin_wire.h"
#include "ferryrun.h"
#include "fuzz_common.h"

static void hello(fy_wire_buf_t *m, uint32_t rank)
{
    fy_wire_begin(m, FY_WIRE_HELLO);
    fy_wire_u32(m, FY_WIRE_VERSION);
    fy_wire_u32(m, rank);
    fy_wire_u32(m, 2);
    fy_wire_u32(m, 1000 + rank);
    fy_wire_u16(m, 4);
    fy_wire_bytes(m, "fuzz", 4);
    fy_wire_u16(m, 6);
    fy_wire_bytes(m, "secret", 6);
    fy_wire_end(m);
}

static void rank_msgs(fy_wire_buf_t *m, uint32_t rank)
{
    hello(m, rank);
    fy_wire_begin(m, FY_WIRE_PUT);
    fy_wire_u16(m, 4);
    fy_wire_bytes(m, "addr", 4);
    fy_wire_u32(m, 3);
    fy_wire_bytes(m, "abc", 3);
    fy_wire_end(m);
    fy_wire_begin(m, FY_WIRE_FENCE);
    fy_wire_u32(m, 0);
    fy_wire_end(m);
    fy_wire_begin(m, FY_WIRE_GET);
    fy_wire_u32(m, 1 - rank);
    fy_wire_u16(m, 4);
    fy_wire_bytes(m, "addr", 4);
    fy_wire_end(m);
    fy_wire_begin(m, FY_WIRE_STATUS);
    fy_wire_end(m);
    fy_wire_begin(m, FY_WIRE_FINALIZE);
    fy_wire_end(m);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_quiet();
    /* seed: both ranks through a whole job, the split after rank 0's messages */
    fy_wire_buf_t m = {0};
    rank_msgs(&m, 0);
    size_t split = m.len;
    rank_msgs(&m, 1);
    uint8_t sel[3] = {0, (uint8_t)(split >> 8), (uint8_t)split};
    fz_seed("two_ranks", sel, 3, m.data, m.len);
    sel[0] = 1; /* rank 0 reported gone */
    fz_seed("rank_gone", sel, 3, m.data, m.len);
    fy_wire_buf_free(&m);
    return 0;
}

static int connect_to(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Handle the server's events until there are none for a while (bounded). */
static void serve(fy_run_server_t *s, int epfd)
{
    struct epoll_event ev[16];
    int idle = 0;
    for (int round = 0; round < 2000 && idle < 2; round++) {
        int n = epoll_wait(epfd, ev, 16, 0); /* loopback: what was sent is there */
        idle = n <= 0 ? idle + 1 : 0;
        for (int i = 0; i < n; i++)
            fy_run_server_event(s, ev[i].data.u64, ev[i].events);
    }
}

/* Send and end one client's stream; read what the server answered (so it never blocks). */
static void send_part(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w <= 0)
            break;
        p += w;
        n -= (size_t)w;
    }
}

static void drain(int fd)
{
    char sink[4096];
    while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    int gone = data[0] & 1;
    size_t split = (size_t)data[1] << 8 | data[2];
    data += 3, size -= 3;
    if (split > size)
        split = size;

    int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0)
        return 0;
    fy_run_server_t *s = NULL;
    char addr[64];
    if (fy_run_server_create(2, "fuzz", "secret", epfd, addr, sizeof(addr), &s) != 0) {
        close(epfd);
        return 0;
    }
    int c0 = connect_to(addr), c1 = connect_to(addr);
    serve(s, epfd); /* accept both */
    if (c0 >= 0)
        send_part(c0, data, split);
    serve(s, epfd);
    if (gone)
        fy_run_server_rank_exited(s, 0, "exited with status 1");
    if (c1 >= 0)
        send_part(c1, data + split, size - split);
    serve(s, epfd);
    for (int i = 0; i < 2; i++) {
        int fd = i == 0 ? c0 : c1;
        if (fd < 0)
            continue;
        drain(fd);
        shutdown(fd, SHUT_WR);
    }
    serve(s, epfd);
    fy_run_server_destroy(s);
    if (c0 >= 0)
        close(c0);
    if (c1 >= 0)
        close(c1);
    close(epfd);
    return 0;
}
