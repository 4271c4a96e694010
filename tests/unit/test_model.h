/*
 * test_model.h - loading a model on a CPU backend of its own, for the tests.
 *
 * rp_test_load(path, threads, f32_act, params, &m): opens a CPU backend (threads,
 * f32_act: BF16 weights take float32 activations, as every comparison with a
 * reference's float32 numbers needs; false: the default, bf16 activations where
 * the CPU has a bf16 dot product that pays) and loads path on it; the model owns
 * the backend (rp_model_own_backend), so rp_model_destroy releases both.
 * RP_TEST_DEVICE in the environment names another device to load on ("cuda"): the
 * GPU machine's run of the suite (tests/gpu/run.sh) checks every model-level test
 * (fidelity against the fixtures, determinism, the engine) there.
 */
#ifndef RP_TEST_MODEL_H
#define RP_TEST_MODEL_H

#include "test_util.h"

#include "backend/backend.h"
#include "model/model.h"

static inline rp_status rp_test_load(const char *path, int threads, bool f32_act, const rp_model_params *mp,
                                     rp_model **out)
{
    *out = NULL;
    rp_backend_params bp;
    rp_backend_params_default(&bp);
    bp.n_threads = threads;
    bp.f32_activations = f32_act;
    rp_backend *be;
    rp_status st = rp_backend_open(rp_test_device(), &bp, &be);
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
