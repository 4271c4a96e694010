/*
 * default_model.c - where the bundled model (models/rapid-tiny) is, so commands
 * work with no model named. Looked for, in order: in $RAPID_MODELS when set;
 * next to the binary in a source tree (build/rapid -> models/), under a moved
 * install prefix (bin/rapid -> share/rapid/models/), one level further up
 * (build/sub/rapid); under the install prefix (PREFIX/share/rapid/models); in
 * the source tree the binary was built from (RP_SOURCE_TREE, CMake's
 * CMAKE_SOURCE_DIR: an out-of-tree build, `cmake -S . -B /elsewhere`, has no
 * models/ next to its binary). When none has it, the message lists every place
 * looked and names RAPID_MODELS.
 *
 * The catalog of aliases (models/catalog.json) is looked for in the same places
 * (rp_cli_catalog_path); $RAPID_CATALOG names another file.
 *
 * Test hook: RP_TEST_SOURCE_TREE in the environment replaces the compiled-in
 * source tree ("" skips it), so a test can run a binary as if built elsewhere.
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
#ifndef RP_SOURCE_TREE
#define RP_SOURCE_TREE ""
#endif

#define DEFAULT_NAME "rapid-tiny"
#define MAX_PLACES 8

static char places[MAX_PLACES][PATH_MAX + 64]; // the folders looked in, in order
static int n_places;
static bool models_unset; // RAPID_MODELS was not set

static const char *want_leaf = DEFAULT_NAME; // what try_place looks for: the bundled model or the catalog

static bool has_model(const char *dir)
{
    if (strcmp(want_leaf, DEFAULT_NAME))
        return rp_file_exists(dir);
    static const char tail[] = "/config.json";
    char cfg[PATH_MAX + 128];
    size_t n = strlen(dir);
    if (n + sizeof(tail) > sizeof(cfg))
        return false;
    memcpy(cfg, dir, n);
    memcpy(cfg + n, tail, sizeof(tail));
    return rp_file_exists(cfg);
}

// Looks in base/rel/rapid-tiny; the found folder, or NULL (the place is kept for the message).
static const char *try_place(const char *base, const char *rel)
{
    if (n_places == MAX_PLACES)
        return NULL;
    char *p = places[n_places++];
    snprintf(p, sizeof(places[0]), "%s/%s%s", base, rel, want_leaf);
    return has_model(p) ? p : NULL;
}

// The first place holding want_leaf, in the order above.
static const char *find_leaf(void)
{
    n_places = 0;
    const char *found = NULL;
    const char *env = getenv("RAPID_MODELS");
    models_unset = !env || !*env;
    if (!models_unset && (found = try_place(env, "")))
        return found;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = 0;
        static const char *rel[] = {"../models/", "../share/rapid/models/", "../../models/"};
        for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++)
            if ((found = try_place(exe, rel[i])))
                return found;
    }
    if ((found = try_place(RP_DATADIR, "models/")))
        return found;
    const char *src = getenv("RP_TEST_SOURCE_TREE");
    if (!src)
        src = RP_SOURCE_TREE;
    if (*src && (found = try_place(src, "models/")))
        return found;
    return NULL;
}

const char *rp_cli_default_model(void)
{
    want_leaf = DEFAULT_NAME;
    return find_leaf();
}

const char *rp_cli_catalog_path(void)
{
    const char *env = getenv("RAPID_CATALOG");
    if (env && *env)
        return env;
    want_leaf = "catalog.json";
    const char *found = find_leaf();
    want_leaf = DEFAULT_NAME;
    return found;
}

void rp_cli_default_model_missing(const char *cmd)
{
    fprintf(stderr, "rapid %s: no MODEL given and the bundled model %s was not found; looked in:\n", cmd,
            DEFAULT_NAME);
    if (models_unset)
        fprintf(stderr, "  $RAPID_MODELS/%s (RAPID_MODELS is not set)\n", DEFAULT_NAME);
    for (int i = 0; i < n_places; i++)
        fprintf(stderr, "  %s\n", places[i]);
    fprintf(stderr, "name a MODEL, or set RAPID_MODELS to the folder that holds %s (the source tree's models/)\n",
            DEFAULT_NAME);
}
