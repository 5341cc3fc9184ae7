/*
 * tl_util.c - small helpers shared by every transport: the iface base, iov gather/scatter.
 */
#include <string.h>

#include "tl/tl.h"

void fy_tl_iface_base_init(fy_tl_iface_t *iface, const fy_tl_component_t *tl, fy_tl_md_t *md,
                           const fy_tl_iface_params_t *params)
{
    iface->component = tl;
    iface->md = md;
    iface->params = *params;
    snprintf(iface->dev_name, sizeof(iface->dev_name), "%s",
             params->device != NULL ? params->device : "");
    iface->params.device = iface->dev_name;
}

size_t fy_iov_gather(void *dst, const struct iovec *iov, size_t iovcnt)
{
    char *p = dst;
    for (size_t i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len != 0)
            memcpy(p, iov[i].iov_base, iov[i].iov_len);
        p += iov[i].iov_len;
    }
    return (size_t)(p - (char *)dst);
}

size_t fy_iov_scatter(const struct iovec *iov, size_t iovcnt, size_t offset, const void *src,
                      size_t len)
{
    const char *s = src;
    size_t done = 0;
    for (size_t i = 0; i < iovcnt && done < len; i++) {
        if (offset >= iov[i].iov_len) {
            offset -= iov[i].iov_len;
            continue;
        }
        size_t n = iov[i].iov_len - offset;
        if (n > len - done)
            n = len - done;
        memcpy((char *)iov[i].iov_base + offset, s + done, n);
        done += n;
        offset = 0;
    }
    return done;
}
