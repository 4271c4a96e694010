/*
 * parse_select.c - which output formats a model uses, and their names.
 *
 * The chat template is the best witness: a template that renders past tool
 * calls shows the exact markup the model was trained to produce. Checked in
 * order (the first match wins):
 *
 *   <｜tool▁calls▁begin｜>           DeepSeek (V3, R1 and its distills)
 *   <tool_call> and <function=      Qwen3-Coder XML (Qwen3-Coder, Qwen3.5, Qwen3.6)
 *   <tool_call>                     Hermes (Qwen2.5, Qwen3, Hermes 2/3)
 *   [TOOL_CALLS]                    Mistral
 *   <|python_tag|>, or the ipython
 *   role with Llama 3 headers       Llama 3.x
 *
 * and reasoning is <think> when the template mentions <think> or </think>.
 * Without a telling template the architecture decides: Qwen3.5/3.6 (qwen3_5,
 * qwen3_5_moe; GGUF qwen35, qwen35moe) → Qwen3-Coder XML, other qwen2/qwen3
 * (Qwen3-Next included: its Instruct and Coder checkpoints need not share a
 * format, so only their templates can tell) → Hermes, any qwen3 → think as
 * well, llama → Llama 3 when the template uses its headers, mistral →
 * Mistral, deepseek → DeepSeek.
 */
#include "parse_int.h"

#include <strings.h>

typedef struct fmt_name {
    const char *name;
    int value;
} fmt_name;

static const fmt_name tool_names[] = {
    {"none", RP_TOOL_FORMAT_NONE},
    {"hermes", RP_TOOL_FORMAT_HERMES},
    {"qwen3_coder", RP_TOOL_FORMAT_QWEN3_CODER},
    {"llama3_json", RP_TOOL_FORMAT_LLAMA3},
    {"mistral", RP_TOOL_FORMAT_MISTRAL},
    {"deepseek_v3", RP_TOOL_FORMAT_DEEPSEEK},
    // aliases
    {"qwen", RP_TOOL_FORMAT_HERMES},
    {"qwen2_5", RP_TOOL_FORMAT_HERMES},
    {"qwen3", RP_TOOL_FORMAT_HERMES},
    {"qwen3_xml", RP_TOOL_FORMAT_QWEN3_CODER},
    {"llama3", RP_TOOL_FORMAT_LLAMA3},
    {"llama", RP_TOOL_FORMAT_LLAMA3},
    {"llama4_json", RP_TOOL_FORMAT_LLAMA3},
    {"deepseek", RP_TOOL_FORMAT_DEEPSEEK},
    {"deepseek_r1", RP_TOOL_FORMAT_DEEPSEEK},
    {"deepseek_v31", RP_TOOL_FORMAT_DEEPSEEK},
};

static const fmt_name reasoning_names[] = {
    {"none", RP_REASONING_FORMAT_NONE},
    {"think", RP_REASONING_FORMAT_THINK},
    {"qwen3", RP_REASONING_FORMAT_THINK},
    {"deepseek_r1", RP_REASONING_FORMAT_THINK},
};

static bool has(const char *text, const char *needle)
{
    return text && strstr(text, needle) != NULL;
}

static bool arch_is(const char *arch, const char *prefix)
{
    return arch && strncasecmp(arch, prefix, strlen(prefix)) == 0;
}

// Qwen3.5 and 3.6 (config.json model_type or GGUF spelling), trained on Qwen3-Coder's XML calls.
static bool arch_qwen_xml(const char *arch)
{
    return arch_is(arch, "qwen3_5") || arch_is(arch, "qwen35");
}

void rp_parser_select(const char *tmpl, const char *arch, rp_tool_format *tools, rp_reasoning_format *reasoning)
{
    rp_tool_format t = RP_TOOL_FORMAT_NONE;
    if (has(tmpl, "<｜tool▁calls▁begin｜>") || has(tmpl, "tool▁calls▁begin"))
        t = RP_TOOL_FORMAT_DEEPSEEK;
    else if (has(tmpl, "<tool_call>") && has(tmpl, "<function="))
        t = RP_TOOL_FORMAT_QWEN3_CODER;
    else if (has(tmpl, "<tool_call>"))
        t = RP_TOOL_FORMAT_HERMES;
    else if (has(tmpl, "[TOOL_CALLS]"))
        t = RP_TOOL_FORMAT_MISTRAL;
    else if (has(tmpl, "<|python_tag|>") || (has(tmpl, "<|start_header_id|>") && has(tmpl, "ipython")))
        t = RP_TOOL_FORMAT_LLAMA3;
    else if (arch_qwen_xml(arch))
        t = RP_TOOL_FORMAT_QWEN3_CODER;
    else if (arch_is(arch, "qwen2") || arch_is(arch, "qwen3"))
        t = RP_TOOL_FORMAT_HERMES;
    else if (arch_is(arch, "llama") && has(tmpl, "<|start_header_id|>"))
        t = RP_TOOL_FORMAT_LLAMA3;
    else if (arch_is(arch, "mistral"))
        t = RP_TOOL_FORMAT_MISTRAL;
    else if (arch_is(arch, "deepseek"))
        t = RP_TOOL_FORMAT_DEEPSEEK;

    bool think = has(tmpl, "<think>") || has(tmpl, "</think>") || arch_is(arch, "qwen3");
    *tools = t;
    *reasoning = think ? RP_REASONING_FORMAT_THINK : RP_REASONING_FORMAT_NONE;
}

static rp_status from_name(const char *what, const fmt_name *names, size_t n, const char *name, int *out)
{
    for (size_t i = 0; name && i < n; i++) {
        if (strcasecmp(names[i].name, name) == 0) {
            *out = names[i].value;
            return RP_OK;
        }
    }
    char list[512];
    size_t len = 0;
    list[0] = 0;
    for (size_t i = 0; i < n && len < sizeof(list); i++)
        len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", i ? ", " : "", names[i].name);
    return RP_ERR(RP_ERR_INVALID, "unknown %s parser '%s' (known: %s)", what, name ? name : "(null)", list);
}

rp_status rp_tool_format_from_name(const char *name, rp_tool_format *out)
{
    int v = 0;
    rp_status st = from_name("tool", tool_names, sizeof(tool_names) / sizeof(tool_names[0]), name, &v);
    if (st == RP_OK)
        *out = (rp_tool_format)v;
    return st;
}

rp_status rp_reasoning_format_from_name(const char *name, rp_reasoning_format *out)
{
    int v = 0;
    rp_status st =
        from_name("reasoning", reasoning_names, sizeof(reasoning_names) / sizeof(reasoning_names[0]), name, &v);
    if (st == RP_OK)
        *out = (rp_reasoning_format)v;
    return st;
}

const char *rp_tool_format_name(rp_tool_format f)
{
    for (size_t i = 0; i < sizeof(tool_names) / sizeof(tool_names[0]); i++)
        if (tool_names[i].value == (int)f)
            return tool_names[i].name;
    return "?";
}

const char *rp_reasoning_format_name(rp_reasoning_format f)
{
    for (size_t i = 0; i < sizeof(reasoning_names) / sizeof(reasoning_names[0]); i++)
        if (reasoning_names[i].value == (int)f)
            return reasoning_names[i].name;
    return "?";
}

bool rp_parse_prompt_opens_think(const char *prompt, size_t len)
{
    while (len && parse_is_ws((uint8_t)prompt[len - 1]))
        len--;
    return len >= 7 && memcmp(prompt + len - 7, "<think>", 7) == 0;
}
