/*
 * chat_opts.c - --chat-template FILE|NAME, shared by `rapid run`, `rapid serve`
 * and `rapid template`: which chat template a command renders with.
 *
 *   NAME    a built-in template (chat.h: chatml, llama3, mistral)
 *   FILE    anything else: a Jinja file (write ./chatml for a file named like a built-in)
 *   absent  the model's own template; a model without one gets the built-in ChatML
 *           template (as llama-server does) and one warning on stderr at start
 *
 * The text is parsed here once, so a template that does not parse is refused at start
 * with the file named. The output parser is picked from the text that is used, so
 * --chat-template llama3 parses Llama 3 tool calls even on a model of another family.
 */
#include "cli.h"

#include "../chat/chat.h"

#include <stdio.h>

static const char *builtin_list(char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; rp_chat_builtin_name(i) && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", rp_chat_builtin_name(i));
    return buf;
}

rp_status rp_cli_chat_template(const char *opt, const rp_tokenizer *tok, const char *cmd, const char *model, char **src,
                               char *what, size_t what_cap)
{
    *src = NULL;
    what[0] = 0;
    char names[128];
    rp_status st = RP_OK;
    if (!opt && tok && rp_tok_chat_template(tok)) {
        snprintf(what, what_cap, "the model's");
        return RP_OK;
    }
    const char *builtin = rp_chat_builtin_template(opt ? opt : RP_CHAT_DEFAULT_TEMPLATE);
    if (builtin) {
        if (!(*src = rp_strdup(builtin)))
            return RP_ERR(RP_ERR_NOMEM, "out of memory");
        snprintf(what, what_cap, "built-in %s", opt ? opt : RP_CHAT_DEFAULT_TEMPLATE);
        if (!opt)
            fprintf(stderr,
                    "rapid %s: warning: %s has no chat template; using the built-in %s template "
                    "(choose one with --chat-template %s or FILE)\n",
                    cmd, model ? model : "the model", RP_CHAT_DEFAULT_TEMPLATE, builtin_list(names, sizeof(names)));
        return RP_OK;
    }
    size_t len = 0;
    if (!rp_file_exists(opt))
        return RP_ERR(RP_ERR_INVALID, "chat template %s: no such file, and not a built-in template (%s)", opt,
                      builtin_list(names, sizeof(names)));
    if ((st = rp_file_read(opt, src, &len)))
        return rp_error_prefix(st, "chat template");
    rp_chat_template *t = NULL;
    if (strlen(*src) != len)
        st = RP_ERR(RP_ERR_INVALID, "chat template %s: the file holds a NUL byte", opt);
    else if ((st = rp_chat_template_create(*src, len, &t)))
        rp_error_prefix(st, "chat template %s", opt);
    rp_chat_template_destroy(t);
    if (st) {
        rp_free(*src);
        *src = NULL;
        return st;
    }
    snprintf(what, what_cap, "%s", opt);
    return RP_OK;
}

void rp_cli_chat_formats(const char *template_text, const char *arch, const char *tool_parser,
                         const char *reasoning_parser, rp_tool_format *tools, rp_reasoning_format *reasoning)
{
    rp_parser_select(template_text, arch, tools, reasoning);
    if (tool_parser)
        rp_tool_format_from_name(tool_parser, tools);
    if (reasoning_parser)
        rp_reasoning_format_from_name(reasoning_parser, reasoning);
}
