/*
 * fuzz_config.c - libFuzzer target for configuration strings (src/util/config.c): every value
 * a user can put in a FERRY_* variable.  The input picks a table (the context's, each
 * transport's, and a local one with a field of every type) and a field, and the rest is the
 * value: it goes through fy_config_set (as ferry_info and the tests set a value), through
 * fy_config_read from the environment (as the library reads it), through each parser on its
 * own, and the result is printed back (fy_config_print formats every type).  A bad value must
 * give FERRY_ERR_BAD_CONFIG, never a crash, and nothing may leak.
 */
#include <stdalign.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto_int.h"
#include "util/config.h"

#ifdef FERRY_TL_SHM
#include "tl/shm/shm.h"
#endif
#ifdef FERRY_TL_TCP
#include "tl/tcp/tcp.h"
#endif
#ifdef FERRY_TL_UDP
#include "tl/udp/udp.h"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

typedef struct every_type {
    char *s;
    long i;
    unsigned long u;
    double d;
    int b;
    size_t sz;
    uint64_t t;
    int e;
    fy_config_list_t l;
} every_type_t;

static const char *const colours[] = {"red", "green", "blue", NULL};
static const fy_config_field_t every_fields[] = {
    FY_CONFIG_FIELD("S", "x", "a string", FY_CFG_STRING, every_type_t, s),
    FY_CONFIG_FIELD("I", "-1", "an int", FY_CFG_INT, every_type_t, i),
    FY_CONFIG_FIELD("U", "0x10", "a uint", FY_CFG_UINT, every_type_t, u),
    FY_CONFIG_FIELD("D", "1.5", "a double", FY_CFG_DOUBLE, every_type_t, d),
    FY_CONFIG_FIELD("B", "yes", "a bool", FY_CFG_BOOL, every_type_t, b),
    FY_CONFIG_FIELD("SZ", "4k", "a size", FY_CFG_SIZE, every_type_t, sz),
    FY_CONFIG_FIELD("T", "5ms", "a time", FY_CFG_TIME, every_type_t, t),
    FY_CONFIG_ENUM_FIELD("E", "red", "an enum", every_type_t, e, colours),
    FY_CONFIG_FIELD("L", "^a,b", "a list", FY_CFG_LIST, every_type_t, l),
};
static const fy_config_table_t every_table = {"fuzz", "FUZZ_", every_fields,
                                              sizeof(every_fields) / sizeof(every_fields[0])};

static const fy_config_table_t *tables[8];
static size_t ntables;
static alignas(64) unsigned char opts[1 << 16];
static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    setenv("FERRY_LOG_LEVEL", "none", 1);
    tables[ntables++] = &every_table;
    tables[ntables++] = &fy_ctx_config_table;
#ifdef FERRY_TL_SHM
    tables[ntables++] = &fy_shm_config_table;
#endif
#ifdef FERRY_TL_TCP
    tables[ntables++] = &fy_tcp_config_table;
#endif
#ifdef FERRY_TL_UDP
    tables[ntables++] = &fy_udp_config_table;
#endif
    for (size_t t = 0; t < ntables; t++)
        for (size_t f = 0; f < tables[t]->nfields; f++)
            if (tables[t]->fields[f].offset + sizeof(fy_config_list_t) > sizeof(opts))
                abort(); /* the options buffer is too small for this table */
    devnull = fopen("/dev/null", "w");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const fy_config_table_t *t = tables[data[0] % ntables];
    const fy_config_field_t *f = &t->fields[data[1] % t->nfields];
    char *value = strndup((const char *)data + 2, size - 2); /* a C string, as getenv gives */
    if (value == NULL)
        return 0;

    /* the parsers on their own */
    size_t sz;
    uint64_t ns;
    int b;
    fy_config_list_t l;
    fy_config_parse_size(value, &sz);
    fy_config_parse_time(value, &ns);
    fy_config_parse_bool(value, &b);
    if (fy_config_parse_list(value, &l) == FERRY_OK) {
        fy_config_list_selects(&l, "udp");
        fy_config_list_index(&l, "all");
        fy_config_list_index(&l, value);
        fy_config_list_release(&l);
    }

    /* set on top of the defaults, then print every field back */
    memset(opts, 0, sizeof(opts));
    if (fy_config_read(t, opts) == FERRY_OK) {
        fy_config_set(t, opts, f->name, value);
        fy_config_print(t, opts, devnull);
        fy_config_release(t, opts);
    }

    /* from the environment, as the library reads it */
    char name[128];
    snprintf(name, sizeof(name), "FERRY_%s%s", t->prefix, f->name);
    if (setenv(name, value, 1) == 0) {
        memset(opts, 0, sizeof(opts));
        if (fy_config_read(t, opts) == FERRY_OK) {
            fy_config_print(t, opts, devnull);
            fy_config_release(t, opts);
        }
        unsetenv(name);
    }
    free(value);
    return 0;
}
