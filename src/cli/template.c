/*
 * template.c - `rapid template`: render a chat template the way the server will.
 *
 *   rapid template (MODEL | --template FILE|NAME) --messages FILE.json [--tools FILE.json]
 *                  [--no-generation-prompt] [--kwargs JSON] [--tokens]
 *
 * The template is MODEL's own (tokenizer_config.json or the GGUF's
 * tokenizer.chat_template) unless --template (--chat-template) names a file or a
 * built-in (chatml, llama3, mistral); a MODEL without one gets the built-in
 * ChatML template with a warning, as `rapid serve` does; bos_token/eos_token
 * come from MODEL's tokenizer (undefined without a MODEL) and --kwargs keys
 * override or add template variables (enable_thinking, ...). The prompt is
 * printed exactly, with no newline added; --tokens prints its token ids instead,
 * encoded as transformers' apply_chat_template(tokenize=True) does: no special
 * tokens added, since the template already wrote them.
 * --messages holds a JSON array of messages, or an object with "messages" (and
 * optionally "tools"), like a chat completion request body.
 */
#include "cli.h"

#include "../chat/chat.h"
#include "../tokenizer/tokenizer.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: rapid template (MODEL | --template FILE|NAME) --messages FILE.json [options]\n"
               "\n"
               "Renders a chat template with transformers' semantics and prints the prompt exactly.\n"
               "MODEL is a Hugging Face model folder or a .gguf file (its chat template and bos/eos tokens),\n"
               "or a repo id or alias already in the hub cache (`rapid models`);\n"
               "a MODEL without a chat template gets the built-in chatml, with a warning, as rapid serve does.\n"
               "\n"
               "options:\n"
               "  --template FILE|NAME    a Jinja chat template file, or a built-in: chatml, llama3, mistral\n"
               "                          (instead of MODEL's; --chat-template is the same)\n"
               "  --messages FILE         JSON: an array of messages, or an object with \"messages\" (and \"tools\")\n"
               "  --tools FILE            JSON array of tools (OpenAI function format)\n"
               "  --no-generation-prompt  render with add_generation_prompt=false\n"
               "  --kwargs JSON           extra template variables, e.g. '{\"enable_thinking\": false}'\n"
               "  --tokens                print the token ids of the prompt (needs MODEL)\n"
               "  -h, --help              this help\n");
}

static json_t *load_json(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, JSON_DECODE_ANY, &e);
    if (!j)
        fprintf(stderr, "rapid: %s: %s (line %d, column %d)\n", path, e.text, e.line, e.column);
    return j;
}

int rp_cli_template(int argc, char **argv)
{
    const char *model = NULL, *tmpl_file = NULL, *msgs_file = NULL, *tools_file = NULL, *kwargs_text = NULL;
    bool gen_prompt = true, tokens = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "--template") || !strcmp(a, "--chat-template")) && has_val && !tmpl_file) {
            tmpl_file = argv[++i];
        } else if (!strcmp(a, "--messages") && has_val && !msgs_file) {
            msgs_file = argv[++i];
        } else if (!strcmp(a, "--tools") && has_val && !tools_file) {
            tools_file = argv[++i];
        } else if (!strcmp(a, "--kwargs") && has_val && !kwargs_text) {
            kwargs_text = argv[++i];
        } else if (!strcmp(a, "--no-generation-prompt")) {
            gen_prompt = false;
        } else if (!strcmp(a, "--tokens")) {
            tokens = true;
        } else if (a[0] != '-' && !model) {
            model = a;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if ((!model && !tmpl_file) || !msgs_file || (tokens && !model)) {
        if (tokens && !model)
            fprintf(stderr, "rapid: --tokens needs a MODEL (its tokenizer)\n\n");
        usage(stderr);
        return 2;
    }

    int rc = 1;
    rp_tokenizer *tok = NULL;
    rp_chat_template *t = NULL;
    json_t *msgs_doc = NULL, *tools = NULL, *kwargs = NULL;
    char *src = NULL, *out = NULL;
    size_t src_len = 0, out_len = 0;
    int32_t *ids = NULL;
    size_t n_ids = 0;

    if (kwargs_text) {
        json_error_t e;
        kwargs = json_loads(kwargs_text, 0, &e);
        if (!kwargs || !json_is_object(kwargs)) {
            fprintf(stderr, "rapid: --kwargs must be a JSON object%s%s\n", kwargs ? "" : ": ", kwargs ? "" : e.text);
            rc = 2;
            goto done;
        }
    }
    if (!(msgs_doc = load_json(msgs_file)))
        goto done;
    const json_t *messages = msgs_doc;
    if (json_is_object(msgs_doc)) {
        messages = json_object_get(msgs_doc, "messages");
        if (!tools_file && json_object_get(msgs_doc, "tools"))
            tools = json_incref(json_object_get(msgs_doc, "tools"));
    }
    if (!json_is_array(messages)) {
        fprintf(stderr, "rapid: %s: expected an array of messages or an object with \"messages\"\n", msgs_file);
        goto done;
    }
    if (tools_file) {
        if (!(tools = load_json(tools_file)))
            goto done;
        if (!json_is_array(tools)) {
            fprintf(stderr, "rapid: %s: expected an array of tools\n", tools_file);
            goto done;
        }
    }
    rp_hub_resolved where;
    if (model && rp_cli_resolve_model("template", model, false, NULL, &where, NULL))
        goto done;
    if (model && rp_tok_load_file(where.path, &tok)) {
        fprintf(stderr, "rapid: %s\n", rp_error_message());
        goto done;
    }
    char what[512];
    if (rp_cli_chat_template(tmpl_file, tok, "template", model, &src, what, sizeof(what))) {
        fprintf(stderr, "rapid: %s\n", rp_error_message());
        goto done;
    }
    if (!src && !(src = rp_strdup(rp_tok_chat_template(tok)))) { // the model's own
        fprintf(stderr, "rapid: out of memory\n");
        goto done;
    }
    src_len = strlen(src);
    if (rp_chat_template_create(src, src_len, &t)) {
        fprintf(stderr, "rapid: %s\n", rp_error_message());
        goto done;
    }
    // transformers passes only the special tokens the tokenizer has.
    const char *bos = tok ? rp_tok_bos_text(tok) : NULL, *eos = tok ? rp_tok_eos_text(tok) : NULL;
    rp_chat_render_params p = {
        .messages = messages,
        .tools = tools,
        .add_generation_prompt = gen_prompt,
        .kwargs = kwargs,
        .bos_token = bos && *bos ? bos : NULL,
        .eos_token = eos && *eos ? eos : NULL,
    };
    if (rp_chat_template_render(t, &p, &out, &out_len)) {
        fprintf(stderr, "rapid: %s\n", rp_error_message());
        goto done;
    }
    if (tokens) {
        if (rp_tok_encode(tok, out, out_len, false, &ids, &n_ids)) {
            fprintf(stderr, "rapid: %s\n", rp_error_message());
            goto done;
        }
        for (size_t i = 0; i < n_ids; i++)
            printf(i ? " %d" : "%d", (int)ids[i]);
        printf("\n");
    } else if (out_len && fwrite(out, 1, out_len, stdout) != out_len) {
        fprintf(stderr, "rapid: writing the prompt failed\n");
        goto done;
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    rp_free(ids);
    rp_free(out);
    rp_chat_template_destroy(t);
    rp_free(src);
    rp_tok_destroy(tok);
    json_decref(kwargs);
    json_decref(tools);
    json_decref(msgs_doc);
    return rc;
}
