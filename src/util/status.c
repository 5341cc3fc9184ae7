/*
 * status.c - status codes for people, and errno mapped at the OS boundary.
 */
#include <errno.h>

#include "util/status.h"

const char *ferry_status_string(ferry_status_t status)
{
    switch (status) {
    case FERRY_OK:
        return "success";
    case FERRY_INPROGRESS:
        return "operation in progress";
    case FERRY_ERR_NO_MESSAGE:
        return "no matching message";
    case FERRY_ERR_NO_RESOURCE:
        return "resources temporarily exhausted (retry after progress)";
    case FERRY_ERR_NO_MEMORY:
        return "out of memory";
    case FERRY_ERR_INVALID_PARAM:
        return "invalid parameter";
    case FERRY_ERR_UNSUPPORTED:
        return "operation not supported (or not yet implemented)";
    case FERRY_ERR_UNREACHABLE:
        return "destination unreachable by any transport";
    case FERRY_ERR_INVALID_ADDR:
        return "invalid or foreign worker address";
    case FERRY_ERR_TIMED_OUT:
        return "timed out";
    case FERRY_ERR_CANCELED:
        return "operation canceled";
    case FERRY_ERR_TRUNCATED:
        return "buffer too small";
    case FERRY_ERR_CONNECTION_RESET:
        return "connection reset by peer";
    case FERRY_ERR_ENDPOINT_TIMEOUT:
        return "peer stopped answering (endpoint timeout)";
    case FERRY_ERR_ACCESS_DENIED:
        return "remote access denied (wrong key or out of bounds)";
    case FERRY_ERR_IO:
        return "input/output error";
    case FERRY_ERR_BUSY:
        return "busy: events pending";
    case FERRY_ERR_EXISTS:
        return "already exists";
    case FERRY_ERR_NO_ELEM:
        return "no such element";
    case FERRY_ERR_BAD_CONFIG:
        return "invalid configuration value";
    case FERRY_ERR_NO_DEVICE:
        return "no usable device or transport";
    case FERRY_ERR_PROTOCOL:
        return "protocol error: malformed data from peer";
    case FERRY_ERR_BOOTSTRAP:
        return "bootstrap (launcher key-value service) failed";
    case FERRY_ERR_MESSAGE_TRUNCATED:
        return "message longer than the receive buffer";
    case FERRY_ERR_NOT_CONNECTED:
        return "endpoint not connected (closed or failed)";
    case FERRY_ERR_LAST:
        break;
    }
    return "unknown status code";
}

ferry_status_t fy_status_from_errno(int err)
{
    switch (err) {
    case 0:
        return FERRY_OK;
    case EAGAIN:
#if EWOULDBLOCK != EAGAIN
    case EWOULDBLOCK:
#endif
    case ENOBUFS:
    case EINTR:
        return FERRY_ERR_NO_RESOURCE;
    case ENOMEM:
        return FERRY_ERR_NO_MEMORY;
    case EINVAL:
        return FERRY_ERR_INVALID_PARAM;
    case ECONNRESET:
    case EPIPE:
    case ECONNABORTED:
        return FERRY_ERR_CONNECTION_RESET;
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
        return FERRY_ERR_UNREACHABLE;
    case ETIMEDOUT:
        return FERRY_ERR_TIMED_OUT;
    case EPERM:
    case EACCES:
        return FERRY_ERR_ACCESS_DENIED;
    case ENOTCONN:
        return FERRY_ERR_NOT_CONNECTED;
    case EEXIST:
        return FERRY_ERR_EXISTS;
    case ENOENT:
    case ESRCH:
        return FERRY_ERR_NO_ELEM;
    case ENOSYS:
    case EOPNOTSUPP:
        return FERRY_ERR_UNSUPPORTED;
    default:
        return FERRY_ERR_IO;
    }
}
