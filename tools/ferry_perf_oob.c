/*
 * ferry_perf_oob.c - the out-of-band step of ferry_perf's server mode: how a client that was
 * given only "host:port" gets the server's worker address.
 *
 * The server listens on a TCP port; a client connects, reads one record and closes:
 *
 *   0        8        12
 *   | "FPERFADR" | len (u32, network order) | worker address (len bytes) |
 *
 * That is all TCP is used for.  Everything else (the test parameters, the client's own
 * address, the remote keys) travels in ferry active messages over the endpoint the client
 * creates from that address, so the same session code serves ferryrun, server/client and
 * `-a <hex>` (an address pasted from the server's output).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ferry_perf.h"

#define OOB_MAGIC    "FPERFADR"
#define OOB_MAX_ADDR (1u << 20)

char *perf_hex_encode(const void *buf, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *b = buf;
    char *s = malloc(2 * len + 1);
    if (s == NULL)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        s[2 * i] = digits[b[i] >> 4];
        s[2 * i + 1] = digits[b[i] & 15];
    }
    s[2 * len] = '\0';
    return s;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

ferry_status_t perf_hex_decode(const char *hex, void **buf, size_t *len)
{
    size_t n = strlen(hex);
    if (n == 0 || n % 2 != 0)
        return FERRY_ERR_INVALID_ADDR;
    uint8_t *b = malloc(n / 2);
    if (b == NULL)
        return FERRY_ERR_NO_MEMORY;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(b);
            return FERRY_ERR_INVALID_ADDR;
        }
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    *buf = b;
    *len = n / 2;
    return FERRY_OK;
}

int perf_oob_listen(unsigned short port, unsigned short *port_p)
{
    struct sockaddr_in6 sa;
    socklen_t sl = sizeof(sa);
    int one = 1, zero = 0;
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        /* no IPv6 in this kernel: IPv4 only */
        struct sockaddr_in s4;
        if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
            return -1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        memset(&s4, 0, sizeof(s4));
        s4.sin_family = AF_INET;
        s4.sin_port = htons(port);
        s4.sin_addr.s_addr = htonl(INADDR_ANY);
        sl = sizeof(s4);
        if (bind(fd, (struct sockaddr *)&s4, sl) < 0 || listen(fd, 8) < 0 ||
            getsockname(fd, (struct sockaddr *)&s4, &sl) < 0)
            goto fail;
        *port_p = ntohs(s4.sin_port);
        fcntl(fd, F_SETFL, O_NONBLOCK);
        return fd;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)); /* IPv4 clients too */
    memset(&sa, 0, sizeof(sa));
    sa.sin6_family = AF_INET6;
    sa.sin6_port = htons(port);
    sa.sin6_addr = in6addr_any;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 8) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
        goto fail;
    *port_p = ntohs(sa.sin6_port);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
fail:
    close(fd);
    return -1;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *b = buf;
    while (len > 0) {
        ssize_t n = write(fd, b, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
    uint8_t *b = buf;
    while (len > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 10000) <= 0)
            return -1; /* 10 s without a byte: the peer is not a ferry_perf server */
        ssize_t n = read(fd, b, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        b += n;
        len -= (size_t)n;
    }
    return 0;
}

int perf_oob_serve(int lfd, const void *addr, size_t len)
{
    int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0)
        return 0; /* nobody waiting */
    uint32_t nlen = htonl((uint32_t)len);
    int ok = write_all(c, OOB_MAGIC, 8) == 0 && write_all(c, &nlen, 4) == 0 &&
             write_all(c, addr, len) == 0;
    close(c);
    return ok ? 1 : -1;
}

ferry_status_t perf_oob_fetch(const char *host, unsigned short port, void **addr, size_t *len)
{
    struct addrinfo hints, *res = NULL, *ai;
    char svc[16], magic[8];
    uint32_t nlen;
    int fd = -1, rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(svc, sizeof(svc), "%u", port);
    if ((rc = getaddrinfo(host, svc, &hints, &res)) != 0) {
        fprintf(stderr, "ferry_perf: cannot resolve %s: %s\n", host, gai_strerror(rc));
        return FERRY_ERR_UNREACHABLE;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        fprintf(stderr, "ferry_perf: cannot connect to %s:%u: %s (is `ferry_perf -l` running?)\n",
                host, port, strerror(errno));
        return FERRY_ERR_UNREACHABLE;
    }
    if (read_all(fd, magic, 8) != 0 || memcmp(magic, OOB_MAGIC, 8) != 0 ||
        read_all(fd, &nlen, 4) != 0 || (nlen = ntohl(nlen)) == 0 || nlen > OOB_MAX_ADDR) {
        fprintf(stderr, "ferry_perf: %s:%u did not send a ferry_perf server address\n", host, port);
        close(fd);
        return FERRY_ERR_PROTOCOL;
    }
    if ((*addr = malloc(nlen)) == NULL) {
        close(fd);
        return FERRY_ERR_NO_MEMORY;
    }
    if (read_all(fd, *addr, nlen) != 0) {
        fprintf(stderr, "ferry_perf: %s:%u closed before the whole address was read\n", host, port);
        free(*addr);
        *addr = NULL;
        close(fd);
        return FERRY_ERR_PROTOCOL;
    }
    close(fd);
    *len = nlen;
    return FERRY_OK;
}
