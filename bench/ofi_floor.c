/*
 * ofi_floor.c - the raw libfabric floor that ferry's ofi transport is measured against: two
 * processes (this one and a forked child) on one FI_EP_RDM provider, bound to 127.0.0.1
 * where the provider takes an IP address, no ferry at all.
 *
 *   ofi_floor PROVIDER write SIZE ITERS   a stream of fi_write of SIZE bytes, 64 in flight,
 *                                         ended by an fi_read (remote completion): MB/s
 *   ofi_floor PROVIDER pingpong SIZE ITERS  fi_send / fi_recv ping-pong: one-way latency us
 *   ofi_floor PROVIDER inject SIZE COUNT  COUNT fi_inject of SIZE bytes (retried on -FI_EAGAIN
 *                                         for up to 5 s), then an 8-byte fi_read: how many the
 *                                         target received and whether the read completed
 *   ofi_floor PROVIDER inject-send SIZE COUNT  the same, but a refused fi_inject is sent by
 *                                         fi_send: over udp;ofi_rxd the target receives 1024
 *                                         and nothing after (docs/ofi.md, "rxd")
 *   ofi_floor PROVIDER close-inflight SIZE COUNT  one process, two endpoints: A sends, closes,
 *                                         then B progresses (shm crashes: docs/ofi.md)
 *   ofi_floor PROVIDER close-park SIZE COUNT  the same, but A is closed only after B closed
 *                                         (shm survives: ferry's workaround, ofi_park.c)
 *   ofi_floor PROVIDER dereg 64 1         a write with a key the target deregistered: what the
 *                                         provider does (docs/ofi.md); dereg-live: key kept;
 *                                         dereg-read, dereg-live-read: the same with a read
 *   ofi_floor PROVIDER kill-progress SIZE TRIALS  a receiver that only progresses is SIGKILLed
 *                                         at a random moment of a sender's fi_inject stream;
 *                                         does the sender's next call return? (shm 1.17: it
 *                                         can spin for ever on the dead peer's lock, docs/ofi.md)
 *
 * Debian ships no fabtests beyond fi_pingpong, and fi_pingpong has no RMA stream: this is the
 * "fi_write stream" of issue 12's acceptance.  The target only progresses its CQ (the software
 * providers need it).  Addresses go over a pipe; nothing sleeps.  The modes after pingpong are
 * the minimal reproductions of what docs/ofi.md says the providers do, with libfabric alone.
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WINDOW 64

typedef struct side {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_mr *mr;
    char *buf;
    size_t len;
    fi_addr_t peer;
} side_t;

typedef struct wire {
    char name[64];
    size_t name_len;
    uint64_t addr, key;
} wire_t;

static void die(const char *what, int ret)
{
    fprintf(stderr, "ofi_floor: %s: %s\n", what, fi_strerror(ret < 0 ? -ret : ret));
    exit(1);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void open_side(side_t *s, const char *prov, size_t len)
{
    struct fi_info *h = fi_allocinfo();
    h->caps = FI_MSG | FI_RMA;
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->ep_attr->type = FI_EP_RDM;
    h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    h->tx_attr->msg_order = FI_ORDER_SAS | FI_ORDER_RAW;
    h->fabric_attr->prov_name = strdup(prov);
    int ip = strcmp(prov, "shm") != 0;
    int ret = fi_getinfo(FI_VERSION(1, 14), ip ? "127.0.0.1" : NULL, NULL, ip ? FI_SOURCE : 0, h,
                         &s->info);
    if (ret)
        die("fi_getinfo", ret);
    fi_freeinfo(h);
    if ((ret = fi_fabric(s->info->fabric_attr, &s->fabric, NULL)) ||
        (ret = fi_domain(s->fabric, s->info, &s->domain, NULL)))
        die("fabric/domain", ret);
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT};
    struct fi_av_attr ava = {.type = FI_AV_TABLE};
    if ((ret = fi_cq_open(s->domain, &cqa, &s->cq, NULL)) ||
        (ret = fi_av_open(s->domain, &ava, &s->av, NULL)) ||
        (ret = fi_endpoint(s->domain, s->info, &s->ep, NULL)) ||
        (ret = fi_ep_bind(s->ep, &s->av->fid, 0)) ||
        (ret = fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV)) || (ret = fi_enable(s->ep)))
        die("endpoint", ret);
    s->len = len < 64 ? 64 : len;
    s->buf = aligned_alloc(4096, (s->len + 4095) & ~(size_t)4095);
    memset(s->buf, 1, s->len);
    if ((ret = fi_mr_reg(s->domain, s->buf, s->len,
                         FI_REMOTE_READ | FI_REMOTE_WRITE | FI_READ | FI_WRITE | FI_SEND | FI_RECV,
                         0, 7, 0, &s->mr, NULL)))
        die("fi_mr_reg", ret);
}

static void my_wire(side_t *s, wire_t *w)
{
    memset(w, 0, sizeof(*w));
    w->name_len = sizeof(w->name);
    int ret = fi_getname(&s->ep->fid, w->name, &w->name_len);
    if (ret)
        die("fi_getname", ret);
    w->addr = (s->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uintptr_t)s->buf : 0;
    w->key = fi_mr_key(s->mr);
}

static int reap(side_t *s)
{
    struct fi_cq_entry e[16];
    ssize_t n = fi_cq_read(s->cq, e, 16);
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry err = {0};
        fi_cq_readerr(s->cq, &err, 0);
        die("completion", err.err);
    }
    return n > 0 ? (int)n : 0;
}

static void post_recv(side_t *s, size_t len)
{
    while (fi_recv(s->ep, s->buf, len, NULL, FI_ADDR_UNSPEC, NULL) == -FI_EAGAIN)
        reap(s);
}

/* ofi_floor PROVIDER inject|inject-send: the initiator's side (the target counts in
 * inject_target).  inject retries a refused fi_inject; inject-send posts that message with
 * fi_send instead (what ferry's am_short did), sends in flight unbounded. */
static void inject_stream(side_t *s, const wire_t *theirs, size_t size, long count, int then_send,
                          int rfd)
{
    long sent = 0, eagain = 0, nsend = 0;
    double end = now() + 5;
    while (sent < count && now() < end) {
        ssize_t ret = fi_inject(s->ep, s->buf, size, s->peer);
        if (ret == -FI_EAGAIN) {
            eagain++;
            reap(s);
            if (then_send && (ret = fi_send(s->ep, s->buf, size, NULL, s->peer, NULL)) == 0)
                nsend++;
        }
        if (ret == 0)
            sent++, end = now() + 5;
        else if (ret != -FI_EAGAIN)
            die("fi_inject", (int)ret);
    }
    /* the read's completion is the last one: every send's came before or with it */
    int read_done = 0;
    ssize_t ret;
    end = now() + 5;
    while ((ret = fi_read(s->ep, s->buf, 8, NULL, s->peer, theirs->addr, theirs->key, s)) ==
               -FI_EAGAIN &&
           now() < end)
        reap(s);
    while (ret == 0 && !read_done && now() < end) {
        struct fi_cq_entry e;
        if (fi_cq_read(s->cq, &e, 1) == 1 && e.op_context == s)
            read_done = 1;
    }
    long got = -1;
    while (read(rfd, &got, sizeof(got)) != sizeof(got)) /* the target's count; keep progressing */
        reap(s);
    printf("ofi_floor %s %s size %zu: %ld of %ld sent (-FI_EAGAIN %ld times, %ld by fi_send), "
           "%ld received, the read after them %s\n",
           s->info->fabric_attr->prov_name, then_send ? "inject-send" : "inject", size, sent, count,
           eagain, nsend, got, read_done ? "completed" : "did not complete in 5 s");
}

/* The target of inject_stream: receives until COUNT came or 5 s pass without one. */
static long inject_target(side_t *s, size_t size, long count)
{
    long got = 0;
    double end = now() + 5;
    while (got < count && now() < end) {
        post_recv(s, size);
        while (reap(s) == 0 && now() < end)
            ;
        if (now() < end)
            got++, end = now() + 5;
    }
    return got;
}

static void close_side(side_t *s)
{
    if (s->mr != NULL)
        fi_close(&s->mr->fid);
    fi_close(&s->ep->fid);
    fi_close(&s->av->fid);
    fi_close(&s->cq->fid);
    fi_close(&s->domain->fid);
    fi_close(&s->fabric->fid);
    fi_freeinfo(s->info);
    free(s->buf);
}

/* ofi_floor PROVIDER close-inflight SIZE COUNT: two endpoints of one process; A sends COUNT
 * messages of SIZE bytes to B, which has not progressed yet, and closes; then B progresses.
 * libfabric 1.17's shm crashes there, even when the one send A tried was refused (the first
 * contact, which B has not yet taken in, names a region that closed): what the conformance
 * suite's iface_close_open_eps met over shm (docs/ofi.md).  close-park (park set): A is closed
 * only after B closed, as ferry's ofi_park.c does, and both survive. */
static int close_inflight(const char *prov, size_t size, long count, int park)
{
    side_t a, b;
    open_side(&a, prov, size);
    open_side(&b, prov, size);
    wire_t wb;
    my_wire(&b, &wb);
    if (fi_av_insert(a.av, wb.name, 1, &a.peer, 0, NULL) != 1)
        die("fi_av_insert", FI_EINVAL);
    long sent = 0;
    for (double end = now() + 2; sent < count && now() < end;) {
        ssize_t ret = fi_send(a.ep, a.buf, size, NULL, a.peer, NULL);
        if (ret == 0)
            sent++;
        else if (ret != -FI_EAGAIN)
            die("fi_send", (int)ret);
        reap(&a);
    }
    printf("ofi_floor %s close-%s: A posted %ld sends of %zu bytes and %s\n", prov,
           park ? "park" : "inflight", sent, size,
           park ? "is done with (no more calls), but not closed" : "closes");
    fflush(stdout);
    if (!park)
        close_side(&a);
    long got = 0;
    for (double end = now() + 1; now() < end;) /* a receive at a time, for 1 s */
        if (fi_recv(b.ep, b.buf, size, NULL, FI_ADDR_UNSPEC, NULL) == 0)
            while (now() < end) {
                int n = reap(&b);
                got += n;
                if (n > 0)
                    break;
            }
    printf("ofi_floor %s close-%s: B progressed for 1 s after A %s, received %ld, and survived\n",
           prov, park ? "park" : "inflight", park ? "was parked" : "closed", got);
    close_side(&b);
    if (park) {
        close_side(&a); /* after the last endpoint that could progress: ferry's workaround */
        printf("ofi_floor %s close-park: A closed after B\n", prov);
    }
    return 0;
}

/* ofi_floor PROVIDER dereg: the target closes its registration, then the initiator writes 64
 * bytes with the key it had: does the write complete, fail, or hang, and did the target's
 * memory change?  The reproduction of the conformance suite's rma_unchecked_dereg over ofi;
 * "dereg-live" is the same with the registration kept (the memory must change). */
static void dereg_write(side_t *s, const wire_t *theirs, int dereg, int get, int child,
                        const int up[2], const int down[2])
{
    char c = 0;
    if (child) {
        if (dereg) {
            fi_close(&s->mr->fid);
            s->mr = NULL;
        }
        memset(s->buf, 1, 64);
        if (write(up[1], &c, 1) != 1) /* "deregistered" */
            die("pipe", FI_EIO);
        int fl = fcntl(down[0], F_GETFL);
        fcntl(down[0], F_SETFL, fl | O_NONBLOCK);
        while (read(down[0], &c, 1) != 1) /* progress until the initiator is done */
            reap(s);
        for (double end = now() + 0.2; now() < end;) /* and a little longer: data in flight */
            reap(s);
        int changed = 0;
        for (int i = 0; i < 64; i++)
            changed |= s->buf[i] != 1;
        if (write(up[1], &changed, sizeof(changed)) != sizeof(changed))
            die("pipe", FI_EIO);
        return;
    }
    if (read(up[0], &c, 1) != 1)
        die("pipe", FI_EIO);
    memset(s->buf, 2, 64);
    ssize_t ret;
    double end = now() + 5;
    while ((ret = get ? fi_read(s->ep, s->buf, 64, NULL, s->peer, theirs->addr, theirs->key, NULL)
                      : fi_write(s->ep, s->buf, 64, NULL, s->peer, theirs->addr, theirs->key,
                                 NULL)) == -FI_EAGAIN &&
           now() < end)
        reap(s);
    const char *what = "did not complete in 5 s";
    if (ret != 0) {
        what = "was refused when posted";
    } else {
        while (now() < end) {
            struct fi_cq_entry e;
            ssize_t n = fi_cq_read(s->cq, &e, 1);
            if (n == 1) {
                what = "completed without an error";
                break;
            }
            if (n == -FI_EAVAIL) {
                struct fi_cq_err_entry err = {0};
                fi_cq_readerr(s->cq, &err, 0);
                printf("ofi_floor dereg: the write's error: %s\n", fi_strerror(err.err));
                what = "completed with an error";
                break;
            }
        }
    }
    int changed = -1;
    if (write(down[1], &c, 1) != 1 || read(up[0], &changed, sizeof(changed)) != sizeof(changed))
        die("pipe", FI_EIO);
    int got = 1; /* a read: did the target's bytes arrive? */
    for (int i = 0; i < 64; i++)
        got &= s->buf[i] == 1;
    printf("ofi_floor %s dereg: a %s with a%s key %s; %s\n", s->info->fabric_attr->prov_name,
           get ? "read" : "write", dereg ? " deregistered" : " live", what,
           get ? (got ? "the target's bytes arrived" : "the destination kept its old bytes")
               : (changed ? "the target's memory changed" : "the target's memory did not change"));
}

static void send_wait(side_t *s, size_t len)
{
    ssize_t ret;
    while ((ret = fi_send(s->ep, s->buf, len, NULL, s->peer, NULL)) == -FI_EAGAIN)
        reap(s);
    if (ret)
        die("fi_send", (int)ret);
}

/* ofi_floor PROVIDER kill-progress SIZE TRIALS: per trial, a receiver process R that only
 * posts receives and reads its CQ, and a sender S that streams fi_inject to it; R is SIGKILLed
 * 0-500 us into the stream, then S is told to stop.  S checks its pipe between two calls, so
 * an S that does not exit within 2 s is stuck inside one call: over libfabric 1.17's shm, in
 * pthread_spin_lock on the lock of R's region that R held when it died (docs/ofi.md, "a peer
 * killed inside its progress").  Each trial's processes are forked anew; the regions they
 * leave in /dev/shm are unlinked after the trial. */
static void kill_receiver(const char *prov, size_t size, int wfd)
{
    side_t r;
    open_side(&r, prov, size);
    wire_t w;
    my_wire(&r, &w);
    if (write(wfd, &w, sizeof(w)) != sizeof(w))
        _exit(1);
    for (;;) { /* killed here */
        fi_recv(r.ep, r.buf, size, NULL, FI_ADDR_UNSPEC, NULL);
        reap(&r);
    }
}

static void kill_sender(const char *prov, size_t size, int rfd, int wfd)
{
    side_t s;
    open_side(&s, prov, size);
    wire_t theirs;
    if (read(rfd, &theirs, sizeof(theirs)) != sizeof(theirs) ||
        fi_av_insert(s.av, theirs.name, 1, &s.peer, 0, NULL) != 1)
        _exit(1);
    fcntl(rfd, F_SETFL, fcntl(rfd, F_GETFL) | O_NONBLOCK);
    int told = 0;
    for (char c;;) {
        ssize_t ret = fi_inject(s.ep, s.buf, size, s.peer);
        if (ret == 0 && !told)
            told = write(wfd, "g", 1) == 1;
        else if (ret == -FI_EAGAIN)
            reap(&s);
        if (read(rfd, &c, 1) == 1)
            _exit(0); /* R is dead and this call returned: not stuck */
    }
}

/* shm names a region <pid>:<domain>:<endpoint> in /dev/shm by default (ferry names its own) */
static void unlink_regions(pid_t pid)
{
    char prefix[32], path[300];
    snprintf(prefix, sizeof(prefix), "%d:", (int)pid);
    DIR *d = opendir("/dev/shm");
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
            unlink(path);
        }
    if (d != NULL)
        closedir(d);
}

static int kill_progress(const char *prov, size_t size, long trials)
{
    long stuck = 0, run = 0;
    srand((unsigned)getpid());
    for (long t = 0; t < trials; t++) {
        int rp[2], sp[2], sa[2];
        if (pipe(rp) || pipe(sp) || pipe(sa))
            return 1;
        pid_t r = fork();
        if (r == 0)
            kill_receiver(prov, size, rp[1]);
        wire_t w;
        if (read(rp[0], &w, sizeof(w)) != sizeof(w))
            return 1;
        pid_t s = fork();
        if (s == 0)
            kill_sender(prov, size, sp[0], sa[1]);
        char g;
        if (write(sp[1], &w, sizeof(w)) != sizeof(w) || read(sa[0], &g, 1) != 1)
            return 1;
        struct timespec d = {0, (long)(rand() % 500) * 1000};
        nanosleep(&d, NULL);
        kill(r, SIGKILL);
        waitpid(r, NULL, 0);
        if (write(sp[1], "x", 1) != 1)
            return 1;
        int exited = 0;
        for (double end = now() + 2; !exited && now() < end;) {
            exited = waitpid(s, NULL, WNOHANG) == s;
            struct timespec p = {0, 1000000};
            nanosleep(&p, NULL);
        }
        if (!exited) {
            stuck++;
            kill(s, SIGKILL);
            waitpid(s, NULL, 0);
        }
        run++;
        unlink_regions(r); /* R's, left by its death; S's, left by its _exit or death */
        unlink_regions(s);
        int fds[] = {rp[0], rp[1], sp[0], sp[1], sa[0], sa[1]};
        for (int i = 0; i < 6; i++)
            close(fds[i]);
    }
    printf("ofi_floor %s kill-progress size %zu: %ld trials, the receiver SIGKILLed while it "
           "progressed; the sender stuck inside fi_inject (no return in 2 s) in %ld\n",
           prov, size, run, stuck);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr,
                "usage: ofi_floor PROVIDER "
                "write|pingpong|inject|inject-send|close-inflight|close-park|dereg[-live][-read]|"
                "kill-progress SIZE "
                "ITERS\n");
        return 2;
    }
    const char *prov = argv[1], *test = argv[2];
    size_t size = strtoull(argv[3], NULL, 0);
    long iters = atol(argv[4]);
    if (strcmp(test, "close-inflight") == 0 || strcmp(test, "close-park") == 0)
        return close_inflight(prov, size, iters, strcmp(test, "close-park") == 0);
    if (strcmp(test, "kill-progress") == 0)
        return kill_progress(prov, size, iters);
    int up[2], down[2];
    if (pipe(up) || pipe(down))
        return 1;
    pid_t pid = fork();
    int child = pid == 0;
    side_t s;
    open_side(&s, prov, size);
    wire_t mine, theirs;
    my_wire(&s, &mine);
    if (write(child ? up[1] : down[1], &mine, sizeof(mine)) != sizeof(mine) ||
        read(child ? down[0] : up[0], &theirs, sizeof(theirs)) != sizeof(theirs))
        die("pipe", FI_EIO);
    if (fi_av_insert(s.av, theirs.name, 1, &s.peer, 0, NULL) != 1)
        die("fi_av_insert", FI_EINVAL);
    if (strncmp(test, "inject", 6) == 0) {
        if (child) {
            long got = inject_target(&s, size, iters);
            int sent_ok = write(up[1], &got, sizeof(got)) == sizeof(got);
            double end = now() + 1; /* answer reads and acks a little longer */
            while (sent_ok && now() < end)
                reap(&s);
        } else {
            int fl = fcntl(up[0], F_GETFL);
            fcntl(up[0], F_SETFL, fl | O_NONBLOCK);
            inject_stream(&s, &theirs, size, iters, strcmp(test, "inject-send") == 0, up[0]);
        }
    } else if (strncmp(test, "dereg", 5) == 0) {
        dereg_write(&s, &theirs, strstr(test, "live") == NULL, strstr(test, "read") != NULL, child,
                    up, down);
    } else if (strcmp(test, "write") == 0) {
        if (child) { /* target: progress until the initiator's "done" arrives */
            post_recv(&s, 8);
            while (reap(&s) == 0)
                ;
        } else {
            long posted = 0, done = 0;
            double t0 = 0;
            for (long i = -iters / 10 - 1; i < iters; i = posted - iters / 10 - 1) {
                if (i == 0 && t0 == 0)
                    t0 = now();
                if (posted - done < WINDOW &&
                    fi_write(s.ep, s.buf, size, NULL, s.peer, theirs.addr, theirs.key, NULL) == 0)
                    posted++;
                else
                    done += reap(&s);
            }
            while (done < posted)
                done += reap(&s);
            while (fi_read(s.ep, s.buf, 8, NULL, s.peer, theirs.addr, theirs.key, NULL) ==
                   -FI_EAGAIN)
                reap(&s);
            while (reap(&s) == 0)
                ;
            double t = now() - t0;
            printf("ofi_floor %s write size %zu: %.0f MB/s\n", prov, size,
                   (double)size * (double)iters / t / 1e6);
            send_wait(&s, 8);
            while (reap(&s) == 0)
                ;
        }
    } else {
        long warm = iters / 10 + 1;
        double t0 = 0;
        for (long i = 0; i < iters + warm; i++) {
            if (i == warm)
                t0 = now();
            post_recv(&s, size);
            if (!child) {
                send_wait(&s, size);
                for (int got = 0; got < 2;)
                    got += reap(&s);
            } else {
                while (reap(&s) == 0)
                    ;
                send_wait(&s, size);
                while (reap(&s) == 0)
                    ;
            }
        }
        if (!child)
            printf("ofi_floor %s pingpong size %zu: %.2f us one way\n", prov, size,
                   (now() - t0) / (double)iters / 2 * 1e6);
    }
    close_side(&s);
    if (!child)
        waitpid(pid, NULL, 0);
    return 0;
}
