/*
 * run.c - `rapid run`: load a model, generate from one prompt, print as it goes.
 *
 * With no MODEL the bundled default model is used. The prompt is sent as one
 * user turn (plus --system) rendered by the chat template (the model's, or
 * --chat-template's; a model without one gets the built-in ChatML, with a
 * warning), with thinking off unless --think; --raw sends the text as it is,
 * with the special tokens the tokenizer adds. Generation runs on the engine (one
 * request: the same loop as the server's), until -n tokens, the context or an
 * end-of-generation token; the tokens are printed as they are read back,
 * through the incremental detokenizer, so the output is always valid UTF-8.
 * One stats line goes to stderr at the end.
 */
#include "cli.h"

#include "../chat/chat.h"
#include "../engine/engine.h"
#include "../model/model.h"
#include "../sample/sample.h"
#include "../tokenizer/tokenizer.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

static void run_usage(FILE *f)
{
    fprintf(f, "usage: rapid run [MODEL] -p PROMPT [options]\n"
               "\n"
               "MODEL is a Hugging Face model folder (config.json, *.safetensors, tokenizer.json), a .gguf file,\n"
               "a repo id (org/name[@REV], org/name-GGUF:Q4_K_M) or an alias (`rapid models --catalog`): a name\n"
               "is found in the hub cache, or downloaded into it (see `rapid pull --help`); without it, the\n"
               "bundled demonstration model rapid-tiny (looked for in $RAPID_MODELS, next to\n"
               "the binary, under the install prefix, then in the source tree it was built from) is used. The\n"
               "prompt goes in as a user message in the model's chat format (its chat template; a model without\n"
               "one gets the built-in ChatML template, with a warning), unless --raw.\n"
               "\n"
               "options:\n"
               "  -p, --prompt TEXT       the prompt (required, or --file)\n"
               "  -f, --file PATH         read the prompt from a file\n"
               "      --system TEXT       a system message (chat format)\n"
               "      --think             let the model think first (chat templates with enable_thinking)\n"
               "      --raw               send the prompt as it is, without the chat template\n"
               "      --chat-template FILE|NAME  the chat template: a Jinja file, or a built-in: chatml, llama3,\n"
               "                          mistral (default: the model's own)\n"
               "      --tools FILE        tools the model may call (a JSON array, OpenAI function format)\n"
               "      --tool-parser NAME  tool-call format (default: from the chat template): none, hermes,\n"
               "                          qwen3_coder, llama3_json, mistral, deepseek_v3\n"
               "      --reasoning-parser NAME  reasoning format (default: from the template): none, think\n"
               "                          (reasoning goes to stderr; each tool call is printed as a JSON line)\n"
               "  -n, --n-predict N       tokens to generate (default 128)\n"
               "      --temp T            temperature, 0 = greedy (default 0)\n"
               "      --top-k K           keep the K most likely tokens (default 0 = off)\n"
               "      --top-p P           nucleus sampling (default 1 = off)\n"
               "      --min-p P           drop tokens below P x the top probability (default 0 = off)\n"
               "      --repeat-penalty R  repetition penalty (default 1 = off)\n"
               "      --presence-penalty X, --frequency-penalty X   OpenAI-style penalties (default 0)\n"
               "      --seed S            random seed for sampling (default 0)\n"
               "      --quant q8|q4|q4k   quantize f16/bf16/f32 weights at load (Q8_0, Q4_0 or Q4_K)\n"
               "      --f32-activations   bf16 weights multiply float32 activations (the float32 reference's\n"
               "                          numbers; on AMD CPUs with AVX512_BF16 and Intel CPUs with AMX the\n"
               "                          default rounds activations to bf16: faster prefill and batched steps;\n"
               "                          with AMX one-token steps are slower)\n"
               "      --mmap              keep float weights in the file's mapping: no copy at load, less\n"
               "                          memory, decode ~20%% slower (default: weights up to half the\n"
               "                          available memory are copied to 2 MiB pages)\n"
               "  -t, --threads N         CPU threads (default: all cores)\n"
               "      --device NAME       where the model runs: cpu, or cuda[:N] in a build with CUDA\n"
               "                          (default: $RAPID_DEVICE, else the GPU when one answers, else cpu)\n"
               "      --ctx N             context length (default: prompt + N, at most the model's)\n"
               "      --kv-dtype f16|f32  how K and V are cached (default f16; f32 keeps them exact)\n"
               "      --ignore-eos        keep generating past end-of-generation tokens\n"
               "      --no-spec-decode    no speculative decoding (it is on by default: prompt lookup, the\n"
               "                          model's MTP layer when it has one, the draft model when given)\n"
               "      --speculative-config JSON  {\"method\": \"auto|ngram|mtp|draft\",\n"
               "                          \"num_speculative_tokens\": K, \"adaptive\": true|false,\n"
               "                          \"prompt_lookup_min\": N, \"prompt_lookup_max\": N}\n"
               "      --draft-model PATH  a smaller model with the same tokenizer that drafts tokens\n"
               "      --cache-dir DIR     keep the prompt's KV in DIR/<model fingerprint>/ at exit and reuse it\n"
               "                          next time (the prefix cache's disk tier; off by default for run)\n"
               "      --no-download       a MODEL by name must be in the hub cache already\n"
               "      --hf-token TOKEN    for downloading gated or private repos (default $HF_TOKEN)\n"
               "  -h, --help              this help\n");
}

typedef struct run_opts {
    const char *model, *prompt, *file, *system, *tools_file, *chat_template;
    const char *tool_parser, *reasoning_parser; // NULL: chosen from the template
    const char *cache_dir;
    const char *device; // --device; NULL: rp_backend_default_name()
    int n_predict, threads, ctx;
    bool ignore_eos, raw, think, mmap, kv_f32, f32_act;
    rp_dtype quant;
    rp_sample_params sp;
    rp_engine_spec_params spec;
    bool no_download;
    const char *hf_token;
    rp_hub_resolved where; // MODEL on disk (model points at where.path)
    rp_cli_model_defaults def; // an alias' parsers, for the flags not given
} run_opts;

// Returns 0 when parsed, 2 on bad usage, -1 when help was printed.
static int parse_args(int argc, char **argv, run_opts *o)
{
    enum {
        O_TEMP = 1000,
        O_TOPK,
        O_TOPP,
        O_MINP,
        O_REP,
        O_PRES,
        O_FREQ,
        O_SEED,
        O_QUANT,
        O_MMAP,
        O_F32_ACT,
        O_CTX,
        O_IGNORE,
        O_SYSTEM,
        O_THINK,
        O_RAW,
        O_TOOLS,
        O_TOOL_PARSER,
        O_REASONING_PARSER,
        O_NO_SPEC,
        O_SPEC_CONFIG,
        O_DRAFT,
        O_DEVICE,
        O_CACHE_DIR,
        O_KV_DTYPE,
        O_CHAT_TEMPLATE,
        O_NO_DOWNLOAD,
        O_HF_TOKEN
    };
    static const struct option longs[] = {
        {"prompt", required_argument, 0, 'p'},
        {"file", required_argument, 0, 'f'},
        {"n-predict", required_argument, 0, 'n'},
        {"threads", required_argument, 0, 't'},
        {"temp", required_argument, 0, O_TEMP},
        {"top-k", required_argument, 0, O_TOPK},
        {"top-p", required_argument, 0, O_TOPP},
        {"min-p", required_argument, 0, O_MINP},
        {"repeat-penalty", required_argument, 0, O_REP},
        {"presence-penalty", required_argument, 0, O_PRES},
        {"frequency-penalty", required_argument, 0, O_FREQ},
        {"seed", required_argument, 0, O_SEED},
        {"quant", required_argument, 0, O_QUANT},
        {"mmap", no_argument, 0, O_MMAP},
        {"f32-activations", no_argument, 0, O_F32_ACT},
        {"ctx", required_argument, 0, O_CTX},
        {"ignore-eos", no_argument, 0, O_IGNORE},
        {"system", required_argument, 0, O_SYSTEM},
        {"think", no_argument, 0, O_THINK},
        {"raw", no_argument, 0, O_RAW},
        {"chat-template", required_argument, 0, O_CHAT_TEMPLATE},
        {"tools", required_argument, 0, O_TOOLS},
        {"tool-parser", required_argument, 0, O_TOOL_PARSER},
        {"reasoning-parser", required_argument, 0, O_REASONING_PARSER},
        {"no-spec-decode", no_argument, 0, O_NO_SPEC},
        {"speculative-config", required_argument, 0, O_SPEC_CONFIG},
        {"draft-model", required_argument, 0, O_DRAFT},
        {"device", required_argument, 0, O_DEVICE},
        {"cache-dir", required_argument, 0, O_CACHE_DIR},
        {"kv-dtype", required_argument, 0, O_KV_DTYPE},
        {"no-download", no_argument, 0, O_NO_DOWNLOAD},
        {"hf-token", required_argument, 0, O_HF_TOKEN},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    memset(o, 0, sizeof(*o));
    o->n_predict = 128;
    o->quant = RP_DTYPE_F32;
    rp_sample_params_default(&o->sp);
    o->sp.temperature = 0; // rapid run is greedy unless asked
    rp_engine_params ep;
    rp_engine_params_default(&ep);
    o->spec = ep.spec;
    bool no_spec = false;
    optind = 1;
    opterr = 0;
    int c, li = -1;
    while ((c = getopt_long(argc, argv, ":p:f:n:t:h", longs, &li)) != -1) {
        bool ok = true;
        char optname[64];
        if (li >= 0)
            snprintf(optname, sizeof(optname), "--%s", longs[li].name);
        else
            snprintf(optname, sizeof(optname), "-%c", c);
        li = -1;
        switch (c) {
        case 'p': o->prompt = optarg; break;
        case 'f': o->file = optarg; break;
        case 'n': ok = rp_cli_parse_int(optarg, 0, 1 << 24, &o->n_predict); break;
        case 't': ok = rp_cli_parse_int(optarg, 1, 1024, &o->threads); break;
        case O_TEMP: ok = rp_cli_parse_float(optarg, &o->sp.temperature); break;
        case O_TOPK: ok = rp_cli_parse_int(optarg, 0, 1 << 24, &o->sp.top_k); break;
        case O_TOPP: ok = rp_cli_parse_float(optarg, &o->sp.top_p); break;
        case O_MINP: ok = rp_cli_parse_float(optarg, &o->sp.min_p); break;
        case O_REP: ok = rp_cli_parse_float(optarg, &o->sp.repetition_penalty); break;
        case O_PRES: ok = rp_cli_parse_float(optarg, &o->sp.presence_penalty); break;
        case O_FREQ: ok = rp_cli_parse_float(optarg, &o->sp.frequency_penalty); break;
        case O_SEED: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            ok = !errno && end != optarg && !*end && optarg[0] != '-';
            o->sp.seed = v;
            break;
        }
        case O_MMAP: o->mmap = true; break;
        case O_F32_ACT:
            o->f32_act = true;
            break;
        case O_QUANT: ok = rp_cli_parse_quant(optarg, &o->quant); break;
        case O_KV_DTYPE: ok = rp_cli_parse_kv_dtype(optarg, &o->kv_f32); break;
        case O_CTX: ok = rp_cli_parse_int(optarg, 1, 1 << 24, &o->ctx); break;
        case O_IGNORE: o->ignore_eos = true; break;
        case O_SYSTEM: o->system = optarg; break;
        case O_THINK: o->think = true; break;
        case O_RAW: o->raw = true; break;
        case O_CHAT_TEMPLATE: o->chat_template = optarg; ok = *optarg != 0; break;
        case O_TOOLS: o->tools_file = optarg; break;
        case O_CACHE_DIR: o->cache_dir = optarg; ok = *optarg != 0; break;
        case O_TOOL_PARSER: {
            rp_tool_format tf;
            ok = rp_tool_format_from_name(optarg, &tf) == RP_OK;
            o->tool_parser = optarg;
            break;
        }
        case O_REASONING_PARSER: {
            rp_reasoning_format rf;
            ok = rp_reasoning_format_from_name(optarg, &rf) == RP_OK;
            o->reasoning_parser = optarg;
            break;
        }
        case O_NO_SPEC: no_spec = true; break;
        case O_SPEC_CONFIG:
            if (rp_cli_spec_config(optarg, &o->spec)) {
                fprintf(stderr, "rapid run: %s\n", rp_error_message());
                return 2;
            }
            break;
        case O_DRAFT: o->spec.draft_path = optarg; break;
        case O_DEVICE: o->device = optarg; break;
        case O_NO_DOWNLOAD: o->no_download = true; break;
        case O_HF_TOKEN: o->hf_token = optarg; break;
        case 'h': run_usage(stdout); return -1;
        case ':': return rp_cli_usage_error("run", "option '%s' needs a value", argv[optind - 1]);
        default: return rp_cli_usage_error("run", "unknown option '%s'", argv[optind - 1]);
        }
        if (!ok)
            return rp_cli_usage_error("run", "invalid value '%s' for %s", optarg, optname);
    }
    const char *bad = NULL;
    if (optind < argc - 1)
        bad = "expected at most one MODEL";
    else if ((!o->prompt && !o->file) || (o->prompt && o->file))
        bad = "give the prompt with -p or --file (one of them)";
    else if (o->raw && o->chat_template)
        bad = "--raw uses no chat template: give --raw or --chat-template";
    if (bad)
        return rp_cli_usage_error("run", "%s", bad);
    if (no_spec)
        o->spec.method = RP_ENGINE_SPEC_OFF;
    if (rp_sample_params_validate(&o->sp) != RP_OK)
        return rp_cli_usage_error("run", "%s", rp_error_message());
    o->model = optind < argc ? argv[optind] : rp_cli_default_model();
    if (!o->model) {
        rp_cli_default_model_missing("run");
        return 1;
    }
    if (optind < argc) {
        if (rp_cli_resolve_model("run", o->model, !o->no_download, o->hf_token, &o->where, &o->def))
            return 1;
        o->model = o->where.path;
        if (!o->tool_parser && o->def.tool_parser[0])
            o->tool_parser = o->def.tool_parser;
        if (!o->reasoning_parser && o->def.reasoning_parser[0])
            o->reasoning_parser = o->def.reasoning_parser;
    }
    return 0;
}

static int fail(const char *what)
{
    fprintf(stderr, "rapid: %s%s%s\n", what ? what : "", what ? ": " : "", rp_error_message());
    return 1;
}

// Writes text and flushes, so generation shows as it happens.
static void emit(const char *text, size_t len)
{
    if (len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
}

// Renders the prompt as one user turn (after an optional system turn, with the
// tools offered) with the chat template src and tokenizes it (the template writes
// the special tokens itself). *rendered (rp_free it) is the prompt text.
static rp_status chat_prompt(const rp_tokenizer *tok, const run_opts *o, const char *src, const char *prompt,
                             size_t len, const json_t *tools, int32_t **ids, size_t *n, char **rendered)
{
    *ids = NULL;
    *rendered = NULL;
    rp_chat_template *tpl = NULL;
    json_t *msgs = json_array(), *kw = json_object();
    size_t text_len = 0;
    rp_status st = rp_chat_template_create(src, strlen(src), &tpl);
    if (!st && (!msgs || !kw))
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
    if (!st && o->system)
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", o->system));
    if (!st) {
        json_array_append_new(msgs, json_pack("{s:s,s:s#}", "role", "user", "content", prompt, (int)len));
        json_object_set_new(kw, "enable_thinking", json_boolean(o->think));
        if (json_array_size(msgs) != (o->system ? 2u : 1u))
            st = RP_ERR(RP_ERR_INVALID, "the prompt is not valid UTF-8");
    }
    if (!st) {
        rp_chat_render_params rp = {msgs, tools, true, kw, rp_tok_bos_text(tok), rp_tok_eos_text(tok)};
        st = rp_chat_template_render(tpl, &rp, rendered, &text_len);
    }
    if (!st)
        st = rp_tok_encode(tok, *rendered, text_len, false, ids, n);
    json_decref(msgs);
    json_decref(kw);
    rp_chat_template_destroy(tpl);
    return st;
}

// The output parser for a chat reply: formats from the flags or the template text src.
static rp_status make_parser(const char *src, const rp_model_config *cfg, const run_opts *o, const char *rendered,
                             const json_t *tools, rp_parser **out)
{
    rp_parser_config pc = {0};
    rp_cli_chat_formats(src, cfg->arch_name, o->tool_parser, o->reasoning_parser, &pc.tools, &pc.reasoning);
    pc.think_open = rp_parse_prompt_opens_think(rendered, strlen(rendered));
    char *tj = tools ? json_dumps(tools, JSON_COMPACT) : NULL;
    pc.tools_json = tj;
    pc.tools_json_len = tj ? strlen(tj) : 0;
    pc.seed = o->sp.seed;
    rp_status st = rp_parser_create(&pc, out);
    free(tj);
    return st;
}

// Prints parser events: content to stdout, reasoning to stderr, each finished
// tool call as one JSON line {"tool_call": {"id", "name", "arguments"}} on stdout.
typedef struct call_buf {
    char id[64], name[256];
    char *args;
    size_t len, cap;
    bool in_reasoning; // reasoning was printed last: end its line before other output
} call_buf;

static void show_events(const rp_parse_event *ev, size_t n, call_buf *cb)
{
    for (size_t i = 0; i < n; i++) {
        const rp_parse_event *e = &ev[i];
        if (cb->in_reasoning && e->type != RP_PARSE_EVENT_REASONING) {
            fputs("\n", stderr);
            cb->in_reasoning = false;
        }
        switch (e->type) {
        case RP_PARSE_EVENT_CONTENT: emit(e->text, e->len); break;
        case RP_PARSE_EVENT_REASONING:
            fwrite(e->text, 1, e->len, stderr);
            cb->in_reasoning = true;
            break;
        case RP_PARSE_EVENT_TOOL_START:
            snprintf(cb->id, sizeof(cb->id), "%s", e->id);
            snprintf(cb->name, sizeof(cb->name), "%s", e->name);
            cb->len = 0;
            break;
        case RP_PARSE_EVENT_TOOL_ARGS:
            if (cb->len + e->len + 1 > cb->cap) {
                size_t cap = (cb->len + e->len + 1) * 2;
                char *na = rp_realloc(cb->args, cap);
                if (!na)
                    break;
                cb->args = na;
                cb->cap = cap;
            }
            memcpy(cb->args + cb->len, e->text, e->len);
            cb->len += e->len;
            break;
        case RP_PARSE_EVENT_TOOL_END: {
            json_t *call = json_pack("{s:{s:s,s:s,s:s#}}", "tool_call", "id", cb->id, "name", cb->name,
                                     "arguments", cb->args ? cb->args : "", (int)cb->len);
            char *line = call ? json_dumps(call, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
            if (line) {
                printf("%s\n", line);
                fflush(stdout);
            }
            free(line);
            json_decref(call);
            break;
        }
        case RP_PARSE_EVENT_TOOL_ABORT: cb->len = 0; break;
        }
    }
}

// Prints one generated token's text (through the output parser when there is one).
static rp_status show_token(rp_detok *dt, rp_parser *parser, call_buf *cb, int32_t id)
{
    const char *text;
    size_t len;
    rp_status st = rp_detok_push(dt, id, &text, &len);
    if (st)
        return st;
    if (!parser) {
        emit(text, len);
        return RP_OK;
    }
    const rp_parse_event *ev;
    size_t n_ev;
    if ((st = rp_parser_push(parser, text, len, &ev, &n_ev)))
        return st;
    show_events(ev, n_ev, cb);
    return RP_OK;
}

int rp_cli_run(int argc, char **argv)
{
    run_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;

    rp_backend *be = NULL, *draft_be = NULL;
    rp_model *model = NULL;
    rp_tokenizer *tok = NULL;
    rp_engine *eng = NULL;
    rp_gen *gen = NULL;
    int32_t *ids = NULL;
    char *prompt_buf = NULL;
    rp_detok dt;
    bool dt_live = false;
    json_t *tools = NULL;
    char *rendered = NULL;
    rp_parser *parser = NULL;
    call_buf cb = {0};
    char *chat_src = NULL;
    rc = 1;

    const char *prompt = o.prompt;
    size_t prompt_len = prompt ? strlen(prompt) : 0;
    if (o.file) {
        if (rp_file_read(o.file, &prompt_buf, &prompt_len)) {
            fail(NULL);
            goto done;
        }
        prompt = prompt_buf;
    }
    if (rp_cli_open_backend(o.device, o.threads, o.f32_act, &be) ||
        (o.spec.draft_path && rp_cli_draft_backend(be, o.f32_act, &draft_be))) {
        fail(NULL);
        goto done;
    }
    o.spec.draft_backend = draft_be;
    rp_model_params mp;
    rp_model_params_default(&mp);
    mp.quant = o.quant;
    mp.copy_limit = rp_cli_mem_available() / 2; // 0 (unknown): no limit
    mp.mmap_weights = o.mmap;
    if (rp_model_load(o.model, be, &mp, &model)) {
        fail(NULL);
        goto done;
    }
    const rp_model_config *cfg = rp_model_get_config(model);
    if (rp_tok_load_file(o.model, &tok)) {
        fail("tokenizer");
        goto done;
    }
    size_t n_prompt;
    if (o.tools_file) {
        json_error_t jerr;
        tools = json_load_file(o.tools_file, 0, &jerr);
        if (!json_is_array(tools)) {
            fprintf(stderr, "rapid: %s:%d: %s\n", o.tools_file, jerr.line,
                    tools ? "the tools must be a JSON array" : jerr.text);
            goto done;
        }
    }
    const char *tmpl = NULL;
    if (!o.raw) {
        char what[512];
        if (rp_cli_chat_template(o.chat_template, tok, "run", o.model, &chat_src, what, sizeof(what))) {
            fail(NULL);
            goto done;
        }
        tmpl = chat_src ? chat_src : rp_tok_chat_template(tok);
    }
    if (tmpl && chat_prompt(tok, &o, tmpl, prompt, prompt_len, tools, &ids, &n_prompt, &rendered)) {
        fail("chat template");
        goto done;
    }
    if (rendered && make_parser(tmpl, cfg, &o, rendered, tools, &parser)) {
        fail("output parser");
        goto done;
    }
    if (!ids && rp_tok_encode(tok, prompt, prompt_len, true, &ids, &n_prompt)) {
        fail("tokenizing the prompt");
        goto done;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "rapid: the prompt is empty (no tokens)\n");
        goto done;
    }
    int ctx = o.ctx ? o.ctx : (int)n_prompt + o.n_predict;
    if (ctx > cfg->max_ctx)
        ctx = cfg->max_ctx;
    if ((int)n_prompt >= ctx) {
        fprintf(stderr, "rapid: the prompt (%zu tokens) does not fit the context (%d tokens)\n", n_prompt, ctx);
        goto done;
    }
    // One request: a KV pool of exactly the context, as before the engine existed.
    rp_engine_params ep;
    rp_engine_params_default(&ep);
    ep.n_ctx = ctx;
    ep.kv_tokens = ctx;
    ep.max_running = 1;
    ep.max_queue = 1;
    ep.spec = o.spec;
    ep.cache_dir = o.cache_dir;
    ep.kv_f32 = o.kv_f32;
    rp_gen_params gp;
    rp_gen_params_default(&gp);
    gp.prompt = ids;
    gp.n_prompt = (int)n_prompt;
    gp.max_tokens = o.n_predict;
    gp.sample = o.sp;
    gp.ignore_eos = o.ignore_eos;
    if (rp_engine_create(model, tok, &ep, &eng)) {
        fail(NULL);
        goto done;
    }
    rp_detok_init(&dt, tok);
    dt_live = true;
    rp_status st = RP_OK;
    rp_gen_finish fin = RP_GEN_LENGTH;
    // -n 0 generates nothing (the engine's max_tokens 0 would mean "until the context is full").
    if (o.n_predict > 0 && (st = rp_engine_submit(eng, &gp, &gen))) {
        fail(NULL);
        goto done;
    }
    while (gen) {
        rp_gen_token toks[64];
        int n = 0;
        fin = rp_gen_read(gen, -1, toks, 64, &n);
        for (int i = 0; i < n && !st; i++)
            st = show_token(&dt, parser, &cb, toks[i].id);
        if (st || fin != RP_GEN_RUNNING)
            break;
    }
    if (!st && fin != RP_GEN_ERROR) {
        const char *text;
        size_t len;
        const rp_parse_event *ev;
        size_t n_ev;
        if (!rp_detok_flush(&dt, &text, &len)) {
            if (!parser)
                emit(text, len);
            else if (!rp_parser_push(parser, text, len, &ev, &n_ev))
                show_events(ev, n_ev, &cb);
        }
        if (parser && !rp_parser_finish(parser, &ev, &n_ev))
            show_events(ev, n_ev, &cb);
    }
    printf("\n");
    fflush(stdout); // before the stats line on stderr
    if (st) {
        fail("generation");
        goto done;
    }
    if (fin == RP_GEN_ERROR) {
        fprintf(stderr, "rapid: generation: %s\n", rp_gen_error(gen));
        goto done;
    }
    rp_gen_stats gs = {0};
    if (gen)
        rp_gen_get_stats(gen, &gs);
    rp_engine_stats es;
    rp_engine_get_stats(eng, &es);
    char spec[256];
    rp_cli_spec_summary(&es, &gs, spec, sizeof(spec));
    // Prefill: from admission to the first token, counting the tokens run, not
    // those found in the prefix cache. Decode speed: the tokens after the first
    // over the time after it (a step may make several with speculation).
    double pre_s = gs.t_first - gs.t_admit, dec_s = gs.t_last - gs.t_first;
    int n_gen = gs.n_generated;
    char cached[48] = "", where[64];
    if (gs.n_cached > 0)
        snprintf(cached, sizeof(cached), " (%d cached)", gs.n_cached);
    rp_backend_info bi;
    rp_backend_get_info(be, &bi);
    if (bi.host_memory)
        snprintf(where, sizeof(where), "%d threads", rp_backend_threads(be));
    else
        snprintf(where, sizeof(where), "on %s", bi.name);
    fprintf(stderr,
            "prompt: %zu tokens%s, %.1f tok/s, first token in %.0f ms | generated: %d tokens, %.1f tok/s | %s | %s, "
            "%s\n",
            n_prompt, cached, gen ? (n_prompt - (size_t)gs.n_cached) / (pre_s > 0 ? pre_s : 1e-9) : 0.0,
            gen && gs.t_first > 0 ? (gs.t_first - gs.t_submit) * 1e3 : 0.0, n_gen,
            n_gen > 1 && dec_s > 0 ? (n_gen - 1) / dec_s : 0.0, spec, rp_model_describe(model), where);
    rc = 0;
done:
    if (dt_live)
        rp_detok_deinit(&dt);
    rp_gen_release(gen);
    rp_engine_destroy(eng);
    rp_parser_destroy(parser);
    rp_free(cb.args);
    rp_free(rendered);
    rp_free(chat_src);
    json_decref(tools);
    rp_free(ids);
    rp_free(prompt_buf);
    rp_tok_destroy(tok);
    rp_model_destroy(model);
    rp_backend_destroy(draft_be);
    rp_backend_destroy(be);
    return rc;
}
