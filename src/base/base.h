/*
 * base.h - the foundation every other module of Rapid stands on.
 *
 * Holds what is shared by all modules and depends on nothing of ours:
 *   - rp_status and the error record: a fallible function returns a negative
 *     status and records, once and at the origin, a human message plus the
 *     file/line/function that raised it (SQLite's _BKPT idea). Callers add
 *     context with rp_error_prefix() as the error travels up.
 *   - rp_malloc/rp_free: every allocation goes through here so a test build can
 *     make the Nth allocation fail (SQLite's OOM testing).
 *   - logging, whole-file reads and read-only mmap,
 *   - half-precision conversions (IEEE fp16 and bfloat16),
 *   - a persistent thread pool (rp_pool) for compute kernels.
 *
 * Threads: the error record is thread-local; everything else is thread-safe
 * unless its contract says otherwise.
 */
#ifndef RP_BASE_H
#define RP_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define RP_VERSION "0.1.0"

/* ---- status and errors ---------------------------------------------------- */

typedef enum rp_status {
    RP_OK = 0,
    RP_ERR_NOMEM = -1,       // an allocation failed
    RP_ERR_IO = -2,          // a file or socket operation failed
    RP_ERR_INVALID = -3,     // bad input: a malformed file, request or argument
    RP_ERR_UNSUPPORTED = -4, // well-formed, but something Rapid does not handle
    RP_ERR_DEVICE = -5,      // an accelerator call failed
    RP_ERR_RANGE = -6,       // a size or index outside what fits (context, pool)
    RP_ERR_LIMIT = -7,       // a safety limit was hit (recursion, loop count)
} rp_status;

// Records status `st` with a printf-style message and returns `st`. Use through
// RP_ERR so the origin is recorded: `return RP_ERR(RP_ERR_INVALID, "bad %s", x);`
rp_status rp_error_set(rp_status st, const char *file, int line, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#define RP_ERR(st, ...) rp_error_set((st), __FILE__, __LINE__, __func__, __VA_ARGS__)

// Prepends "<context>: " to the current message (e.g. the file name), returns st.
rp_status rp_error_prefix(rp_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// The current thread's last error message ("" if none), and where it was raised.
const char *rp_error_message(void);
const char *rp_error_origin(void);
void rp_error_clear(void);
const char *rp_status_name(rp_status st);

// Programmer errors only: never for anything that comes from a file or a request.
#define RP_ASSERT(cond)                                                                                                \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            rp_assert_fail(#cond, __FILE__, __LINE__, __func__);                                                       \
    } while (0)
_Noreturn void rp_assert_fail(const char *expr, const char *file, int line, const char *func);

/* ---- memory --------------------------------------------------------------- */

void *rp_malloc(size_t n);
void *rp_calloc(size_t count, size_t size);
void *rp_realloc(void *p, size_t n);
char *rp_strdup(const char *s);
char *rp_strndup(const char *s, size_t n);
// Edit distance with transpositions (optimal string alignment) between a and b, ASCII case
// ignored, both cut at 63 characters: how close a mistyped name is to a known one.
int rp_str_distance(const char *a, const char *b);
void rp_free(void *p);
// 64-byte aligned (SIMD rows, cache lines); free with rp_free_aligned.
void *rp_malloc_aligned(size_t n);
void rp_free_aligned(void *p);
// Large long-lived buffers streamed again and again (model weights): zero-filled anonymous
// memory, 2 MiB aligned and rounded up to 2 MiB, that the kernel is asked to back with
// 2 MiB pages (MADV_HUGEPAGE; it silently uses 4 KiB pages when it has none). A decode
// step reads every weight once: over 4 KiB pages that is one TLB miss per 4 KiB, measured
// 20-25% slower on a VM. NULL when out of memory. Free with rp_free_huge(p, n), n as asked.
void *rp_malloc_huge(size_t n);
void rp_free_huge(void *p, size_t n);
// True when the kernel's transparent huge pages are not switched off ("never").
bool rp_huge_pages_enabled(void);
// Test hook: the allocation after `n` more successful ones fails (and every one
// after it while `sticky`). n < 0 turns failure injection off.
void rp_alloc_fail_after(long n, bool sticky);

// Overflow-checked size arithmetic: false on overflow.
static inline bool rp_mul_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool rp_add_size(size_t a, size_t b, size_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* ---- logging -------------------------------------------------------------- */

typedef enum rp_log_level {
    RP_LOG_DEBUG = 0,
    RP_LOG_INFO = 1,
    RP_LOG_WARN = 2,
    RP_LOG_ERROR = 3,
    RP_LOG_QUIET = 4,
} rp_log_level;

void rp_log_set_level(rp_log_level level);
rp_log_level rp_log_get_level(void);
void rp_log(rp_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define RP_LOGD(...) rp_log(RP_LOG_DEBUG, __VA_ARGS__)
#define RP_LOGI(...) rp_log(RP_LOG_INFO, __VA_ARGS__)
#define RP_LOGW(...) rp_log(RP_LOG_WARN, __VA_ARGS__)
#define RP_LOGE(...) rp_log(RP_LOG_ERROR, __VA_ARGS__)

/* ---- files ---------------------------------------------------------------- */

// A read-only memory map of a whole file. Plain data; release with rp_file_unmap.
typedef struct rp_mapping {
    const uint8_t *data; // (size) bytes, NULL for an empty file
    size_t size;
} rp_mapping;

rp_status rp_file_map(const char *path, rp_mapping *out);
void rp_file_unmap(rp_mapping *m);
// Reads a whole file into a NUL-terminated heap buffer (rp_free it); *len excludes the NUL.
rp_status rp_file_read(const char *path, char **out, size_t *len);
bool rp_file_exists(const char *path);
bool rp_dir_exists(const char *path);
// Writes a file atomically: bytes go to "<path>.tmp.<pid>", and commit fsyncs,
// closes and renames it over path, so readers see the old file or the whole new
// one, never a part. Caller-owned; after open, exactly one of commit / abort.
// The first error sticks: later writes do nothing and commit reports it.
typedef struct rp_file_writer {
    int fd;
    char *path, *tmp;
    rp_status st;
} rp_file_writer;

rp_status rp_file_writer_open(rp_file_writer *w, const char *path);
rp_status rp_file_writer_write(rp_file_writer *w, const void *data, size_t n);
rp_status rp_file_writer_zeros(rp_file_writer *w, size_t n);
rp_status rp_file_writer_commit(rp_file_writer *w); // removes the temp file on failure
void rp_file_writer_abort(rp_file_writer *w);
// Commit's last step alone, for many files made durable by one sync: after the
// caller has synced the written data itself (syncfs, or fsync of w->fd), closes
// and renames the temp file into place. Removes the temp file on failure.
rp_status rp_file_writer_publish(rp_file_writer *w);

// Joins dir and name with one '/'; heap string (rp_free it), NULL on OOM.
char *rp_path_join(const char *dir, const char *name);

/* ---- half precision ------------------------------------------------------- */

typedef uint16_t rp_fp16;
typedef uint16_t rp_bf16;

float rp_fp16_to_f32(rp_fp16 h);
rp_fp16 rp_f32_to_fp16(float f); // round to nearest even
static inline float rp_bf16_to_f32(rp_bf16 h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
rp_bf16 rp_f32_to_bf16(float f); // round to nearest even, NaN kept

/* ---- element types ------------------------------------------------------- */

// Tensor element types. The values are GGML's type ids, so a GGUF file's type
// field maps directly; types not listed are unsupported. Quantized types store
// blocks of rp_dtype_block(t) elements in rp_dtype_block_bytes(t) bytes, laid out
// exactly as GGML does (see quant/quant.h for the block structs).
typedef enum rp_dtype {
    RP_DTYPE_F32 = 0,
    RP_DTYPE_F16 = 1,
    RP_DTYPE_Q4_0 = 2,
    RP_DTYPE_Q5_0 = 6,
    RP_DTYPE_Q8_0 = 8,
    RP_DTYPE_Q4_K = 12,
    RP_DTYPE_Q5_K = 13,
    RP_DTYPE_Q6_K = 14,
    RP_DTYPE_Q8_K = 15, // activations only (the K-quant dot products' partner)
    RP_DTYPE_BF16 = 30,
    RP_DTYPE_COUNT = 31, // one past the largest id
} rp_dtype;

bool rp_dtype_valid(int t);        // one of the types above
const char *rp_dtype_name(rp_dtype t); // "f32", "q4_K", ...
int rp_dtype_block(rp_dtype t);    // elements per block (1 for float types)
int rp_dtype_block_bytes(rp_dtype t); // bytes per block
bool rp_dtype_is_quant(rp_dtype t);
// Bytes of a row of n elements; false when n is not a whole number of blocks or overflows.
bool rp_dtype_row_bytes(rp_dtype t, int64_t n, size_t *out);

/* ---- thread pool ---------------------------------------------------------- */

// A persistent pool of worker threads for compute kernels. The calling thread is
// worker 0, so a pool of n threads starts n-1. One rp_pool_run at a time (the
// engine thread owns the pool); runs return when every worker has finished.
typedef struct rp_pool rp_pool;
typedef void (*rp_pool_fn)(void *ctx, int ith, int nth);

rp_status rp_pool_create(int n_threads, rp_pool **out);
void rp_pool_destroy(rp_pool *pool);
int rp_pool_size(const rp_pool *pool);
// Runs fn(ctx, i, n) once for every part i in [0, n) and returns when all are
// done: part 0 on the calling thread, part i on worker i, or on the calling
// thread when worker i has not started it by the time part 0 is done (so fn
// must depend on i, never on the thread that runs it). pool may be NULL (runs
// fn(ctx, 0, 1)).
void rp_pool_run(rp_pool *pool, rp_pool_fn fn, void *ctx);
// The number of CPU cores available to this process.
int rp_cpu_count(void);

// Splits [0, n) into nth nearly equal ranges: the ith is [*lo, *hi).
static inline void rp_split_range(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi)
{
    int64_t per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}

/* ---- name index ----------------------------------------------------------- */

// An open-addressing hash from NUL-terminated names (borrowed, not copied) to
// int64 values, sized once for n entries. Caller-owned; init / deinit.
typedef struct rp_name_index {
    const char **keys; // (cap) NULL when the slot is free
    int64_t *vals;     // (cap)
    size_t cap;        // a power of two, at least twice the number of entries
} rp_name_index;

bool rp_name_index_init(rp_name_index *x, int64_t n); // false on OOM
void rp_name_index_deinit(rp_name_index *x);
// Inserts key -> val; returns -1, or the value already stored under key (then nothing changes).
int64_t rp_name_index_put(rp_name_index *x, const char *key, int64_t val);
int64_t rp_name_index_get(const rp_name_index *x, const char *key); // -1 if absent

/* ---- time ----------------------------------------------------------------- */

double rp_time_s(void); // monotonic seconds

#endif
