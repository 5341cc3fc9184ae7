/*
 * config_list.c - the list syntax of FERRY_* variables: "a,b,c" selects names, "^a,b" excludes
 * them, "all" selects everything not excluded.
 *
 * Transports, connection managers and providers are all chosen by such lists (FERRY_TLS,
 * FERRY_CM, FERRY_OFI_PROVIDER, ...), and the position of a name in an include list is its
 * preference, so the one parser and the two questions asked of a list (is it selected; where
 * does it rank) live here, apart from the table machinery of config.c.  Names compare without
 * case because users type them both ways.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/config.h"

void fy_config_list_release(fy_config_list_t *l)
{
    if (l == NULL)
        return;
    for (unsigned i = 0; i < l->count; i++)
        free(l->names[i]);
    free(l->names);
    l->names = NULL;
    l->count = 0;
    l->exclude = 0;
}

ferry_status_t fy_config_parse_list(const char *s, fy_config_list_t *out)
{
    fy_config_list_t l = {NULL, 0, 0};
    if (s == NULL)
        return FERRY_ERR_BAD_CONFIG;
    const char *p = s, *e = s + strlen(s);
    fy_config_trim(&p, &e);
    if (p < e && *p == '^') {
        l.exclude = 1;
        p++;
    }
    unsigned max = 1;
    for (const char *q = p; q < e; q++)
        max += *q == ',';
    l.names = calloc(max, sizeof(*l.names));
    if (l.names == NULL)
        return FERRY_ERR_NO_MEMORY;
    while (p < e) {
        const char *comma = memchr(p, ',', (size_t)(e - p));
        const char *ie = comma != NULL ? comma : e;
        const char *ib = p;
        fy_config_trim(&ib, &ie);
        /* Empty items (a trailing comma) are skipped; a ^ is only meaningful at the start. */
        if (ib < ie) {
            if (memchr(ib, '^', (size_t)(ie - ib)) != NULL)
                goto bad;
            l.names[l.count] = strndup(ib, (size_t)(ie - ib));
            if (l.names[l.count] == NULL) {
                fy_config_list_release(&l);
                return FERRY_ERR_NO_MEMORY;
            }
            l.count++;
        }
        p = comma != NULL ? comma + 1 : e;
    }
    *out = l;
    return FERRY_OK;
bad:
    fy_config_list_release(&l);
    return FERRY_ERR_BAD_CONFIG;
}

/* Is name listed (or is "all" listed)?  The position, or -1. */
static int list_find(const fy_config_list_t *l, const char *name)
{
    int all = -1;
    for (unsigned i = 0; i < l->count; i++) {
        if (strcasecmp(l->names[i], name) == 0)
            return (int)i;
        if (all < 0 && strcasecmp(l->names[i], "all") == 0)
            all = (int)i;
    }
    return all;
}

int fy_config_list_selects(const fy_config_list_t *l, const char *name)
{
    if (l == NULL)
        return 1;
    int found = list_find(l, name) >= 0;
    return l->exclude ? !found : found;
}

int fy_config_list_index(const fy_config_list_t *l, const char *name)
{
    if (l == NULL)
        return 0;
    if (l->exclude)
        return list_find(l, name) >= 0 ? -1 : 0;
    return list_find(l, name);
}
