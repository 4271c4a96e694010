/*
 * template.c - the chat template API (chat.h): parse once, render per request.
 *
 * create lexes and parses the source into an AST kept in the template's arena.
 * render builds a context with its own arena (capped), binds the variables
 * transformers passes to apply_chat_template (messages, tools, documents=None,
 * add_generation_prompt, the special tokens, then chat_template_kwargs) in a root
 * frame, and runs the AST. Nothing in the template is written during a render,
 * so concurrent renders of one template are safe.
 */
#include "jinja_int.h"

struct rp_chat_template {
    jj_arena arena; // tokens, AST, constants
    jj_node *root;
};

rp_status rp_chat_template_create(const char *source, size_t len, rp_chat_template **out)
{
    *out = NULL;
    if (!source && len)
        return RP_ERR(RP_ERR_INVALID, "template error: no source");
    rp_chat_template *t = rp_calloc(1, sizeof(*t));
    if (!t)
        return RP_ERR(RP_ERR_NOMEM, "template error: out of memory");
    jj_token *toks = NULL;
    size_t n_toks = 0;
    rp_status st = jj_lex(&t->arena, source ? source : "", len, &toks, &n_toks);
    if (!st)
        st = jj_parse(&t->arena, toks, n_toks, &t->root);
    if (st) {
        rp_chat_template_destroy(t);
        return st;
    }
    *out = t;
    return RP_OK;
}

void rp_chat_template_destroy(rp_chat_template *t)
{
    if (!t)
        return;
    jj_arena_free(&t->arena);
    rp_free(t);
}

static bool bind_str(jj_ctx *c, const char *name, const char *s)
{
    jv *v = jv_str(c, s, strlen(s));
    return v && jj_frame_set(c, c->root, name, v);
}

static rp_status bind_inputs(jj_ctx *c, const rp_chat_render_params *p)
{
    jv *messages = p->messages ? jv_from_json(c, p->messages, 0) : jv_list(c, 0);
    jv *tools = p->tools ? jv_from_json(c, p->tools, 0) : JV_NONE_;
    if (!messages || !tools || !jj_frame_set(c, c->root, "messages", messages) ||
        !jj_frame_set(c, c->root, "tools", tools) || !jj_frame_set(c, c->root, "documents", JV_NONE_) ||
        !jj_frame_set(c, c->root, "add_generation_prompt", jv_bool(p->add_generation_prompt)))
        return c->st;
    if (p->bos_token && !bind_str(c, "bos_token", p->bos_token))
        return c->st;
    if (p->eos_token && !bind_str(c, "eos_token", p->eos_token))
        return c->st;
    if (p->kwargs) {
        if (!json_is_object(p->kwargs))
            return jj_fail(c, RP_ERR_INVALID, "chat template kwargs must be an object");
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)p->kwargs, key, val)
        {
            if (!strcmp(key, "messages") || !strcmp(key, "tools") || !strcmp(key, "documents") ||
                !strcmp(key, "add_generation_prompt"))
                return jj_fail(c, RP_ERR_INVALID, "chat template kwargs may not set '%s'", key);
            char *name = jj_strndup(&c->arena, key, strlen(key));
            jv *v = name ? jv_from_json(c, val, 0) : NULL;
            if (!name)
                jj_fail(c, RP_ERR_NOMEM, "out of memory");
            if (!v || !jj_frame_set(c, c->root, name, v))
                return c->st;
        }
    }
    return RP_OK;
}

rp_status rp_chat_template_render(const rp_chat_template *t, const rp_chat_render_params *p, char **out,
                                  size_t *out_len)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    jj_ctx c = {0};
    jj_buf buf = {0};
    c.arena.cap = JJ_MAX_ARENA;
    c.out = &buf;
    c.line = 1;
    c.root = c.frame = jj_calloc(&c, sizeof(jj_frame));
    rp_status st = c.root ? bind_inputs(&c, p) : c.st;
    if (!st)
        st = jj_exec(&c, t->root);
    if (!st && c.st)
        st = c.st;
    if (!st && !buf.s) {
        buf.s = rp_malloc(1);
        if (!buf.s)
            st = RP_ERR(RP_ERR_NOMEM, "template error: out of memory");
        else
            buf.s[0] = 0;
    }
    jj_arena_free(&c.arena);
    if (st) {
        jj_buf_free(&buf);
        return st;
    }
    *out = buf.s;
    if (out_len)
        *out_len = buf.len;
    return RP_OK;
}
