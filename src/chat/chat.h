/*
 * chat.h - chat templates: the Jinja that Hugging Face `chat_template`s are written in.
 *
 * A template is parsed once (rp_chat_template_create) and rendered per request
 * (rp_chat_template_render) with the semantics of transformers'
 * apply_chat_template: jinja2's ImmutableSandboxedEnvironment with trim_blocks and
 * lstrip_blocks, the loopcontrols extension (break/continue), transformers' own
 * `tojson` filter (json.dumps: key order kept, non-ASCII unescaped, optional indent)
 * and the globals raise_exception(msg) and strftime_now(fmt). Values follow Python:
 * `{{ 1.0 }}` is "1.0", `{{ true }}` is "True", `{{ none }}` is "None", a list prints
 * as its repr, dicts keep insertion order, undefined prints as "".
 *
 * A render is bounded: output size, loop iterations, call/recursion depth and
 * memory all have limits, so a hostile template fails with RP_ERR_LIMIT instead
 * of hanging or crashing.
 *
 * Threads: a template is immutable after create; any number of threads may
 * render it at once (each render has its own memory).
 */
#ifndef RP_CHAT_H
#define RP_CHAT_H

#include "../base/base.h"

#include <jansson.h>

typedef struct rp_chat_template rp_chat_template;

// Parses `len` bytes of Jinja source. Errors: RP_ERR_INVALID with
// "template error: <what> at line L" for a syntax error, RP_ERR_LIMIT for a
// template nested past the parser's depth limit, RP_ERR_NOMEM.
rp_status rp_chat_template_create(const char *source, size_t len, rp_chat_template **out);
void rp_chat_template_destroy(rp_chat_template *t);

// What a template is rendered with; all pointers are borrowed for the call.
typedef struct rp_chat_render_params {
    const json_t *messages;     // array of message objects (role, content as a string or a list of parts,
                                // tool_calls with arguments as objects, tool_call_id, name, reasoning_content...)
    const json_t *tools;        // array of tools (OpenAI function format), or NULL: `tools` is then none
    bool add_generation_prompt; // `add_generation_prompt`
    const json_t *kwargs;       // object or NULL: extra variables (chat_template_kwargs such as enable_thinking);
                                // they override bos_token/eos_token
    const char *bos_token;      // the tokenizer's special tokens; NULL: the variable is undefined, as when
    const char *eos_token;      // transformers' special_tokens_map lacks it
} rp_chat_render_params;

// Renders the template. `documents` is none, as in transformers. *out is rp_malloc'd and
// NUL-terminated; *out_len (may be NULL) excludes the NUL. Errors: RP_ERR_INVALID with
// "template error: <what>" (a template runtime error, or raise_exception's message exactly as
// given after the prefix), RP_ERR_LIMIT (output over 16 MiB, too many loop iterations, calls
// nested too deeply, render memory over its cap), RP_ERR_NOMEM. kwargs naming messages,
// tools, documents or add_generation_prompt are RP_ERR_INVALID (transformers raises too).
rp_status rp_chat_template_render(const rp_chat_template *t, const rp_chat_render_params *p, char **out,
                                  size_t *out_len);

#endif
