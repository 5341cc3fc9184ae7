/*
 * test_config.c - configuration tables: the value syntax of every type, reading from the
 * environment with defaults, a bad value refused with a message naming the variable and the
 * value, printing, and the warning for FERRY_* variables no table knows.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>

#include "fytest.h"
#include "util/config.h"
#include "util/log.h"

extern char **environ;

typedef struct opts {
    char *name;
    long delta;
    unsigned long count;
    double ratio;
    int enabled;
    size_t window;
    uint64_t timeout;
    int mode;
    fy_config_list_t tls;
} opts_t;

static const char *const mode_choices[] = {"poll", "sleep", "hybrid", NULL};

static const fy_config_field_t test_fields[] = {
    FY_CONFIG_FIELD("NAME", "ferry", "A name.", FY_CFG_STRING, opts_t, name),
    FY_CONFIG_FIELD("DELTA", "-3", "A signed number.", FY_CFG_INT, opts_t, delta),
    FY_CONFIG_FIELD("COUNT", "0x10", "A count.", FY_CFG_UINT, opts_t, count),
    FY_CONFIG_FIELD("RATIO", "0.25", "A ratio.", FY_CFG_DOUBLE, opts_t, ratio),
    FY_CONFIG_FIELD("ENABLE", "yes", "Turn it on.", FY_CFG_BOOL, opts_t, enabled),
    FY_CONFIG_FIELD("WINDOW", "4k", "Send window, in bytes.", FY_CFG_SIZE, opts_t, window),
    FY_CONFIG_FIELD("TIMEOUT", "5ms", "Retransmission timeout.", FY_CFG_TIME, opts_t, timeout),
    FY_CONFIG_ENUM_FIELD("MODE", "poll", "How to wait.", opts_t, mode, mode_choices),
    FY_CONFIG_FIELD("TLS", "shm,udp", "Transports to use.", FY_CFG_LIST, opts_t, tls),
};

static const fy_config_table_t test_table = {"test", "TEST_", test_fields,
                                             sizeof(test_fields) / sizeof(test_fields[0])};

/* Remove every FERRY_* variable, so the environment of the run cannot disturb a case. */
static void clear_ferry_env(void)
{
    for (;;) {
        char **e;
        for (e = environ; *e != NULL; e++)
            if (strncmp(*e, "FERRY_", 6) == 0)
                break;
        if (*e == NULL)
            return;
        char name[256];
        const char *eq = strchr(*e, '=');
        size_t n = eq != NULL ? (size_t)(eq - *e) : strlen(*e);
        FY_ASSERT_LT(n, sizeof(name));
        memcpy(name, *e, n);
        name[n] = '\0';
        unsetenv(name);
    }
}

/* Send fd 2 to a fresh unlinked temp file; returns its fd, for capture_read(). */
static int capture_stderr(void)
{
    char path[] = "/tmp/fytest_cfg_XXXXXX";
    int fd = mkstemp(path);
    FY_ASSERT(fd >= 0);
    unlink(path);
    fy_log_init();
    fy_log_level_current = FY_LOG_WARN;
    FY_ASSERT(dup2(fd, 2) == 2);
    return fd;
}

static const char *capture_read(int fd)
{
    static char buf[16384];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    FY_ASSERT(n >= 0);
    buf[n] = '\0';
    return buf;
}

static void sizes(void)
{
    static const struct {
        const char *in;
        size_t out;
    } ok[] = {
        {"0", 0},         {"1234", 1234},    {"4k", 4096},      {"64K", 65536},   {"2m", 2u << 20},
        {"2M", 2u << 20}, {"1g", 1u << 30},  {"1G", 1u << 30},  {"8kb", 8192},    {"8KB", 8192},
        {"100b", 100},    {"inf", SIZE_MAX}, {"INF", SIZE_MAX}, {" 16k ", 16384}, {"3 m", 3u << 20},
    };
    static const char *const bad[] = {"",
                                      "k",
                                      "-1",
                                      "+1",
                                      "4x",
                                      "4kk",
                                      "1.5k",
                                      "0x10",
                                      "4 k b",
                                      "99999999999999999999",
                                      "17179869184g",
                                      "infinite",
                                      "k4"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        size_t v = 7;
        FY_ASSERT_MSG(fy_config_parse_size(ok[i].in, &v) == FERRY_OK, "\"%s\" refused", ok[i].in);
        FY_ASSERT_MSG(v == ok[i].out, "\"%s\" -> %zu, expected %zu", ok[i].in, v, ok[i].out);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t v = 7;
        FY_ASSERT_MSG(fy_config_parse_size(bad[i], &v) == FERRY_ERR_BAD_CONFIG,
                      "\"%s\" accepted as %zu", bad[i], v);
        FY_ASSERT_EQ(v, 7); /* untouched on error */
    }
}

static void times(void)
{
    static const struct {
        const char *in;
        uint64_t ns;
    } ok[] = {
        {"250ns", 250},
        {"50us", 50000},
        {"5ms", 5000000},
        {"5MS", 5000000},
        {"2s", 2000000000ull},
        {"1m", 60000000000ull},
        {"3", 3000000000ull}, /* bare number: seconds */
        {"0", 0},
        {"1.5ms", 1500000},
        {"0.25", 250000000},
        {".5s", 500000000},
        {"100 us", 100000},
        {"inf", UINT64_MAX},
    };
    static const char *const bad[] = {"",
                                      "ms",
                                      "5 sec",
                                      "5h",
                                      "-1s",
                                      "1.2.3s",
                                      "5msx",
                                      "s5",
                                      "99999999999999999999s",
                                      "400000000000m",
                                      "."};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 7;
        FY_ASSERT_MSG(fy_config_parse_time(ok[i].in, &v) == FERRY_OK, "\"%s\" refused", ok[i].in);
        FY_ASSERT_MSG(v == ok[i].ns, "\"%s\" -> %" PRIu64 " ns, expected %" PRIu64, ok[i].in, v,
                      ok[i].ns);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 7;
        FY_ASSERT_MSG(fy_config_parse_time(bad[i], &v) == FERRY_ERR_BAD_CONFIG,
                      "\"%s\" accepted as %" PRIu64, bad[i], v);
    }
}

static void bools(void)
{
    static const char *const yes[] = {"y", "yes", "on", "1", "true", "Y", "YES", "On", "TRUE"};
    static const char *const no[] = {"n", "no", "off", "0", "false", "N", "NO", "OFF", "False"};
    static const char *const bad[] = {"", "2", "yess", "t", "enable", "-1"};
    int v;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        v = -1;
        FY_ASSERT_OK(fy_config_parse_bool(yes[i], &v));
        FY_ASSERT_MSG(v == 1, "\"%s\" -> %d", yes[i], v);
        v = -1;
        FY_ASSERT_OK(fy_config_parse_bool(no[i], &v));
        FY_ASSERT_MSG(v == 0, "\"%s\" -> %d", no[i], v);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        FY_ASSERT_MSG(fy_config_parse_bool(bad[i], &v) == FERRY_ERR_BAD_CONFIG, "\"%s\" accepted",
                      bad[i]);
}

static void lists(void)
{
    fy_config_list_t l;
    FY_ASSERT_OK(fy_config_parse_list("shm, udp ,tcp", &l));
    FY_ASSERT_EQ(l.count, 3);
    FY_ASSERT_EQ(l.exclude, 0);
    FY_ASSERT_STR_EQ(l.names[0], "shm");
    FY_ASSERT_STR_EQ(l.names[1], "udp");
    FY_ASSERT_STR_EQ(l.names[2], "tcp");
    FY_ASSERT(fy_config_list_selects(&l, "udp"));
    FY_ASSERT(fy_config_list_selects(&l, "UDP"));
    FY_ASSERT(!fy_config_list_selects(&l, "ofi"));
    FY_ASSERT(!fy_config_list_selects(&l, "sh"));
    FY_ASSERT_EQ(fy_config_list_index(&l, "shm"), 0);
    FY_ASSERT_EQ(fy_config_list_index(&l, "tcp"), 2);
    FY_ASSERT_EQ(fy_config_list_index(&l, "ofi"), -1);
    fy_config_list_release(&l);
    FY_ASSERT_EQ(l.count, 0);
    fy_config_list_release(&l); /* twice is harmless */

    /* ^ excludes. */
    FY_ASSERT_OK(fy_config_parse_list("^tcp,ofi", &l));
    FY_ASSERT_EQ(l.exclude, 1);
    FY_ASSERT_EQ(l.count, 2);
    FY_ASSERT_STR_EQ(l.names[0], "tcp");
    FY_ASSERT(!fy_config_list_selects(&l, "tcp"));
    FY_ASSERT(!fy_config_list_selects(&l, "ofi"));
    FY_ASSERT(fy_config_list_selects(&l, "shm"));
    FY_ASSERT_EQ(fy_config_list_index(&l, "tcp"), -1);
    FY_ASSERT_GE(fy_config_list_index(&l, "shm"), 0);
    fy_config_list_release(&l);

    /* Empty list selects nothing; "^" alone excludes nothing; "all" selects everything. */
    FY_ASSERT_OK(fy_config_parse_list("", &l));
    FY_ASSERT_EQ(l.count, 0);
    FY_ASSERT(!fy_config_list_selects(&l, "shm"));
    fy_config_list_release(&l);
    FY_ASSERT_OK(fy_config_parse_list("^", &l));
    FY_ASSERT(fy_config_list_selects(&l, "shm"));
    fy_config_list_release(&l);
    FY_ASSERT_OK(fy_config_parse_list("udp,all", &l));
    FY_ASSERT(fy_config_list_selects(&l, "shm"));
    FY_ASSERT_EQ(fy_config_list_index(&l, "udp"), 0);
    FY_ASSERT_EQ(fy_config_list_index(&l, "shm"), 1);
    fy_config_list_release(&l);

    /* A trailing comma is forgiven; a ^ anywhere but the start is not. */
    FY_ASSERT_OK(fy_config_parse_list("a,b,", &l));
    FY_ASSERT_EQ(l.count, 2);
    fy_config_list_release(&l);
    FY_ASSERT_STATUS(fy_config_parse_list("a,^b", &l), FERRY_ERR_BAD_CONFIG);
    FY_ASSERT_STATUS(fy_config_parse_list("^^a", &l), FERRY_ERR_BAD_CONFIG);
}

/* Defaults when nothing is set; environment values when set; enum case-insensitive. */
static void read_environment(void)
{
    opts_t o;
    clear_ferry_env();
    memset(&o, 0xa5, sizeof(o));
    FY_ASSERT_OK(fy_config_read(&test_table, &o));
    FY_ASSERT_STR_EQ(o.name, "ferry");
    FY_ASSERT_EQ(o.delta, -3);
    FY_ASSERT_EQ(o.count, 16);
    FY_ASSERT(o.ratio == 0.25);
    FY_ASSERT_EQ(o.enabled, 1);
    FY_ASSERT_EQ(o.window, 4096);
    FY_ASSERT_U64_EQ(o.timeout, 5000000);
    FY_ASSERT_EQ(o.mode, 0);
    FY_ASSERT_EQ(o.tls.count, 2);
    FY_ASSERT_EQ(o.tls.exclude, 0);
    fy_config_release(&test_table, &o);
    FY_ASSERT(o.name == NULL);
    FY_ASSERT_EQ(o.tls.count, 0);

    setenv("FERRY_TEST_NAME", "hello world", 1);
    setenv("FERRY_TEST_DELTA", "-0x20", 1);
    setenv("FERRY_TEST_COUNT", "4000000000", 1);
    setenv("FERRY_TEST_RATIO", "1e-3", 1);
    setenv("FERRY_TEST_ENABLE", "off", 1);
    setenv("FERRY_TEST_WINDOW", "64K", 1);
    setenv("FERRY_TEST_TIMEOUT", "250us", 1);
    setenv("FERRY_TEST_MODE", "HyBrid", 1);
    setenv("FERRY_TEST_TLS", "^tcp", 1);
    FY_ASSERT_OK(fy_config_read(&test_table, &o));
    FY_ASSERT_STR_EQ(o.name, "hello world");
    FY_ASSERT_EQ(o.delta, -32);
    FY_ASSERT_EQ(o.count, 4000000000ul);
    FY_ASSERT(o.ratio == 1e-3);
    FY_ASSERT_EQ(o.enabled, 0);
    FY_ASSERT_EQ(o.window, 65536);
    FY_ASSERT_U64_EQ(o.timeout, 250000);
    FY_ASSERT_EQ(o.mode, 2);
    FY_ASSERT_EQ(o.tls.exclude, 1);
    FY_ASSERT_EQ(o.tls.count, 1);
    FY_ASSERT(!fy_config_list_selects(&o.tls, "tcp"));

    /* fy_config_set by field name or full name; a bad value keeps the old one. */
    FY_ASSERT_OK(fy_config_set(&test_table, &o, "WINDOW", "1m"));
    FY_ASSERT_EQ(o.window, 1u << 20);
    FY_ASSERT_OK(fy_config_set(&test_table, &o, "FERRY_TEST_NAME", "other"));
    FY_ASSERT_STR_EQ(o.name, "other");
    int fd = capture_stderr();
    FY_ASSERT_STATUS(fy_config_set(&test_table, &o, "WINDOW", "lots"), FERRY_ERR_BAD_CONFIG);
    FY_ASSERT_EQ(o.window, 1u << 20);
    FY_ASSERT_STATUS(fy_config_set(&test_table, &o, "TLS", "a,^b"), FERRY_ERR_BAD_CONFIG);
    FY_ASSERT_EQ(o.tls.count, 1);
    FY_ASSERT_STATUS(fy_config_set(&test_table, &o, "NOSUCH", "1"), FERRY_ERR_BAD_CONFIG);
    const char *log = capture_read(fd);
    FY_ASSERT_MSG(strstr(log, "NOSUCH") != NULL, "log: %s", log);
    fy_config_release(&test_table, &o);
    close(fd);
}

/* "a|b" choices: both spellings select the choice; messages and listings show only the first.
 * FERRY_TCP_AF and FERRY_UDP_AF take the same words (ipv4 / inet, ...) through it. */
static const char *const af_choices[] = {"auto|any", "ipv4|inet", "ipv6|inet6", NULL};
static const fy_config_field_t af_fields[] = {
    FY_CONFIG_ENUM_FIELD("AF", "auto", "Family.", opts_t, mode, af_choices),
};
static const fy_config_table_t af_table = {"aftest", "AFTEST_", af_fields, 1};

static void enum_spellings(void)
{
    opts_t o;
    clear_ferry_env();
    int saved = dup(2); /* the real stderr, for a failure's message */
    FY_ASSERT(saved >= 0);
    static const struct {
        const char *v;
        int idx;
    } cases[] = {{"auto", 0}, {"any", 0}, {"ipv4", 1}, {"INET", 1}, {"ipv6", 2}, {"inet6", 2}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        FY_ASSERT_OK(fy_config_set(&af_table, &o, "AF", cases[i].v));
        FY_ASSERT_EQ(o.mode, cases[i].idx);
    }
    int fd = capture_stderr();
    FY_ASSERT_STATUS(fy_config_set(&af_table, &o, "AF", "ipv"), FERRY_ERR_BAD_CONFIG);
    FY_ASSERT_STATUS(fy_config_set(&af_table, &o, "AF", "ipv4|inet"), FERRY_ERR_BAD_CONFIG);
    const char *log = capture_read(fd);
    dup2(saved, 2);
    FY_ASSERT_MSG(strstr(log, "auto, ipv4 or ipv6") != NULL && strstr(log, "auto|") == NULL,
                  "log: %s", log);
    close(fd);

    /* the transports' own tables: each family word in both variables is accepted */
    static const char *const vars[] = {"FERRY_TCP_AF", "FERRY_UDP_AF"};
    static const char *const words[] = {"ipv4", "inet", "auto", "any", "ipv6", "inet6"};
    for (int v = 0; v < 2; v++) {
        for (int k = 0; k < 6; k++) {
            setenv(vars[v], words[k], 1);
            setenv("FERRY_TLS", "self,tcp,udp", 1);
            fd = capture_stderr();
            ferry_context_t *ctx;
            FY_ASSERT_OK(ferry_context_create(NULL, &ctx));
            ferry_context_destroy(ctx);
            log = capture_read(fd);
            dup2(saved, 2);
            FY_ASSERT_MSG(strstr(log, "not accepted") == NULL, "%s=%s: %s", vars[v], words[k], log);
            close(fd);
        }
        unsetenv(vars[v]);
    }
    unsetenv("FERRY_TLS");
    close(saved);
}

/* Each bad value: BAD_CONFIG, and an error naming the variable, the value, what is accepted. */
static void bad_value_is_named(void)
{
    static const struct {
        const char *var, *value, *accepted;
    } cases[] = {
        {"FERRY_TEST_WINDOW", "12q", "k, m, g"},
        {"FERRY_TEST_TIMEOUT", "5 parsecs", "ms"},
        {"FERRY_TEST_ENABLE", "maybe", "yes"},
        {"FERRY_TEST_MODE", "spin", "poll, sleep or hybrid"},
        {"FERRY_TEST_COUNT", "-5", "integer"},
        {"FERRY_TEST_DELTA", "12abc", "integer"},
        {"FERRY_TEST_RATIO", "half", "number"},
        {"FERRY_TEST_TLS", "udp,^tcp", "^"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        opts_t o;
        clear_ferry_env();
        setenv(cases[i].var, cases[i].value, 1);
        int fd = capture_stderr();
        FY_ASSERT_STATUS(fy_config_read(&test_table, &o), FERRY_ERR_BAD_CONFIG);
        /* Nothing is left allocated: release after a failed read is harmless. */
        FY_ASSERT(o.name == NULL);
        fy_config_release(&test_table, &o);
        const char *log = capture_read(fd);
        FY_ASSERT_MSG(strstr(log, cases[i].var) != NULL, "%s not named in: %s", cases[i].var, log);
        FY_ASSERT_MSG(strstr(log, cases[i].value) != NULL, "value %s not in: %s", cases[i].value,
                      log);
        FY_ASSERT_MSG(strstr(log, cases[i].accepted) != NULL, "\"%s\" not in: %s",
                      cases[i].accepted, log);
        FY_ASSERT_MSG(strstr(log, "error") != NULL, "not an error: %s", log);
        close(fd);
    }
}

static void print_table(void)
{
    opts_t o;
    char *text = NULL;
    size_t len = 0;
    clear_ferry_env();
    setenv("FERRY_TEST_WINDOW", "128k", 1);
    setenv("FERRY_TEST_TIMEOUT", "1500us", 1);
    FY_ASSERT_OK(fy_config_read(&test_table, &o));
    FILE *f = open_memstream(&text, &len);
    FY_ASSERT(f != NULL);
    fy_config_print(&test_table, &o, f);
    fclose(f);
    FY_ASSERT(text != NULL);
    /* Current values, in the syntax a user would type. */
    FY_ASSERT_MSG(strstr(text, "FERRY_TEST_WINDOW=128k\n") != NULL, "%s", text);
    FY_ASSERT_MSG(strstr(text, "FERRY_TEST_TIMEOUT=1500us\n") != NULL, "%s", text);
    FY_ASSERT_MSG(strstr(text, "FERRY_TEST_ENABLE=y\n") != NULL, "%s", text);
    FY_ASSERT_MSG(strstr(text, "FERRY_TEST_MODE=poll\n") != NULL, "%s", text);
    FY_ASSERT_MSG(strstr(text, "FERRY_TEST_TLS=shm,udp\n") != NULL, "%s", text);
    FY_ASSERT_MSG(strstr(text, "FERRY_TEST_DELTA=-3\n") != NULL, "%s", text);
    FY_ASSERT_MSG(strstr(text, "FERRY_TEST_NAME=ferry\n") != NULL, "%s", text);
    /* Defaults and docs. */
    FY_ASSERT_MSG(strstr(text, "Default: 4k") != NULL, "%s", text);
    FY_ASSERT_MSG(strstr(text, "Default: 5ms") != NULL, "%s", text);
    FY_ASSERT_MSG(strstr(text, "Send window, in bytes.") != NULL, "%s", text);
    FY_ASSERT_MSG(strstr(text, "Retransmission timeout.") != NULL, "%s", text);
    FY_ASSERT_MSG(strstr(text, "poll, sleep or hybrid") != NULL, "%s", text);
    free(text);
    fy_config_release(&test_table, &o);
}

static void warn_unused(void)
{
    const fy_config_table_t *tables[] = {&test_table};
    static const char *const extra[] = {"FERRY_EXTRA_ONE", "EXTRA_TWO", NULL};
    clear_ferry_env();
    int fd = capture_stderr();
    FY_ASSERT_EQ(fy_config_warn_unused(tables, 1, extra), 0);

    setenv("FERRY_TEST_WINDOW", "1k", 1); /* known by the table */
    setenv("FERRY_EXTRA_ONE", "1", 1);    /* extra, full name */
    setenv("FERRY_EXTRA_TWO", "1", 1);    /* extra, without prefix */
    setenv("FERRY_LOG_LEVEL", "warn", 1); /* the logger's */
    setenv("FERRYFOO", "1", 1);           /* not FERRY_ */
    FY_ASSERT_EQ(fy_config_warn_unused(tables, 1, extra), 0);
    FY_ASSERT_STR_EQ(capture_read(fd), "");

    setenv("FERRY_FOO_BAR", "1", 1);
    setenv("FERRY_TEST_WINDOWS", "1k", 1); /* a typo of a known name */
    setenv("FERRY_WINDOW", "1k", 1);       /* the field without its table's prefix */
    FY_ASSERT_EQ(fy_config_warn_unused(tables, 1, extra), 3);
    const char *log = capture_read(fd);
    FY_ASSERT_MSG(strstr(log, "FERRY_FOO_BAR") != NULL, "log: %s", log);
    FY_ASSERT_MSG(strstr(log, "FERRY_TEST_WINDOWS") != NULL, "log: %s", log);
    FY_ASSERT_MSG(strstr(log, "FERRY_WINDOW ") != NULL, "log: %s", log);
    /* Without the table, its variable is unknown too. */
    FY_ASSERT_EQ(fy_config_warn_unused(NULL, 0, extra), 4);
    close(fd);
}

FYTEST_MAIN(FYTEST_CASE(sizes), FYTEST_CASE(times), FYTEST_CASE(bools), FYTEST_CASE(lists),
            FYTEST_CASE(read_environment), FYTEST_CASE(bad_value_is_named),
            FYTEST_CASE(print_table), FYTEST_CASE(warn_unused), FYTEST_CASE(enum_spellings))
