/*
 * config.c - FERRY_* environment variables parsed through per-component tables.
 *
 * A component describes its options once, as a table of {name, default, doc, type, offset};
 * this file turns that table into values (from the environment or the default, both in the
 * same syntax), into the listing `ferry_info -c` prints, and into the check for variables
 * nobody reads.  Keeping the default as a string in the environment's syntax means the printed
 * default is exactly what a user would type.  Parsers are strict (no trailing junk, no sign on
 * sizes, an overflow is an error, not a wrap) because a silently misread timeout or window is
 * far harder to find than a refusal to start; and every refusal names the variable, the value
 * and what would have been accepted, so the user can fix it without reading the source.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/clock.h"
#include "util/config.h"
#include "util/log.h"
#include "util/rcache.h"
#include "util/status.h"

extern char **environ;

/* Library-wide services read their own FERRY_* variables (FERRY_RCACHE* in util/rcache.c). */
const fy_config_table_t *const fy_config_global_tables[] = {&fy_rcache_config_table};
const size_t fy_config_num_global_tables =
    sizeof(fy_config_global_tables) / sizeof(fy_config_global_tables[0]);

#define CFG_NAME_MAX 256

/* ---- small string helpers ------------------------------------------------------------------ */

/* [*b, *e) trimmed of surrounding white space (config_list.c uses it too). */
void fy_config_trim(const char **b, const char **e)
{
    while (*b < *e && isspace((unsigned char)**b))
        (*b)++;
    while (*e > *b && isspace((unsigned char)(*e)[-1]))
        (*e)--;
}

static int span_equals(const char *b, const char *e, const char *word)
{
    size_t n = strlen(word);
    return (size_t)(e - b) == n && strncasecmp(b, word, n) == 0;
}

/* Decimal digits in [*p, e) into *out; 0 if there are none or they overflow. */
static int parse_digits(const char **p, const char *e, uint64_t *out, unsigned *ndigits)
{
    uint64_t v = 0;
    unsigned n = 0;
    for (; *p < e && isdigit((unsigned char)**p); (*p)++, n++) {
        unsigned d = (unsigned)(**p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *out = v;
    if (ndigits != NULL)
        *ndigits = n;
    return n > 0;
}

static void full_name(const fy_config_table_t *t, const fy_config_field_t *f, char *buf,
                      size_t size)
{
    snprintf(buf, size, "FERRY_%s%s", t->prefix != NULL ? t->prefix : "", f->name);
}

/* ---- parsers ------------------------------------------------------------------------------- */

ferry_status_t fy_config_parse_size(const char *s, size_t *out)
{
    if (s == NULL)
        return FERRY_ERR_BAD_CONFIG;
    const char *p = s, *e = s + strlen(s);
    fy_config_trim(&p, &e);
    if (span_equals(p, e, "inf") || span_equals(p, e, "infinity")) {
        *out = SIZE_MAX;
        return FERRY_OK;
    }
    uint64_t v;
    if (!parse_digits(&p, e, &v, NULL))
        return FERRY_ERR_BAD_CONFIG;
    const char *u = p, *ue = e;
    fy_config_trim(&u, &ue);
    unsigned shift = 0;
    if (u < ue) {
        switch (tolower((unsigned char)*u)) {
        case 'k':
            shift = 10;
            u++;
            break;
        case 'm':
            shift = 20;
            u++;
            break;
        case 'g':
            shift = 30;
            u++;
            break;
        case 't':
            shift = 40;
            u++;
            break;
        default:
            break;
        }
        /* An optional b: 4k, 4kb, 4KB and 100b all read as meant. */
        if (u < ue && tolower((unsigned char)*u) == 'b')
            u++;
        if (u != ue)
            return FERRY_ERR_BAD_CONFIG;
    }
    if (shift != 0 && v > (UINT64_MAX >> shift))
        return FERRY_ERR_BAD_CONFIG;
    v <<= shift;
    if (v > SIZE_MAX)
        return FERRY_ERR_BAD_CONFIG;
    *out = (size_t)v;
    return FERRY_OK;
}

ferry_status_t fy_config_parse_time(const char *s, uint64_t *out_ns)
{
    static const struct {
        const char *suffix;
        uint64_t ns;
    } units[] = {
        {"ns", 1},
        {"us", FY_NSEC_PER_USEC},
        {"ms", FY_NSEC_PER_MSEC},
        {"s", FY_NSEC_PER_SEC},
        {"m", 60 * FY_NSEC_PER_SEC},
    };
    if (s == NULL)
        return FERRY_ERR_BAD_CONFIG;
    const char *p = s, *e = s + strlen(s);
    fy_config_trim(&p, &e);
    if (span_equals(p, e, "inf") || span_equals(p, e, "infinity")) {
        *out_ns = UINT64_MAX;
        return FERRY_OK;
    }
    uint64_t whole = 0, frac = 0;
    unsigned nwhole = 0, nfrac = 0;
    if (p < e && isdigit((unsigned char)*p) && !parse_digits(&p, e, &whole, &nwhole))
        return FERRY_ERR_BAD_CONFIG;
    if (p < e && *p == '.') {
        p++;
        /* Digits past the nanosecond resolution of any unit add nothing: read at most 12. */
        const char *fe = p;
        while (fe < e && isdigit((unsigned char)*fe))
            fe++;
        const char *cut = fe - p > 12 ? p + 12 : fe;
        if (p < cut && !parse_digits(&p, cut, &frac, &nfrac))
            return FERRY_ERR_BAD_CONFIG;
        p = fe;
    }
    if (nwhole + nfrac == 0)
        return FERRY_ERR_BAD_CONFIG;
    const char *u = p, *ue = e;
    fy_config_trim(&u, &ue);
    uint64_t unit = FY_NSEC_PER_SEC; /* a bare number is in seconds */
    if (u < ue) {
        size_t i;
        for (i = 0; i < FY_ARRAY_SIZE(units); i++)
            if (span_equals(u, ue, units[i].suffix))
                break;
        if (i == FY_ARRAY_SIZE(units))
            return FERRY_ERR_BAD_CONFIG;
        unit = units[i].ns;
    }
    if (whole > UINT64_MAX / unit)
        return FERRY_ERR_BAD_CONFIG;
    uint64_t ns = whole * unit;
    if (nfrac > 0) {
        double f = (double)frac / pow(10.0, (double)nfrac) * (double)unit;
        uint64_t fns = (uint64_t)(f + 0.5);
        if (fns > UINT64_MAX - ns)
            return FERRY_ERR_BAD_CONFIG;
        ns += fns;
    }
    *out_ns = ns;
    return FERRY_OK;
}

ferry_status_t fy_config_parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"y", "yes", "on", "1", "true"};
    static const char *const no[] = {"n", "no", "off", "0", "false"};
    if (s == NULL)
        return FERRY_ERR_BAD_CONFIG;
    const char *p = s, *e = s + strlen(s);
    fy_config_trim(&p, &e);
    for (size_t i = 0; i < FY_ARRAY_SIZE(yes); i++) {
        if (span_equals(p, e, yes[i])) {
            *out = 1;
            return FERRY_OK;
        }
        if (span_equals(p, e, no[i])) {
            *out = 0;
            return FERRY_OK;
        }
    }
    return FERRY_ERR_BAD_CONFIG;
}

/* An unsigned decimal or 0x-hex number taking the whole of [p, e). */
static int parse_unsigned(const char *p, const char *e, uint64_t *out)
{
    uint64_t v = 0;
    if (e - p > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        p += 2;
        for (; p < e; p++) {
            int c = tolower((unsigned char)*p);
            unsigned d;
            if (c >= '0' && c <= '9')
                d = (unsigned)(c - '0');
            else if (c >= 'a' && c <= 'f')
                d = (unsigned)(c - 'a' + 10);
            else
                return 0;
            if (v > (UINT64_MAX >> 4))
                return 0;
            v = (v << 4) | d;
        }
    } else if (!parse_digits(&p, e, &v, NULL) || p != e) {
        return 0;
    }
    *out = v;
    return 1;
}

static ferry_status_t parse_long(const char *s, long *out)
{
    const char *p = s, *e = s + strlen(s);
    fy_config_trim(&p, &e);
    int neg = 0;
    if (p < e && (*p == '-' || *p == '+'))
        neg = *p++ == '-';
    uint64_t v;
    if (!parse_unsigned(p, e, &v))
        return FERRY_ERR_BAD_CONFIG;
    if (neg) {
        if (v > (uint64_t)LONG_MAX + 1)
            return FERRY_ERR_BAD_CONFIG;
        *out = v == (uint64_t)LONG_MAX + 1 ? LONG_MIN : -(long)v;
    } else {
        if (v > (uint64_t)LONG_MAX)
            return FERRY_ERR_BAD_CONFIG;
        *out = (long)v;
    }
    return FERRY_OK;
}

static ferry_status_t parse_ulong(const char *s, unsigned long *out)
{
    const char *p = s, *e = s + strlen(s);
    fy_config_trim(&p, &e);
    uint64_t v;
    if (!parse_unsigned(p, e, &v) || v > ULONG_MAX)
        return FERRY_ERR_BAD_CONFIG;
    *out = (unsigned long)v;
    return FERRY_OK;
}

static ferry_status_t parse_double(const char *s, double *out)
{
    const char *p = s, *e = s + strlen(s);
    fy_config_trim(&p, &e);
    if (p == e)
        return FERRY_ERR_BAD_CONFIG;
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end != e || errno == ERANGE || !isfinite(v))
        return FERRY_ERR_BAD_CONFIG;
    *out = v;
    return FERRY_OK;
}

static int parse_enum(const char *s, const char *const *choices, int *out)
{
    const char *p = s, *e = s + strlen(s);
    fy_config_trim(&p, &e);
    for (int i = 0; choices != NULL && choices[i] != NULL; i++) {
        /* "name|alias|...": any spelling gives the choice (the first is the documented one) */
        for (const char *a = choices[i]; *a != '\0';) {
            const char *bar = strchr(a, '|');
            size_t n = bar != NULL ? (size_t)(bar - a) : strlen(a);
            if ((size_t)(e - p) == n && strncasecmp(p, a, n) == 0) {
                *out = i;
                return 1;
            }
            a += n + (bar != NULL);
        }
    }
    return 0;
}

/* ---- fields -------------------------------------------------------------------------------- */

static const char *type_syntax(fy_config_type_t type)
{
    switch (type) {
    case FY_CFG_STRING:
        return "a string";
    case FY_CFG_INT:
        return "an integer (decimal or 0x hex, optionally signed)";
    case FY_CFG_UINT:
        return "a non-negative integer (decimal or 0x hex)";
    case FY_CFG_DOUBLE:
        return "a decimal number";
    case FY_CFG_BOOL:
        return "a boolean: y, yes, on, 1, true or n, no, off, 0, false";
    case FY_CFG_SIZE:
        return "a size in bytes: a number with an optional k, m, g suffix (powers of 1024), or inf";
    case FY_CFG_TIME:
        return "a time: a number with a unit ns, us, ms, s or m (a bare number is seconds), or inf";
    case FY_CFG_ENUM:
        return "one of the choices";
    case FY_CFG_LIST:
        return "a comma-separated list of names, optionally starting with ^ to exclude them";
    }
    return "?";
}

/* "a, b or c" into buf. */
static void format_choices(const char *const *choices, char *buf, size_t size)
{
    size_t o = 0;
    buf[0] = '\0';
    int n = 0;
    while (choices != NULL && choices[n] != NULL)
        n++;
    for (int i = 0; i < n && o < size; i++) {
        const char *sep = i == 0 ? "" : i == n - 1 ? " or " : ", ";
        int w =
            snprintf(buf + o, size - o, "%s%.*s", sep, (int)strcspn(choices[i], "|"), choices[i]);
        if (w < 0)
            break;
        o += (size_t)w;
    }
}

static void *field_ptr(void *opts, const fy_config_field_t *f)
{
    return (char *)opts + f->offset;
}
static const void *field_cptr(const void *opts, const fy_config_field_t *f)
{
    return (const char *)opts + f->offset;
}

/*
 * Parse value into the field.  The old value of a string or list is replaced only on success.
 * from_default says where the value came from, for the error message.
 */
static ferry_status_t field_set(const fy_config_table_t *t, const fy_config_field_t *f, void *opts,
                                const char *value, int from_default)
{
    void *dst = field_ptr(opts, f);
    ferry_status_t st = FERRY_ERR_BAD_CONFIG;

    if (value == NULL) {
        /* No default: strings NULL, lists empty, numbers 0. */
        switch (f->type) {
        case FY_CFG_STRING:
            free(*(char **)dst);
            *(char **)dst = NULL;
            break;
        case FY_CFG_INT:
            *(long *)dst = 0;
            break;
        case FY_CFG_UINT:
            *(unsigned long *)dst = 0;
            break;
        case FY_CFG_DOUBLE:
            *(double *)dst = 0;
            break;
        case FY_CFG_BOOL:
            *(int *)dst = 0;
            break;
        case FY_CFG_SIZE:
            *(size_t *)dst = 0;
            break;
        case FY_CFG_TIME:
            *(uint64_t *)dst = 0;
            break;
        case FY_CFG_ENUM:
            *(int *)dst = 0;
            break;
        case FY_CFG_LIST:
            fy_config_list_release(dst);
            break;
        }
        return FERRY_OK;
    }

    switch (f->type) {
    case FY_CFG_STRING: {
        char *copy = strdup(value);
        if (copy == NULL)
            return FERRY_ERR_NO_MEMORY;
        free(*(char **)dst);
        *(char **)dst = copy;
        return FERRY_OK;
    }
    case FY_CFG_INT:
        st = parse_long(value, dst);
        break;
    case FY_CFG_UINT:
        st = parse_ulong(value, dst);
        break;
    case FY_CFG_DOUBLE:
        st = parse_double(value, dst);
        break;
    case FY_CFG_BOOL:
        st = fy_config_parse_bool(value, dst);
        break;
    case FY_CFG_SIZE:
        st = fy_config_parse_size(value, dst);
        break;
    case FY_CFG_TIME:
        st = fy_config_parse_time(value, dst);
        break;
    case FY_CFG_ENUM:
        st = parse_enum(value, f->choices, dst) ? FERRY_OK : FERRY_ERR_BAD_CONFIG;
        break;
    case FY_CFG_LIST: {
        fy_config_list_t l;
        st = fy_config_parse_list(value, &l);
        if (st == FERRY_OK) {
            fy_config_list_release(dst);
            *(fy_config_list_t *)dst = l;
        }
        break;
    }
    }
    if (st == FERRY_ERR_BAD_CONFIG) {
        char name[CFG_NAME_MAX];
        full_name(t, f, name, sizeof(name));
        if (f->type == FY_CFG_ENUM) {
            char choices[1024];
            format_choices(f->choices, choices, sizeof(choices));
            fy_error("%s=\"%s\"%s is not accepted: expected one of %s (case-insensitive)", name,
                     value, from_default ? " (the built-in default)" : "", choices);
        } else {
            fy_error("%s=\"%s\"%s is not accepted: expected %s", name, value,
                     from_default ? " (the built-in default)" : "", type_syntax(f->type));
        }
    }
    return st;
}

static void field_clear(const fy_config_field_t *f, void *opts)
{
    void *dst = field_ptr(opts, f);
    if (f->type == FY_CFG_STRING) {
        free(*(char **)dst);
        *(char **)dst = NULL;
    } else if (f->type == FY_CFG_LIST) {
        fy_config_list_release(dst);
    }
}

ferry_status_t fy_config_read(const fy_config_table_t *table, void *opts)
{
    fy_log_init();
    /* Owned fields start empty, so that release works whatever happens below. */
    for (size_t i = 0; i < table->nfields; i++) {
        void *dst = field_ptr(opts, &table->fields[i]);
        if (table->fields[i].type == FY_CFG_STRING)
            *(char **)dst = NULL;
        else if (table->fields[i].type == FY_CFG_LIST)
            memset(dst, 0, sizeof(fy_config_list_t));
    }
    for (size_t i = 0; i < table->nfields; i++) {
        const fy_config_field_t *f = &table->fields[i];
        char name[CFG_NAME_MAX];
        full_name(table, f, name, sizeof(name));
        const char *env = getenv(name);
        ferry_status_t st = field_set(table, f, opts, env != NULL ? env : f->dflt, env == NULL);
        if (st != FERRY_OK) {
            fy_config_release(table, opts);
            return st;
        }
    }
    return FERRY_OK;
}

ferry_status_t fy_config_set(const fy_config_table_t *table, void *opts, const char *name,
                             const char *value)
{
    /* The field name ("WINDOW"), or the full variable name ("FERRY_UDP_WINDOW"). */
    for (size_t i = 0; i < table->nfields; i++) {
        const fy_config_field_t *f = &table->fields[i];
        char full[CFG_NAME_MAX];
        full_name(table, f, full, sizeof(full));
        if (strcasecmp(name, f->name) == 0 || strcasecmp(name, full) == 0)
            return field_set(table, f, opts, value, 0);
    }
    fy_error("no configuration variable %s in %s (its variables are FERRY_%s*)", name,
             table->component != NULL ? table->component : "this component",
             table->prefix != NULL ? table->prefix : "");
    return FERRY_ERR_BAD_CONFIG;
}

void fy_config_release(const fy_config_table_t *table, void *opts)
{
    if (table == NULL || opts == NULL)
        return;
    for (size_t i = 0; i < table->nfields; i++)
        field_clear(&table->fields[i], opts);
}

/* ---- printing ------------------------------------------------------------------------------ */

static void format_size(size_t v, char *buf, size_t size)
{
    static const char sfx[] = "kmgt";
    if (v == SIZE_MAX) {
        snprintf(buf, size, "inf");
        return;
    }
    int u = -1;
    while (v != 0 && u < 3 && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, size, "%zu", v);
    else
        snprintf(buf, size, "%zu%c", v, sfx[u]);
}

static void format_time(uint64_t ns, char *buf, size_t size)
{
    if (ns == UINT64_MAX)
        snprintf(buf, size, "inf");
    else if (ns == 0)
        snprintf(buf, size, "0");
    else if (ns % (60 * FY_NSEC_PER_SEC) == 0)
        snprintf(buf, size, "%llum", (unsigned long long)(ns / (60 * FY_NSEC_PER_SEC)));
    else if (ns % FY_NSEC_PER_SEC == 0)
        snprintf(buf, size, "%llus", (unsigned long long)(ns / FY_NSEC_PER_SEC));
    else if (ns % FY_NSEC_PER_MSEC == 0)
        snprintf(buf, size, "%llums", (unsigned long long)(ns / FY_NSEC_PER_MSEC));
    else if (ns % FY_NSEC_PER_USEC == 0)
        snprintf(buf, size, "%lluus", (unsigned long long)(ns / FY_NSEC_PER_USEC));
    else
        snprintf(buf, size, "%lluns", (unsigned long long)ns);
}

static void format_value(const fy_config_field_t *f, const void *opts, char *buf, size_t size)
{
    const void *src = field_cptr(opts, f);
    switch (f->type) {
    case FY_CFG_STRING: {
        const char *s = *(char *const *)src;
        snprintf(buf, size, "%s", s != NULL ? s : "");
        break;
    }
    case FY_CFG_INT:
        snprintf(buf, size, "%ld", *(const long *)src);
        break;
    case FY_CFG_UINT:
        snprintf(buf, size, "%lu", *(const unsigned long *)src);
        break;
    case FY_CFG_DOUBLE:
        snprintf(buf, size, "%g", *(const double *)src);
        break;
    case FY_CFG_BOOL:
        snprintf(buf, size, "%s", *(const int *)src ? "y" : "n");
        break;
    case FY_CFG_SIZE:
        format_size(*(const size_t *)src, buf, size);
        break;
    case FY_CFG_TIME:
        format_time(*(const uint64_t *)src, buf, size);
        break;
    case FY_CFG_ENUM: {
        int idx = *(const int *)src, n = 0;
        while (f->choices != NULL && f->choices[n] != NULL)
            n++;
        const char *c = idx >= 0 && idx < n ? f->choices[idx] : "?";
        snprintf(buf, size, "%.*s", (int)strcspn(c, "|"), c);
        break;
    }
    case FY_CFG_LIST: {
        const fy_config_list_t *l = src;
        size_t o = 0;
        buf[0] = '\0';
        if (l->exclude)
            o += (size_t)snprintf(buf, size, "^");
        for (unsigned i = 0; i < l->count && o < size; i++) {
            int w = snprintf(buf + o, size - o, "%s%s", i ? "," : "", l->names[i]);
            if (w < 0)
                break;
            o += (size_t)w;
        }
        break;
    }
    }
}

void fy_config_print(const fy_config_table_t *table, const void *opts, FILE *f)
{
    fprintf(f, "#\n# %s\n#\n", table->component != NULL ? table->component : "");
    for (size_t i = 0; i < table->nfields; i++) {
        const fy_config_field_t *fd = &table->fields[i];
        char name[CFG_NAME_MAX], value[1024];
        full_name(table, fd, name, sizeof(name));
        format_value(fd, opts, value, sizeof(value));
        fprintf(f, "# %s\n", fd->doc != NULL ? fd->doc : "");
        if (fd->type == FY_CFG_ENUM) {
            char choices[1024];
            format_choices(fd->choices, choices, sizeof(choices));
            fprintf(f, "# Default: %s; one of %s.\n", fd->dflt != NULL ? fd->dflt : "", choices);
        } else {
            fprintf(f, "# Default: %s\n", fd->dflt != NULL ? fd->dflt : "");
        }
        fprintf(f, "%s=%s\n\n", name, value);
    }
}

/* ---- variables read directly ---------------------------------------------------------------- */

const fy_config_var_t fy_config_direct_vars[] = {
    {"FERRY_LOG_LEVEL", "warn", "Log level: none, error, warn, info, debug or trace."},
    {"FERRY_LOG_FILE", "stderr", "File the log goes to instead of stderr; %p becomes the pid."},
    {"FERRY_BOOT", "auto",
     "Bootstrap of ferry_world: builtin (ferryrun), pmix, pmi1 or singleton; auto takes the "
     "first whose launcher the environment shows."},
    {"FERRY_BOOT_TIMEOUT", "60s",
     "How long a bootstrap exchange or barrier may take before it fails with "
     "FERRY_ERR_TIMED_OUT."},
    {"FERRY_BOOT_ADDR", "(set by ferryrun)", "host:port of ferryrun's bootstrap server."},
    {"FERRY_BOOT_SECRET", "(set by ferryrun)",
     "The job secret a rank proves to ferryrun's bootstrap server (64 hex digits)."},
    {"FERRY_RANK", "(set by ferryrun)", "This process's rank in the job."},
    {"FERRY_SIZE", "(set by ferryrun)", "The number of ranks in the job."},
    {"FERRY_LOCAL_RANK", "(set by ferryrun)", "This process's rank among those of its host."},
    {"FERRY_LOCAL_SIZE", "(set by ferryrun)", "The number of ranks on this host."},
    {"FERRY_PERF_CLOCK", "tsc",
     "ferry_perf's clock: the invariant TSC where the cpu has one, or monotonic "
     "(clock_gettime) when set to monotonic."},
    {NULL, NULL, NULL},
};

void fy_config_print_direct(FILE *f)
{
    for (size_t i = 0; fy_config_direct_vars[i].name != NULL; i++) {
        const fy_config_var_t *v = &fy_config_direct_vars[i];
        const char *cur = getenv(v->name);
        fprintf(f, "# %s\n# Default: %s\n", v->doc, v->dflt);
        if (cur != NULL)
            fprintf(f, "%s=%s\n\n", v->name, cur);
        else
            fprintf(f, "# %s is not set\n\n", v->name);
    }
}

/* ---- unknown variables --------------------------------------------------------------------- */

static int known_name(const char *var, size_t len, const fy_config_table_t *const *tables,
                      size_t ntables, const char *const *extra_names)
{
    for (size_t i = 0; fy_config_direct_vars[i].name != NULL; i++)
        if (strlen(fy_config_direct_vars[i].name) == len &&
            strncmp(var, fy_config_direct_vars[i].name, len) == 0)
            return 1;
    for (size_t t = 0; t < ntables + fy_config_num_global_tables; t++) {
        const fy_config_table_t *tb =
            t < ntables ? tables[t] : fy_config_global_tables[t - ntables];
        if (tb == NULL)
            continue;
        for (size_t i = 0; i < tb->nfields; i++) {
            char full[CFG_NAME_MAX];
            full_name(tb, &tb->fields[i], full, sizeof(full));
            if (strlen(full) == len && strncmp(var, full, len) == 0)
                return 1;
        }
    }
    /* Extra names may be given with or without the FERRY_ prefix. */
    for (size_t i = 0; extra_names != NULL && extra_names[i] != NULL; i++) {
        const char *x = extra_names[i];
        if (strlen(x) == len && strncmp(var, x, len) == 0)
            return 1;
        if (strlen(x) + 6 == len && strncmp(var + 6, x, len - 6) == 0)
            return 1;
    }
    return 0;
}

unsigned fy_config_warn_unused(const fy_config_table_t *const *tables, size_t ntables,
                               const char *const *extra_names)
{
    unsigned n = 0;
    for (char **env = environ; env != NULL && *env != NULL; env++) {
        const char *var = *env;
        if (strncmp(var, "FERRY_", 6) != 0)
            continue;
        const char *eq = strchr(var, '=');
        size_t len = eq != NULL ? (size_t)(eq - var) : strlen(var);
        if (known_name(var, len, tables, ntables, extra_names))
            continue;
        fy_warn("%.*s is set but no part of ferry reads it (misspelled?); ignored", (int)len, var);
        n++;
    }
    return n;
}
