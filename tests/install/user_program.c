/* A user's program built against the installed library: two workers exchange one AM. */
#include <ferry.h>
#include <stdio.h>
#include <string.h>

static char got[64];

static ferry_status_t on_msg(void *arg, const void *header, size_t header_len, const void *data,
                             size_t len, ferry_ep_t *reply_ep)
{
    (void)arg, (void)header, (void)header_len, (void)reply_ep;
    memcpy(got, data, len < sizeof(got) - 1 ? len : sizeof(got) - 1);
    return FERRY_OK;
}

int main(void)
{
    ferry_context_t *ctx;
    ferry_worker_t *a, *b;
    ferry_ep_t *ep;
    char addr[4096];
    size_t len = sizeof(addr);
    if (ferry_context_create(NULL, &ctx) != FERRY_OK || ferry_worker_create(ctx, NULL, &a) ||
        ferry_worker_create(ctx, NULL, &b) || ferry_worker_get_address(b, addr, &len))
        return 1;
    ferry_ep_params_t p = {
        .field_mask = FERRY_EP_FIELD_ADDRESS, .address = addr, .address_len = len};
    if (ferry_ep_create(a, &p, &ep) || ferry_worker_set_am_handler(b, 1, on_msg, NULL))
        return 1;
    const char *msg = "hello from an installed ferry";
    if (ferry_am_send(ep, 1, NULL, 0, msg, strlen(msg), NULL) != FERRY_OK)
        return 1;
    while (got[0] == '\0') {
        ferry_worker_progress(a);
        ferry_worker_progress(b);
    }
    printf("user program: received '%s'\n", got);
    ferry_ep_close(ep, FERRY_EP_CLOSE_FORCE, NULL);
    ferry_worker_destroy(a);
    ferry_worker_destroy(b);
    ferry_context_destroy(ctx);
    return 0;
}
