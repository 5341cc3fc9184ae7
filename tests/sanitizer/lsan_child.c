/*
 * lsan_child.c - proof that LeakSanitizer sees the harness's forked children.  The case
 * `leaks` loses a block on purpose; the case `clean` frees what it takes.  Under ASan with
 * detect_leaks=1, `leaks` must die with LSan's report naming leak_on_purpose and the harness
 * must count it as a failure, while `clean` passes.  Without this check a harness that left
 * its children by _exit would hide every leak of every case, silently.
 */
#include <stdlib.h>
#include <string.h>

#include "fytest.h"

static void *volatile sink;

/* noinline and the pointer dropped from a volatile: no stale copy keeps the block reachable */
__attribute__((noinline)) static void leak_on_purpose(void)
{
    for (int i = 0; i < 8; i++) {
        sink = malloc(4096);
        memset(sink, i, 4096);
    }
    sink = NULL;
}

static void leaks(void)
{
    leak_on_purpose();
    FY_ASSERT(sink == NULL);
}

static void clean(void)
{
    char *p = malloc(4096);
    FY_ASSERT(p != NULL);
    memset(p, 1, 4096);
    free(p);
}

FYTEST_MAIN(FYTEST_CASE(leaks), FYTEST_CASE(clean))
