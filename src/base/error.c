/*
 * error.c - the per-thread error record and logging.
 *
 * An error is raised once, where it happens (RP_ERR records the message and the
 * origin), and gains context on its way up (rp_error_prefix). The record is
 * thread-local, so the engine thread and HTTP threads never see each other's.
 */
#include "base.h"

#include <stdio.h>
#include <stdlib.h>

#define ERR_MSG_MAX 1024

static _Thread_local char err_msg[ERR_MSG_MAX];
static _Thread_local char err_origin[256];

rp_status rp_error_set(rp_status st, const char *file, int line, const char *func, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof(err_msg), fmt, ap);
    va_end(ap);
    snprintf(err_origin, sizeof(err_origin), "%s:%d (%s)", file, line, func);
    return st;
}

rp_status rp_error_prefix(rp_status st, const char *fmt, ...)
{
    char prefix[512], old[ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    memcpy(old, err_msg, sizeof(old));
    const char *rest = old[0] ? old : rp_status_name(st);
    size_t n = strlen(prefix);
    // Built by hand: the message is cut at the buffer's end by design.
    memcpy(err_msg, prefix, n);
    size_t at = n;
    if (at + 2 < sizeof(err_msg)) {
        err_msg[at++] = ':';
        err_msg[at++] = ' ';
    }
    size_t m = strlen(rest);
    if (m > sizeof(err_msg) - 1 - at)
        m = sizeof(err_msg) - 1 - at;
    memcpy(err_msg + at, rest, m);
    err_msg[at + m] = 0;
    return st;
}

const char *rp_error_message(void)
{
    return err_msg;
}

const char *rp_error_origin(void)
{
    return err_origin;
}

void rp_error_clear(void)
{
    err_msg[0] = 0;
    err_origin[0] = 0;
}

const char *rp_status_name(rp_status st)
{
    switch (st) {
    case RP_OK: return "ok";
    case RP_ERR_NOMEM: return "out of memory";
    case RP_ERR_IO: return "i/o error";
    case RP_ERR_INVALID: return "invalid input";
    case RP_ERR_UNSUPPORTED: return "unsupported";
    case RP_ERR_DEVICE: return "device error";
    case RP_ERR_RANGE: return "out of range";
    case RP_ERR_LIMIT: return "limit reached";
    }
    return "unknown error";
}

void rp_assert_fail(const char *expr, const char *file, int line, const char *func)
{
    fprintf(stderr, "rapid: internal error: assertion `%s' failed at %s:%d (%s)\n", expr, file, line, func);
    abort();
}

/* ---- logging ---- */

static rp_log_level log_level = RP_LOG_INFO;

void rp_log_set_level(rp_log_level level)
{
    log_level = level;
}

rp_log_level rp_log_get_level(void)
{
    return log_level;
}

void rp_log(rp_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warning", "error"};
    if (level < log_level || level >= RP_LOG_QUIET)
        return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    // One write per line so lines from several threads do not interleave.
    if (level == RP_LOG_INFO)
        fprintf(stderr, "%s\n", line);
    else
        fprintf(stderr, "%s: %s\n", names[level], line);
}
