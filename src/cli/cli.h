/*
 * cli.h - the `rapid` command's subcommands. Each takes the arguments after its
 * name (argv[0] is the subcommand) and returns the process exit status:
 * 0 success, 1 failure (a message was printed), 2 bad usage (one line saying what is
 * wrong and where the help is: rp_cli_usage_error).
 */
#ifndef RP_CLI_H
#define RP_CLI_H

#include "../chat/chat.h"
#include "../engine/engine.h"
#include "../hub/hub.h"
#include "../tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int rp_cli_run(int argc, char **argv);
int rp_cli_serve(int argc, char **argv);
int rp_cli_tokenize(int argc, char **argv);
int rp_cli_template(int argc, char **argv);
int rp_cli_bench(int argc, char **argv);
int rp_cli_pull(int argc, char **argv);
int rp_cli_models(int argc, char **argv);
int rp_cli_rm(int argc, char **argv);
int rp_cli_ps(int argc, char **argv);

// default_model.c
// The bundled default model's folder (models/rapid-tiny), or NULL when it cannot be found
// ($RAPID_MODELS, next to the binary, the install prefix, the source tree it was built from).
const char *rp_cli_default_model(void);
// After rp_cli_default_model returned NULL: prints on stderr that `rapid CMD` has no
// model, every place looked in, and how to set RAPID_MODELS.
void rp_cli_default_model_missing(const char *cmd);
// The shipped catalog of aliases: $RAPID_CATALOG, else models/catalog.json in the places the
// bundled model is looked for; NULL when none has it.
const char *rp_cli_catalog_path(void);

// model_name.c: MODEL by name (src/hub)
// The catalog (shipped, then the user's ~/.config/rapid/models.json over it); NULL after a
// message on stderr naming `rapid CMD` and the bad file.
rp_hub_catalog *rp_cli_catalog(const char *cmd);
// The hub cache folder into buf; false after a message on stderr.
bool rp_cli_cache_dir(const char *cmd, char *buf, size_t cap);
// What an alias's catalog entry sets for run and serve when their flags do not ("": nothing).
typedef struct rp_cli_model_defaults {
    char tool_parser[32];
    char reasoning_parser[32];
} rp_cli_model_defaults;
// Resolves MODEL for `rapid CMD` into *out (out->path: what the loaders take): a path as
// given, else a repo id or alias from the hub cache; missing there and download set (and
// HF_HUB_OFFLINE unset), pulled with token (NULL: $HF_TOKEN). def (may be NULL) gets the
// alias' parsers (names the chat module knows; others are left out with a warning).
// 0, or 1 after printing what was tried and the next step on stderr.
int rp_cli_resolve_model(const char *cmd, const char *model, bool download, const char *token, rp_hub_resolved *out,
                         rp_cli_model_defaults *def);
// rp_hub_pull's parameters for the CLI: the cache, token, a progress bar when stderr is a terminal.
void rp_cli_pull_params(const char *cache, const char *token, rp_hub_pull_params *p);

// sizes.c: the flags' values, and what a bad one prints
// Bad usage of `rapid CMD` (cmd NULL: of `rapid` itself): one line on stderr, "rapid CMD:
// <fmt ...> (see `rapid CMD --help`)". Returns 2, the bad-usage status.
int rp_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// A whole decimal number in [lo, hi] (the whole string, no junk after it); false otherwise.
bool rp_cli_parse_long(const char *s, long long lo, long long hi, long long *out);
bool rp_cli_parse_int(const char *s, long lo, long hi, int *out);
// A float (the whole string); false otherwise.
bool rp_cli_parse_float(const char *s, float *out);
// A byte size: a number with an optional K, M, G or T (powers of 1024), then
// an optional "iB" or "B" ("512M", "4GiB", "1.5G", "1000"). False when malformed.
bool rp_cli_parse_bytes(const char *s, uint64_t *out);
// --kv-memory: a size as rp_cli_parse_bytes, or a fraction of the memory
// available now ("0.25", "25%"; in (0, 1], written with a '.' or a '%'), which is also
// returned in *fraction (0 for a size): on a GPU the caller applies it to the device's
// free memory instead.
bool rp_cli_parse_kv_memory(const char *s, uint64_t *out, double *fraction);
// MemAvailable from /proc/meminfo in bytes; 0 when unknown.
uint64_t rp_cli_mem_available(void);
// --kv-dtype: "f16"/"float16" (*f32 = false) or "f32"/"float32" (*f32 = true). False
// for anything else.
bool rp_cli_parse_kv_dtype(const char *s, bool *f32);
// --quant: "q8"/"q8_0", "q4"/"q4_0" or "q4k"/"q4_K" into *out. False for anything else.
bool rp_cli_parse_quant(const char *s, rp_dtype *out);

// env_opts.c: flags from a config file and the environment (the command line wins over a
// variable, a variable over the file)
struct option;
typedef struct rp_cli_env_argv {
    int argc;     // argv[0], the file's flags, the variables' flags, then the command line's arguments
    char **argv;
    int n_env;    // argv[1 .. n_env] came from the file or a variable
    int n_file;   // argv[1 .. n_file] of those came from the file
    char **names; // (n_env) where each came from: the file's path, or the variable's name
    char *model;  // the file's "model": MODEL when the command line names none (NULL: none)
} rp_cli_env_argv;
// Where a flag came from, lowest precedence first.
typedef enum rp_cli_origin { RP_CLI_FROM_FILE, RP_CLI_FROM_ENV, RP_CLI_FROM_ARGS } rp_cli_origin;
// Builds *out from the config file (--config FILE in argv, read by getopt with shorts and
// longs, else $RAPID_CONFIG; only when longs has a "config" flag), the variables of longs
// (RAPID_FOO_BAR for --foo-bar, every flag but help and config) and the command line.
// 0, else the status to exit with after one line on stderr: 2 for a file that cannot be
// read, is not a JSON object (jansson's line and column), has a key that names no flag (the
// closest named) or a value of the wrong type; 2 for a flag without a value given by a
// variable a value other than 1/true/yes/on or 0/false/no/off; 1 out of memory.
int rp_cli_env_args(const char *cmd, const char *shorts, const struct option *longs, int argc, char **argv,
                    rp_cli_env_argv *out);
// Where argument `index` of out->argv came from (the file's path, the variable), or NULL (the command line).
const char *rp_cli_env_origin(const rp_cli_env_argv *e, int index);
rp_cli_origin rp_cli_env_rank(const rp_cli_env_argv *e, int index);
void rp_cli_env_free(rp_cli_env_argv *e);

// device.c
// Opens the backend named by --device (NULL: $RAPID_DEVICE, else rp_backend_default_name()) with --threads
// (0: all cores) and --f32-activations. Errors as rp_backend_open.
rp_status rp_cli_open_backend(const char *device, int threads, bool f32_act, rp_backend **out);
// The backend a --draft-model is loaded on beside a model on be: a CPU backend of its
// own with a quarter of be's threads when be is the CPU (*out: destroy it after the
// engine), NULL (*out; the engine then uses the model's backend) on a device.
rp_status rp_cli_draft_backend(rp_backend *be, bool f32_act, rp_backend **out);
// One line on stderr naming the device (and its free memory on a GPU).
void rp_cli_print_backend(rp_backend *be);

// spec_opts.c
// Reads --speculative-config's JSON object into p (only the keys given change).
// RP_ERR_INVALID with a message naming the bad key or value (unknown keys too).
rp_status rp_cli_spec_config(const char *json, rp_engine_spec_params *p);
// The stats line's speculation part: "spec accepted/drafted: ngram 40/52, mtp 10/30"
// for the engine's methods (es) and the request's counts (gs); "spec: off" without any.
void rp_cli_spec_summary(const rp_engine_stats *es, const rp_gen_stats *gs, char *buf, size_t cap);

// chat_opts.c
// The chat template for --chat-template OPT (NULL: not given) and the model's tokenizer (may be NULL):
// a built-in NAME, else a FILE (read and parsed here; RP_ERR_IO / RP_ERR_INVALID naming it), else the
// model's own (*src stays NULL: use rp_tok_chat_template), else the built-in default, with a warning on
// stderr naming `cmd` and `model`. *src (rp_free it) is the template text when not the model's; `what`
// receives a description for messages ("the model's", "built-in chatml", the file's path).
rp_status rp_cli_chat_template(const char *opt, const rp_tokenizer *tok, const char *cmd, const char *model, char **src,
                               char *what, size_t what_cap);
// The output formats for a template text: rp_parser_select, then --tool-parser / --reasoning-parser
// (already validated names, or NULL).
void rp_cli_chat_formats(const char *template_text, const char *arch, const char *tool_parser,
                         const char *reasoning_parser, rp_tool_format *tools, rp_reasoning_format *reasoning);

#endif
