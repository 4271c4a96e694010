/*
 * bench_model.h - loading a benchmark's model on the device it names: a backend
 * of its own (--device NAME, default rp_backend_default_name(); --threads;
 * --f32-activations), which the model then owns (rp_model_own_backend), so
 * rp_model_destroy releases both.
 */
#ifndef RP_BENCH_MODEL_H
#define RP_BENCH_MODEL_H

#include "backend/backend.h"
#include "model/model.h"

#include <stdlib.h>

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
