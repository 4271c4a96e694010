/*
 * cuda_backend.c - the CUDA backend: fills the backend vtable (backend_int.h) for one
 * NVIDIA GPU. C host code; the kernels are in the .cu files (cuda_int.h).
 *
 * Memory: device buffers (cudaMalloc, zeroed), pinned host buffers for results
 * (cudaMallocHost), one stream. Weights are copied at tensor_init, the quantized
 * types repacked into planes (cu_plane_map) so kernels read them with 16-byte loads.
 * The KV cache is kept in the canonical layout, so exporting a block is a copy.
 *
 * A forward is deferred, then run as a whole: rp_backend_begin_batch uploads the
 * batch descriptor (from a pinned staging buffer, one copy), and each op until the
 * next synchronize is recorded as (launcher, argument bytes) (cmd_push). At the
 * synchronize the list runs: the first GRAPH_AFTER times a list is seen, eagerly;
 * the next time it is captured as a CUDA graph, which later forwards with the same
 * list replay (one launch instead of hundreds; a decode step issues the same list
 * every time: its per-step facts are in the uploaded descriptor, which the kernels
 * read). Lists that come and go (prefill chunks of new lengths) never pay for a capture.
 * Lists are compared whole (XXH3-128 of the bytes, then the bytes), so a replay runs
 * exactly the ops that were asked for. An op that cannot be captured (a download
 * into pageable memory) makes its forward eager.
 *
 * Errors: every CUDA call is checked (CU_CHECK) and becomes RP_ERR_DEVICE with the
 * call's text; an error that leaves the context unusable (an illegal address, a
 * kernel fault) marks the backend lost, and every later call fails at once.
 *
 * Threads: driven by one thread; the host pool only runs between ops.
 */
#include "cuda.h"
#include "cuda_int.h"

#include "../backend_int.h"
#include "../../quant/quant.h"

#include <stdio.h>
#include <stdlib.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#define ALIGN 256 // device sub-allocations (planes, batch arrays)
#define GRAPH_SLOTS 64
#define GRAPH_AFTER 2 // a list is captured the time after it was run eagerly this often (instantiating costs ~ms)

static bool use_graphs = true;
static int graphs_env = 1; // RP_CUDA_GRAPHS=0: every forward eager (for profilers that time kernels one by one)
static int forced_splits; // 0: weights split K by their shape (cu_matmul_splits)
static int group_splits = 1; // RP_CUDA_GROUP=0: grouped weights keep their own splits (for measuring)

void rp_cuda_use_graphs(bool on)
{
    use_graphs = on;
}

int cu_pdl = 1;
int cu_prefetch = 0; // measured slower (bench/RESULTS.md, session 14)
int cu_bf16_mma = 1; // 2% slower at one token than rows, a 16-token span 1.6x a step against 7.8x (session 18)
int cu_tc_parts = 2;
int cu_tc_rt = 0;
int cu_tc_grid = -1; // two blocks an SM streaming item after item: 1.2% a step over a block an item (session 19)

// *v from the environment variable `name` when it is set to one of the allowed values.
static void env_int(const char *name, int *v, const int *allowed, int n_allowed)
{
    const char *s = getenv(name);
    for (int i = 0; s && i < n_allowed; i++)
        if (atoi(s) == allowed[i])
            *v = allowed[i];
}

// *flag from the environment variable `name` when it is set ("0": off, anything else: on).
static void env_flag(const char *name, int *flag)
{
    const char *v = getenv(name);
    if (v)
        *flag = strcmp(v, "0") != 0;
}

void rp_cuda_tc_rt(int rt)
{
    RP_ASSERT(rt == 0 || rt == 1 || rt == 2);
    cu_tc_rt = rt;
}

void rp_cuda_tc_grid(int blocks)
{
    RP_ASSERT(blocks >= -1);
    cu_tc_grid = blocks;
}

void rp_cuda_matmul_splits(int splits)
{
    RP_ASSERT(splits == 0 || splits == 1 || splits == 2 || splits == 4 || splits == 8);
    forced_splits = splits;
}

/* ---- errors ---- */

static bool fatal_error(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorUnknown: return true;
    default: return false;
    }
}

typedef struct cuda_backend cuda_backend;
static rp_status cu_error(cuda_backend *c, cudaError_t e, const char *call, const char *file, int line);
#define CU_CHECK(c, call)                                                                                              \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
            return cu_error((c), e_, #call, __FILE__, __LINE__);                                                       \
    } while (0)

/* ---- the backend ---- */

typedef struct cmd {
    cu_launch_fn fn;
    size_t off, size; // its arguments in the arena
} cmd;

typedef struct graph_slot {
    XXH128_hash_t key;
    uint8_t *list; // the recorded list's bytes (fn pointers and arguments), to compare whole
    size_t list_bytes;
    cudaGraphExec_t exec; // NULL: not captured yet
    int seen;             // times run eagerly
    uint64_t used;        // last use, for replacement
} graph_slot;

struct cuda_backend {
    rp_backend base;
    int device;
    cudaStream_t stream;
    struct cudaDeviceProp prop;
    bool lost;     // a fatal device error: nothing more runs
    char lost_msg[256];
    rp_pool *pool; // host threads for the engine's sampling
    char numerics[96];
    // the forward under way: recorded ops
    cmd *cmds;
    int n_cmds, cap_cmds;
    uint8_t *args; // the arguments of the recorded ops
    size_t n_args, cap_args;
    bool graphable;
    graph_slot graphs[GRAPH_SLOTS];
    uint64_t clock;
    // the batch descriptor: pinned staging and its device copy, laid out alike
    uint8_t *stage, *dbatch;
    size_t batch_cap;
    int cap_tokens, cap_seqs, cap_bt;
    cu_batch *dev_batch; // the device copy's header
    cu_batch hbatch;     // the host's view (counts)
    // pinned staging for uploads recorded inside a forward (bump allocated, reset per forward)
    uint8_t *up_stage;
    size_t up_cap, up_used;
    // scratch (grown; growing invalidates the graphs)
    void *qa_buf;
    size_t qa_size;
    float *attn_part;
    size_t attn_part_size;
    float *tmp_rows;
    size_t tmp_rows_size;
};

static cuda_backend *cuda(rp_backend *be)
{
    return (cuda_backend *)be;
}

static rp_status cu_error(cuda_backend *c, cudaError_t e, const char *call, const char *file, int line)
{
    if (c && fatal_error(e) && !c->lost) {
        c->lost = true;
        snprintf(c->lost_msg, sizeof(c->lost_msg), "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    }
    cudaGetLastError(); // clear a non-sticky error
    return rp_error_set(RP_ERR_DEVICE, file, line, "cuda", "CUDA: %s: %s (%s)%s", call, cudaGetErrorString(e),
                        cudaGetErrorName(e), c && c->lost ? "; the device context is lost" : "");
}

// Makes the backend's GPU the calling thread's current device (the runtime keeps one per
// host thread: the engine thread drives a backend another thread opened).
static void bind(cuda_backend *c)
{
    int d = -1;
    if (cudaGetDevice(&d) != cudaSuccess || d != c->device)
        cudaSetDevice(c->device);
}

static rp_status check_lost(cuda_backend *c)
{
    if (c->lost)
        return RP_ERR(RP_ERR_DEVICE, "CUDA: the device context is lost after an earlier error: %s", c->lost_msg);
    return RP_OK;
}

/* ---- recorded ops and graphs ---- */

static void graphs_clear(cuda_backend *c)
{
    for (int i = 0; i < GRAPH_SLOTS; i++) {
        if (c->graphs[i].exec)
            cudaGraphExecDestroy(c->graphs[i].exec);
        rp_free(c->graphs[i].list);
    }
    memset(c->graphs, 0, sizeof(c->graphs));
}

// Records an op: launcher fn with `size` bytes of arguments (copied).
static rp_status cmd_push(cuda_backend *c, cu_launch_fn fn, const void *a, size_t size)
{
    rp_status st = check_lost(c);
    if (st)
        return st;
    if (c->n_cmds == c->cap_cmds) {
        int cap = c->cap_cmds ? 2 * c->cap_cmds : 256;
        cmd *p = rp_realloc(c->cmds, (size_t)cap * sizeof(cmd));
        if (!p)
            return RP_ERR(RP_ERR_NOMEM, "cuda backend: out of memory recording ops");
        c->cmds = p, c->cap_cmds = cap;
    }
    size_t off = (c->n_args + 15) & ~(size_t)15;
    if (off + size > c->cap_args) {
        size_t cap = c->cap_args ? c->cap_args : 16384;
        while (cap < off + size)
            cap *= 2;
        uint8_t *p = rp_realloc(c->args, cap);
        if (!p)
            return RP_ERR(RP_ERR_NOMEM, "cuda backend: out of memory recording ops");
        memset(p + c->cap_args, 0, cap - c->cap_args); // padding bytes hash alike
        c->args = p, c->cap_args = cap;
    }
    memcpy(c->args + off, a, size);
    c->cmds[c->n_cmds++] = (cmd){fn, off, size};
    c->n_args = off + size;
    return RP_OK;
}

static rp_status run_list(cuda_backend *c)
{
    for (int i = 0; i < c->n_cmds; i++) {
        cudaError_t e = c->cmds[i].fn(c->args + c->cmds[i].off, c->stream);
        if (e != cudaSuccess)
            return cu_error(c, e, "a kernel launch", __FILE__, __LINE__);
    }
    return RP_OK;
}

// The recorded list as bytes: each op's launcher and arguments (the key of its graph).
static size_t list_bytes(const cuda_backend *c)
{
    return (size_t)c->n_cmds * (sizeof(cu_launch_fn) + sizeof(size_t)) + c->n_args;
}

static void list_write(const cuda_backend *c, uint8_t *out)
{
    for (int i = 0; i < c->n_cmds; i++) {
        memcpy(out, &c->cmds[i].fn, sizeof(cu_launch_fn));
        memcpy(out + sizeof(cu_launch_fn), &c->cmds[i].size, sizeof(size_t));
        out += sizeof(cu_launch_fn) + sizeof(size_t);
    }
    memcpy(out, c->args, c->n_args);
}

// Runs what was recorded: eagerly, or as a graph (see the top of the file).
static rp_status flush(cuda_backend *c)
{
    bind(c);
    rp_status st = check_lost(c);
    if (st || c->n_cmds == 0)
        goto done;
    if (!use_graphs || !c->graphable) {
        st = run_list(c);
        goto done;
    }
    size_t nb = list_bytes(c);
    uint8_t *list = rp_malloc(nb);
    if (!list) {
        st = run_list(c);
        goto done;
    }
    list_write(c, list);
    XXH128_hash_t key = XXH3_128bits(list, nb);
    graph_slot *g = NULL, *victim = NULL; // the list's slot; else an empty one, else the least recently used
    for (int i = 0; i < GRAPH_SLOTS && !g; i++) {
        graph_slot *sl = &c->graphs[i];
        if (sl->list && XXH128_isEqual(sl->key, key) && sl->list_bytes == nb && memcmp(sl->list, list, nb) == 0)
            g = sl;
        else if (!victim || (victim->list && (!sl->list || sl->used < victim->used)))
            victim = sl;
    }
    c->clock++;
    if (!g) { // first sight: remember it, run eagerly
        if (victim->exec)
            cudaGraphExecDestroy(victim->exec);
        rp_free(victim->list);
        *victim = (graph_slot){.key = key, .list = list, .list_bytes = nb, .seen = 1, .used = c->clock};
        st = run_list(c);
        goto done;
    }
    rp_free(list);
    g->used = c->clock;
    if (!g->exec && g->seen < GRAPH_AFTER) { // not yet seen often enough to pay for a capture
        g->seen++;
        st = run_list(c);
        goto done;
    }
    if (!g->exec) { // seen often: capture it
        cudaGraph_t graph;
        CU_CHECK(c, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
        rp_status rs = run_list(c);
        cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
        if (rs) {
            if (e == cudaSuccess)
                cudaGraphDestroy(graph);
            st = rs;
            goto done;
        }
        CU_CHECK(c, e);
        e = cudaGraphInstantiate(&g->exec, graph, 0);
        cudaGraphDestroy(graph);
        CU_CHECK(c, e);
    }
    CU_CHECK(c, cudaGraphLaunch(g->exec, c->stream));
done:
    // The staged uploads are read by copies now in flight: they finish before the staging is reused.
    if (c->up_used && !st) {
        cudaError_t e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess)
            st = cu_error(c, e, "cudaStreamSynchronize", __FILE__, __LINE__);
    }
    c->n_cmds = 0;
    c->n_args = 0;
    c->up_used = 0;
    c->graphable = true;
    return st;
}

/* ---- memory ---- */

static rp_status cuda_alloc(rp_backend *be, size_t bytes, void **out)
{
    cuda_backend *c = cuda(be);
    *out = NULL;
    rp_status st = check_lost(c);
    if (st || (st = flush(c))) // (flush binds the device)
        return st;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        if (e == cudaErrorMemoryAllocation)
            return RP_ERR(RP_ERR_NOMEM, "cuda backend: cannot allocate %.1f MiB of device memory (%.1f MiB free of %.1f)",
                          bytes / 1048576.0, fr / 1048576.0, tot / 1048576.0);
        return cu_error(c, e, "cudaMalloc", __FILE__, __LINE__);
    }
    e = cudaMemsetAsync(p, 0, bytes, c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        cudaFree(p);
        return cu_error(c, e, "cudaMemset", __FILE__, __LINE__);
    }
    *out = p;
    return RP_OK;
}

static void cuda_free(rp_backend *be, void *ptr)
{
    cuda_backend *c = cuda(be);
    flush(c);
    cudaStreamSynchronize(c->stream);
    graphs_clear(c); // a graph may name the buffer
    cudaFree(ptr);
}

static rp_status cuda_host_alloc(rp_backend *be, size_t bytes, void **out)
{
    cuda_backend *c = cuda(be);
    *out = NULL;
    bind(c);
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return RP_ERR(RP_ERR_NOMEM, "cuda backend: cannot allocate %.1f MiB of pinned host memory (%s)",
                      bytes / 1048576.0, cudaGetErrorString(e));
    }
    memset(p, 0, bytes);
    *out = p;
    return RP_OK;
}

static void cuda_host_free(rp_backend *be, void *ptr)
{
    cuda_backend *c = cuda(be);
    flush(c);
    cudaStreamSynchronize(c->stream);
    cudaFreeHost(ptr);
}

static bool is_pinned(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeHost;
}

typedef struct memcpy_args {
    void *dst;
    const void *src;
    size_t bytes;
    size_t dpitch, spitch, rows; // rows > 0: a 2-D copy of `bytes` per row
    int kind;
} memcpy_args;

static cudaError_t launch_memcpy(const void *args, cudaStream_t s)
{
    const memcpy_args *a = args;
    if (a->rows)
        return cudaMemcpy2DAsync(a->dst, a->dpitch, a->src, a->spitch, a->bytes, a->rows, a->kind, s);
    return cudaMemcpyAsync(a->dst, a->src, a->bytes, a->kind, s);
}

// Pinned room for an upload recorded in a forward (its bytes copied there now).
static rp_status stage_upload(cuda_backend *c, const void *src, size_t bytes, const void **out)
{
    size_t off = (c->up_used + 255) & ~(size_t)255;
    if (off + bytes > c->up_cap) {
        // Growing the staging moves it: run what is recorded first, whose copies read it.
        rp_status st = flush(c);
        if (st)
            return st;
        CU_CHECK(c, cudaStreamSynchronize(c->stream));
        size_t cap = c->up_cap ? c->up_cap : ((size_t)1 << 20);
        while (cap < bytes + 256)
            cap *= 2;
        uint8_t *p = NULL;
        CU_CHECK(c, cudaMallocHost((void **)&p, cap));
        cudaFreeHost(c->up_stage);
        graphs_clear(c);
        c->up_stage = p, c->up_cap = cap, off = 0;
    }
    memcpy(c->up_stage + off, src, bytes);
    c->up_used = off + bytes;
    *out = c->up_stage + off;
    return RP_OK;
}

static rp_status cuda_upload(rp_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_backend *c = cuda(be);
    const void *from = NULL;
    rp_status st = stage_upload(c, src, bytes, &from);
    if (st)
        return st;
    memcpy_args a;
    memset(&a, 0, sizeof(a)); // padding too: the arguments are hashed (flush)
    a.dst = dst;
    a.src = from;
    a.bytes = bytes;
    a.kind = cudaMemcpyHostToDevice;
    return cmd_push(c, launch_memcpy, &a, sizeof(a));
}

static rp_status cuda_download(rp_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_backend *c = cuda(be);
    if (!is_pinned(dst))
        c->graphable = false; // a pageable copy cannot be captured; it runs (synchronously) in order
    memcpy_args a;
    memset(&a, 0, sizeof(a)); // padding too: the arguments are hashed (flush)
    a.dst = dst;
    a.src = src;
    a.bytes = bytes;
    a.kind = cudaMemcpyDeviceToHost;
    return cmd_push(c, launch_memcpy, &a, sizeof(a));
}

static rp_status cuda_copy(rp_backend *be, void *dst, const void *src, size_t bytes)
{
    memcpy_args a;
    memset(&a, 0, sizeof(a)); // padding too: the arguments are hashed (flush)
    a.dst = dst;
    a.src = src;
    a.bytes = bytes;
    a.kind = cudaMemcpyDeviceToDevice;
    return cmd_push(cuda(be), launch_memcpy, &a, sizeof(a));
}

static rp_status cuda_copy_2d(rp_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                              size_t row_bytes, size_t rows)
{
    memcpy_args a;
    memset(&a, 0, sizeof(a)); // padding too: the arguments are hashed (flush)
    a.dst = dst;
    a.src = src;
    a.bytes = row_bytes;
    a.dpitch = dst_pitch;
    a.spitch = src_pitch;
    a.rows = rows;
    a.kind = cudaMemcpyDeviceToDevice;
    return cmd_push(cuda(be), launch_memcpy, &a, sizeof(a));
}

static rp_status cuda_synchronize(rp_backend *be)
{
    cuda_backend *c = cuda(be);
    rp_status st = flush(c);
    if (st)
        return st;
    CU_CHECK(c, cudaStreamSynchronize(c->stream));
    return RP_OK;
}

/* ---- weights ---- */

bool cu_plane_map_of(int type, cu_plane_map *m)
{
    switch (type) {
    case CU_Q8_0: *m = (cu_plane_map){2, {2, 0}, {32, 2}}; return true;
    case CU_Q4_0: *m = (cu_plane_map){2, {2, 0}, {16, 2}}; return true;
    case CU_Q5_0: *m = (cu_plane_map){3, {6, 2, 0}, {16, 4, 2}}; return true;
    case CU_Q4_K: *m = (cu_plane_map){2, {16, 0}, {128, 16}}; return true;
    case CU_Q5_K: *m = (cu_plane_map){3, {48, 16, 0}, {128, 32, 16}}; return true;
    case CU_Q6_K: *m = (cu_plane_map){4, {0, 128, 192, 208}, {128, 64, 16, 2}}; return true;
    default: return false;
    }
}

static bool cuda_supports_type(rp_backend *be, rp_dtype type)
{
    cu_plane_map m;
    return type == RP_DTYPE_F32 || type == RP_DTYPE_F16 || type == RP_DTYPE_BF16 || cu_plane_map_of((int)type, &m);
}

static size_t align_up(size_t n)
{
    return (n + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

// A BF16 matrix (rows x cols, as in the file) into its tiles at dev: through a raw copy in
// device memory, tiled there (cu_launch_tile_bf16).
static rp_status upload_tiled(cuda_backend *c, const void *host, int64_t rows, int64_t cols, uint8_t *dev)
{
    size_t bytes = (size_t)rows * (size_t)cols * 2;
    void *raw = NULL;
    rp_status st = cuda_alloc(&c->base, bytes, &raw);
    if (st)
        return st;
    // On the backend's stream, which does not wait for the legacy one: a plain cudaMemcpy
    // from pageable memory returns before its DMA lands, so the kernel could read zeros.
    cudaError_t e = cudaMemcpyAsync(raw, host, bytes, cudaMemcpyHostToDevice, c->stream);
    const char *call = "cudaMemcpyAsync (weights)";
    if (e == cudaSuccess && (e = cu_launch_tile_bf16(raw, dev, rows, cols, c->stream)) != cudaSuccess)
        call = "cu_launch_tile_bf16";
    if (e == cudaSuccess && (e = cudaStreamSynchronize(c->stream)) != cudaSuccess)
        call = "cudaStreamSynchronize (tiling weights)";
    st = e == cudaSuccess ? RP_OK : cu_error(c, e, call, __FILE__, __LINE__);
    cuda_free(&c->base, raw);
    return st;
}

static rp_status cuda_tensor_init(rp_backend *be, rp_dtype type, int64_t ne0, int64_t ne1, const void *host_data,
                                  rp_tensor *out)
{
    cuda_backend *c = cuda(be);
    bool is_float = type == RP_DTYPE_F32 || type == RP_DTYPE_F16 || type == RP_DTYPE_BF16;
    if (is_float && ne0 % 8 != 0)
        return RP_ERR(RP_ERR_UNSUPPORTED, "cuda backend: a %s matrix needs a multiple of 8 columns, not %lld",
                      rp_dtype_name(type), (long long)ne0);
    cu_weight *w = rp_calloc(1, sizeof(*w));
    if (!w)
        return RP_ERR(RP_ERR_NOMEM, "cuda backend: out of memory");
    bool tiled = type == RP_DTYPE_BF16 && cu_bf16_mma;
    w->type = type == RP_DTYPE_BF16 && !tiled ? CU_BF16_ROWS : (int)type, w->rows = ne1, w->cols = ne0;
    w->splits = forced_splits ? forced_splits : cu_matmul_splits(w->type, ne1, ne0, c->prop.multiProcessorCount);
    cu_plane_map pm = {1, {0}, {0}};
    int64_t n_blocks = ne0 / rp_dtype_block(type) * ne1; // blocks of the whole matrix
    size_t total = 0, at[CU_MAX_PLANES];
    if (tiled) {
        at[0] = 0, total = cu_tiled_bytes(ne1, ne0);
    } else if (is_float) {
        at[0] = 0, total = out->nbytes;
    } else {
        cu_plane_map_of((int)type, &pm);
        for (int p = 0; p < pm.n; p++)
            at[p] = total, total += align_up((size_t)n_blocks * pm.seg[p]);
    }
    uint8_t *dev = NULL, *host = NULL;
    rp_status st = cuda_alloc(be, total, (void **)&dev);
    if (st)
        goto fail;
    const uint8_t *src = host_data;
    if (!is_float) { // repack into planes
        if (!(host = rp_malloc(total))) {
            st = RP_ERR(RP_ERR_NOMEM, "cuda backend: out of memory repacking a %s matrix", rp_dtype_name(type));
            goto fail;
        }
        int bb = rp_dtype_block_bytes(type);
        for (int p = 0; p < pm.n; p++)
            for (int64_t b = 0; b < n_blocks; b++)
                memcpy(host + at[p] + (size_t)b * pm.seg[p], src + (size_t)b * bb + pm.off[p], (size_t)pm.seg[p]);
        src = host;
    }
    if (tiled && (st = upload_tiled(c, src, ne1, ne0, dev)))
        goto fail;
    cudaError_t e = cudaSuccess; // (on the stream the kernels run on, landed before the host buffer goes)
    if (!tiled && (e = cudaMemcpyAsync(dev, src, total, cudaMemcpyHostToDevice, c->stream)) == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        st = cu_error(c, e, "cudaMemcpyAsync (weights)", __FILE__, __LINE__);
        goto fail;
    }
    rp_free(host);
    for (int p = 0; p < pm.n; p++)
        w->plane[p] = dev + at[p];
    out->data = dev;
    out->priv = w;
    return RP_OK;
fail:
    rp_free(host);
    if (dev)
        cuda_free(be, dev);
    rp_free(w);
    return st;
}

static void cuda_tensor_deinit(rp_backend *be, rp_tensor *t)
{
    if (t->data)
        cuda_free(be, (void *)t->data);
    rp_free(t->priv);
}

static const cu_weight *weight_of(const rp_tensor *t)
{
    return t->priv;
}

int rp_cuda_splits_of(const rp_tensor *t)
{
    return weight_of(t)->splits;
}

static void cuda_group_weights(rp_backend *be, rp_tensor *const *t, int n)
{
    const cu_weight *w[CU_MM_GROUP] = {NULL};
    if (forced_splits || !group_splits || n > CU_MM_GROUP)
        return;
    for (int i = 0; i < n; i++)
        w[i] = weight_of(t[i]);
    int s = cu_group_splits(w, n, cuda(be)->prop.multiProcessorCount);
    for (int i = 0; s && i < n; i++)
        ((cu_weight *)t[i]->priv)->splits = s;
}

/* ---- the KV cache: the canonical layout ---- */

static size_t kv_half(const rp_kv_layer *kv)
{
    return rp_kv_layer_block_bytes(kv) / 2;
}

static rp_status cuda_kv_layer_init(rp_backend *be, rp_kv_layer *kv)
{
    size_t bytes = (size_t)kv->n_blocks * kv_half(kv);
    rp_status st = cuda_alloc(be, bytes, &kv->k);
    if (!st && (st = cuda_alloc(be, bytes, &kv->v))) {
        cuda_free(be, kv->k);
        kv->k = NULL;
    }
    return st;
}

static void cuda_kv_layer_deinit(rp_backend *be, rp_kv_layer *kv)
{
    if (kv->k)
        cuda_free(be, kv->k);
    if (kv->v)
        cuda_free(be, kv->v);
}

static rp_status cuda_kv_block_export(rp_backend *be, const rp_kv_layer *kv, int32_t b, void *host)
{
    cuda_backend *c = cuda(be);
    size_t h = kv_half(kv);
    rp_status st = flush(c);
    if (st)
        return st;
    CU_CHECK(c, cudaMemcpyAsync(host, (const uint8_t *)kv->k + (size_t)b * h, h, cudaMemcpyDeviceToHost, c->stream));
    CU_CHECK(c, cudaMemcpyAsync((uint8_t *)host + h, (const uint8_t *)kv->v + (size_t)b * h, h, cudaMemcpyDeviceToHost,
                                c->stream));
    CU_CHECK(c, cudaStreamSynchronize(c->stream));
    return RP_OK;
}

static rp_status cuda_kv_block_import(rp_backend *be, rp_kv_layer *kv, int32_t b, const void *host)
{
    cuda_backend *c = cuda(be);
    size_t h = kv_half(kv);
    rp_status st = flush(c);
    if (st)
        return st;
    CU_CHECK(c, cudaMemcpyAsync((uint8_t *)kv->k + (size_t)b * h, host, h, cudaMemcpyHostToDevice, c->stream));
    CU_CHECK(c, cudaMemcpyAsync((uint8_t *)kv->v + (size_t)b * h, (const uint8_t *)host + h, h, cudaMemcpyHostToDevice,
                                c->stream));
    CU_CHECK(c, cudaStreamSynchronize(c->stream));
    return RP_OK;
}

static rp_status cuda_kv_block_copy(rp_backend *be, rp_kv_layer *kv, int32_t dst, int32_t src)
{
    cuda_backend *c = cuda(be);
    size_t h = kv_half(kv);
    rp_status st = cuda_copy(be, (uint8_t *)kv->k + (size_t)dst * h, (const uint8_t *)kv->k + (size_t)src * h, h);
    if (!st)
        st = cuda_copy(be, (uint8_t *)kv->v + (size_t)dst * h, (const uint8_t *)kv->v + (size_t)src * h, h);
    return st ? st : cuda_synchronize(&c->base);
}

/* ---- the batch ---- */

// Offsets of the batch arrays in the staging buffer and its device copy (the same layout).
typedef struct batch_layout {
    size_t tokens, pos, slot, seq, bt_start, bt, rows, logit_rows, total;
} batch_layout;

static batch_layout layout_of(int cap_tokens, int cap_seqs, int cap_bt)
{
    batch_layout l;
    size_t t = align_up(sizeof(cu_batch)), n = align_up((size_t)cap_tokens * 4);
    l.tokens = t, t += n;
    l.pos = t, t += n;
    l.slot = t, t += n;
    l.seq = t, t += n;
    l.rows = t, t += n;
    l.logit_rows = t, t += n;
    l.bt_start = t, t += align_up((size_t)(cap_seqs + 1) * 4);
    l.bt = t, t += align_up((size_t)cap_bt * 4);
    l.total = t;
    return l;
}

static int grow_to(int have, int need)
{
    int c = have ? have : 64;
    while (c < need)
        c *= 2;
    return c;
}

static rp_status cuda_begin_batch(rp_backend *be, const rp_batch_desc *d)
{
    cuda_backend *c = cuda(be);
    rp_status st = flush(c); // anything recorded before runs first (its copies read the staging)
    if (st)
        return st;
    CU_CHECK(c, cudaStreamSynchronize(c->stream));
    int n_bt = d->bt_start[d->n_seqs];
    if (d->n_tokens > c->cap_tokens || d->n_seqs > c->cap_seqs || n_bt > c->cap_bt) {
        int ct = grow_to(c->cap_tokens, d->n_tokens), cs = grow_to(c->cap_seqs, d->n_seqs),
            cb = grow_to(c->cap_bt, n_bt + 1);
        batch_layout l = layout_of(ct, cs, cb);
        uint8_t *stage = NULL, *dev = NULL;
        CU_CHECK(c, cudaMallocHost((void **)&stage, l.total));
        cudaError_t e = cudaMalloc((void **)&dev, l.total);
        if (e != cudaSuccess) {
            cudaFreeHost(stage);
            return cu_error(c, e, "cudaMalloc (batch)", __FILE__, __LINE__);
        }
        cudaFreeHost(c->stage);
        cudaFree(c->dbatch);
        graphs_clear(c);
        c->stage = stage, c->dbatch = dev, c->batch_cap = l.total;
        c->cap_tokens = ct, c->cap_seqs = cs, c->cap_bt = cb;
        c->dev_batch = (cu_batch *)dev;
    }
    batch_layout l = layout_of(c->cap_tokens, c->cap_seqs, c->cap_bt);
    uint8_t *s = c->stage, *g = c->dbatch;
    cu_batch hb = {.n_tokens = d->n_tokens,
                   .block_size = d->block_size,
                   .tokens = (const int32_t *)(g + l.tokens),
                   .pos = (const int32_t *)(g + l.pos),
                   .slot = (const int32_t *)(g + l.slot),
                   .seq = (const int32_t *)(g + l.seq),
                   .bt_start = (const int32_t *)(g + l.bt_start),
                   .bt = (const int32_t *)(g + l.bt),
                   .rows = (const int32_t *)(g + l.rows),
                   .logit_rows = (const int32_t *)(g + l.logit_rows),
                   .n_rows = d->n_rows,
                   .n_logit_rows = d->n_logit_rows};
    memcpy(s, &hb, sizeof(hb));
    size_t n = (size_t)d->n_tokens * 4;
    if (d->tokens)
        memcpy(s + l.tokens, d->tokens, n);
    memcpy(s + l.pos, d->pos, n);
    memcpy(s + l.slot, d->slot, n);
    memcpy(s + l.seq, d->seq, n);
    if (d->n_rows)
        memcpy(s + l.rows, d->rows, (size_t)d->n_rows * 4);
    if (d->n_logit_rows)
        memcpy(s + l.logit_rows, d->logit_rows, (size_t)d->n_logit_rows * 4);
    memcpy(s + l.bt_start, d->bt_start, (size_t)(d->n_seqs + 1) * 4);
    memcpy(s + l.bt, d->bt, (size_t)n_bt * 4);
    // One copy, before the forward's ops (not part of a graph: the kernels read it).
    CU_CHECK(c, cudaMemcpyAsync(g, s, l.total, cudaMemcpyHostToDevice, c->stream));
    c->hbatch = hb;
    return RP_OK;
}

/* ---- scratch ---- */

// Grows a device scratch buffer to at least need bytes (graphs are dropped: they name it).
static rp_status grow_dev(cuda_backend *c, void **buf, size_t *size, size_t need)
{
    if (need <= *size)
        return RP_OK;
    size_t n = *size ? *size : 65536;
    while (n < need)
        n *= 2;
    rp_status st = flush(c);
    if (st)
        return st;
    CU_CHECK(c, cudaStreamSynchronize(c->stream));
    void *p = NULL;
    CU_CHECK(c, cudaMalloc(&p, n));
    cudaFree(*buf);
    graphs_clear(c);
    *buf = p, *size = n;
    return RP_OK;
}

/* ---- ops ---- */

static rp_status cuda_get_rows(rp_backend *be, const rp_tensor *table, float *out)
{
    cuda_backend *c = cuda(be);
    cu_get_rows_args a;
    memset(&a, 0, sizeof(a)); // padding too: the arguments are hashed (flush)
    a.table = *weight_of(table);
    a.b = c->dev_batch;
    a.n = c->hbatch.n_tokens;
    a.out = out;
    return cmd_push(c, cu_launch_get_rows, &a, sizeof(a));
}

static rp_status cuda_gather_rows(rp_backend *be, rp_row_set set, const float *src, int width, float *dst)
{
    cuda_backend *c = cuda(be);
    int n = set == RP_ROWS_OUT ? c->hbatch.n_rows : c->hbatch.n_logit_rows;
    if (n == 0)
        return RP_OK;
    size_t bytes = (size_t)n * width * sizeof(float);
    float *to = dst;
    if (dst == src) { // rows move forward: through scratch
        rp_status st = grow_dev(c, (void **)&c->tmp_rows, &c->tmp_rows_size, bytes);
        if (st)
            return st;
        to = c->tmp_rows;
    }
    cu_gather_args a;
    memset(&a, 0, sizeof(a)); // padding too: the arguments are hashed (flush)
    a.src = src;
    a.dst = to;
    a.b = c->dev_batch;
    a.logit = set == RP_ROWS_LOGIT;
    a.n = n;
    a.width = width;
    rp_status st = cmd_push(c, cu_launch_gather, &a, sizeof(a));
    if (!st && to != dst)
        st = cuda_copy(be, dst, to, bytes);
    return st;
}

// The quantized activations a weight of type t multiplies (qa), quantized from x.
static rp_status quantize_for(cuda_backend *c, const cu_weight *w, const float *x, int n, cu_qact *qa)
{
    bool kq = w->type == CU_Q4_K || w->type == CU_Q5_K || w->type == CU_Q6_K;
    int64_t blocks = (int64_t)n * (w->cols / (kq ? 256 : 32));
    size_t qs = align_up((size_t)n * w->cols), d = align_up((size_t)blocks * 4);
    size_t bs = kq ? align_up((size_t)blocks * 16 * 2) : 0;
    rp_status st = grow_dev(c, &c->qa_buf, &c->qa_size, qs + d + bs);
    if (st)
        return st;
    uint8_t *p = c->qa_buf;
    *qa = (cu_qact){.qs = (int8_t *)p, .d = (float *)(p + qs), .bsums = kq ? (int16_t *)(p + qs + d) : NULL,
                    .cols = w->cols};
    cu_quantize_args q;
    memset(&q, 0, sizeof(q)); // padding too: the arguments are hashed (flush)
    q.x = x;
    q.qa = *qa;
    q.n = n;
    q.k_quant = kq;
    return cmd_push(c, cu_launch_quantize, &q, sizeof(q));
}

static bool is_quant(int type)
{
    return type != CU_F32 && type != CU_F16 && type != CU_BF16 && type != CU_BF16_ROWS;
}

static rp_status run_group(cuda_backend *c, const rp_matmul_desc *mm, int count, bool glu, const float *x, int n)
{
    cu_matmul_args a;
    memset(&a, 0, sizeof(a)); // padding hashes alike
    a.count = count, a.glu = glu, a.x = x, a.n = n, a.prefetch = cu_prefetch;
    a.rt = cu_tc_rt;
    a.grid = cu_tc_grid < 0 ? 2 * c->prop.multiProcessorCount : cu_tc_grid;
    for (int i = 0; i < count; i++) {
        a.w[i] = *weight_of(mm[i].w);
        a.y[i] = mm[i].y;
        a.bias[i] = mm[i].bias;
        a.residual[i] = mm[i].residual;
    }
    if (is_quant(a.w[0].type)) {
        rp_status st = quantize_for(c, &a.w[0], x, n, &a.qa);
        if (st)
            return st;
    }
    return cmd_push(c, cu_launch_matmul, &a, sizeof(a));
}

static rp_status cuda_matmul(rp_backend *be, const rp_tensor *w, const float *x, int n, float *y)
{
    rp_matmul_desc d = {w, y, NULL, NULL};
    return run_group(cuda(be), &d, 1, false, x, n);
}

static rp_status cuda_matmul_group(rp_backend *be, const rp_matmul_desc *mm, int count, const float *x, int n)
{
    cuda_backend *c = cuda(be);
    bool fusable = count <= CU_MM_GROUP;
    for (int i = 1; i < count && fusable; i++)
        fusable = mm[i].w->type == mm[0].w->type && mm[i].w->ne[0] == mm[0].w->ne[0];
    if (fusable)
        return run_group(c, mm, count, false, x, n);
    rp_status st = RP_OK;
    for (int i = 0; i < count && !st; i++) // mixed types (GGUF files mix quantizations)
        st = run_group(c, &mm[i], 1, false, x, n);
    return st;
}

static rp_status cuda_add(rp_backend *be, float *y, const float *x, size_t count);
static rp_status cuda_silu_mul(rp_backend *be, const float *gate, const float *up, size_t count, float *out);

static rp_status cuda_matmul_glu(rp_backend *be, const rp_tensor *gate, const rp_tensor *up, const float *x, int n,
                                 float *up_out, float *out)
{
    cuda_backend *c = cuda(be);
    rp_matmul_desc mm[2] = {{gate, out, NULL, NULL}, {up, up_out, NULL, NULL}};
    if (gate->type == up->type && gate->ne[0] == up->ne[0] && gate->ne[1] == up->ne[1] &&
        weight_of(gate)->splits == weight_of(up)->splits)
        return run_group(c, mm, 2, true, x, n);
    rp_status st = cuda_matmul_group(be, mm, 2, x, n);
    return st ? st : cuda_silu_mul(be, out, up_out, (size_t)n * gate->ne[1], out);
}

static rp_status elementwise(rp_backend *be, int op, const float *a, const float *b, float *out, size_t count,
                             int width)
{
    cu_elementwise_args e;
    memset(&e, 0, sizeof(e)); // padding too: the arguments are hashed (flush)
    e.op = op;
    e.a = a;
    e.b = b;
    e.out = out;
    e.count = count;
    e.width = width;
    return cmd_push(cuda(be), cu_launch_elementwise, &e, sizeof(e));
}

static rp_status cuda_add_bias(rp_backend *be, float *y, const float *b, int n, int width)
{
    return elementwise(be, CU_EW_ADD_BIAS, b, NULL, y, (size_t)n * width, width);
}

static rp_status cuda_add(rp_backend *be, float *y, const float *x, size_t count)
{
    return elementwise(be, CU_EW_ADD, x, NULL, y, count, 1);
}

static rp_status cuda_silu_mul(rp_backend *be, const float *gate, const float *up, size_t count, float *out)
{
    return elementwise(be, CU_EW_SILU_MUL, gate, up, out, count, 1);
}

static rp_status cuda_sigmoid_mul(rp_backend *be, const float *x, const float *gate, int rows, int width,
                                  int gate_width, float *out)
{
    return elementwise(be, CU_EW_SIGMOID_MUL, gate, x, out, (size_t)rows * width, gate_width == 1 ? width : 1);
}

static rp_status cuda_rmsnorm(rp_backend *be, const float *x, const float *w, float eps, int rows, int width,
                              float *out)
{
    cu_rmsnorm_args a;
    memset(&a, 0, sizeof(a)); // padding too: the arguments are hashed (flush)
    a.x = x;
    a.w = w;
    a.out = out;
    a.eps = eps;
    a.rows = rows;
    a.width = width;
    return cmd_push(cuda(be), cu_launch_rmsnorm, &a, sizeof(a));
}

static rp_status cuda_rope(rp_backend *be, float *x, int n_head, int head_dim, int rot_dim, const float *inv_freq,
                           rp_rope_style style)
{
    cuda_backend *c = cuda(be);
    cu_rope_args a;
    memset(&a, 0, sizeof(a)); // padding too: the arguments are hashed (flush)
    a.x = x;
    a.inv_freq = inv_freq;
    a.b = c->dev_batch;
    a.n = c->hbatch.n_tokens;
    a.n_head = n_head;
    a.head_dim = head_dim;
    a.rot_dim = rot_dim;
    a.neox = style == RP_ROPE_NEOX;
    return cmd_push(c, cu_launch_rope, &a, sizeof(a));
}

static rp_status cuda_attention(rp_backend *be, const float *q, const float *k, const float *v, rp_kv_layer *kv,
                                int n_head, int n_kv_head, int head_dim, float scale, float *out)
{
    cuda_backend *c = cuda(be);
    int n = c->hbatch.n_tokens;
    if (n_head % n_kv_head || n_head / n_kv_head > 16 || head_dim > 256 || head_dim % 8)
        return RP_ERR(RP_ERR_UNSUPPORTED, "cuda backend: attention with %d heads over %d KV heads of %d", n_head,
                      n_kv_head, head_dim);
    size_t part = (size_t)n * n_head * CU_ATTN_SPLIT * (head_dim + 2) * sizeof(float);
    rp_status st = grow_dev(c, (void **)&c->attn_part, &c->attn_part_size, part);
    if (st)
        return st;
    cu_attn_args a;
    memset(&a, 0, sizeof(a)); // padding too: the arguments are hashed (flush)
    a.q = q;
    a.k = k;
    a.v = v;
    a.kc = kv->k;
    a.vc = kv->v;
    a.f16 = kv->type == RP_DTYPE_F16;
    a.b = c->dev_batch;
    a.n = n;
    a.n_head = n_head;
    a.n_kv = n_kv_head;
    a.hd = head_dim;
    a.scale = scale;
    a.part = c->attn_part;
    a.out = out;
    if ((st = cmd_push(c, cu_launch_kv_store, &a, sizeof(a))))
        return st;
    return cmd_push(c, cu_launch_attention, &a, sizeof(a));
}

static rp_status cuda_argmax(rp_backend *be, const float *x, int rows, int width, int32_t *out)
{
    cu_argmax_args a;
    memset(&a, 0, sizeof(a)); // padding too: the arguments are hashed (flush)
    a.x = x;
    a.out = out;
    a.rows = rows;
    a.width = width;
    return cmd_push(cuda(be), cu_launch_argmax, &a, sizeof(a));
}

/* ---- facts ---- */

static void cuda_get_info(rp_backend *be, rp_backend_info *out)
{
    cuda_backend *c = cuda(be);
    bind(c);
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
        cudaGetLastError();
    snprintf(out->device, sizeof(out->device), "%.80s (sm_%d%d, %d SMs)", c->prop.name, c->prop.major, c->prop.minor,
             c->prop.multiProcessorCount);
    out->host_memory = false;
    out->mem_total = tot;
    out->mem_free = fr;
}

static const char *cuda_numerics(rp_backend *be, rp_dtype wtype)
{
    cuda_backend *c = cuda(be);
    // The kernels' version: change it with any change of their arithmetic. The SM count
    // decides the matmuls' K-splits (cu_matmul_splits).
    char split[16] = "";
    if (forced_splits)
        snprintf(split, sizeof(split), " splits-%d", forced_splits);
    else if (!group_splits)
        snprintf(split, sizeof(split), " ungrouped");
    snprintf(c->numerics, sizeof(c->numerics), "cuda sm_%d%d %dsm kernels-7 %s f32-act q8-act%s", c->prop.major,
             c->prop.minor, c->prop.multiProcessorCount,
             !cu_bf16_mma ? "bf16-fma" : cu_tc_parts == 3 ? "bf16-mma3" : "bf16-mma2", split);
    return c->numerics;
}

static rp_pool *cuda_host_pool(rp_backend *be)
{
    return cuda(be)->pool;
}

static const char *cuda_lost(rp_backend *be)
{
    return cuda(be)->lost ? cuda(be)->lost_msg : NULL;
}

static void cuda_destroy(rp_backend *be)
{
    cuda_backend *c = cuda(be);
    flush(c);
    cudaStreamSynchronize(c->stream);
    graphs_clear(c);
    cudaFree(c->qa_buf);
    cudaFree(c->attn_part);
    cudaFree(c->tmp_rows);
    cudaFree(c->dbatch);
    cudaFreeHost(c->stage);
    cudaFreeHost(c->up_stage);
    cudaStreamDestroy(c->stream);
    rp_pool_destroy(c->pool);
    rp_free(c->cmds);
    rp_free(c->args);
    rp_free(c);
}

static const rp_backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .get_info = cuda_get_info,
    .numerics = cuda_numerics,
    .host_pool = cuda_host_pool,
    .lost = cuda_lost,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .copy_2d = cuda_copy_2d,
    .synchronize = cuda_synchronize,
    .tensor_init = cuda_tensor_init,
    .tensor_deinit = cuda_tensor_deinit,
    .supports_type = cuda_supports_type,
    .group_weights = cuda_group_weights,
    .kv_layer_init = cuda_kv_layer_init,
    .kv_layer_deinit = cuda_kv_layer_deinit,
    .kv_block_export = cuda_kv_block_export,
    .kv_block_import = cuda_kv_block_import,
    .kv_block_copy = cuda_kv_block_copy,
    .begin_batch = cuda_begin_batch,
    .get_rows = cuda_get_rows,
    .gather_rows = cuda_gather_rows,
    .matmul = cuda_matmul,
    .matmul_group = cuda_matmul_group,
    .matmul_glu = cuda_matmul_glu,
    .add_bias = cuda_add_bias,
    .rmsnorm = cuda_rmsnorm,
    .rope = cuda_rope,
    .attention = cuda_attention,
    .silu_mul = cuda_silu_mul,
    .sigmoid_mul = cuda_sigmoid_mul,
    .add = cuda_add,
    .argmax = cuda_argmax,
};

int rp_cuda_device_count(const char **why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (why)
            *why = e == cudaErrorNoDevice ? "no CUDA device"
                   : e == cudaErrorInsufficientDriver || e == cudaErrorNoKernelImageForDevice
                       ? "no usable CUDA driver"
                       : "the CUDA runtime cannot start";
        return 0;
    }
    if (n == 0 && why)
        *why = "no CUDA device";
    return n;
}

bool rp_backend_cuda_available(void)
{
    return rp_cuda_device_count(NULL) > 0;
}

rp_status rp_backend_cuda_create(int device, const rp_backend_params *p, rp_backend **out)
{
    *out = NULL;
    const char *why = "";
    int n = rp_cuda_device_count(&why);
    if (n == 0)
        return RP_ERR(RP_ERR_DEVICE, "device cuda:%d: %s", device, why);
    if (device >= n)
        return RP_ERR(RP_ERR_DEVICE, "device cuda:%d: this machine has %d CUDA device%s (cuda:0%s)", device, n,
                      n == 1 ? "" : "s", n > 1 ? "..cuda:N-1" : "");
    cuda_backend *c = rp_calloc(1, sizeof(*c));
    if (!c)
        return RP_ERR(RP_ERR_NOMEM, "cuda backend: out of memory");
    c->base.ops = &cuda_ops;
    c->device = device;
    c->graphable = true;
    env_flag("RP_CUDA_PDL", &cu_pdl); // (each for measuring a variant against the default)
    env_flag("RP_CUDA_BF16_MMA", &cu_bf16_mma);
    env_flag("RP_CUDA_PREFETCH", &cu_prefetch);
    env_int("RP_CUDA_TC_PARTS", &cu_tc_parts, (const int[]){2, 3}, 2);
    env_int("RP_CUDA_TC_RT", &cu_tc_rt, (const int[]){0, 1, 2}, 3);
    env_int("RP_CUDA_SPLITS", &forced_splits, (const int[]){0, 1, 2, 4, 8}, 5); // changes results: named in numerics
    const char *grid = getenv("RP_CUDA_TC_GRID");
    if (grid && atoi(grid) >= -1)
        cu_tc_grid = atoi(grid);
    env_flag("RP_CUDA_GROUP", &group_splits);
    env_flag("RP_CUDA_GRAPHS", &graphs_env);
    if (!graphs_env)
        use_graphs = false;
    rp_status st;
    cudaError_t e;
    if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cudaGetDeviceProperties(&c->prop, device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        st = cu_error(NULL, e, "opening the device", __FILE__, __LINE__);
        rp_free(c);
        return st;
    }
    if (c->prop.major < 9) {
        cudaStreamDestroy(c->stream);
        rp_free(c);
        return RP_ERR(RP_ERR_UNSUPPORTED, "device cuda:%d: %s has compute capability %d.%d; this build's kernels need 9.0 "
                      "(Hopper) or newer",
                      device, c->prop.name, c->prop.major, c->prop.minor);
    }
    if ((st = rp_pool_create(p->n_threads > 0 ? p->n_threads : rp_cpu_count(), &c->pool))) {
        cudaStreamDestroy(c->stream);
        rp_free(c);
        return st;
    }
    *out = &c->base;
    return RP_OK;
}
