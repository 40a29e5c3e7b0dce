/* Status strings and the thread-local last-error message. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char fx_last_msg[1024];
static _Thread_local int fx_last_code;

int fx_error(int code, const char *func, const char *fmt, ...)
{
    fx_last_code = code;
    int n = snprintf(fx_last_msg, sizeof fx_last_msg, "%s: ", func ? func : "flexpoint");
    if (n < 0 || (size_t)n >= sizeof fx_last_msg) n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fx_last_msg + n, sizeof fx_last_msg - (size_t)n, fmt, ap);
    va_end(ap);
    return code;
}

const char *flexpoint_last_error(void) { return fx_last_msg; }

void flexpoint_clear_error(void)
{
    fx_last_msg[0] = '\0';
    fx_last_code = FX_OK;
}

int flexpoint_last_status(void) { return fx_last_code; }

const char *flexpoint_status_str(int status)
{
    switch (status) {
    case FX_OK: return "FX_OK";
    case FX_EINVAL: return "FX_EINVAL";
    case FX_ESHAPE: return "FX_ESHAPE";
    case FX_EFORMAT: return "FX_EFORMAT";
    case FX_EUNSUPPORTED: return "FX_EUNSUPPORTED";
    case FX_ENOMEM: return "FX_ENOMEM";
    case FX_ERANGE: return "FX_ERANGE";
    case FX_EIO: return "FX_EIO";
    case FX_ECORRUPT: return "FX_ECORRUPT";
    case FX_EDEVICE: return "FX_EDEVICE";
    case FX_ENAME: return "FX_ENAME";
    case FX_ESTATE: return "FX_ESTATE";
    default: return "FX_UNKNOWN";
    }
}

/* The CMake build defines FX_PROJECT_VERSION from project(VERSION) and refuses to configure
 * when include/flexpoint.h's FLEXPOINT_VERSION_* macros say otherwise; builds without CMake
 * (tools/fuzz_check.sh) spell the version from those macros. */
#define FX_STR_(x) #x
#define FX_STR(x) FX_STR_(x)
#ifndef FX_PROJECT_VERSION
#define FX_PROJECT_VERSION                                                                     \
    FX_STR(FLEXPOINT_VERSION_MAJOR) "." FX_STR(FLEXPOINT_VERSION_MINOR) "." FX_STR(            \
        FLEXPOINT_VERSION_PATCH)
#endif

const char *flexpoint_version(void) { return FX_PROJECT_VERSION; }
