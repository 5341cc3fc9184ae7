/*
 * test_cm_lanes.c - the connection managers connect the lanes: two workers of one process,
 * and which manager made each transport endpoint (ferry_ep_query's lane attribute cm).
 *
 * An endpoint made from an address the application gave is connected by direct; the endpoint
 * a peer's WIREUP_REQ makes (its address came by AM) by am, also once the application adopts
 * it.  FERRY_CM decides: without direct, an address in hand has no manager to vouch for it,
 * so ferry_ep_create fails and says per candidate what each manager answered; without am, a
 * peer's wireup is not answered, with a warning naming FERRY_CM.  (oob, a peer known by rank,
 * is tested under ferryrun by cm_world; sockaddr by test_cm.)  Each case runs in a child of
 * its own, so FERRY_CM is set per case.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fytest.h"
#include "util/clock.h"

#define AM_ID 3

typedef struct two {
    ferry_context_t *ctx;
    ferry_worker_t *w[2];
    void *addr[2];
    size_t len[2];
} two_t;

static void two_open(two_t *t)
{
    memset(t, 0, sizeof(*t));
    setenv("FERRY_TLS", "^self", 1); /* two workers of one process: shm, else the network */
    FY_ASSERT_OK(ferry_context_create(NULL, &t->ctx));
    for (int i = 0; i < 2; i++) {
        FY_ASSERT_OK(ferry_worker_create(t->ctx, NULL, &t->w[i]));
        size_t len = 0;
        ferry_status_t st = ferry_worker_get_address(t->w[i], NULL, &len);
        FY_ASSERT(st == FERRY_ERR_TRUNCATED || st == FERRY_OK);
        t->addr[i] = malloc(len);
        FY_ASSERT(t->addr[i] != NULL);
        t->len[i] = len;
        FY_ASSERT_OK(ferry_worker_get_address(t->w[i], t->addr[i], &t->len[i]));
    }
}

static void two_close(two_t *t)
{
    for (int i = 0; i < 2; i++) {
        ferry_worker_destroy(t->w[i]);
        free(t->addr[i]);
    }
    ferry_context_destroy(t->ctx);
}

static ferry_status_t ep_to(two_t *t, int i, ferry_ep_t **ep_p)
{
    ferry_ep_params_t p = {.field_mask = FERRY_EP_FIELD_ADDRESS,
                           .address = t->addr[1 - i],
                           .address_len = t->len[1 - i]};
    return ferry_ep_create(t->w[i], &p, ep_p);
}

typedef struct seen {
    ferry_ep_t *ep;
    int count;
    char data[8];
} seen_t;

static ferry_status_t on_msg(void *arg, const void *hdr, size_t hdr_len, const void *data,
                             size_t len, ferry_ep_t *ep)
{
    (void)hdr, (void)hdr_len;
    seen_t *s = arg;
    s->ep = ep;
    s->count++;
    memcpy(s->data, data, len < sizeof(s->data) ? len : sizeof(s->data) - 1);
    return FERRY_OK;
}

static void wait_count(two_t *t, seen_t *s, int n)
{
    uint64_t deadline = fy_time_ns() + 20 * FY_NSEC_PER_SEC;
    while (s->count < n && fy_time_ns() < deadline) {
        ferry_worker_progress(t->w[0]);
        ferry_worker_progress(t->w[1]);
    }
    FY_ASSERT_EQ(s->count, n);
}

/* Every lane of ep was connected by the manager called want. */
static void expect_cm(ferry_ep_t *ep, const char *want)
{
    ferry_ep_attr_t a = {.field_mask = FERRY_EP_ATTR_FIELD_LANES};
    FY_ASSERT_OK(ferry_ep_query(ep, &a));
    FY_ASSERT(a.nlanes > 0);
    for (unsigned l = 0; l < a.nlanes; l++)
        FY_ASSERT_MSG(a.lanes[l].cm != NULL && strcmp(a.lanes[l].cm, want) == 0,
                      "lane %u (%s over %s): connected by %s, expected %s", l, a.lanes[l].op_class,
                      a.lanes[l].transport, a.lanes[l].cm ? a.lanes[l].cm : "(none)", want);
}

/* The application's endpoint: direct.  The one the peer's wireup made: am, also adopted. */
static void direct_and_am(void)
{
    two_t t;
    seen_t s = {0};
    two_open(&t);
    FY_ASSERT_OK(ferry_worker_set_am_handler(t.w[1], AM_ID, on_msg, &s));
    ferry_ep_t *a = NULL, *b = NULL;
    FY_ASSERT_OK(ep_to(&t, 0, &a));
    expect_cm(a, "direct");
    FY_ASSERT_OK(ferry_am_send(a, AM_ID, NULL, 0, "hello", 6, NULL));
    wait_count(&t, &s, 1);
    FY_ASSERT_STR_EQ(s.data, "hello");
    FY_ASSERT(s.ep != NULL);
    expect_cm(s.ep, "am");
    FY_ASSERT_OK(ep_to(&t, 1, &b)); /* adopts the reply endpoint */
    FY_ASSERT(b == s.ep);
    expect_cm(b, "am");
    FY_ASSERT_OK(ferry_ep_close(a, FERRY_EP_CLOSE_FLUSH, NULL));
    FY_ASSERT_OK(ferry_ep_close(b, FERRY_EP_CLOSE_FLUSH, NULL));
    two_close(&t);
}

/* stderr into a file while fn runs; its text (malloc'd) back. */
static char *capture_stderr(void (*fn)(void *), void *arg)
{
    char log[64];
    snprintf(log, sizeof(log), "/tmp/fycm-log-%d", (int)getpid());
    int fd = open(log, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FY_ASSERT(fd >= 0);
    unlink(log);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    off_t n = lseek(fd, 0, SEEK_END);
    char *text = malloc((size_t)n + 1);
    FY_ASSERT(text != NULL && pread(fd, text, (size_t)n, 0) == n);
    text[n] = '\0';
    close(fd);
    return text;
}

static void create_refused(void *arg)
{
    two_t *t = arg;
    ferry_ep_t *ep = NULL;
    FY_ASSERT_STATUS(ep_to(t, 0, &ep), FERRY_ERR_UNREACHABLE);
}

/* Without direct no manager vouches for an address the application gave: each candidate
 * says what the others answered. */
static void without_direct(void)
{
    setenv("FERRY_CM", "^direct", 1);
    two_t t;
    two_open(&t);
    char *text = capture_stderr(create_refused, &t);
    FY_ASSERT_MSG(strstr(text, "no transport reaches") != NULL &&
                      strstr(text, "failed: oob, am, sockaddr: not how its address came") != NULL,
                  "log:\n%s", text);
    printf("  %.*s\n", (int)strcspn(text, "\n"), text);
    free(text);
    two_close(&t);
}

typedef struct no_am {
    two_t *t;
    seen_t *s;
    ferry_ep_t *a;
} no_am_t;

static void send_unanswered(void *arg)
{
    no_am_t *n = arg;
    FY_ASSERT_OK(ep_to(n->t, 0, &n->a));
    expect_cm(n->a, "direct");
    ferry_status_t st = ferry_am_send(n->a, AM_ID, NULL, 0, "x", 1, NULL);
    FY_ASSERT(st == FERRY_OK || st == FERRY_INPROGRESS);
    for (int i = 0; i < 20000; i++) {
        ferry_worker_progress(n->t->w[0]);
        ferry_worker_progress(n->t->w[1]);
    }
}

/* Without am, the endpoint a peer's wireup would make is not made: the handler never runs and
 * the warning names FERRY_CM. */
static void without_am(void)
{
    setenv("FERRY_CM", "^am", 1);
    two_t t;
    seen_t s = {0};
    two_open(&t);
    FY_ASSERT_OK(ferry_worker_set_am_handler(t.w[1], AM_ID, on_msg, &s));
    no_am_t n = {&t, &s, NULL};
    char *text = capture_stderr(send_unanswered, &n);
    FY_ASSERT_MSG(strstr(text, "FERRY_CM excludes am") != NULL, "log:\n%s", text);
    FY_ASSERT_EQ(s.count, 0);
    free(text);
    ferry_ep_close(n.a, FERRY_EP_CLOSE_FORCE, NULL);
    two_close(&t);
}

FYTEST_MAIN(FYTEST_CASE(direct_and_am), FYTEST_CASE(without_direct), FYTEST_CASE(without_am))
