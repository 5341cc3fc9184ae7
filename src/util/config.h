/*
 * config.h - configuration tables read from FERRY_* environment variables.
 *
 * Each component declares a table of {name, default, doc, type, offset}; fy_config_read()
 * fills the component's options struct from FERRY_<prefix><name> or the default.  The same
 * tables feed `ferry_info -c`, so the documentation of a variable lives in one place.
 *
 * Value syntax:
 *   size   1234, 4k, 64K, 2m, 1g (powers of 1024; also t, and an optional
 *          trailing b: 4kb), "inf" = SIZE_MAX                         -> size_t
 *   time   250ns, 50us, 5ms, 2s, 1m, 1.5ms; a bare number is in seconds;
 *          "inf" = UINT64_MAX                                        -> uint64_t ns
 *   bool   y/yes/on/1/true, n/no/off/0/false                         -> int
 *   int    decimal (or 0x hex)                                       -> long
 *   uint   decimal (or 0x hex), no sign                               -> unsigned long
 *   double decimal                                                    -> double
 *   enum   one of the table's choices (case-insensitive; "a|b": b spells a too) -> int (index)
 *   string anything                                                   -> char * (owned)
 *   list   comma-separated names; a leading ^ excludes them instead   -> fy_config_list_t
 *          (names compare case-insensitively; the name "all" matches every name, so
 *          "all" selects everything and "^" alone excludes nothing)
 *
 * A bad value is FERRY_ERR_BAD_CONFIG with an error naming the variable, the value and what
 * is accepted.  fy_config_warn_unused() warns once for any FERRY_* variable no table knows.
 */
#ifndef FY_UTIL_CONFIG_H
#define FY_UTIL_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ferry.h"

typedef enum fy_config_type {
    FY_CFG_STRING,
    FY_CFG_INT,
    FY_CFG_UINT,
    FY_CFG_DOUBLE,
    FY_CFG_BOOL,
    FY_CFG_SIZE,
    FY_CFG_TIME,
    FY_CFG_ENUM,
    FY_CFG_LIST,
} fy_config_type_t;

typedef struct fy_config_list {
    char **names;
    unsigned count;
    int exclude; /* the value began with ^: names are the ones NOT to use */
} fy_config_list_t;

typedef struct fy_config_field {
    const char *name; /* e.g. "WINDOW": the variable is FERRY_<prefix>WINDOW */
    const char *dflt; /* default value, in the same syntax as the environment */
    const char *doc;  /* one or two sentences: what it does, units, range */
    fy_config_type_t type;
    size_t offset;              /* into the options struct */
    const char *const *choices; /* FY_CFG_ENUM: NULL-terminated */
} fy_config_field_t;

typedef struct fy_config_table {
    const char *component; /* "context", "udp", ... (for printing) */
    const char *prefix;    /* "" or "UDP_" */
    const fy_config_field_t *fields;
    size_t nfields;
} fy_config_table_t;

#define FY_CONFIG_FIELD(_name, _dflt, _doc, _type, _struct, _member)                               \
    {                                                                                              \
        _name, _dflt, _doc, _type, offsetof(_struct, _member), NULL                                \
    }
#define FY_CONFIG_ENUM_FIELD(_name, _dflt, _doc, _struct, _member, _choices)                       \
    {                                                                                              \
        _name, _dflt, _doc, FY_CFG_ENUM, offsetof(_struct, _member), _choices                      \
    }

/* Fill opts from the environment (defaults for unset variables).  On failure nothing is left
 * allocated in opts; on success the caller ends with fy_config_release(). */
ferry_status_t fy_config_read(const fy_config_table_t *table, void *opts);
/* Parse one value (as the environment would give it) into one field of opts, which must have
 * been filled by fy_config_read().  name is the field name ("WINDOW") or the full variable
 * name; on failure the field keeps its old value. */
ferry_status_t fy_config_set(const fy_config_table_t *table, void *opts, const char *name,
                             const char *value);
/* Free strings and lists owned by opts. */
void fy_config_release(const fy_config_table_t *table, void *opts);
/* Print every variable: name, current value, default and doc. */
void fy_config_print(const fy_config_table_t *table, const void *opts, FILE *f);

/* Parsers, exposed for reuse and tests.  Return FERRY_OK or FERRY_ERR_BAD_CONFIG. */
ferry_status_t fy_config_parse_size(const char *s, size_t *out);
ferry_status_t fy_config_parse_time(const char *s, uint64_t *out_ns);
ferry_status_t fy_config_parse_bool(const char *s, int *out);
ferry_status_t fy_config_parse_list(const char *s, fy_config_list_t *out);
void fy_config_list_release(fy_config_list_t *l);
/* Is name selected by the list?  (in the list, or not in an exclusion list) */
int fy_config_list_selects(const fy_config_list_t *l, const char *name);
/* Position of name in an inclusion list (-1 if absent / excluded); gives a preference order.
 * A name matched only by "all" gets the position of "all"; in an exclusion list every name
 * not excluded is at 0.  So the index is >= 0 exactly when the name is selected. */
int fy_config_list_index(const fy_config_list_t *l, const char *name);
/* [*b, *e) narrowed past white space at both ends (shared by the parsers). */
void fy_config_trim(const char **b, const char **e);

/*
 * The variables read directly (getenv) rather than through a table: logging (before any
 * context exists), the bootstrap and the launcher's per-rank settings, the tools.  This list
 * and the tables are the one place every FERRY_* variable is written down: `ferry_info -c`
 * prints both, fy_config_warn_unused() knows both, and tests/tools/test_env_vars.sh fails on a
 * variable read anywhere in src/ or tools/ that neither lists.
 */
typedef struct fy_config_var {
    const char *name; /* the whole name, FERRY_... */
    const char *dflt; /* what applies when it is unset, in words */
    const char *doc;
} fy_config_var_t;
extern const fy_config_var_t fy_config_direct_vars[]; /* ends with a NULL name */
/* Print the direct variables as fy_config_print() prints a table (current value or unset). */
void fy_config_print_direct(FILE *f);

/* The tables of library-wide services (the registration cache's FERRY_RCACHE*): always known
 * to fy_config_warn_unused, listed by ferry_info -c. */
extern const fy_config_table_t *const fy_config_global_tables[];
extern const size_t fy_config_num_global_tables;

/* Warn for each FERRY_* variable that none of the tables (nor the global ones, nor
 * fy_config_direct_vars, nor extra_names, given with or without the FERRY_ prefix) knows.
 * Returns the count. */
unsigned fy_config_warn_unused(const fy_config_table_t *const *tables, size_t ntables,
                               const char *const *extra_names);

#endif
