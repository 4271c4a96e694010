/*
 * fingerprint.c - a 128-bit identity of everything that decides a loaded
 * model's KV numbers, for the prefix cache's keys and its disk folder.
 *
 * Hashed (XXH3-128, one stream): a format tag and Rapid's version (kernels
 * may change between versions); the architecture config field by field; the
 * rope frequencies as computed (covers theta, scaling and GGUF rope_freqs);
 * the name, type and shape of every weight tensor the forward pass uses; the
 * quantization asked at load; the backend's numerics (rp_backend_numerics: its
 * name, and on the CPU the SIMD level and the activation rounding: different
 * instruction sets and devices do not round alike); the running
 * executable's size and modification time (a rebuilt or upgraded binary may
 * compute other bits); the identity of the files: the model path and, for
 * each weight or config file, its name, size and modification time. File
 * contents are not read: a rewritten file changes its size or mtime.
 */
#include "model_int.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#define FP_TAG "rapid-kv-fingerprint-2" // 2: the backend named by its numerics

static void put(XXH3_state_t *h, const void *p, size_t n)
{
    XXH3_128bits_update(h, p, n);
}

static void put_i64(XXH3_state_t *h, int64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)v >> (8 * i));
    put(h, b, 8);
}

static void put_f32(XXH3_state_t *h, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put_i64(h, u);
}

static void put_str(XXH3_state_t *h, const char *s)
{
    size_t n = strlen(s);
    put_i64(h, (int64_t)n);
    put(h, s, n);
}

static void put_tensor(XXH3_state_t *h, const char *name, const rp_tensor *t)
{
    put_str(h, name);
    put_i64(h, t->type);
    put_i64(h, t->ne[0]);
    put_i64(h, t->ne[1]);
}

// The identity of one file: name, size, mtime (ns). A file that cannot be
// stat'ed hashes as such (its cache is then its own).
static void put_file(XXH3_state_t *h, const char *path, const char *name)
{
    struct stat st;
    put_str(h, name);
    if (stat(path, &st) != 0) {
        put_i64(h, -1);
        return;
    }
    put_i64(h, (int64_t)st.st_size);
    put_i64(h, (int64_t)st.st_mtim.tv_sec);
    put_i64(h, (int64_t)st.st_mtim.tv_nsec);
}

static bool weight_file(const char *name)
{
    size_t n = strlen(name);
    static const char *const suffixes[] = {".safetensors", ".safetensors.index.json", ".gguf"};
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        size_t k = strlen(suffixes[i]);
        if (n >= k && strcmp(name + n - k, suffixes[i]) == 0)
            return true;
    }
    return strcmp(name, "config.json") == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// A folder: its weight and config files in name order.
static rp_status put_dir(XXH3_state_t *h, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        put_i64(h, -1);
        return RP_OK;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    rp_status st = RP_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!weight_file(de->d_name))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **nn = rp_realloc(names, nc * sizeof(char *));
            if (!nn) {
                st = RP_ERR(RP_ERR_NOMEM, "model fingerprint: out of memory");
                goto done;
            }
            names = nn;
            cap = nc;
        }
        if (!(names[n] = rp_strdup(de->d_name))) {
            st = RP_ERR(RP_ERR_NOMEM, "model fingerprint: out of memory");
            goto done;
        }
        n++;
    }
    if (n)
        qsort(names, n, sizeof(char *), cmp_str);
    put_i64(h, (int64_t)n);
    for (size_t i = 0; i < n && !st; i++) {
        char *path = rp_path_join(dir, names[i]);
        if (!path) {
            st = RP_ERR(RP_ERR_NOMEM, "model fingerprint: out of memory");
            break;
        }
        put_file(h, path, names[i]);
        rp_free(path);
    }
done:
    closedir(d);
    for (size_t i = 0; i < n; i++)
        rp_free(names[i]);
    rp_free(names);
    return st;
}

rp_status rp_model_fingerprint(const rp_model *m, uint8_t out[16])
{
    XXH3_state_t h;
    XXH3_INITSTATE(&h);
    XXH3_128bits_reset(&h);
    put_str(&h, FP_TAG);
    put_str(&h, RP_VERSION);

    const rp_model_config *c = &m->cfg;
    put_str(&h, c->arch_name);
    int64_t ints[] = {c->arch,          c->n_vocab,          c->dim,          c->n_layer,     c->n_head,
                      c->n_kv_head,     c->head_dim,         c->ffn_dim,      c->tied_embeddings,
                      c->qkv_bias,      c->qk_norm,          c->rope_style,   c->rope_scaling, c->rope_orig_ctx,
                      c->n_mtp,         c->n_expert,         c->n_expert_used, c->moe_ffn_dim, c->moe_norm_topk,
                      c->moe_step};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
        put_i64(&h, ints[i]);
    float floats[] = {c->norm_eps, c->rope_theta, c->rope_factor, c->rope_low_freq_factor, c->rope_high_freq_factor};
    for (size_t i = 0; i < sizeof(floats) / sizeof(floats[0]); i++)
        put_f32(&h, floats[i]);
    for (int i = 0; i < c->head_dim / 2; i++)
        put_f32(&h, m->inv_freq[i]);

    put_tensor(&h, "token_embd", &m->tok_embd);
    put_tensor(&h, "output", &m->output);
    for (int l = 0; l < c->n_layer + c->n_mtp; l++) {
        const rp_layer *L = &m->layers[l];
        put_i64(&h, l);
        put_tensor(&h, "wq", &L->wq);
        put_tensor(&h, "wk", &L->wk);
        put_tensor(&h, "wv", &L->wv);
        put_tensor(&h, "wo", &L->wo);
        put_tensor(&h, "w_gate", &L->w_gate);
        put_tensor(&h, "w_up", &L->w_up);
        put_tensor(&h, "w_down", &L->w_down);
        if (L->ex_gate) {
            put_tensor(&h, "router", &L->router);
            for (int e = 0; e < c->n_expert; e++) {
                put_tensor(&h, "ex_gate", &L->ex_gate[e]);
                put_tensor(&h, "ex_up", &L->ex_up[e]);
                put_tensor(&h, "ex_down", &L->ex_down[e]);
            }
        }
    }
    for (int i = 0; i < 32; i++)
        put_i64(&h, c->dense_layers[i]);
    if (c->n_mtp)
        put_tensor(&h, "mtp.fc", &m->mtp.fc);

    put_i64(&h, m->params.quant);
    // The backend's numbers (kernels, instruction set, activation rounding) for the matrices'
    // type: KV made with other numbers would give other text than this backend's own.
    put_str(&h, rp_backend_numerics(m->be, m->layers[0].wq.type));
    put_file(&h, "/proc/self/exe", "executable");

    char *real = realpath(m->path, NULL); // libc's allocation: freed with free()
    put_str(&h, real ? real : m->path);
    free(real);
    rp_status st = RP_OK;
    if (rp_dir_exists(m->path))
        st = put_dir(&h, m->path);
    else
        put_file(&h, m->path, "model");
    if (st)
        return st;
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(&h));
    memcpy(out, canon.digest, 16);
    return RP_OK;
}
