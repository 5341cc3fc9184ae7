/*
 * test_status.c - every status code has its own message, and errno maps to the status the
 * callers act on (EAGAIN must be back-pressure, not an error).
 */
#include <errno.h>

#include "fytest.h"
#include "util/status.h"

static void every_code_has_a_string(void)
{
    const char *unknown = ferry_status_string(FERRY_ERR_LAST);
    FY_ASSERT(unknown != NULL);
    FY_ASSERT_STR_EQ(ferry_status_string((ferry_status_t)12345), unknown);
    FY_ASSERT_STR_EQ(ferry_status_string((ferry_status_t)(FERRY_ERR_LAST - 1)), unknown);

    /* FERRY_OK, FERRY_INPROGRESS, then every error down to the one before FERRY_ERR_LAST. */
    const char *seen[64];
    int n = 0;
    for (int c = FERRY_INPROGRESS; c > FERRY_ERR_LAST; c--) {
        const char *s = ferry_status_string((ferry_status_t)c);
        FY_ASSERT_MSG(s != NULL && *s != '\0', "code %d has no string", c);
        FY_ASSERT_MSG(strcmp(s, unknown) != 0, "code %d reads as unknown", c);
        FY_ASSERT_MSG(strstr(s, "unknown") == NULL, "code %d: \"%s\"", c, s);
        for (int j = 0; j < n; j++)
            FY_ASSERT_MSG(strcmp(s, seen[j]) != 0, "code %d repeats \"%s\"", c, s);
        FY_ASSERT_LT(n, 64);
        seen[n++] = s;
    }
    FY_ASSERT_EQ(n, 2 - (FERRY_ERR_LAST + 1)); /* OK, INPROGRESS and the errors */
}

static void errno_mapping(void)
{
    static const struct {
        int err;
        ferry_status_t st;
    } map[] = {
        {0, FERRY_OK},
        {EAGAIN, FERRY_ERR_NO_RESOURCE},
        {EWOULDBLOCK, FERRY_ERR_NO_RESOURCE},
        {ENOBUFS, FERRY_ERR_NO_RESOURCE},
        {EINTR, FERRY_ERR_NO_RESOURCE},
        {ENOMEM, FERRY_ERR_NO_MEMORY},
        {EINVAL, FERRY_ERR_INVALID_PARAM},
        {ECONNRESET, FERRY_ERR_CONNECTION_RESET},
        {EPIPE, FERRY_ERR_CONNECTION_RESET},
        {ECONNABORTED, FERRY_ERR_CONNECTION_RESET},
        {ECONNREFUSED, FERRY_ERR_UNREACHABLE},
        {EHOSTUNREACH, FERRY_ERR_UNREACHABLE},
        {ENETUNREACH, FERRY_ERR_UNREACHABLE},
        {ETIMEDOUT, FERRY_ERR_TIMED_OUT},
        {EPERM, FERRY_ERR_ACCESS_DENIED},
        {EACCES, FERRY_ERR_ACCESS_DENIED},
        {ENOTCONN, FERRY_ERR_NOT_CONNECTED},
        {EEXIST, FERRY_ERR_EXISTS},
        {ENOENT, FERRY_ERR_NO_ELEM},
        {ENOSYS, FERRY_ERR_UNSUPPORTED},
        {EOPNOTSUPP, FERRY_ERR_UNSUPPORTED},
        {EIO, FERRY_ERR_IO},
        {EBADF, FERRY_ERR_IO},
    };
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        FY_ASSERT_MSG(fy_status_from_errno(map[i].err) == map[i].st,
                      "errno %d (%s): got %d, expected %d", map[i].err, strerror(map[i].err),
                      fy_status_from_errno(map[i].err), map[i].st);
    /* Every mapped error is an error (negative), never OK or INPROGRESS. */
    for (int e = 1; e < 134; e++)
        FY_ASSERT_MSG(fy_status_from_errno(e) < 0, "errno %d maps to %d", e,
                      fy_status_from_errno(e));
}

FYTEST_MAIN(FYTEST_CASE(every_code_has_a_string), FYTEST_CASE(errno_mapping))
