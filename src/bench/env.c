/*
 * env.c - facts about the machine a run measured on, for the result file:
 * CPU model, cores, memory, OS and kernel, the load average before and after,
 * the UTC time, and where this machine's Python standard library is (the
 * source of the code in the prompts). Everything is read from /proc, /etc and
 * uname; a fact that cannot be read is left out, never guessed.
 */
#include "bench_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

// The value after "key" and a ':' or '=' on the first line starting with key,
// without surrounding spaces and quotes, into buf. False when absent.
static bool read_field(const char *path, const char *key, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[1024];
    size_t kn = strlen(key);
    bool found = false;
    while (!found && fgets(line, sizeof(line), f)) {
        if (strncmp(line, key, kn) != 0)
            continue;
        char *v = line + kn;
        while (*v == ' ' || *v == '\t')
            v++;
        if (*v != ':' && *v != '=')
            continue;
        v++;
        while (*v == ' ' || *v == '\t' || *v == '"')
            v++;
        size_t n = strlen(v);
        while (n && (v[n - 1] == '\n' || v[n - 1] == ' ' || v[n - 1] == '"'))
            n--;
        snprintf(buf, cap, "%.*s", (int)n, v);
        found = true;
    }
    fclose(f);
    return found;
}

json_t *rp_bench_machine(void)
{
    json_t *m = json_object();
    if (!m)
        return NULL;
    char buf[512];
    int bad = 0;
    if (read_field("/proc/cpuinfo", "model name", buf, sizeof(buf)))
        bad |= json_object_set_new(m, "cpu", json_string(buf));
    bad |= json_object_set_new(m, "cores", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
    if (read_field("/proc/meminfo", "MemTotal", buf, sizeof(buf)))
        bad |= json_object_set_new(m, "memory_bytes", json_integer((json_int_t)strtoll(buf, NULL, 10) * 1024));
    if (read_field("/etc/os-release", "PRETTY_NAME", buf, sizeof(buf)))
        bad |= json_object_set_new(m, "os", json_string(buf));
    struct utsname u;
    if (uname(&u) == 0) {
        snprintf(buf, sizeof(buf), "%s %s", u.sysname, u.release);
        bad |= json_object_set_new(m, "kernel", json_string(buf));
        bad |= json_object_set_new(m, "arch", json_string(u.machine));
    }
    if (bad) {
        json_decref(m);
        return NULL;
    }
    return m;
}

json_t *rp_bench_loadavg(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double a[3];
    int n = f ? fscanf(f, "%lf %lf %lf", &a[0], &a[1], &a[2]) : 0;
    if (f)
        fclose(f);
    if (n != 3)
        return json_null();
    return json_pack("[f, f, f]", a[0], a[1], a[2]);
}

void rp_bench_utc_now(char *buf, size_t cap)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

char *rp_bench_stdlib_find(void)
{
    const char *env = getenv("RAPID_BENCH_STDLIB");
    if (env && *env)
        return rp_strdup(env);
    FILE *p = popen("python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"stdlib\"])' 2>/dev/null", "r");
    if (!p)
        return NULL;
    char line[1024] = "";
    bool got = fgets(line, sizeof(line), p) != NULL;
    pclose(p);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = 0;
    return got && n && rp_dir_exists(line) ? rp_strdup(line) : NULL;
}

void rp_bench_hash_hex(const void *p, size_t n, char *buf)
{
    const unsigned char *u = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= u[i];
        h *= 0x100000001b3ull;
    }
    snprintf(buf, 17, "%016llx", (unsigned long long)h);
}
