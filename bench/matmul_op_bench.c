/*
 * matmul_op_bench.c - a decoder layer's matmuls through the backend seam, one op at a
 * time: what each costs for n = 1, 2, 4, 8, 16 tokens, the weight bytes it reads per
 * second, and n tokens against one (what a verification span costs in matmuls).
 *
 * The ops are those of one layer of a Qwen2.5-7B-shaped model (hidden 3584, 28/4 heads
 * of 128, MLP 18944) and its output head (vocabulary 152064), grouped as the forward
 * groups them: q/k/v with their biases (rp_backend_matmul_group), wo with the residual
 * add, gate/up with silu (rp_backend_matmul_glu), down with the residual add, the head.
 * Random weights of one type (bf16 bits, or random floats quantized to q8_0/q4_0/q4_k);
 * enough copies of each op's weights that one pass over them is several times the GPU's
 * L2 (so every call streams its weights from memory, as a forward does). One measured
 * forward is `--calls` calls of the op on the copies in turn, then one synchronize (on a
 * GPU the backend runs it as a CUDA graph from the third forward on); the figure is the
 * median of `--runs` forwards over the calls.
 *
 * Usage: matmul-op-bench [--device NAME] [--type bf16|q8|q4|q4k] [--runs N] [--calls N]
 *                        [--ns 1,2,4,8,16] [--ops qkv,wo,gateup,down,head]
 */
#include "backend/backend.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HIDDEN 3584
#define KV_DIM 512
#define MLP 18944
#define VOCAB 152064
#define MAX_N 64
#define MAX_COPIES 16

typedef struct op {
    const char *name;
    int n_w;           // weights in the group (glu: gate, up)
    int64_t rows[3];   // each weight's rows
    int64_t cols;
    bool bias, residual, glu;
} op;

static const op ops[] = {
    {"qkv", 3, {HIDDEN, KV_DIM, KV_DIM}, HIDDEN, true, false, false},
    {"wo", 1, {HIDDEN}, HIDDEN, false, true, false},
    {"gateup", 2, {MLP, MLP}, HIDDEN, false, false, true},
    {"down", 1, {HIDDEN}, MLP, false, true, false},
    {"head", 1, {VOCAB}, HIDDEN, false, false, false},
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void) // uniform in [-1, 1)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (2.0 / 16777216.0) - 1.0);
}

static size_t row_bytes(rp_dtype type, int64_t cols)
{
    size_t b = 0;
    rp_dtype_row_bytes(type, cols, &b);
    return b;
}

// A random weight of `type` (rows x cols) in host memory, as a file would hold it.
static void *make_weight(rp_dtype type, int64_t rows, int64_t cols)
{
    size_t bytes = (size_t)rows * row_bytes(type, cols);
    uint8_t *out = malloc(bytes);
    float *row = malloc((size_t)cols * sizeof(float));
    if (!out || !row) {
        fprintf(stderr, "matmul-op-bench: out of memory\n");
        exit(1);
    }
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++)
            row[c] = frand() * 0.05f;
        uint8_t *dst = out + (size_t)r * row_bytes(type, cols);
        if (type == RP_DTYPE_BF16) {
            for (int64_t c = 0; c < cols; c++) {
                uint32_t u;
                memcpy(&u, &row[c], 4);
                uint16_t h = (uint16_t)(u >> 16);
                memcpy(dst + 2 * c, &h, 2);
            }
        } else if (rp_quantize(type, row, dst, cols)) {
            fprintf(stderr, "matmul-op-bench: cannot quantize to %s\n", rp_dtype_name(type));
            exit(1);
        }
    }
    free(row);
    return out;
}

#define CHECK(x)                                                                                                       \
    do {                                                                                                               \
        rp_status st_ = (x);                                                                                           \
        if (st_) {                                                                                                     \
            fprintf(stderr, "matmul-op-bench: %s: %s\n", #x, rp_error_message());                                        \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static bool listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
            return true;
    return false;
}

int main(int argc, char **argv)
{
    const char *device = NULL, *type_name = "bf16", *ns_arg = "1,2,4,8,16", *op_list = "qkv,wo,gateup,down,head";
    int runs = 20, calls = 28;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--device") && v)
            device = v, i++;
        else if (!strcmp(a, "--type") && v)
            type_name = v, i++;
        else if (!strcmp(a, "--runs") && v)
            runs = atoi(v), i++;
        else if (!strcmp(a, "--calls") && v)
            calls = atoi(v), i++;
        else if (!strcmp(a, "--ns") && v)
            ns_arg = v, i++;
        else if (!strcmp(a, "--ops") && v)
            op_list = v, i++;
        else {
            fprintf(stderr, "usage: matmul-op-bench [--device NAME] [--type bf16|q8|q4|q4k] [--runs N] [--calls N] "
                            "[--ns 1,2,4,8,16] [--ops qkv,wo,gateup,down,head]\n");
            return 2;
        }
    }
    rp_dtype type = !strcmp(type_name, "q8")    ? RP_DTYPE_Q8_0
                    : !strcmp(type_name, "q4")  ? RP_DTYPE_Q4_0
                    : !strcmp(type_name, "q4k") ? RP_DTYPE_Q4_K
                                                : RP_DTYPE_BF16;
    int ns[16], n_ns = 0;
    for (const char *p = ns_arg; *p && n_ns < 16;) {
        int n = atoi(p);
        if (n < 1 || n > MAX_N) {
            fprintf(stderr, "matmul-op-bench: n must be 1..%d\n", MAX_N);
            return 2;
        }
        ns[n_ns++] = n;
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    if (runs < 3 || calls < 1) {
        fprintf(stderr, "matmul-op-bench: --runs must be at least 3, --calls at least 1\n");
        return 2;
    }

    rp_backend_params bp;
    rp_backend_params_default(&bp);
    rp_backend *be;
    CHECK(rp_backend_open(device ? device : rp_backend_default_name(), &bp, &be));
    rp_backend_info info;
    rp_backend_get_info(be, &info);
    printf("matmul-op-bench: %s, %s weights (%s), %d runs of %d calls, median per call\n", info.device,
           rp_dtype_name(type), rp_backend_numerics(be, type), runs, calls);

    // The batch: n tokens of one sequence (matmuls read no per-token fact, but a forward needs one).
    int32_t zeros[MAX_N] = {0}, bt_start[2] = {0, 1}, bt[1] = {0}, rows_out[1] = {0};
    float *x, *y[3], *bias, *resid, *sink; // sink: pinned host memory (a pageable copy would stop the graphs)
    CHECK(rp_backend_host_alloc(be, sizeof(float), (void **)&sink));
    size_t big = (size_t)MAX_N * VOCAB * sizeof(float);
    CHECK(rp_backend_alloc(be, (size_t)MAX_N * MLP * sizeof(float), (void **)&x));
    for (int i = 0; i < 3; i++)
        CHECK(rp_backend_alloc(be, big, (void **)&y[i]));
    CHECK(rp_backend_alloc(be, (size_t)MLP * sizeof(float), (void **)&bias));
    CHECK(rp_backend_alloc(be, (size_t)MAX_N * MLP * sizeof(float), (void **)&resid));
    { // x: random activations
        size_t nx = (size_t)MAX_N * MLP;
        float *hx = malloc(nx * sizeof(float));
        for (size_t i = 0; i < nx; i++)
            hx[i] = frand();
        CHECK(rp_backend_upload(be, x, hx, nx * sizeof(float)));
        free(hx);
    }

    printf("\n| op | weights | n | per call | read | n / 1 |\n|---|---|---|---|---|---|\n");
    for (size_t oi = 0; oi < sizeof(ops) / sizeof(ops[0]); oi++) {
        const op *o = &ops[oi];
        if (!listed(op_list, o->name))
            continue;
        size_t op_bytes = 0;
        for (int w = 0; w < o->n_w; w++)
            op_bytes += (size_t)o->rows[w] * row_bytes(type, o->cols);
        int copies = (int)(400e6 / op_bytes) + 1; // a pass over the copies: several times a 50 MB L2
        copies = copies < 2 ? 2 : copies > MAX_COPIES ? MAX_COPIES : copies;
        rp_tensor t[MAX_COPIES][3];
        void *host[3]; // (the CPU backend reads the host data itself: kept until the tensors go)
        for (int w = 0; w < o->n_w; w++) {
            host[w] = make_weight(type, o->rows[w], o->cols);
            for (int c = 0; c < copies; c++)
                CHECK(rp_backend_tensor_init(be, type, o->cols, o->rows[w], host[w], &t[c][w]));
        }
        double one = 0;
        for (int ni = 0; ni < n_ns; ni++) {
            int n = ns[ni];
            rp_batch_desc d = {.n_tokens = n, .tokens = zeros, .pos = zeros, .slot = zeros, .seq = zeros,
                               .n_seqs = 1, .bt_start = bt_start, .bt = bt, .block_size = 16,
                               .n_rows = 1, .rows = rows_out};
            double *ms = malloc((size_t)(runs + 3) * sizeof(double));
            for (int r = 0; r < runs + 3; r++) { // three forwards first: two eager, the graph's capture
                CHECK(rp_backend_synchronize(be));
                double t0 = now();
                CHECK(rp_backend_begin_batch(be, &d));
                for (int k = 0; k < calls; k++) {
                    rp_tensor *w = t[k % copies];
                    if (o->glu) {
                        CHECK(rp_backend_matmul_glu(be, &w[0], &w[1], x, n, y[1], y[0]));
                    } else {
                        rp_matmul_desc mm[3];
                        for (int i = 0; i < o->n_w; i++)
                            mm[i] = (rp_matmul_desc){&w[i], y[i], o->bias ? bias : NULL, o->residual ? resid : NULL};
                        CHECK(rp_backend_matmul_group(be, mm, o->n_w, x, n));
                    }
                }
                CHECK(rp_backend_download(be, sink, y[0], sizeof(float)));
                CHECK(rp_backend_synchronize(be));
                if (r >= 3)
                    ms[r - 3] = (now() - t0) * 1e3 / calls;
            }
            qsort(ms, (size_t)runs, sizeof(double), cmp_double);
            double med = ms[runs / 2];
            if (ni == 0)
                one = med;
            printf("| %s | %.1f MB | %d | %.1f us | %.0f GB/s | %.2fx |\n", o->name, op_bytes / 1e6, n, med * 1e3,
                   op_bytes / (med * 1e-3) / 1e9, med / one);
            fflush(stdout);
            free(ms);
        }
        for (int w = 0; w < o->n_w; w++) {
            for (int c = 0; c < copies; c++)
                rp_backend_tensor_deinit(be, &t[c][w]);
            free(host[w]);
        }
    }
    rp_backend_free(be, x);
    for (int i = 0; i < 3; i++)
        rp_backend_free(be, y[i]);
    rp_backend_free(be, bias);
    rp_backend_free(be, resid);
    rp_backend_host_free(be, sink);
    rp_backend_destroy(be);
    return 0;
}
