/*
 * serve.c - `rapid serve`: load a model, start the engine, serve HTTP until
 * SIGINT/SIGTERM.
 *
 * With no MODEL the bundled default model is served. Loading shows a progress
 * line when stderr is a terminal. Once listening, exactly one line
 * "rapid: listening on http://HOST:PORT" goes to stderr (scripts wait for it
 * and read the port from it); then one log line per request.
 */
#include "cli.h"

#include "../chat/chat.h"
#include "../server/server.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void serve_usage(FILE *f)
{
    fprintf(f, "usage: rapid serve [MODEL] [options]\n"
               "\n"
               "Serves MODEL (a Hugging Face folder, a .gguf file, a repo id org/name[@REV] or\n"
               "org/name-GGUF:QUANT, or an alias from `rapid models --catalog`: a name is found in the hub\n"
               "cache or downloaded into it; without MODEL the bundled demonstration model rapid-tiny) over HTTP: the OpenAI API (/v1/chat/completions, /v1/completions,\n"
               "/v1/responses, /v1/models), the Anthropic API (/v1/messages, /v1/messages/count_tokens),\n"
               "/health, /metrics (Prometheus) and /v1/status (JSON). Runs until SIGINT or SIGTERM, then\n"
               "cancels what is running, closes the connections, writes the prefix cache to disk (at most\n"
               "10 s) and exits.\n"
               "\n"
               "options:\n"
               "      --host ADDR            address to listen on (default 127.0.0.1)\n"
               "      --port N               port (default 8000; 0 picks a free one)\n"
               "      --api-key KEY          require this key (Authorization: Bearer KEY or x-api-key: KEY)\n"
               "      --api-key-file FILE    the key is FILE's first line (kept out of `ps`)\n"
               "      --allowed-origins LIST browser pages of these origins may call the API (CORS): a comma\n"
               "                             list (https://app.example,http://localhost:3000) or *; default none\n"
               "      --served-model-name NAME  the model's name in the API (default: the folder/file name)\n"
               "      --strict-model-name    answer 404 for requests naming another model (default: any name\n"
               "                             gets this model)\n"
               "      --ctx N                most tokens (prompt + reply) per request (default: the model's, at most\n"
               "                             what the KV cache holds)\n"
               "      --kv-memory SIZE       KV cache size, shared by all requests: bytes (512M, 8G, ...) or a\n"
               "                             fraction of the memory available (0.5, 50%%; on a GPU: of its memory\n"
               "                             free after the weights) (default: max(ctx, 4096) tokens, at most a\n"
               "                             quarter of that memory)\n"
               "      --kv-tokens N          KV cache size in tokens instead\n"
               "      --kv-dtype f16|f32     how K and V are cached (default f16: half the memory of f32, and\n"
               "                             faster at long contexts; f32 keeps them exact)\n"
               "      --max-num-seqs N       requests generating together (default 16; --parallel is the same)\n"
               "      --prefill-chunk N      most prompt tokens run per step, so that a long prompt never\n"
               "                             stalls running streams for more than one chunk (default 512;\n"
               "                             while others decode, chunks deep into a long prompt take fewer\n"
               "                             tokens, so that each costs about what the prompt's first does)\n"
               "      --cache-dir DIR        the prefix cache's disk tier (blocks go to DIR/<model fingerprint>/;\n"
               "                             default $XDG_CACHE_HOME/rapid/kv or ~/.cache/rapid/kv)\n"
               "      --cache-disk-budget SIZE  most bytes on disk per model (default 4G)\n"
               "      --cache-state-memory SIZE  models with recurrent state (Qwen3.5/3.6): most bytes of the\n"
               "                             states kept in memory for reuse, one per prompt (default 1G)\n"
               "      --no-disk-cache        keep the prefix cache in memory only\n"
               "      --no-prefix-cache      no prefix cache at all\n"
               "      --max-queue N          requests waiting beyond those; more get 503 (default 64)\n"
               "      --max-request-bytes N  largest request body (default 8388608); larger get 413\n"
               "      --chat-template FILE|NAME  the chat template: a Jinja file, or a built-in: chatml, llama3,\n"
               "                             mistral (default: the model's own; a model without one gets chatml,\n"
               "                             with a warning)\n"
               "      --max-connections N    connections open at once (default 512). Past it, or past a client\n"
               "                             address's share, the oldest connection of that address (or of the\n"
               "                             address holding the most) that has not sent a whole request yet,\n"
               "                             idle kept-alive ones included, is closed to make room; with every\n"
               "                             slot busy with a request, a new connection is answered 503 with\n"
               "                             Retry-After\n"
               "      --max-connections-per-client N  connections of one client address (an IPv4 address or\n"
               "                             an IPv6 /64) (default: a quarter of --max-connections)\n"
               "      --timeout SECONDS      a request's head must arrive within it (of the connection's start\n"
               "                             or the previous reply's end: idle kept-alive connections close\n"
               "                             after it), and its body within it of the head (default 30); a\n"
               "                             generation or a stream is never cut\n"
               "      --tool-parser NAME     tool-call format (default: from the chat template): none, hermes,\n"
               "                             qwen3_coder, llama3_json, mistral, deepseek_v3\n"
               "      --reasoning-parser NAME  reasoning format (default: from the template): none, think\n"
               "      --no-spec-decode       no speculative decoding (on by default: prompt lookup, the model's\n"
               "                             MTP layer when it has one, the draft model when given)\n"
               "      --speculative-config JSON  {\"method\": \"auto|ngram|mtp|draft\", \"num_speculative_tokens\":\n"
               "                             K, \"adaptive\": true|false, \"prompt_lookup_min\": N,\n"
               "                             \"prompt_lookup_max\": N}\n"
               "      --draft-model PATH     a smaller model with the same tokenizer that drafts tokens\n"
               "      --quant q8|q4|q4k      quantize f16/bf16/f32 weights at load (Q8_0, Q4_0 or Q4_K)\n"
               "      --f32-activations      bf16 weights multiply float32 activations (the float32 reference's\n"
               "                             numbers; on AMD CPUs with AVX512_BF16 and Intel CPUs with AMX\n"
               "                             the default rounds activations to bf16: faster prefill and\n"
               "                             batched steps; with AMX one-token steps are slower)\n"
               "      --mmap                 keep float weights in the file's mapping: no copy at load, less\n"
               "                             memory, decode ~20%% slower (default: weights up to half the\n"
               "                             available memory are copied to 2 MiB pages)\n"
               "  -t, --threads N            CPU threads (default: all cores)\n"
               "      --device NAME          where the model runs: cpu, or cuda[:N] in a build with CUDA\n"
               "                             (default: $RAPID_DEVICE, else the GPU when one answers, else cpu)\n"
               "  -q, --quiet                no per-request log lines\n"
               "      --no-download          a MODEL by name must be in the hub cache already\n"
               "      --hf-token TOKEN       for downloading gated or private repos (default $HF_TOKEN)\n"
               "      --config FILE          options from FILE (default $RAPID_CONFIG), a JSON object: the long\n"
               "                             options' names without the dashes, a string or a number each, true\n"
               "                             or false for an option without a value, and \"model\" for MODEL:\n"
               "                             {\"model\": \"qwen3-8b\", \"host\": \"0.0.0.0\", \"port\": 8000,\n"
               "                             \"api-key-file\": \"/etc/rapid/key\", \"no-spec-decode\": true}\n"
               "  -h, --help                 this help\n"
               "\n"
               "Every option can also come from the environment: --foo-bar V as RAPID_FOO_BAR=V (an option\n"
               "without a value: 1/true/yes/on or 0/false/no/off). The command line wins over a variable, a\n"
               "variable over the config file (MODEL: the command line's over the file's).\n");
}

typedef struct serve_opts {
    const char *model, *chat_template;
    rp_server_params sp;
    rp_engine_params ep;
    const char *device; // --device; NULL: rp_backend_default_name()
    double kv_fraction; // --kv-memory as a fraction (0: a size or none)
    int threads;
    rp_dtype quant;
    bool no_disk_cache, mmap, f32_act;
    const char *api_key_file;
    int key_from, key_file_from; // where --api-key, --api-key-file came from (rp_cli_origin; -1: not given)
    char *key_buf;               // the key read from api_key_file
    rp_cli_env_argv env; // the config file's and RAPID_* variables' flags and the command line (optargs point into it)
    bool no_download, model_named;
    const char *hf_token;
    rp_hub_resolved where; // MODEL on disk (model points at where.path once resolved)
    rp_cli_model_defaults def; // an alias' parsers, for the flags not given
} serve_opts;

static void serve_opts_free(serve_opts *o)
{
    rp_cli_env_free(&o->env);
    rp_free(o->key_buf);
    o->key_buf = NULL;
}

// The API key in `path`: its first line, without the line end and trailing blanks. 0, or 1
// with the message printed (unreadable, or no key in it).
static int read_key_file(const char *path, serve_opts *o)
{
    size_t len = 0;
    char *text = NULL;
    if (rp_file_read(path, &text, &len)) {
        fprintf(stderr, "rapid serve: --api-key-file: %s\n", rp_error_message());
        return 1;
    }
    size_t n = strcspn(text, "\r\n");
    while (n > 0 && (text[n - 1] == ' ' || text[n - 1] == '\t'))
        n--;
    text[n] = 0;
    if (n == 0) {
        fprintf(stderr, "rapid serve: --api-key-file: %s holds no key (its first line is empty)\n", path);
        rp_free(text);
        return 1;
    }
    o->key_buf = text;
    o->sp.api_key = text;
    return 0;
}

// 0 parsed, 2 bad usage, -1 help printed.
static int parse_args(int argc, char **argv, serve_opts *o)
{
    enum {
        O_HOST = 1000,
        O_PORT,
        O_KEY,
        O_NAME,
        O_STRICT,
        O_CTX,
        O_KV,
        O_PAR,
        O_QUEUE,
        O_MAXREQ,
        O_TOOLP,
        O_REASP,
        O_QUANT,
        O_MMAP,
        O_F32_ACT,
        O_KVMEM,
        O_KVDTYPE,
        O_CHUNK,
        O_CDIR,
        O_CBUDGET,
        O_CSTATE,
        O_NODISK,
        O_NOPREFIX,
        O_NO_SPEC,
        O_SPEC_CONFIG,
        O_DRAFT,
        O_DEVICE,
        O_CHAT_TEMPLATE,
        O_MAXCONN,
        O_MAXCONN_CLIENT,
        O_TIMEOUT,
        O_KEYFILE,
        O_ORIGINS,
        O_NO_DOWNLOAD,
        O_HF_TOKEN,
        O_CONFIG
    };
    static const struct option longs[] = {
        {"host", required_argument, 0, O_HOST},
        {"port", required_argument, 0, O_PORT},
        {"api-key", required_argument, 0, O_KEY},
        {"api-key-file", required_argument, 0, O_KEYFILE},
        {"allowed-origins", required_argument, 0, O_ORIGINS},
        {"served-model-name", required_argument, 0, O_NAME},
        {"strict-model-name", no_argument, 0, O_STRICT},
        {"ctx", required_argument, 0, O_CTX},
        {"kv-tokens", required_argument, 0, O_KV},
        {"parallel", required_argument, 0, O_PAR},
        {"max-num-seqs", required_argument, 0, O_PAR},
        {"kv-memory", required_argument, 0, O_KVMEM},
        {"kv-dtype", required_argument, 0, O_KVDTYPE},
        {"prefill-chunk", required_argument, 0, O_CHUNK},
        {"cache-dir", required_argument, 0, O_CDIR},
        {"cache-disk-budget", required_argument, 0, O_CBUDGET},
        {"cache-state-memory", required_argument, 0, O_CSTATE},
        {"no-disk-cache", no_argument, 0, O_NODISK},
        {"no-prefix-cache", no_argument, 0, O_NOPREFIX},
        {"no-spec-decode", no_argument, 0, O_NO_SPEC},
        {"speculative-config", required_argument, 0, O_SPEC_CONFIG},
        {"draft-model", required_argument, 0, O_DRAFT},
        {"device", required_argument, 0, O_DEVICE},
        {"no-download", no_argument, 0, O_NO_DOWNLOAD},
        {"hf-token", required_argument, 0, O_HF_TOKEN},
        {"max-queue", required_argument, 0, O_QUEUE},
        {"max-request-bytes", required_argument, 0, O_MAXREQ},
        {"max-connections", required_argument, 0, O_MAXCONN},
        {"max-connections-per-client", required_argument, 0, O_MAXCONN_CLIENT},
        {"timeout", required_argument, 0, O_TIMEOUT},
        {"tool-parser", required_argument, 0, O_TOOLP},
        {"reasoning-parser", required_argument, 0, O_REASP},
        {"chat-template", required_argument, 0, O_CHAT_TEMPLATE},
        {"quant", required_argument, 0, O_QUANT},
        {"mmap", no_argument, 0, O_MMAP},
        {"f32-activations", no_argument, 0, O_F32_ACT},
        {"threads", required_argument, 0, 't'},
        {"quiet", no_argument, 0, 'q'},
        {"config", required_argument, 0, O_CONFIG},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    memset(o, 0, sizeof(*o));
    rp_server_params_default(&o->sp);
    rp_engine_params_default(&o->ep);
    o->quant = RP_DTYPE_F32;
    o->key_from = o->key_file_from = -1;
    static const char shorts[] = ":t:qh";
    int env_rc = rp_cli_env_args("serve", shorts, longs, argc, argv, &o->env);
    if (env_rc)
        return env_rc;
    argc = o->env.argc, argv = o->env.argv;
    bool no_spec = false;
    optind = 0; // glibc: a whole new scan (rp_cli_env_args ran one of its own)
    opterr = 0;
    int c, li = -1;
    while ((c = getopt_long(argc, argv, shorts, longs, &li)) != -1) {
        bool ok = true;
        long long v = 0;
        char optname[64];
        if (li >= 0)
            snprintf(optname, sizeof(optname), "--%s", longs[li].name);
        else
            snprintf(optname, sizeof(optname), "-%c", c);
        li = -1;
        switch (c) {
        case O_HOST: o->sp.host = optarg; ok = *optarg != 0; break;
        case O_PORT: ok = rp_cli_parse_long(optarg, 0, 65535, &v), o->sp.port = (int)v; break;
        case O_KEY:
            o->sp.api_key = optarg;
            o->key_from = (int)rp_cli_env_rank(&o->env, optind - 1);
            break;
        case O_KEYFILE:
            o->api_key_file = optarg;
            o->key_file_from = (int)rp_cli_env_rank(&o->env, optind - 1);
            ok = *optarg != 0;
            break;
        case O_ORIGINS: o->sp.allowed_origins = optarg; ok = *optarg != 0; break;
        case O_NAME: o->sp.served_model_name = optarg; ok = *optarg != 0; break;
        case O_STRICT: o->sp.strict_model_name = true; break;
        case O_CTX: ok = rp_cli_parse_long(optarg, 1, 1 << 24, &v), o->ep.n_ctx = (int)v; break;
        case O_KV: ok = rp_cli_parse_long(optarg, 1, 1 << 26, &v), o->ep.kv_tokens = (int)v; break;
        case O_PAR: ok = rp_cli_parse_long(optarg, 1, 4096, &v), o->ep.max_running = (int)v; break;
        case O_QUEUE: ok = rp_cli_parse_long(optarg, 1, 1 << 20, &v), o->ep.max_queue = (int)v; break;
        case O_KVMEM:
            ok = rp_cli_parse_kv_memory(optarg, &o->ep.kv_memory, &o->kv_fraction) && o->ep.kv_memory > 0;
            break;
        case O_KVDTYPE: ok = rp_cli_parse_kv_dtype(optarg, &o->ep.kv_f32); break;
        case O_CHUNK: ok = rp_cli_parse_long(optarg, 1, 1 << 24, &v), o->ep.prefill_chunk = (int)v; break;
        case O_CDIR: o->ep.cache_dir = optarg; ok = *optarg != 0; break;
        case O_CBUDGET: ok = rp_cli_parse_bytes(optarg, &o->ep.cache_disk_budget) && o->ep.cache_disk_budget > 0; break;
        case O_CSTATE: ok = rp_cli_parse_bytes(optarg, &o->ep.cache_state_mem) && o->ep.cache_state_mem > 0; break;
        case O_NODISK: o->no_disk_cache = true; break;
        case O_NOPREFIX: o->ep.no_prefix_cache = true; break;
        case O_NO_SPEC: no_spec = true; break;
        case O_SPEC_CONFIG:
            if (rp_cli_spec_config(optarg, &o->ep.spec)) {
                fprintf(stderr, "rapid serve: %s\n", rp_error_message());
                return 2;
            }
            break;
        case O_DRAFT: o->ep.spec.draft_path = optarg; break;
        case O_DEVICE: o->device = optarg; break;
        case O_NO_DOWNLOAD: o->no_download = true; break;
        case O_HF_TOKEN: o->hf_token = optarg; break;
        case O_MAXREQ:
            ok = rp_cli_parse_long(optarg, 1024, (long long)1 << 40, &v);
            o->sp.max_request_bytes = (size_t)v;
            break;
        case O_MAXCONN:
            ok = rp_cli_parse_long(optarg, 1, 1 << 20, &v), o->sp.max_connections = (int)v;
            break;
        case O_MAXCONN_CLIENT:
            ok = rp_cli_parse_long(optarg, 1, 1 << 20, &v), o->sp.max_connections_per_client = (int)v;
            break;
        case O_TIMEOUT: {
            char *end;
            errno = 0;
            double t = strtod(optarg, &end);
            ok = !errno && end != optarg && !*end && t > 0 && t <= 86400;
            o->sp.timeout_s = t;
            break;
        }
        case O_TOOLP: {
            rp_tool_format tf;
            ok = rp_tool_format_from_name(optarg, &tf) == RP_OK;
            o->sp.tool_parser = optarg;
            break;
        }
        case O_REASP: {
            rp_reasoning_format rf;
            ok = rp_reasoning_format_from_name(optarg, &rf) == RP_OK;
            o->sp.reasoning_parser = optarg;
            break;
        }
        case O_CHAT_TEMPLATE: o->chat_template = optarg; ok = *optarg != 0; break;
        case O_MMAP: o->mmap = true; break;
        case O_F32_ACT:
            o->f32_act = true;
            break;
        case O_QUANT: ok = rp_cli_parse_quant(optarg, &o->quant); break;
        case O_CONFIG: break; // read by rp_cli_env_args
        case 't': ok = rp_cli_parse_long(optarg, 1, 1024, &v), o->threads = (int)v; break;
        case 'q': o->sp.quiet = true; break;
        case 'h': serve_usage(stdout); return -1;
        case ':': return rp_cli_usage_error("serve", "option '%s' needs a value", argv[optind - 1]);
        default: return rp_cli_usage_error("serve", "unknown option '%s'", argv[optind - 1]);
        }
        if (!ok) {
            const char *from = rp_cli_env_origin(&o->env, optind - 1);
            return rp_cli_usage_error("serve", "invalid value '%s' for %s%s%s%s", optarg, optname, from ? " (from " : "",
                                      from ? from : "", from ? ")" : "");
        }
    }
    if (no_spec)
        o->ep.spec.method = RP_ENGINE_SPEC_OFF;
    if (optind < argc - 1)
        return rp_cli_usage_error("serve", "expected at most one MODEL");
    if (o->key_from == RP_CLI_FROM_ARGS && o->key_file_from == RP_CLI_FROM_ARGS)
        return rp_cli_usage_error("serve", "give --api-key or --api-key-file, not both");
    // A key given both ways: the one from higher up (flags > env > file) wins; from the same
    // variables or the same file, the key file.
    if (o->api_key_file && o->key_file_from >= o->key_from && read_key_file(o->api_key_file, o))
        return 1;
    o->model_named = optind < argc || o->env.model;
    o->model = optind < argc ? argv[optind] : o->env.model ? o->env.model : rp_cli_default_model();
    if (!o->model) {
        rp_cli_default_model_missing("serve");
        return 1;
    }
    return 0;
}

// A progress bar on stderr (a terminal) while the layers load.
static void load_progress(void *ctx, double fraction)
{
    const char *name = ctx;
    int width = 30, done = (int)(fraction * width + 0.5);
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < done ? '#' : '.';
    bar[width] = 0;
    fprintf(stderr, "\rrapid: loading %s [%s] %3d%%", name, bar, (int)(fraction * 100 + 0.5));
    fflush(stderr);
}

// The memory a KV cache may take (a GPU's free memory after the weights, else the host's
// available memory; 0: unknown), whether that is host memory, and a token's KV bytes.
static uint64_t kv_room(rp_model *m, const rp_engine_params *ep, bool *host, uint64_t *per_token)
{
    rp_backend_info bi;
    rp_backend_get_info(rp_model_backend(m), &bi);
    const rp_model_config *c = rp_model_get_config(m);
    *per_token = rp_kv_block_bytes(rp_model_kv_layers(m), c->n_kv_head, c->head_dim, 1, rp_engine_kv_type(ep));
    *host = bi.host_memory;
    return bi.host_memory ? rp_cli_mem_available() : bi.mem_free;
}

// Without --kv-memory or --kv-tokens the engine holds max(ctx, 4096) tokens;
// here that is capped at a quarter of the memory available (but never below one context).
// The KV pool's size when --kv-memory is a fraction or absent: the memory it may take is
// kv_room's.
static void default_kv_memory(rp_model *m, double fraction, rp_engine_params *ep)
{
    bool host;
    uint64_t per_token, avail = kv_room(m, ep, &host, &per_token);
    if (fraction > 0 && !host)
        ep->kv_memory = (uint64_t)(fraction * (double)avail);
    if (ep->kv_tokens || ep->kv_memory)
        return;
    const rp_model_config *c = rp_model_get_config(m);
    uint64_t ctx = ep->n_ctx > 0 && ep->n_ctx < c->max_ctx ? (uint64_t)ep->n_ctx : (uint64_t)c->max_ctx;
    uint64_t want = (ctx > 4096 ? ctx : 4096) * per_token, cap = avail / 4;
    if (cap && want > cap)
        ep->kv_memory = cap > ctx * per_token ? cap : ctx * per_token;
}

// An explicit KV cache (--kv-memory SIZE or --kv-tokens N) the memory cannot hold: false,
// with a message saying what is there (kv_room). Checked before anything is allocated: an
// allocation past the memory would otherwise be granted lazily and then page the machine
// to a halt.
static bool kv_fits(rp_model *m, const rp_engine_params *ep)
{
    bool host;
    uint64_t per_token, avail = kv_room(m, ep, &host, &per_token);
    uint64_t want = ep->kv_memory ? ep->kv_memory : (uint64_t)ep->kv_tokens * per_token;
    if (!avail || want <= avail)
        return true;
    fprintf(stderr,
            "rapid: a KV cache of %.1f GiB%s does not fit: %s %.1f GiB available; give at most that (or a fraction "
            "of it: --kv-memory 0.5)\n",
            want / 1073741824.0, ep->kv_memory ? "" : " (--kv-tokens)", host ? "the machine has" : "the GPU has",
            avail / 1073741824.0);
    return false;
}

static void print_memory(const rp_model *m, rp_engine *e)
{
    rp_engine_stats es;
    rp_engine_get_stats(e, &es);
    rp_log(RP_LOG_INFO, "rapid: %s | context %d tokens per request", rp_model_describe(m), es.n_ctx);
    rp_log(RP_LOG_INFO, "rapid: KV cache %.0f MiB of %s: %d tokens (%d blocks of %d)", es.kv_bytes / 1048576.0,
           rp_dtype_name(es.kv_type), es.kv_blocks * es.kv_block_tokens, es.kv_blocks,
           es.kv_block_tokens);
    char spec[128] = "";
    for (int k = 0, n = 0; k < RP_SPEC_N_METHODS; k++)
        if (es.spec_methods[k])
            snprintf(spec + strlen(spec), sizeof(spec) - strlen(spec), "%s%s", n++ ? ", " : "",
                     rp_spec_method_name((rp_spec_method)k));
    rp_log(RP_LOG_INFO, "rapid: speculative decoding %s%s", spec[0] ? "on: " : "off", spec);
    const char *dir = rp_engine_cache_dir(e);
    if (!es.prefix_cache)
        rp_log(RP_LOG_INFO, "rapid: prefix cache off");
    else if (!dir)
        rp_log(RP_LOG_INFO, "rapid: prefix cache in memory only");
    else
        rp_log(RP_LOG_INFO, "rapid: prefix cache on disk in %s (%llu blocks, %.1f of %.1f GiB)", dir,
               (unsigned long long)es.cache.disk_blocks, es.cache.disk_bytes / 1073741824.0,
               es.cache.disk_budget / 1073741824.0);
}

// Whether host is a loopback address (only this machine can connect; "": the default, 127.0.0.1).
static bool is_loopback(const char *host)
{
    return !*host || strncmp(host, "127.", 4) == 0 || strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0 ||
           strcmp(host, "[::1]") == 0;
}

int rp_cli_serve(int argc, char **argv)
{
    serve_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) {
        serve_opts_free(&o);
        return rc < 0 ? 0 : rc;
    }
    if ((!o.sp.api_key || !*o.sp.api_key) && !is_loopback(o.sp.host))
        fprintf(stderr, "rapid: warning: listening on %s without an API key: anyone who can reach this address can "
                        "use the model (--api-key-file FILE or RAPID_API_KEY)\n",
                o.sp.host);
    // The address first: a busy port or a bad host fails now, not after the model has loaded.
    int port = 0;
    if (rp_server_listen(o.sp.host, o.sp.port, &o.sp.listen_fd, &port)) {
        fprintf(stderr, "rapid: %s\n", rp_error_message());
        serve_opts_free(&o);
        return 1;
    }
    o.sp.has_listen_fd = true; // the server's once rp_server_run has it
    // MODEL by name: from the hub cache, or downloaded (after the port is ours, before the load).
    if (o.model_named) {
        if (rp_cli_resolve_model("serve", o.model, !o.no_download, o.hf_token, &o.where, &o.def)) {
            close(o.sp.listen_fd);
            serve_opts_free(&o);
            return 1;
        }
        // A model by name is served under that name, not its snapshot folder's (a commit).
        if (o.where.name.kind != RP_HUB_NAME_PATH && !o.sp.served_model_name)
            o.sp.served_model_name = o.where.name.text;
        o.model = o.where.path;
        if (!o.sp.tool_parser && o.def.tool_parser[0])
            o.sp.tool_parser = o.def.tool_parser;
        if (!o.sp.reasoning_parser && o.def.reasoning_parser[0])
            o.sp.reasoning_parser = o.def.reasoning_parser;
    }
    rp_model *model = NULL;
    rp_tokenizer *tok = NULL;
    rp_engine *engine = NULL;
    char *chat_src = NULL;
    rc = 1;
    bool tty = isatty(STDERR_FILENO);
    rp_backend *be = NULL, *draft_be = NULL;
    if (rp_cli_open_backend(o.device, o.threads, o.f32_act, &be) ||
        (o.ep.spec.draft_path && rp_cli_draft_backend(be, o.f32_act, &draft_be))) {
        fprintf(stderr, "rapid: %s\n", rp_error_message());
        goto done;
    }
    o.ep.spec.draft_backend = draft_be;
    rp_cli_print_backend(be);
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.quant = o.quant;
    mp.copy_limit = rp_cli_mem_available() / 2; // 0 (unknown): no limit
    mp.mmap_weights = o.mmap;
    if (tty) { // the bar replaces the loader's own lines
        mp.quiet = true;
        mp.progress = load_progress;
        mp.progress_ctx = (void *)o.model;
        load_progress((void *)o.model, 0);
    }
    double t0 = rp_time_s();
    rp_status st = rp_model_load(o.model, be, &mp, &model);
    if (tty) {
        fprintf(stderr, "\r\033[K");
        if (!st)
            fprintf(stderr, "rapid: loaded %s in %.1fs\n", o.model, rp_time_s() - t0);
    }
    if (st) {
        fprintf(stderr, "rapid: %s\n", rp_error_message());
        goto done;
    }
    if (rp_tok_load_file(o.model, &tok)) {
        fprintf(stderr, "rapid: tokenizer: %s\n", rp_error_message());
        goto done;
    }
    char what[512];
    if (rp_cli_chat_template(o.chat_template, tok, "serve", o.model, &chat_src, what, sizeof(what))) {
        fprintf(stderr, "rapid: %s\n", rp_error_message());
        goto done;
    }
    o.sp.chat_template = chat_src;
    default_kv_memory(model, o.kv_fraction, &o.ep);
    if (!kv_fits(model, &o.ep))
        goto done;
    int max_ctx = rp_model_get_config(model)->max_ctx;
    if (o.ep.n_ctx > max_ctx)
        fprintf(stderr, "rapid: --ctx %d is past the model's context (%d tokens): requests get %d\n", o.ep.n_ctx,
                max_ctx, max_ctx);
    char *default_dir = NULL;
    if (o.no_disk_cache || o.ep.no_prefix_cache)
        o.ep.cache_dir = NULL;
    else if (!o.ep.cache_dir)
        o.ep.cache_dir = default_dir = rp_cache_default_dir();
    st = rp_engine_create(model, tok, &o.ep, &engine); // an unusable cache folder: memory only, with a warning
    rp_free(default_dir);
    if (st) {
        fprintf(stderr, "rapid: engine: %s\n", rp_error_message());
        goto done;
    }
    print_memory(model, engine);
    rp_tool_format tf;
    rp_reasoning_format rf;
    rp_cli_chat_formats(chat_src ? chat_src : rp_tok_chat_template(tok), rp_model_get_config(model)->arch_name,
                        o.sp.tool_parser, o.sp.reasoning_parser, &tf, &rf);
    rp_log(RP_LOG_INFO, "rapid: chat template %s | tool calls: %s, reasoning: %s", what, rp_tool_format_name(tf),
           rp_reasoning_format_name(rf));
    rp_server_params sp = o.sp; // the listening socket goes with it, whatever happens
    o.sp.has_listen_fd = false;
    if (rp_server_run(engine, model, tok, &sp)) {
        fprintf(stderr, "rapid: %s\n", rp_error_message());
        goto done;
    }
    rc = 0;
done:
    if (o.sp.has_listen_fd)
        close(o.sp.listen_fd);
    rp_engine_destroy(engine);
    rp_free(chat_src);
    rp_tok_destroy(tok);
    rp_model_destroy(model);
    rp_backend_destroy(draft_be);
    rp_backend_destroy(be);
    serve_opts_free(&o);
    return rc;
}
