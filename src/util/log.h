/*
 * log.h - leveled logging.
 *
 * FERRY_LOG_LEVEL=error|warn|info|debug|trace (default warn) and FERRY_LOG_FILE=path (default
 * stderr; "%p" in the path becomes the pid).  The level is checked before any argument is
 * formatted, so a disabled debug line costs one compare.
 */
#ifndef FY_UTIL_LOG_H
#define FY_UTIL_LOG_H

#include <stdarg.h>

typedef enum fy_log_level {
    FY_LOG_NONE = 0,
    FY_LOG_ERROR,
    FY_LOG_WARN,
    FY_LOG_INFO,
    FY_LOG_DEBUG,
    FY_LOG_TRACE,
} fy_log_level_t;

extern int fy_log_level_current;

/* Read FERRY_LOG_LEVEL / FERRY_LOG_FILE once (idempotent, thread-safe). */
void fy_log_init(void);
/* Parse a level name; -1 if unknown. */
int fy_log_level_parse(const char *name);
void fy_log_emit(fy_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Tag every line with a rank (set by the bootstrap once known; -1 = none). */
void fy_log_set_rank(int rank);

#define fy_log(level, ...)                                                                         \
    do {                                                                                           \
        if ((int)(level) <= fy_log_level_current)                                                  \
            fy_log_emit((level), __FILE__, __LINE__, __VA_ARGS__);                                 \
    } while (0)

#define fy_error(...) fy_log(FY_LOG_ERROR, __VA_ARGS__)
#define fy_warn(...)  fy_log(FY_LOG_WARN, __VA_ARGS__)
#define fy_info(...)  fy_log(FY_LOG_INFO, __VA_ARGS__)
#define fy_debug(...) fy_log(FY_LOG_DEBUG, __VA_ARGS__)
#define fy_trace(...) fy_log(FY_LOG_TRACE, __VA_ARGS__)

#endif
