/*
 * cpu.h - what only the CPU backend has: its instruction-set facts and the test
 * hooks that pin its kernels. Included by cli/, tests and benchmarks; the
 * model, the KV pool and the engine see the CPU backend through backend.h alone.
 *
 * Threads: the facts are pure; the hooks change process-wide state and are for
 * tests and benchmarks, called before any backend runs an op.
 */
#ifndef RP_BACKEND_CPU_H
#define RP_BACKEND_CPU_H

#include "../backend.h"

// Name of the highest SIMD level the CPU kernels use on this machine ("avx512", "avx2",
// "scalar"); a weight type without a kernel at that level uses the next level down's.
const char *rp_cpu_simd_name(void);
// True when the CPU has the AVX512_BF16 dot product and the kernels may use it (the
// test hooks below cap it with the AVX-512 level).
bool rp_cpu_has_bf16_dot(void);
// True when the CPU has AMX tiles for bf16 (AMX-TILE, AMX-BF16, AVX512_BF16, the OS's
// permission) and the kernels may use them (capped like rp_cpu_has_bf16_dot).
bool rp_cpu_has_amx(void);
// True when bf16 activations are faster than float32 ones: AMX, or AMD's bf16 dot product
// (Zen 4, Zen 5; not Intel's, which issues at half the FMA rate: matmul.c).
bool rp_cpu_bf16_act_pays(void);
// Whether a CPU backend rounds BF16 weights' activations to bf16 (rp_backend_params.
// f32_activations off and rp_cpu_bf16_act_pays()). be must be a CPU backend.
bool rp_backend_cpu_bf16_act(rp_backend *be);

// Test hook: forces the scalar reference kernels (true) or the best available (false).
void rp_cpu_force_scalar(bool on);
// Test hook: caps the kernels at the level named as rp_cpu_simd_name names them; false
// (nothing changed) for an unknown name or a level this CPU lacks.
bool rp_cpu_force_simd(const char *name);
// Test hook: keeps the AMX kernel out (true), so bf16 activations take the AVX512_BF16
// dot product where there is one, or lets it back in (false).
void rp_cpu_force_no_amx(bool off);
// Test hook: makes a CPU backend behave as a GPU whose context was lost: from now on every
// forward fails (RP_ERR_DEVICE) and rp_backend_lost says `why`. For the tests of what the
// engine and the server do then (a CPU never loses its device).
void rp_cpu_test_lose(rp_backend *be, const char *why);

#endif
