/*
 * registry.c - the compiled-in transports, registered explicitly (a constructor attribute
 * would be dropped silently from a static archive).  The order is the default preference
 * when two transports score the same.  CMake defines FERRY_TL_<NAME> for each transport
 * folder present in the tree (and, for ofi, when libfabric is found).
 */
#include <string.h>

#include "ferry_build.h"
#include "tl/tl.h"

extern const fy_tl_component_t fy_tl_self_component;
extern const fy_tl_component_t fy_tl_shm_component;
extern const fy_tl_component_t fy_tl_udp_component;
extern const fy_tl_component_t fy_tl_tcp_component;
extern const fy_tl_component_t fy_tl_ofi_component;

const fy_tl_component_t *const fy_tl_components[] = {
#ifdef FERRY_TL_SELF
    &fy_tl_self_component,
#endif
#ifdef FERRY_TL_SHM
    &fy_tl_shm_component,
#endif
#ifdef FERRY_TL_OFI
    &fy_tl_ofi_component,
#endif
#ifdef FERRY_TL_UDP
    &fy_tl_udp_component,
#endif
#ifdef FERRY_TL_TCP
    &fy_tl_tcp_component,
#endif
    NULL,
};

const size_t fy_tl_num_components = sizeof(fy_tl_components) / sizeof(fy_tl_components[0]) - 1;

const fy_tl_component_t *fy_tl_find(const char *name)
{
    for (size_t i = 0; i < fy_tl_num_components; i++)
        if (strcmp(fy_tl_components[i]->name, name) == 0)
            return fy_tl_components[i];
    return NULL;
}
