/*
 * default_model.c - where the bundled model (models/rapid-tiny) is, so commands
 * work with no model named: in $RAPID_MODELS when set, next to the binary in a
 * source tree (build/rapid -> models/), under the install prefix
 * (PREFIX/share/rapid/models), or relative to an installed binary that was moved
 * with its prefix.
 */
#include "cli.h"

#include "../base/base.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef RP_DATADIR
#define RP_DATADIR "/usr/local/share/rapid"
#endif

#define DEFAULT_NAME "rapid-tiny"

static bool has_model(const char *dir)
{
    char cfg[PATH_MAX + 128];
    snprintf(cfg, sizeof(cfg), "%s/config.json", dir);
    return rp_file_exists(cfg);
}

const char *rp_cli_default_model(void)
{
    static char found[PATH_MAX + 64];
    const char *env = getenv("RAPID_MODELS");
    if (env && *env) {
        snprintf(found, sizeof(found), "%s/%s", env, DEFAULT_NAME);
        if (has_model(found))
            return found;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0;
        static const char *rel[] = {"../models/", "../share/rapid/models/", "../../models/"};
        for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
            snprintf(found, sizeof(found), "%s/%s%s", exe, rel[i], DEFAULT_NAME);
            if (has_model(found))
                return found;
        }
    }
    snprintf(found, sizeof(found), "%s/models/%s", RP_DATADIR, DEFAULT_NAME);
    return has_model(found) ? found : NULL;
}
