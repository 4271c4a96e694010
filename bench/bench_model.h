/*
 * bench_model.h - loading a benchmark's model on the device it names: a backend
 * of its own (--device NAME, default rp_backend_default_name(); --threads;
 * --f32-activations), which the model then owns (rp_model_own_backend), so
 * rp_model_destroy releases both. A model may be named as `rapid` takes it (a path, a repo
 * id org/name[@REV][:QUANT] or a catalog alias) and is then found in the hub cache
 * (bench_model_path; never downloaded: benchmarks link no network library).
 */
#ifndef RP_BENCH_MODEL_H
#define RP_BENCH_MODEL_H

#include "backend/backend.h"
#include "hub/hub.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>

#ifndef RP_CATALOG
#define RP_CATALOG NULL
#endif

// The path the loaders take for MODEL (a static buffer: one model per program), or NULL
// after a message on stderr saying what was tried. The catalog: $RAPID_CATALOG, else the
// source tree's models/catalog.json.
static inline const char *bench_model_path(const char *model)
{
    static rp_hub_resolved r;
    const char *cat_path = getenv("RAPID_CATALOG");
    char cache[RP_HUB_PATH_MAX];
    rp_hub_catalog *cat = NULL;
    rp_hub_name n;
    rp_status st = rp_hub_catalog_load(cat_path && *cat_path ? cat_path : RP_CATALOG, NULL, &cat);
    if (!st)
        st = rp_hub_name_parse(model, cat, &n);
    if (!st)
        st = rp_hub_resolve(&n, rp_hub_cache_dir(cache, sizeof(cache)) ? cache : NULL, &r);
    rp_hub_catalog_destroy(cat);
    if (st) {
        fprintf(stderr, "%s\n", rp_error_message());
        return NULL;
    }
    return r.path;
}

static inline rp_status bench_load(const char *path, const char *device, int threads, bool f32_act,
                                   const rp_model_params *mp, rp_model **out)
{
    *out = NULL;
    rp_backend_params bp;
    rp_backend_params_default(&bp);
    bp.n_threads = threads;
    bp.f32_activations = f32_act;
    rp_backend *be;
    if (!device || !*device)
        device = getenv("RAPID_DEVICE");
    rp_status st = rp_backend_open(device && *device ? device : rp_backend_default_name(), &bp, &be);
    if (st)
        return st;
    if ((st = rp_model_load(path, be, mp, out))) {
        rp_backend_destroy(be);
        return st;
    }
    rp_model_own_backend(*out);
    return RP_OK;
}

#endif
