/*
 * device.c - the --device, --threads and --f32-activations flags that `run`,
 * `serve` and the benchmarks share: which backend a model is loaded on.
 *
 * Without --device, $RAPID_DEVICE names it, else the GPU when one answers (else the
 * CPU). The command line is the one place that names a backend (backend/backend.h
 * opens it by name; only here, the tests and the benchmarks include a
 * backend's own header). A draft model (--draft-model) gets its own CPU
 * backend with a quarter of the threads when the model runs on the CPU: it runs
 * between the model's steps, and its pool's workers, spinning after each run,
 * would take cores the model's pool is about to need; on a GPU it shares the
 * model's backend (one device, one stream).
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>

rp_status rp_cli_open_backend(const char *device, int threads, bool f32_act, rp_backend **out)
{
    rp_backend_params bp;
    rp_backend_params_default(&bp);
    bp.n_threads = threads;
    bp.f32_activations = f32_act;
    if (!device || !*device)
        device = getenv("RAPID_DEVICE");
    return rp_backend_open(device && *device ? device : rp_backend_default_name(), &bp, out);
}

rp_status rp_cli_draft_backend(rp_backend *be, bool f32_act, rp_backend **out)
{
    *out = NULL;
    rp_backend_info bi;
    rp_backend_get_info(be, &bi);
    if (!bi.host_memory)
        return RP_OK; // a device: the model's own backend
    int threads = rp_backend_threads(be) / 4;
    return rp_cli_open_backend("cpu", threads > 1 ? threads : 1, f32_act, out);
}

void rp_cli_print_backend(rp_backend *be)
{
    rp_backend_info bi;
    rp_backend_get_info(be, &bi);
    if (bi.host_memory)
        fprintf(stderr, "rapid: device %s: %s\n", bi.name, bi.device);
    else
        fprintf(stderr, "rapid: device %s: %s, %.1f of %.1f GiB free\n", bi.name, bi.device,
                bi.mem_free / 1073741824.0, bi.mem_total / 1073741824.0);
}
