/*
 * load_spm.c - SentencePiece `tokenizer.model` files (BPE type only).
 *
 * A small protobuf reader for ModelProto: pieces (piece, score, type),
 * trainer_spec (model_type, byte_fallback, unk id) and normalizer_spec
 * (precompiled charsmap, add_dummy_prefix, remove_extra_whitespaces,
 * escape_whitespaces). Encoding follows the sentencepiece library itself: its
 * normalizer (NORM_SPM), score-ordered BPE with byte fallback, control/unknown
 * pieces as special added tokens,
 * user-defined pieces as plain added tokens, and the
 * Replace/ByteFallback/Fuse/Strip decoder of transformers' LlamaConverter. The caller applies
 * tokenizer_config.json and finishes the tokenizer.
 */
#include "tokenizer_int.h"

typedef struct pb {
    const uint8_t *p, *end;
} pb;

static bool pb_varint(pb *b, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end)
            return false;
        uint8_t c = *b->p++;
        *v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80))
            return true;
    }
    return false;
}

// Reads one field header and its payload: varint in *v, or bytes in *sub.
static bool pb_field(pb *b, uint32_t *field, uint32_t *wire, uint64_t *v, pb *sub)
{
    uint64_t key;
    if (!pb_varint(b, &key))
        return false;
    *field = (uint32_t)(key >> 3);
    *wire = (uint32_t)(key & 7);
    switch (*wire) {
    case 0:
        return pb_varint(b, v);
    case 1:
        if (b->end - b->p < 8)
            return false;
        memcpy(v, b->p, 8);
        b->p += 8;
        return true;
    case 2:
        if (!pb_varint(b, v) || *v > (uint64_t)(b->end - b->p))
            return false;
        sub->p = b->p;
        sub->end = b->p + *v;
        b->p += *v;
        return true;
    case 5: {
        uint32_t x;
        if (b->end - b->p < 4)
            return false;
        memcpy(&x, b->p, 4);
        *v = x;
        b->p += 4;
        return true;
    }
    default:
        return false;
    }
}

rp_status tok_load_spm_model(const char *path, rp_tokenizer **out)
{
    *out = NULL;
    rp_mapping m;
    rp_status st = rp_file_map(path, &m);
    if (st)
        return st;
    rp_tokenizer *t = NULL;
    pb b = {m.data, m.data + m.size};
    int64_t model_type = 1; // UNIGRAM is the protobuf default
    bool byte_fallback = false, dummy_prefix = true, remove_ws = true, escape_ws = true;
    const uint8_t *charsmap = NULL;
    size_t charsmap_len = 0;
    int64_t unk_id = 0;
    int32_t n = 0;
    // First pass: count pieces and read the specs.
    while (b.p < b.end) {
        uint32_t f, w;
        uint64_t v;
        pb sub = {0};
        if (!pb_field(&b, &f, &w, &v, &sub)) {
            st = RP_ERR(RP_ERR_INVALID, "%s: malformed SentencePiece model", path);
            goto fail;
        }
        if (f == 1 && w == 2) {
            if (++n >= RP_TOK_MAX_ID) {
                st = RP_ERR(RP_ERR_INVALID, "%s: too many pieces", path);
                goto fail;
            }
        } else if ((f == 2 || f == 3) && w == 2) {
            while (sub.p < sub.end) {
                uint32_t f2, w2;
                uint64_t v2;
                pb s2 = {0};
                if (!pb_field(&sub, &f2, &w2, &v2, &s2)) {
                    st = RP_ERR(RP_ERR_INVALID, "%s: malformed SentencePiece spec", path);
                    goto fail;
                }
                if (f == 2 && f2 == 3 && w2 == 0)
                    model_type = (int64_t)v2;
                else if (f == 2 && f2 == 35 && w2 == 0)
                    byte_fallback = v2 != 0;
                else if (f == 2 && f2 == 40 && w2 == 0)
                    unk_id = (int64_t)(int32_t)v2;
                else if (f == 3 && f2 == 3 && w2 == 0)
                    dummy_prefix = v2 != 0;
                else if (f == 3 && f2 == 4 && w2 == 0)
                    remove_ws = v2 != 0;
                else if (f == 3 && f2 == 5 && w2 == 0)
                    escape_ws = v2 != 0;
                else if (f == 3 && f2 == 2 && w2 == 2)
                    charsmap = s2.p, charsmap_len = (size_t)(s2.end - s2.p);
            }
        }
    }
    if (model_type != 2) {
        st = RP_ERR(RP_ERR_UNSUPPORTED, "%s: SentencePiece model type %lld is not supported (only BPE)", path,
                    (long long)model_type);
        goto fail;
    }
    if ((st = tok_create(n, &t)))
        goto fail;
    t->added = rp_calloc((size_t)n + 1, sizeof(*t->added));
    if (!t->added || tok_strmap_init(&t->vocab_map, (size_t)n)) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    b = (pb){m.data, m.data + m.size};
    int32_t id = 0;
    while (b.p < b.end) {
        uint32_t f, w;
        uint64_t v;
        pb sub = {0};
        if (!pb_field(&b, &f, &w, &v, &sub) || !(f == 1 && w == 2))
            continue;
        const uint8_t *piece = NULL;
        size_t plen = 0;
        float score = 0;
        int type = 1;
        while (sub.p < sub.end) {
            uint32_t f2, w2;
            uint64_t v2;
            pb s2 = {0};
            if (!pb_field(&sub, &f2, &w2, &v2, &s2))
                break;
            if (f2 == 1 && w2 == 2) {
                piece = s2.p;
                plen = (size_t)(s2.end - s2.p);
            } else if (f2 == 2 && w2 == 5) {
                uint32_t x = (uint32_t)v2;
                memcpy(&score, &x, 4);
            } else if (f2 == 3 && w2 == 0) {
                type = (int)v2;
            }
        }
        if (!piece) {
            st = RP_ERR(RP_ERR_INVALID, "%s: piece %d has no text", path, (int)id);
            goto fail;
        }
        if ((st = tok_set_text(t, id, (const char *)piece, plen)))
            goto fail;
        tok_entry *e = &t->vocab[id];
        e->score = score;
        e->attr = type == 2 ? TOK_ATTR_UNKNOWN : type == 3 ? TOK_ATTR_CONTROL : type == 4 ? TOK_ATTR_USER
                  : type == 5 ? TOK_ATTR_UNUSED : type == 6 ? TOK_ATTR_BYTE : TOK_ATTR_NORMAL;
        if (e->attr & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL | TOK_ATTR_USER)) {
            tok_added *a = &t->added[t->n_added];
            a->id = id;
            a->special = !(e->attr & TOK_ATTR_USER);
            a->normalized = false;
            a->len = plen;
            if (!(a->content = rp_strndup((const char *)piece, plen))) {
                st = RP_ERR(RP_ERR_NOMEM, "out of memory");
                goto fail;
            }
            t->n_added++;
            e->special = a->special;
        }
        id++;
    }
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->vocab[i].text && (st = tok_strmap_put(&t->vocab_map, t->vocab[i].text, t->vocab[i].len, i)))
            goto fail;
    t->model = TOK_MODEL_SPM;
    t->byte_fallback = byte_fallback;
    t->unk_id = unk_id >= 0 && unk_id < t->n_vocab ? (int32_t)unk_id : -1;
    t->norms = rp_calloc(1, sizeof(*t->norms));
    t->decs = rp_calloc(4, sizeof(*t->decs));
    if (!t->norms || !t->decs || !(t->norms[0].a = rp_malloc(charsmap_len + 1))) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    // SentencePiece's normalizer does the charsmap, whitespace and ▁ escaping.
    t->n_norms = 1;
    t->norms[0].type = NORM_SPM;
    if (charsmap_len)
        memcpy(t->norms[0].a, charsmap, charsmap_len);
    t->norms[0].a_len = charsmap_len;
    t->norms[0].dummy_prefix = dummy_prefix;
    t->norms[0].remove_ws = remove_ws;
    t->norms[0].escape_ws = escape_ws;
    t->decs[0] = (tok_dec){.type = DEC_REPLACE, .a = rp_strdup("\xE2\x96\x81"), .b = rp_strdup(" "), .a_len = 3, .b_len = 1};
    t->decs[1] = (tok_dec){.type = DEC_BYTEFALLBACK};
    t->decs[2] = (tok_dec){.type = DEC_FUSE};
    t->n_decs = 3;
    if (dummy_prefix) {
        t->decs[3] = (tok_dec){.type = DEC_STRIP, .strip_cp = ' ', .start = 1, .stop = 0};
        t->n_decs = 4;
        t->strip_leading = true;
    }
    if (!t->decs[0].a || !t->decs[0].b) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    // bos/eos: the usual SentencePiece control pieces; tokenizer_config.json may override.
    t->bos = tok_strmap_get(&t->vocab_map, "<s>", 3);
    t->eos = tok_strmap_get(&t->vocab_map, "</s>", 4);
    if ((t->bos >= 0 && !(t->bos_text = rp_strdup("<s>"))) || (t->eos >= 0 && !(t->eos_text = rp_strdup("</s>")))) {
        st = RP_ERR(RP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    rp_file_unmap(&m);
    *out = t;
    return RP_OK;
fail:
    rp_tok_destroy(t);
    rp_file_unmap(&m);
    return st;
}
