/*
 * sizes.c - the values of the command line's flags: sizes in bytes ("512M",
 * "4GiB", "0.25" of the memory available) for the KV cache and the prefix
 * cache's disk budget, the types of --quant and --kv-dtype, and whole numbers and
 * floats read strictly (the whole string, in range) for every subcommand; and the one
 * line a bad flag prints.
 */
#include "cli.h"

#include "../base/base.h"

#include <ctype.h>
#include <stdarg.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool rp_cli_parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0 || isspace((unsigned char)*s))
        return false;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mul > 1 && (*end == 'i' || *end == 'I'))
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v * mul >= 18446744073709551615.0)
        return false;
    *out = (uint64_t)(v * mul);
    return true;
}

uint64_t rp_cli_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

bool rp_cli_parse_kv_memory(const char *s, uint64_t *out, double *fraction)
{
    *fraction = 0;
    size_t n = strlen(s);
    bool percent = n > 0 && s[n - 1] == '%';
    if (percent || (strchr(s, '.') && strtod(s, NULL) <= 1.0)) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (errno || end == s || (percent ? end != s + n - 1 : *end != 0) || !isfinite(v))
            return false;
        if (percent)
            v /= 100;
        uint64_t avail = rp_cli_mem_available();
        if (!(v > 0 && v <= 1) || avail == 0)
            return false;
        *out = (uint64_t)(v * (double)avail);
        *fraction = v;
        return true;
    }
    return rp_cli_parse_bytes(s, out);
}

bool rp_cli_parse_kv_dtype(const char *s, bool *f32)
{
    if (strcmp(s, "f16") == 0 || strcmp(s, "float16") == 0)
        *f32 = false;
    else if (strcmp(s, "f32") == 0 || strcmp(s, "float32") == 0)
        *f32 = true;
    else
        return false;
    return true;
}

bool rp_cli_parse_quant(const char *s, rp_dtype *out)
{
    if (strcmp(s, "q8") == 0 || strcmp(s, "q8_0") == 0)
        *out = RP_DTYPE_Q8_0;
    else if (strcmp(s, "q4") == 0 || strcmp(s, "q4_0") == 0)
        *out = RP_DTYPE_Q4_0;
    else if (strcmp(s, "q4k") == 0 || strcmp(s, "q4_k") == 0 || strcmp(s, "q4_K") == 0)
        *out = RP_DTYPE_Q4_K;
    else
        return false;
    return true;
}

bool rp_cli_parse_long(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool rp_cli_parse_int(const char *s, long lo, long hi, int *out)
{
    long long v;
    if (!rp_cli_parse_long(s, lo, hi, &v))
        return false;
    *out = (int)v;
    return true;
}

bool rp_cli_parse_float(const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end)
        return false;
    *out = v;
    return true;
}

int rp_cli_usage_error(const char *cmd, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "rapid%s%s: %s (see `rapid%s%s --help`)\n", cmd ? " " : "", cmd ? cmd : "", msg, cmd ? " " : "",
            cmd ? cmd : "");
    return 2;
}
