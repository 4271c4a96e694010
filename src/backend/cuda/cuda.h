/*
 * cuda.h - what only the CUDA backend has, for the command line, tests and
 * benchmarks: whether a GPU answers, and the hooks the tests use. The model,
 * the KV pool and the engine see the backend through backend.h alone.
 *
 * Threads: rp_cuda_device_count may be called from any thread; the hooks change
 * process-wide state and are for tests, called before a backend runs an op.
 */
#ifndef RP_BACKEND_CUDA_H
#define RP_BACKEND_CUDA_H

#include "../backend.h"

// The CUDA devices this process can use (0 without a driver or a GPU); *why, when not
// NULL, says why there are none ("no CUDA driver", "no CUDA device"), static storage.
int rp_cuda_device_count(const char **why);

// Test hook: forwards run eagerly (false) or, from the second time the same sequence of
// ops is seen, as a CUDA graph (true, the default).
void rp_cuda_use_graphs(bool on);

// Test hook: weights initialized from now on split their matmuls' K into `splits` parts
// (1, 2, 4 or 8, even past what their rows need), or by their shape (0, the default).
void rp_cuda_matmul_splits(int splits);

// Test hook: matmuls recorded from now on with BF16 weights on the tensor cores take `rt`
// row tiles a warp (1 or 2), or as the launch's tokens suit (0, the default, or
// RP_CUDA_TC_RT). Never changes a result.
void rp_cuda_tc_rt(int rt);

// Test hook: matmuls recorded from now on with BF16 weights on the tensor cores run on at
// most `blocks` blocks, each taking item after item (-1, the default: two an SM; 0: a block
// an item). Never changes a result.
void rp_cuda_tc_grid(int blocks);

// Test hook: the K-splits of a weight's matmuls (cu_weight.splits).
int rp_cuda_splits_of(const rp_tensor *t);

#endif
