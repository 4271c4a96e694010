/*
 * tasks.c - the task file (bench/tasks.json) and the request bodies made from it.
 *
 * The file is checked whole when loaded, so a typo fails at once with the
 * field named, not halfway through a run. Prompts never hold foreign text:
 * code comes from the machine's own Python standard library at run time
 * ({{source:MODULE}}), long shared texts are named once ({{text:NAME}}) and
 * cold prompts get {{nonce}}. A placeholder that cannot be filled (no Python,
 * a module missing from this Python) is an error for that request only; the
 * scenario records it and goes on.
 */
#include "bench_int.h"

#include <math.h>

#define TASKS_FORMAT "rapid-bench-tasks/1"

static rp_status bad(const rp_bench_taskset *ts, const char *fmt, const char *a, const char *b)
{
    char msg[512];
    snprintf(msg, sizeof(msg), fmt, a ? a : "", b ? b : "");
    return RP_ERR(RP_ERR_INVALID, "%s: %s", ts->path, msg);
}

static bool is_id(const char *s)
{
    if (!*s || strlen(s) > 64)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '_'))
            return false;
    return true;
}

static bool is_count(const json_t *v, json_int_t lo, json_int_t hi)
{
    return json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= hi;
}

// "tools": an optional array of names that all exist in the tool map.
static rp_status check_tool_names(const rp_bench_taskset *ts, const json_t *names, const char *where)
{
    if (!names)
        return RP_OK;
    if (!json_is_array(names))
        return bad(ts, "%s: \"tools\" is not an array of names%s", where, NULL);
    const json_t *map = json_object_get(ts->root, "tools");
    size_t i;
    const json_t *n;
    json_array_foreach(names, i, n)
    {
        if (!json_is_string(n))
            return bad(ts, "%s: \"tools\" holds a value that is not a name%s", where, NULL);
        if (!json_object_get(map, json_string_value(n)))
            return bad(ts, "%s: tool '%s' is not defined in \"tools\"", where, json_string_value(n));
    }
    return RP_OK;
}

static rp_status check_max_tokens(const rp_bench_taskset *ts, const json_t *obj, const char *where, bool required)
{
    const json_t *mt = json_object_get(obj, "max_tokens");
    if (!mt && !required)
        return RP_OK;
    if (!is_count(mt, 1, 1 << 20))
        return bad(ts, "%s: \"max_tokens\" must be an integer in [1, 1048576]%s", where, NULL);
    return RP_OK;
}

static rp_status check_messages(const rp_bench_taskset *ts, const json_t *msgs, const char *where)
{
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return bad(ts, "%s: \"messages\" must be a non-empty array%s", where, NULL);
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m)
    {
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
            return bad(ts, "%s: a message is not an object with a \"role\"%s", where, NULL);
    }
    return RP_OK;
}

static rp_status check_task(const rp_bench_taskset *ts, const json_t *t, size_t index)
{
    char where[96];
    snprintf(where, sizeof(where), "tasks[%zu]", index);
    if (!json_is_object(t))
        return bad(ts, "%s is not an object%s", where, NULL);
    const char *id = json_string_value(json_object_get(t, "id"));
    if (!id || !is_id(id))
        return bad(ts, "%s: \"id\" must be a name of a-z, 0-9, '-' and '_'%s", where, NULL);
    snprintf(where, sizeof(where), "task '%s'", id);
    if (!json_is_string(json_object_get(t, "kind")))
        return bad(ts, "%s: \"kind\" is missing%s", where, NULL);
    const json_t *prompt = json_object_get(t, "prompt"), *msgs = json_object_get(t, "messages");
    if (!!prompt == !!msgs)
        return bad(ts, "%s: give exactly one of \"prompt\" and \"messages\"%s", where, NULL);
    if (prompt && !json_is_string(prompt))
        return bad(ts, "%s: \"prompt\" is not a string%s", where, NULL);
    rp_status st;
    if (msgs && (st = check_messages(ts, msgs, where)) != RP_OK)
        return st;
    const json_t *sys = json_object_get(t, "system");
    if (sys && !json_is_string(sys))
        return bad(ts, "%s: \"system\" is not a string%s", where, NULL);
    const json_t *think = json_object_get(t, "thinking");
    if (think && !json_is_boolean(think))
        return bad(ts, "%s: \"thinking\" is not true or false%s", where, NULL);
    if ((st = check_max_tokens(ts, t, where, true)) != RP_OK)
        return st;
    return check_tool_names(ts, json_object_get(t, "tools"), where);
}

static rp_status check_sections(rp_bench_taskset *ts)
{
    const json_t *root = ts->root;
    rp_status st;
    const json_t *conc = json_object_get(root, "concurrency");
    if (conc) {
        const char *task = json_string_value(json_object_get(conc, "task"));
        if (!task || !rp_bench_taskset_find(ts, task))
            return bad(ts, "concurrency: \"task\" must name a task%s%s", NULL, NULL);
        const json_t *levels = json_object_get(conc, "levels");
        if (!json_is_array(levels) || json_array_size(levels) == 0 || json_array_size(levels) > 16)
            return bad(ts, "concurrency: \"levels\" must be an array of 1 to 16 counts%s%s", NULL, NULL);
        size_t i;
        const json_t *l;
        json_array_foreach(levels, i, l) if (!is_count(l, 1, 1024)) return bad(
            ts, "concurrency: a level is not an integer in [1, 1024]%s%s", NULL, NULL);
        if ((st = check_max_tokens(ts, conc, "concurrency", false)) != RP_OK)
            return st;
        const json_t *ie = json_object_get(conc, "ignore_eos");
        if (ie && !json_is_boolean(ie))
            return bad(ts, "concurrency: \"ignore_eos\" is not true or false%s%s", NULL, NULL);
    }
    const json_t *agent = json_object_get(root, "agent");
    if (agent) {
        if (!json_is_string(json_object_get(agent, "system")))
            return bad(ts, "agent: \"system\" is missing%s%s", NULL, NULL);
        if ((st = check_tool_names(ts, json_object_get(agent, "tools"), "agent")) != RP_OK ||
            (st = check_max_tokens(ts, agent, "agent", true)) != RP_OK)
            return st;
        const json_t *turns = json_object_get(agent, "turns");
        if (!json_is_array(turns) || json_array_size(turns) == 0)
            return bad(ts, "agent: \"turns\" must be a non-empty array of message arrays%s%s", NULL, NULL);
        size_t i;
        const json_t *turn;
        json_array_foreach(turns, i, turn) if ((st = check_messages(ts, turn, "agent turn")) != RP_OK) return st;
    }
    const json_t *pre = json_object_get(root, "prefill");
    if (pre) {
        const json_t *sizes = json_object_get(pre, "sizes"), *src = json_object_get(pre, "sources");
        const json_t *cpt = json_object_get(pre, "chars_per_token");
        if (!json_is_array(sizes) || json_array_size(sizes) == 0)
            return bad(ts, "prefill: \"sizes\" must be a non-empty array of token counts%s%s", NULL, NULL);
        size_t i;
        const json_t *v;
        json_array_foreach(sizes, i, v) if (!is_count(v, 16, 1 << 22)) return bad(
            ts, "prefill: a size is not an integer in [16, 4194304]%s%s", NULL, NULL);
        if (!json_is_array(src) || json_array_size(src) == 0)
            return bad(ts, "prefill: \"sources\" must be a non-empty array of module names%s%s", NULL, NULL);
        json_array_foreach(src, i, v) if (!json_is_string(v)) return bad(
            ts, "prefill: \"sources\" holds a value that is not a module name%s%s", NULL, NULL);
        if (!json_is_number(cpt) || !(json_number_value(cpt) >= 0.5 && json_number_value(cpt) <= 16))
            return bad(ts, "prefill: \"chars_per_token\" must be a number in [0.5, 16]%s%s", NULL, NULL);
        if (!json_is_string(json_object_get(pre, "question")))
            return bad(ts, "prefill: \"question\" is missing%s%s", NULL, NULL);
        if ((st = check_max_tokens(ts, pre, "prefill", true)) != RP_OK)
            return st;
    }
    const json_t *inter = json_object_get(root, "interference");
    if (inter) {
        const char *task = json_string_value(json_object_get(inter, "task"));
        if (json_object_get(inter, "task") && (!task || !rp_bench_taskset_find(ts, task)))
            return bad(ts, "interference: \"task\" must name a task%s%s", NULL, NULL);
        static const char *const keys[] = {"streams", "stream_max_tokens", "after_chunks", "prompt_tokens"};
        static const int lo[] = {1, 16, 0, 16}, hi[] = {64, 1 << 20, 1 << 20, 1 << 22};
        for (int i = 0; i < 4; i++) {
            const json_t *v = json_object_get(inter, keys[i]);
            if (v && !is_count(v, lo[i], hi[i]))
                return bad(ts, "interference: \"%s\" must be an integer in [%s]", keys[i],
                           i == 0   ? "1, 64"
                           : i == 1 ? "16, 1048576"
                           : i == 2 ? "0, 1048576"
                                    : "16, 4194304");
        }
        if ((st = check_max_tokens(ts, inter, "interference", false)) != RP_OK)
            return st;
        if (!json_object_get(root, "prefill"))
            return bad(ts, "interference: needs the \"prefill\" section (its sources make the long prompt)%s%s", NULL,
                       NULL);
    }
    const json_t *tools = json_object_get(root, "tools_scenario");
    if (tools) {
        const json_t *names = json_object_get(tools, "tools");
        if ((st = check_tool_names(ts, names, "tools_scenario")) != RP_OK ||
            (st = check_max_tokens(ts, tools, "tools_scenario", true)) != RP_OK)
            return st;
        if (!names)
            return bad(ts, "tools_scenario: \"tools\" is missing%s%s", NULL, NULL);
        const json_t *sys = json_object_get(tools, "system");
        if (sys && !json_is_string(sys))
            return bad(ts, "tools_scenario: \"system\" is not a string%s%s", NULL, NULL);
        const json_t *cases = json_object_get(tools, "cases");
        if (!json_is_array(cases) || json_array_size(cases) == 0)
            return bad(ts, "tools_scenario: \"cases\" must be a non-empty array%s%s", NULL, NULL);
        size_t i;
        const json_t *c;
        json_array_foreach(cases, i, c)
        {
            const char *name = json_string_value(json_object_get(c, "name"));
            if (!json_is_string(json_object_get(c, "prompt")) || !name ||
                !json_is_object(json_object_get(c, "arguments")))
                return bad(ts, "tools_scenario: a case needs \"prompt\", \"name\" and an \"arguments\" object%s%s",
                           NULL, NULL);
            bool offered = false;
            size_t k;
            const json_t *n;
            json_array_foreach(names, k, n) offered |= strcmp(json_string_value(n), name) == 0;
            if (!offered)
                return bad(ts, "tools_scenario: a case expects '%s', which is not among its tools%s", name, NULL);
        }
    }
    return RP_OK;
}

rp_status rp_bench_taskset_load(const char *path, rp_bench_taskset *out)
{
    memset(out, 0, sizeof(*out));
    out->path = rp_strdup(path);
    if (!out->path)
        return RP_ERR(RP_ERR_NOMEM, "out of memory");
    json_error_t e;
    out->root = json_load_file(path, 0, &e);
    rp_status st;
    if (!out->root) {
        st = rp_file_exists(path) ? RP_ERR(RP_ERR_INVALID, "%s: line %d, column %d: %s", path, e.line, e.column, e.text)
                                  : RP_ERR(RP_ERR_IO, "%s: cannot read the task file", path);
        goto fail;
    }
    const json_t *root = out->root;
    const char *fmt = json_string_value(json_object_get(root, "format"));
    if (!json_is_object(root) || !fmt || strcmp(fmt, TASKS_FORMAT) != 0) {
        st = bad(out, "not a task file (\"format\" must be \"%s\")%s", TASKS_FORMAT, NULL);
        goto fail;
    }
    const json_t *texts = json_object_get(root, "texts");
    if (texts && !json_is_object(texts)) {
        st = bad(out, "\"texts\" is not an object%s%s", NULL, NULL);
        goto fail;
    }
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)texts, key, v)
    {
        if (!json_is_string(v)) {
            st = bad(out, "texts: '%s' is not a string%s", key, NULL);
            goto fail;
        }
    }
    const json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_object(tools)) {
        st = bad(out, "\"tools\" is not an object of name -> definition%s%s", NULL, NULL);
        goto fail;
    }
    json_object_foreach((json_t *)tools, key, v)
    {
        if (!json_is_object(v) || !json_is_string(json_object_get(v, "description")) ||
            !json_is_object(json_object_get(v, "parameters"))) {
            st = bad(out, "tools: '%s' needs a \"description\" and a \"parameters\" object%s", key, NULL);
            goto fail;
        }
    }
    const json_t *tasks = json_object_get(root, "tasks");
    if (!json_is_array(tasks)) {
        st = bad(out, "\"tasks\" is missing or not an array%s%s", NULL, NULL);
        goto fail;
    }
    size_t i;
    json_array_foreach(tasks, i, v)
    {
        if ((st = check_task(out, v, i)) != RP_OK)
            goto fail;
        const char *id = json_string_value(json_object_get(v, "id"));
        for (size_t k = 0; k < i; k++)
            if (strcmp(json_string_value(json_object_get(json_array_get(tasks, k), "id")), id) == 0) {
                st = bad(out, "task id '%s' appears twice%s", id, NULL);
                goto fail;
            }
    }
    if ((st = check_sections(out)) != RP_OK)
        goto fail;
    return RP_OK;
fail:
    rp_bench_taskset_deinit(out);
    return st;
}

void rp_bench_taskset_deinit(rp_bench_taskset *ts)
{
    json_decref(ts->root);
    rp_free(ts->path);
    memset(ts, 0, sizeof(*ts));
}

const json_t *rp_bench_taskset_find(const rp_bench_taskset *ts, const char *id)
{
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(ts->root, "tasks"), i, t)
    {
        const char *tid = json_string_value(json_object_get(t, "id"));
        if (tid && strcmp(tid, id) == 0)
            return t;
    }
    return NULL;
}

/* ---- Python sources ------------------------------------------------------------ */

rp_status rp_bench_stdlib_source(const char *stdlib_dir, const char *module, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    size_t n = strlen(module);
    bool ok = n > 0 && n <= 128 && module[0] != '.' && module[n - 1] != '.' && !strstr(module, "..");
    for (size_t i = 0; ok && i < n; i++) {
        char c = module[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
    }
    if (!ok)
        return RP_ERR(RP_ERR_INVALID, "'%s' is not a Python module name", module);
    if (!stdlib_dir)
        return RP_ERR(RP_ERR_IO,
                      "Python module '%s' is needed but no Python standard library was found (install python3, or "
                      "pass --stdlib DIR)",
                      module);
    char rel[160];
    snprintf(rel, sizeof(rel), "%s", module);
    for (char *p = rel; *p; p++)
        if (*p == '.')
            *p = '/';
    char *file = rp_bench_fmt("%s/%s.py", stdlib_dir, rel);
    char *pkg = rp_bench_fmt("%s/%s/__init__.py", stdlib_dir, rel);
    rp_status st;
    if (!file || !pkg)
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
    else if (rp_file_exists(file))
        st = rp_file_read(file, out, len);
    else if (rp_file_exists(pkg))
        st = rp_file_read(pkg, out, len);
    else
        st = RP_ERR(RP_ERR_IO, "Python module '%s' not found under %s (no %s.py or %s/__init__.py there)", module,
                    stdlib_dir, rel, rel);
    rp_free(file);
    rp_free(pkg);
    return st;
}

/* ---- placeholders ---------------------------------------------------------------- */

rp_status rp_bench_expand(const rp_bench_taskset *ts, const char *stdlib_dir, const char *nonce, const char *s,
                          char **out)
{
    *out = NULL;
    if (!ts) {
        *out = rp_strdup(s);
        return *out ? RP_OK : RP_ERR(RP_ERR_NOMEM, "out of memory");
    }
    rp_bench_buf b = {0};
    rp_status st = RP_OK;
    const char *p = s;
    for (;;) {
        const char *open = strstr(p, "{{");
        if (!open) {
            rp_bench_buf_adds(&b, p);
            break;
        }
        rp_bench_buf_add(&b, p, (size_t)(open - p));
        const char *close = strstr(open + 2, "}}");
        if (!close) {
            st = RP_ERR(RP_ERR_INVALID, "a '{{' placeholder is not closed");
            goto fail;
        }
        char name[160];
        size_t n = (size_t)(close - open - 2);
        if (n >= sizeof(name)) {
            st = RP_ERR(RP_ERR_INVALID, "a placeholder is too long");
            goto fail;
        }
        memcpy(name, open + 2, n);
        name[n] = 0;
        if (strncmp(name, "source:", 7) == 0) {
            char *src = NULL;
            size_t len;
            if ((st = rp_bench_stdlib_source(stdlib_dir, name + 7, &src, &len)) != RP_OK)
                goto fail;
            rp_bench_buf_add(&b, src, len);
            rp_free(src);
        } else if (strncmp(name, "text:", 5) == 0) {
            const char *t = json_string_value(json_object_get(json_object_get(ts->root, "texts"), name + 5));
            if (!t) {
                st = RP_ERR(RP_ERR_INVALID, "{{%s}}: no text named '%s' in \"texts\"", name, name + 5);
                goto fail;
            }
            rp_bench_buf_adds(&b, t);
        } else if (strcmp(name, "nonce") == 0) {
            if (!nonce) {
                st = RP_ERR(RP_ERR_INVALID, "{{nonce}} is only allowed in cold prompts");
                goto fail;
            }
            rp_bench_buf_adds(&b, nonce);
        } else {
            st = RP_ERR(RP_ERR_INVALID, "unknown placeholder {{%s}}", name);
            goto fail;
        }
        p = close + 2;
    }
    if (b.oom) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory expanding a prompt");
        goto fail;
    }
    *out = rp_bench_buf_take(&b);
    return RP_OK;
fail:
    rp_bench_buf_deinit(&b);
    return st;
}

// Expands every string inside v in place (messages, their contents, tool calls).
static rp_status expand_json(const rp_bench_taskset *ts, const char *stdlib, const char *nonce, json_t *v)
{
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x)
        {
            if (json_is_string(x)) {
                char *e = NULL;
                rp_status st = rp_bench_expand(ts, stdlib, nonce, json_string_value(x), &e);
                if (st != RP_OK)
                    return st;
                int bad_set = json_object_set_new(v, k, json_string(e));
                rp_free(e);
                if (bad_set)
                    return RP_ERR(RP_ERR_NOMEM, "out of memory expanding a message");
            } else {
                rp_status st = expand_json(ts, stdlib, nonce, x);
                if (st != RP_OK)
                    return st;
            }
        }
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if (json_is_string(x)) {
                char *e = NULL;
                rp_status st = rp_bench_expand(ts, stdlib, nonce, json_string_value(x), &e);
                if (st != RP_OK)
                    return st;
                int bad_set = json_array_set_new(v, i, json_string(e));
                rp_free(e);
                if (bad_set)
                    return RP_ERR(RP_ERR_NOMEM, "out of memory expanding a message");
            } else {
                rp_status st = expand_json(ts, stdlib, nonce, x);
                if (st != RP_OK)
                    return st;
            }
        }
    }
    return RP_OK;
}

static json_t *message(const char *role, char *content)
{
    json_t *m = json_pack("{s:s, s:s}", "role", role, "content", content);
    rp_free(content);
    return m;
}

rp_status rp_bench_body(const rp_bench_taskset *ts, const json_t *spec, const char *model, const char *stdlib_dir,
                        const char *nonce, char **out)
{
    *out = NULL;
    rp_status st = RP_OK;
    json_t *msgs = json_array(), *body = NULL, *tools = NULL;
    char *text = NULL;
    if (!msgs)
        goto oom;
    // A literal spec (prefill prompts made of source text) is sent as it is.
    const rp_bench_taskset *xts = json_is_true(json_object_get(spec, "literal")) ? NULL : ts;
    const char *sys = json_string_value(json_object_get(spec, "system"));
    if (sys) {
        if ((st = rp_bench_expand(xts, stdlib_dir, nonce, sys, &text)) != RP_OK)
            goto fail;
        if (json_array_append_new(msgs, message("system", text)))
            goto oom;
    }
    const json_t *given = json_object_get(spec, "messages");
    if (given) {
        json_t *copy = json_deep_copy(given);
        if (!copy)
            goto oom;
        st = xts ? expand_json(xts, stdlib_dir, nonce, copy) : RP_OK;
        if (st != RP_OK || json_array_extend(msgs, copy)) {
            json_decref(copy);
            if (st == RP_OK)
                goto oom;
            goto fail;
        }
        json_decref(copy);
    } else {
        const char *prompt = json_string_value(json_object_get(spec, "prompt"));
        if ((st = rp_bench_expand(xts, stdlib_dir, nonce, prompt ? prompt : "", &text)) != RP_OK)
            goto fail;
        if (json_array_append_new(msgs, message("user", text)))
            goto oom;
    }
    const json_t *mt = json_object_get(spec, "max_tokens");
    json_int_t max_tokens = json_is_integer(mt) ? json_integer_value(mt) : 256;
    bool thinking = json_is_true(json_object_get(spec, "thinking"));
    body = json_pack("{s:s, s:O, s:b, s:{s:b}, s:f, s:I, s:{s:b}}", "model", model, "messages", msgs, "stream", 1,
                     "stream_options", "include_usage", 1, "temperature", 0.0, "max_tokens", max_tokens,
                     "chat_template_kwargs", "enable_thinking", thinking);
    if (!body)
        goto oom;
    // End-of-generation tokens do not stop the reply (Rapid and vLLM read this; others ignore it).
    if (json_is_true(json_object_get(spec, "ignore_eos")) && json_object_set_new(body, "ignore_eos", json_true()))
        goto oom;
    const json_t *names = json_object_get(spec, "tools");
    if (json_array_size(names)) {
        const json_t *map = json_object_get(ts->root, "tools");
        tools = json_array();
        if (!tools)
            goto oom;
        size_t i;
        const json_t *n;
        json_array_foreach(names, i, n)
        {
            const char *name = json_string_value(n);
            const json_t *def = name ? json_object_get(map, name) : NULL;
            if (!def) {
                st = RP_ERR(RP_ERR_INVALID, "tool '%s' is not defined in the task file", name ? name : "?");
                goto fail;
            }
            json_t *fn = json_deep_copy(def);
            if (!fn || json_object_set_new(fn, "name", json_string(name)) ||
                json_array_append_new(tools, json_pack("{s:s, s:o}", "type", "function", "function", fn)))
                goto oom;
        }
        if (json_object_set(body, "tools", tools))
            goto oom;
        const json_t *choice = json_object_get(spec, "tool_choice");
        if (choice && json_object_set(body, "tool_choice", (json_t *)choice))
            goto oom;
    }
    char *dump = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!dump)
        goto oom;
    *out = rp_strdup(dump);
    free(dump); // jansson's allocation
    if (!*out)
        goto oom;
    goto fail;
oom:
    st = RP_ERR(RP_ERR_NOMEM, "out of memory building a request");
fail:
    json_decref(msgs);
    json_decref(body);
    json_decref(tools);
    return st;
}

/* ---- tool-call accuracy ------------------------------------------------------------ */

static bool same_value(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!same_value(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    }
    if (json_is_object(a) && json_is_object(b)) {
        if (json_object_size(a) != json_object_size(b))
            return false;
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)a, k, v) if (!same_value(v, json_object_get(b, k))) return false;
        return true;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

bool rp_bench_tool_pass(const json_t *tool_calls, const char *name, const json_t *expected_args)
{
    const json_t *call = json_array_get(tool_calls, 0);
    const char *got = json_string_value(json_object_get(call, "name"));
    if (!got || strcmp(got, name) != 0)
        return false;
    const char *args = json_string_value(json_object_get(call, "arguments"));
    json_t *parsed = args ? json_loads(args, 0, NULL) : NULL;
    bool ok = json_is_object(parsed);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)expected_args, k, v)
    {
        if (!ok)
            break;
        const json_t *g = json_object_get(parsed, k);
        ok = g && same_value(v, g);
    }
    json_decref(parsed);
    return ok;
}
