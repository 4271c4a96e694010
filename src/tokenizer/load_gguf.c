/*
 * load_gguf.c - the tokenizer embedded in GGUF files (tokenizer.ggml.* keys).
 *
 * tokenizer.ggml.model "gpt2": byte-level BPE, merges "a b" by rank; the
 * pre-tokenizer regexes are chosen by tokenizer.ggml.pre, as llama.cpp does
 * (each regex a Split with Isolated behavior, then the byte mapping). We use
 * the original Hugging Face patterns where llama.cpp carries a rewritten copy
 * for std::regex, since PCRE2 runs the originals.
 * tokenizer.ggml.model "llama": SentencePiece BPE by score with <0xNN> byte
 * fallback; spaces escaped to ▁ with llama.cpp's prefix rule (a space before
 * the text and after every special token when add_space_prefix).
 * Control, user-defined and unknown tokens are matched in the text as added
 * tokens; bos/eos/eot/eom/unk/pad ids and add_bos/add_eos follow llama.cpp's
 * defaults and overrides.
 */
#include "tokenizer_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3                                                                                                      \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|" \
    "\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                                       \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"      \
    "\\s+(?!\\S)|\\s+"

typedef struct pre_def {
    const char *names; // '|'-separated tokenizer.ggml.pre values
    const char *re[6];
    bool ignore_merges, add_bos;
} pre_def;

static const pre_def pre_defs[] = {
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, false},
    {"llama3|llama-v3|llama-bpe|falcon3", {RE_LLAMA3}, true, true},
    {"dbrx|smaug-bpe|chatglm-bpe", {RE_LLAMA3}, false, false},
    {"deepseek-llm",
     {"[\r\n]",
      "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
      "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+", "\\p{N}+"},
     false, false},
    {"deepseek-coder", {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"}, false, false},
    {"deepseek-v3",
     {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
      "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
     false, false},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, false, false},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b", {"\\p{N}", RE_GPT2}, false, false},
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v1-en|jina-v2-es|jina-v2-de|jina-v2-code|roberta-bpe|mpt|olmo|jais",
     {RE_GPT2},
     false,
     false},
    {"qwen2|stablelm2|megrez", {RE_QWEN2}, false, false},
    {"poro-chat|bloom|gpt3-finnish", {" ?[^(\\s|.,!?…。，、।۔،)]+"}, false, false},
    {"viking", {" ?[^(\\s|.,!?…。，、।۔،)]+", "\\p{N}"}, false, false},
    {"tekken",
     {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?["
      "\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
      "\\s+(?!\\S)|\\s+"},
     true,
     true},
};

static bool name_in(const char *names, const char *s, size_t len)
{
    const char *p = names;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && memcmp(p, s, n) == 0)
            return true;
        if (!bar)
            break;
        p = bar + 1;
    }
    return false;
}

static int32_t get_id(const rp_gguf *g, const rp_tokenizer *t, const char *key, int32_t def)
{
    int64_t v;
    if (!rp_gguf_get_int(g, key, &v))
        return def;
    if (v < 0 || v >= t->n_vocab)
        return def; // llama.cpp: a bad special id keeps the default
    return (int32_t)v;
}

static rp_status load_merges(const rp_gguf *g, rp_tokenizer *t)
{
    rp_gguf_type et;
    uint64_t n;
    if (!rp_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n) || et != RP_GGUF_STRING)
        return RP_ERR(RP_ERR_INVALID, "tokenizer.ggml.merges: missing or not a string array");
    if (n > RP_TOK_MAX_ID)
        return RP_ERR(RP_ERR_INVALID, "tokenizer.ggml.merges: too many merges");
    if (tok_pairmap_init(&t->merges, (size_t)n))
        return RP_ERR_NOMEM;
    tok_buf cat = {0};
    for (uint64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = rp_gguf_arr_str(g, "tokenizer.ggml.merges", i, &len);
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp)
            continue; // llama.cpp ranks a malformed line under an empty pair: it never matches
        size_t al = (size_t)(sp - s), bl = len - al - 1;
        int32_t a = tok_strmap_get(&t->vocab_map, s, al), b = tok_strmap_get(&t->vocab_map, sp + 1, bl);
        cat.len = 0;
        if (tok_buf_put(&cat, s, al) || tok_buf_put(&cat, sp + 1, bl)) {
            rp_free(cat.p);
            return RP_ERR_NOMEM;
        }
        int32_t m = tok_strmap_get(&t->vocab_map, cat.p, cat.len);
        if (a < 0 || b < 0 || m < 0)
            continue; // merges into or from unknown strings can never yield a token
        if (tok_pairmap_put(&t->merges, a, b, (int32_t)i, m)) {
            rp_free(cat.p);
            return RP_ERR_NOMEM;
        }
    }
    rp_free(cat.p);
    return RP_OK;
}

rp_status rp_tok_load_gguf(const rp_gguf *g, rp_tokenizer **out)
{
    *out = NULL;
    rp_status st;
    rp_tokenizer *t = NULL;
    size_t mlen = 0, plen = 0;
    const char *model = rp_gguf_get_str(g, "tokenizer.ggml.model", &mlen);
    if (!model)
        return RP_ERR(RP_ERR_INVALID, "tokenizer.ggml.model: missing (the file holds no tokenizer)");
    bool bpe = mlen == 4 && !memcmp(model, "gpt2", 4), spm = mlen == 5 && !memcmp(model, "llama", 5);
    if (!bpe && !spm)
        return RP_ERR(RP_ERR_UNSUPPORTED, "tokenizer.ggml.model \"%.*s\" is not supported (gpt2 or llama)", (int)mlen,
                      model);
    rp_gguf_type et;
    uint64_t n;
    if (!rp_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) || et != RP_GGUF_STRING)
        return RP_ERR(RP_ERR_INVALID, "tokenizer.ggml.tokens: missing or not a string array");
    if (n == 0 || n >= RP_TOK_MAX_ID)
        return RP_ERR(RP_ERR_INVALID, "tokenizer.ggml.tokens: %llu tokens is out of range", (unsigned long long)n);
    uint64_t ns = 0, nt = 0;
    rp_gguf_type st_t = RP_GGUF_FLOAT32, tt_t = RP_GGUF_INT32;
    bool has_scores = rp_gguf_get_arr(g, "tokenizer.ggml.scores", &st_t, &ns);
    bool has_types = rp_gguf_get_arr(g, "tokenizer.ggml.token_type", &tt_t, &nt);
    if (has_scores && (ns != n || (st_t != RP_GGUF_FLOAT32 && st_t != RP_GGUF_FLOAT64)))
        return RP_ERR(RP_ERR_INVALID, "tokenizer.ggml.scores: %llu values for %llu tokens", (unsigned long long)ns,
                      (unsigned long long)n);
    if (has_types && (nt != n || tt_t == RP_GGUF_STRING || tt_t == RP_GGUF_ARRAY || tt_t == RP_GGUF_FLOAT32 ||
                      tt_t == RP_GGUF_FLOAT64 || tt_t == RP_GGUF_BOOL))
        return RP_ERR(RP_ERR_INVALID, "tokenizer.ggml.token_type: %llu integers expected", (unsigned long long)n);
    if ((st = tok_create((int32_t)n, &t)))
        return st;
    t->added = rp_calloc((size_t)n + 1, sizeof(*t->added));
    if (!t->added || tok_strmap_init(&t->vocab_map, (size_t)n)) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (uint64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = rp_gguf_arr_str(g, "tokenizer.ggml.tokens", i, &len);
        char empty[32];
        if (!s || len == 0) {
            snprintf(empty, sizeof(empty), "[EMPTY_%llu]", (unsigned long long)i);
            s = empty;
            len = strlen(empty);
        }
        if ((st = tok_set_text(t, (int32_t)i, s, len)))
            goto fail;
        tok_entry *e = &t->vocab[i];
        e->score = has_scores ? (float)rp_gguf_arr_float(g, "tokenizer.ggml.scores", i) : 0.0f;
        int64_t ty = has_types ? rp_gguf_arr_int(g, "tokenizer.ggml.token_type", i) : 1;
        e->attr = ty == 2 ? TOK_ATTR_UNKNOWN : ty == 3 ? TOK_ATTR_CONTROL : ty == 4 ? TOK_ATTR_USER
                  : ty == 5 ? TOK_ATTR_UNUSED : ty == 6 ? TOK_ATTR_BYTE : TOK_ATTR_NORMAL;
    }
    for (int32_t i = 0; i < t->n_vocab; i++)
        if ((st = tok_strmap_put(&t->vocab_map, t->vocab[i].text, t->vocab[i].len, i)))
            goto fail;

    bool add_bos, add_eos = false, add_space_prefix = false;
    if (bpe) {
        t->model = TOK_MODEL_BPE;
        add_bos = false;
        if ((st = load_merges(g, t)))
            goto fail;
        const char *pre = rp_gguf_get_str(g, "tokenizer.ggml.pre", &plen);
        if (!pre) {
            pre = "default";
            plen = 7;
        }
        const pre_def *def = NULL;
        for (size_t i = 0; i < sizeof(pre_defs) / sizeof(pre_defs[0]) && !def; i++)
            if (name_in(pre_defs[i].names, pre, plen))
                def = &pre_defs[i];
        if (!def) {
            st = RP_ERR(RP_ERR_UNSUPPORTED, "tokenizer.ggml.pre \"%.*s\" is not supported", (int)plen, pre);
            goto fail;
        }
        t->ignore_merges = def->ignore_merges;
        add_bos = def->add_bos;
        for (int i = 0; i < 6 && def->re[i]; i++) {
            tok_pre p = {.type = PRE_SPLIT, .behavior = SPLIT_ISOLATED};
            if ((st = tok_compile(def->re[i], strlen(def->re[i]), 0, &p.re)) || (st = tok_add_pre(t, p)))
                goto fail;
        }
        if ((st = tok_add_pre(t, (tok_pre){.type = PRE_BYTELEVEL})) ||
            (st = tok_add_dec(t, (tok_dec){.type = DEC_BYTELEVEL})))
            goto fail;
        t->bos = t->eos = t->n_vocab > 11 ? 11 : -1; // llama.cpp's defaults for gpt2 vocabularies
    } else {
        t->model = TOK_MODEL_SPM;
        add_bos = true;
        add_space_prefix = true;
        t->bos = t->n_vocab > 1 ? 1 : -1;
        t->eos = t->n_vocab > 2 ? 2 : -1;
        t->unk_id = 0;
    }
    bool b;
    if (rp_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b))
        add_space_prefix = b;
    if (spm) {
        tok_pre p = {.type = PRE_METASPACE, .repl = "\xE2\x96\x81", .repl_len = 3,
                     .prepend = add_space_prefix ? PREPEND_LLAMACPP : PREPEND_NEVER};
        if ((st = tok_add_pre(t, p)))
            goto fail;
        tok_dec r = {.type = DEC_REPLACE, .a = rp_strdup("\xE2\x96\x81"), .b = rp_strdup(" "), .a_len = 3, .b_len = 1};
        if (!r.a || !r.b) {
            tok_dec_free(&r);
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            goto fail;
        }
        if ((st = tok_add_dec(t, r)) || (st = tok_add_dec(t, (tok_dec){.type = DEC_BYTEFALLBACK})) ||
            (st = tok_add_dec(t, (tok_dec){.type = DEC_FUSE})))
            goto fail;
        if (add_space_prefix) {
            if ((st = tok_add_dec(t, (tok_dec){.type = DEC_STRIP, .strip_cp = ' ', .start = 1})))
                goto fail;
            t->strip_leading = true;
        }
        t->byte_fallback = true;
    }
    t->bos = get_id(g, t, "tokenizer.ggml.bos_token_id", t->bos);
    t->eos = get_id(g, t, "tokenizer.ggml.eos_token_id", t->eos);
    t->unk_id = get_id(g, t, "tokenizer.ggml.unknown_token_id", t->unk_id);
    t->pad = get_id(g, t, "tokenizer.ggml.padding_token_id", -1);
    int32_t eot = get_id(g, t, "tokenizer.ggml.eot_token_id", -1), eom = get_id(g, t, "tokenizer.ggml.eom_token_id", -1);
    if (rp_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b))
        add_bos = b;
    if (rp_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b))
        add_eos = b;
    t->prefix = rp_malloc(sizeof(int32_t));
    t->suffix = rp_malloc(sizeof(int32_t));
    if (!t->prefix || !t->suffix) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (add_bos && t->bos >= 0)
        t->prefix[t->n_prefix++] = t->bos;
    if (add_eos && t->eos >= 0)
        t->suffix[t->n_suffix++] = t->eos;

    // Tokens matched verbatim in the text; llama.cpp gives phi-3's special tokens rstrip.
    size_t nlen = 0;
    const char *name = rp_gguf_get_str(g, "general.name", &nlen);
    bool phi3 = false;
    for (size_t i = 0; name && i + 4 <= nlen && !phi3; i++)
        phi3 = (i + 5 <= nlen && !strncasecmp(name + i, "phi-3", 5)) || !strncasecmp(name + i, "phi3", 4);
    for (int32_t i = 0; i < t->n_vocab; i++) {
        tok_entry *e = &t->vocab[i];
        if (!(e->attr & (TOK_ATTR_CONTROL | TOK_ATTR_USER | TOK_ATTR_UNKNOWN)))
            continue;
        e->special = !(e->attr & TOK_ATTR_USER);
        tok_added *a = &t->added[t->n_added];
        a->id = i;
        a->special = e->special;
        a->len = e->len;
        if (!(a->content = rp_strndup(e->text, e->len))) {
            st = RP_ERR(RP_ERR_NOMEM, "out of memory");
            goto fail;
        }
        if (phi3)
            a->rstrip = strcmp(e->text, "<unk>") && strcmp(e->text, "<s>") && strcmp(e->text, "<|endoftext|>");
        t->n_added++;
    }
    if (phi3) {
        for (int i = 0; i < t->n_added; i++)
            if (!strcmp(t->added[i].content, "</s>"))
                t->added[i].rstrip = true;
    }
    size_t tl;
    const char *tmpl = rp_gguf_get_str(g, "tokenizer.chat_template", &tl);
    if (tmpl && !(t->chat_template = rp_strndup(tmpl, tl))) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((t->bos >= 0 && !(t->bos_text = rp_strdup(t->vocab[t->bos].text))) ||
        (t->eos >= 0 && !(t->eos_text = rp_strdup(t->vocab[t->eos].text)))) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = tok_finish(t)))
        goto fail;
    if (eot >= 0)
        t->vocab[eot].eog = true;
    if (eom >= 0)
        t->vocab[eom].eog = true;
    *out = t;
    return RP_OK;
fail:
    rp_tok_destroy(t);
    return st;
}
