/*
 * engine.c - the engine thread: continuous batching of generation requests.
 *
 * Design:
 *   - One mutex (e->mu) guards what other threads see: the queue, each
 *     request's outbox, finish reason and stats, the running count and the KV
 *     pool's block accounting. The engine thread holds it to schedule (sweep
 *     cancelled requests, admit, reserve KV, preempt) and to publish (append
 *     tokens, retire); it drops it for the forward pass and sampling, which
 *     touch only engine-thread state. Readers wait on their request's condvar,
 *     the engine thread on e->cv (never a busy loop).
 *   - Lifetimes: the engine's shell (mutex, condvars) is reference counted,
 *     one reference for create/destroy and one per handle not yet released, so
 *     handles stay usable after rp_engine_destroy; the thread, the KV pool and
 *     the buffers go at destroy.
 *   - A request's tokens: toks[0, n_tok) is the prompt then the generated
 *     tokens, toks[0, n_comp) have their KV in the pool. Each step a running
 *     request feeds toks[n_comp, ...): one token when n_tok - n_comp == 1
 *     (decode), else a chunk (prefill, or recompute after preemption), and it
 *     samples when its chunk reaches n_tok. Decode tokens go first, then the
 *     chunks in admission order, up to the model's max_batch tokens.
 *   - KV: admission reserves every block toks needs, so a prefill never waits
 *     for blocks; decoding grows a slot a step. When the pool is empty the most
 *     recently admitted request is preempted (KV freed, back to the head of the
 *     queue, n_comp = 0; its sampler and emitted tokens are kept): vLLM's
 *     recompute preemption. The forward pass is per-token deterministic, so the
 *     recomputed logits, and the output, are what they would have been.
 *   - Prefix cache (src/cache/): admission looks the request's tokens up and
 *     adopts the cached leading blocks (attach_prefix), retirement and
 *     preemption publish the whole computed blocks (publish_prefix). While
 *     others run, a prefix with many blocks on disk is first read into the
 *     memory cache DISK_READS_PER_STEP blocks per step (rp_cache_prefetch), the
 *     request waiting at the head of the queue, so the reads never stall the
 *     running streams for long. These hooks are all the scheduler knows of it; the pool's free blocks include
 *     cached blocks nobody holds, which the pool reuses least recent first.
 *   - JSON mode: the grammar's token table (rp_json_vocab) is built once, by
 *     the first JSON request's submit; each JSON request gets a matcher at
 *     first admission. Each step its logits row is masked before sampling
 *     (and before logprobs) and the chosen token is accepted by the matcher.
 *   - Speculative decoding lives in engine_spec.c; this file only calls its
 *     hooks (engine_int.h): spec_plan picks drafts and reserves their slots
 *     with the schedule, spec_draft makes them before the batch is built, the
 *     batch carries them after the request's decode token, spec_verify
 *     replaces sampling for a request that drafted, spec_publish gives back
 *     the slots of rejected drafts. A step may so emit several tokens of one
 *     request (g->step).
 *   - Memory: engine buffers are sized at create (the batch for max_batch
 *     tokens, logits for max_rows rows); a request's token list, step tokens
 *     and outbox at submit, its sampler and matcher at first admission; the
 *     token list, the outbox and the KV block table grow geometrically.
 *     Nothing else is allocated per step.
 */
#include "engine_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <time.h>

#define DEFAULT_BLOCK 16
#define DEFAULT_MAX_RUNNING 16
#define DEFAULT_MAX_QUEUE 64
#define DEFAULT_KV_MIN 4096    // tokens
#define MARGIN_DIV 8           // the admission margin is at most this fraction of the pool
#define PARAM_MAX (1 << 24)    // sanity bound on every size parameter
#define OUTBOX_MIN 16          // tokens an outbox holds at first
#define TOKS_SLACK 64          // room for generated tokens in the token list at first
#define DISK_READS_PER_STEP 16 // prefix-cache blocks read from disk per step while others run
#define DISK_STEPS_MAX 256     // then (the pool keeps evicting what was read) the rest is read at once

void rp_engine_params_default(rp_engine_params *p)
{
    memset(p, 0, sizeof(*p));
    p->spec.adaptive = true;
}

void rp_gen_params_default(rp_gen_params *p)
{
    memset(p, 0, sizeof(*p));
    rp_sample_params_default(&p->sample);
    p->n_logprobs = -1;
}

/* ---- lists and lifetimes ---------------------------------------------------- */

static void list_unlink(rp_gen **head, rp_gen **tail, rp_gen *g)
{
    if (g->prev)
        g->prev->next = g->next;
    else
        *head = g->next;
    if (g->next)
        g->next->prev = g->prev;
    else
        *tail = g->prev;
    g->prev = g->next = NULL;
}

static void list_append(rp_gen **head, rp_gen **tail, rp_gen *g)
{
    g->next = NULL;
    g->prev = *tail;
    if (*tail)
        (*tail)->next = g;
    else
        *head = g;
    *tail = g;
}

static void list_prepend(rp_gen **head, rp_gen **tail, rp_gen *g)
{
    g->prev = NULL;
    g->next = *head;
    if (*head)
        (*head)->prev = g;
    else
        *tail = g;
    *head = g;
}

// Drops a reference to the engine's shell; the last one frees it.
static void engine_unref(rp_engine *e)
{
    if (atomic_fetch_sub(&e->refs, 1) != 1)
        return;
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->jv_mu);
    pthread_mutex_destroy(&e->mu);
    rp_free(e);
}

// Frees a request that holds no KV and no sampler any more; drops its engine reference.
static void gen_free(rp_gen *g)
{
    rp_engine *e = g->e;
    rp_free(g->kv.blocks); // the table only: retirement gave the blocks back
    rp_free(g->toks);
    rp_free(g->step);
    rp_free(g->out);
    rp_json_schema_unref(g->schema);
    rp_free(g->json_prefix);
    pthread_cond_destroy(&g->cv);
    rp_free(g);
    engine_unref(e);
}

static int blocks_for(const rp_engine *e, int n_tokens)
{
    return (n_tokens + e->block - 1) / e->block;
}

bool engine_is_eog(const rp_engine *e, int32_t id)
{
    if (rp_tok_is_eog(e->tok, id))
        return true;
    for (int i = 0; i < e->cfg->n_eos; i++)
        if (e->cfg->eos_ids[i] == id)
            return true;
    return false;
}

/* ---- scheduling (engine thread, e->mu held) ------------------------------- */

// Offers g's whole blocks of computed tokens to the prefix cache (before its KV goes).
// With recurrent state, blocks are worth nothing without the state at their end: they
// went to the cache with it (save_state), and the rest is not offered.
static void publish_prefix(rp_engine *e, rp_gen *g)
{
    if (e->cache && g->kv.n_blocks > 0 && !e->stateful)
        rp_cache_publish(e->cache, g->toks, &g->kv, g->n_comp / e->block);
}

// Retires g with `reason`: out of its list, KV and sampler freed, the reader
// woken (or the handle freed if it was released).
static void finish(rp_engine *e, rp_gen *g, rp_gen_finish reason, const char *msg)
{
    if (g->running) {
        list_unlink(&e->r_head, &e->r_tail, g);
        e->n_running--;
        g->running = false;
    } else {
        list_unlink(&e->q_head, &e->q_tail, g);
        e->n_queued--;
    }
    if (reason != RP_GEN_ERROR) // an error may have left KV half written
        publish_prefix(e, g);
    rp_kv_seq_deinit(e->kv, &g->kv);
    spec_gen_end(e, g);
    rp_sampler_destroy(g->smp);
    g->smp = NULL;
    rp_json_match_destroy(g->jm);
    g->jm = NULL;
    g->finish = reason;
    if (reason == RP_GEN_ERROR)
        snprintf(g->err, sizeof(g->err), "%s", msg && *msg ? msg : "generation failed");
    g->in_engine = false;
    e->stats.requests_done++;
    if (reason == RP_GEN_CANCELLED)
        e->stats.requests_cancelled++;
    if (g->released)
        gen_free(g); // the shell outlives this: destroy holds its reference until the thread is joined
    else
        pthread_cond_signal(&g->cv);
}

// Cancelled (or released) requests, queued or running, are retired.
static void sweep(rp_engine *e)
{
    for (int pass = 0; pass < 2; pass++)
        for (rp_gen *g = pass ? e->r_head : e->q_head, *next; g; g = next) {
            next = g->next;
            if (atomic_load(&g->cancel))
                finish(e, g, RP_GEN_CANCELLED, NULL);
        }
}

// Sends the running request g back to the head of the queue without its KV.
static void preempt(rp_engine *e, rp_gen *g)
{
    list_unlink(&e->r_head, &e->r_tail, g);
    e->n_running--;
    g->running = false;
    publish_prefix(e, g);
    rp_kv_seq_truncate(e->kv, &g->kv, 0);
    g->n_comp = 0;
    spec_gen_preempted(e, g);
    list_prepend(&e->q_head, &e->q_tail, g);
    e->n_queued++;
    e->stats.preemptions++;
}

// Whether a cached prefix's last position runs again at admission (in a private copy of
// its block) for the MTP layer's sake: with MTP, unless the model has recurrent state,
// whose state has consumed every cached position (attach_prefix).
static bool reruns_last_cached(const rp_engine *e)
{
    return e->has_mtp && !e->stateful;
}

// Gives g (its sequence empty) the cached leading blocks of its tokens found by
// the lookup cm, and sets n_comp past them.
static rp_status attach_prefix(rp_engine *e, rp_gen *g, const rp_cache_match *cm)
{
    g->n_comp = 0;
    if (!e->cache)
        return RP_OK;
    int got; // (taking nothing still counts the misses)
    rp_status st = rp_cache_take(e->cache, g->toks, &g->kv, &got);
    if (st || got == 0)
        return st;
    int c = got * e->block;
    // (A model with state: the lookup left at least the last token out, and nothing runs
    // again, MTP or not: the state has consumed every cached position. The MTP row of the
    // last cached position stays as its publisher computed it: it only steers drafts.)
    RP_ASSERT(!e->stateful || c < g->n_tok);
    // The last token always runs: its logits are needed. MTP hook: the MTP
    // layer's KV at the last cached position depends on the next token, and its
    // input there (the main model's hidden row) is not cached, so with an MTP
    // layer the last cached position runs again: prefill from n_comp then yields
    // that row's h, and the speculative step fills its MTP KV as for any
    // prefilled position. Either way the position's block is written, so it is
    // made private first (copy on write); without a free block for the copy the
    // whole block is run again instead.
    if (reruns_last_cached(e) || c == g->n_tok) {
        if (rp_kv_seq_unshare_last(e->kv, &g->kv) == RP_OK) {
            c -= 1;
        } else {
            c -= e->block;
            rp_kv_seq_truncate(e->kv, &g->kv, c);
        }
    }
    g->n_comp = c;
    return RP_OK;
}

// Admits queued requests, first come first, while there is room and KV for all
// their tokens (the cached ones held by others cost nothing), keeping a margin
// free for the running requests' next tokens.
static void admit(rp_engine *e)
{
    while (e->q_head && e->n_running < e->max_running) {
        rp_gen *g = e->q_head;
        int need = blocks_for(e, g->n_tok);
        if (need > e->n_blocks) { // only a preempted request can have outgrown the whole pool
            finish(e, g, RP_GEN_LENGTH, NULL);
            continue;
        }
        rp_cache_match cm = {0};
        if (e->cache) // (with state the last token must run: the state at the end cannot take it again)
            rp_cache_lookup(e->cache, g->toks, (g->n_tok - e->stateful) / e->block, &cm);
        if (cm.n_disk > DISK_READS_PER_STEP && e->n_running > 0 && g->disk_steps < DISK_STEPS_MAX) {
            // Others are decoding: read this prefix from disk a few blocks per step (into
            // the memory cache) rather than stall them for all of it; admit it once the
            // rest fits in one step's reads. It keeps its place at the head of the queue.
            rp_cache_prefetch(e->cache, g->toks, DISK_READS_PER_STEP);
            g->disk_steps++;
            break;
        }
        bool cow = cm.n_blocks > 0 && (reruns_last_cached(e) || cm.n_blocks * e->block == g->n_tok);
        int margin = e->n_running < e->n_blocks / MARGIN_DIV ? e->n_running : e->n_blocks / MARGIN_DIV;
        if (need - cm.n_live + cow + margin > rp_kv_pool_free_blocks(e->kv))
            break;
        if (rp_kv_pool_n_state_layers(e->kv) > 0 && rp_kv_pool_free_states(e->kv) == 0)
            break; // (one slot per running request: only a request that has not let go of one yet)
        rp_status st = RP_OK;
        bool first = !g->smp;
        if (first && (st = rp_sampler_create(&g->sp, e->n_vocab, &g->smp)) == RP_OK)
            for (int i = 0; i < g->n_prompt; i++)
                rp_sampler_accept(g->smp, g->toks[i], true);
        if (!st && g->json && !g->jm)
            if ((st = rp_json_match_create(e->jv, g->schema, &g->jm)) == RP_OK && g->json_prefix_len)
                st = rp_json_match_feed(g->jm, g->json_prefix, g->json_prefix_len);
        if (!st)
            st = attach_prefix(e, g, &cm);
        if (!st)
            st = rp_kv_seq_reserve(e->kv, &g->kv, g->n_tok);
        if (st) {
            finish(e, g, RP_GEN_ERROR, rp_error_message());
            continue;
        }
        list_unlink(&e->q_head, &e->q_tail, g);
        e->n_queued--;
        list_append(&e->r_head, &e->r_tail, g);
        e->n_running++;
        g->running = true;
        if (g->stats.t_admit == 0) {
            g->stats.t_admit = rp_time_s();
            g->stats.n_cached = g->n_comp;
        }
        // With state: its state at the prompt's last whole block goes to the cache, where a
        // follow-up turn (or its own readmission) resumes.
        g->snap_at = e->cache && e->stateful ? g->n_prompt / e->block * e->block : 0;
        if (g->snap_at <= g->n_comp)
            g->snap_at = 0;
        spec_gen_admitted(e, g, first);
        if (e->cache) {
            e->stats.cache_hit_tokens += (uint64_t)g->n_comp;
            e->stats.cache_miss_tokens += (uint64_t)(g->n_tok - g->n_comp);
        }
    }
}

// Gives every decoding request the slot of its next token, preempting the most
// recently admitted requests when the pool is empty. Victims come from the tail
// and the walk goes from the head, so a victim is never one already served,
// except g itself (then it is the tail and the walk ends).
static void reserve_decodes(rp_engine *e)
{
    for (rp_gen *g = e->r_head; g;) {
        rp_gen *next = NULL; // where to go on once g has left the running list
        bool gone = false;
        rp_status st;
        while (!gone && g->n_tok - g->n_comp == 1 && (st = rp_kv_seq_reserve(e->kv, &g->kv, g->n_comp + 1)) != RP_OK) {
            rp_gen *victim = e->r_tail;
            if (st != RP_ERR_RANGE) { // out of memory for the block table
                next = g->next;
                finish(e, g, RP_GEN_ERROR, rp_error_message());
                gone = true;
            } else if (victim == g && e->r_head == g) {
                finish(e, g, RP_GEN_LENGTH, NULL); // alone and the pool is full: it can never grow
                gone = true;
            } else {
                preempt(e, victim);
                gone = victim == g; // g was the tail: nothing after it
            }
        }
        g = gone ? next : g->next;
    }
}

/* ---- the step (engine thread, e->mu not held) ----------------------------- */

// The work of prefilling positions [p0, p0 + n) (see rp_engine.attn_eq).
static double prefill_work(const rp_engine *e, int p0, int n)
{
    return n + ((double)n * p0 + (double)n * (n - 1) / 2) / e->attn_eq;
}

// Fills the batch: one decode token per decoding request, each followed by its
// drafts (spec_draft), then prefill chunks in admission order, up to max_batch
// tokens and prefill_chunk prompt tokens. While requests decode, the chunks
// also keep within chunk_work, so a chunk deep into a long prompt (whose
// attention reads thousands of positions per token) holds the decoding
// streams up no longer than the first chunk of a prompt does. Requests keeping
// MTP want the hidden row of every token they feed.
static void build_batch(rp_engine *e)
{
    e->n_b = e->n_b_seqs = e->n_b_rows = e->n_b_prefill = 0;
    e->spec.need_hidden = false;
    int n_out = 0;                     // rows of the forward's output (logits or hidden)
    int chunk_left = e->prefill_chunk; // prefill tokens this step may still take
    double work_left = e->chunk_work;  // and their work, when others decode
    bool decoding = false;             // the batch has decode tokens (pass 0 put them in)
    for (int pass = 0; pass < 2; pass++) {
        decoding = pass == 1 && e->n_b > 0;
        for (rp_gen *g = e->r_head; g && e->n_b < e->max_batch && (pass == 0 || chunk_left > 0); g = g->next) {
            int left = g->n_tok - g->n_comp;
            if ((pass == 0) != (left == 1))
                continue;
            int room = e->max_batch - e->n_b;
            if (pass == 1 && room > chunk_left)
                room = chunk_left;
            int take = left < room ? left : room;
            if (g->snap_at > g->n_comp && take > g->snap_at - g->n_comp) // a forward ends there (save_state)
                take = g->snap_at - g->n_comp;
            if (pass == 1 && decoding) { // decode tokens ride in this step: bound the work
                if (work_left <= 0)
                    break;
                int lo = 1, hi = take; // the most tokens within the work left (at least one)
                while (lo < hi) {
                    int mid = lo + (hi - lo + 1) / 2;
                    if (prefill_work(e, g->n_comp, mid) <= work_left)
                        lo = mid;
                    else
                        hi = mid - 1;
                }
                take = lo;
                work_left -= prefill_work(e, g->n_comp, take);
            }
            if (pass == 1)
                chunk_left -= take;
            int n_draft = pass == 0 ? g->spec.n_draft : 0; // spec_plan kept them within max_batch
            if (n_draft > room - take)
                n_draft = g->spec.n_draft = room - take;
            if (n_draft > 0 && g->snap_at > g->n_comp) // (the state must stop at snap_at)
                n_draft = g->spec.n_draft = 0;
            int s = e->n_b_seqs++;
            e->b_seqs[s] = &g->kv;
            e->b_gens[s] = g;
            g->take = take + n_draft;
            g->n_step = 0;
            g->done = RP_GEN_RUNNING;
            g->done_msg = NULL;
            g->spec.h_row = n_out;
            g->spec.h_pos = g->n_comp;
            for (int i = 0; i < take + n_draft; i++) {
                int p = g->n_comp + i;
                bool want = p >= g->n_tok - 1;
                e->b_tok[e->n_b] = i < take ? g->toks[p] : g->spec.draft[i - take];
                e->b_pos[e->n_b] = p;
                e->b_seq[e->n_b] = s;
                e->b_want[e->n_b] = want;
                e->spec.want_hidden[e->n_b] = g->spec.mtp;
                if (want)
                    e->b_rows[e->n_b_rows++] = g;
                n_out += want || g->spec.mtp;
                e->spec.need_hidden = e->spec.need_hidden || g->spec.mtp;
                e->n_b_prefill += p < g->n_prompt; // prompt tokens, recomputed ones too
                e->n_b++;
            }
        }
    }
}

void engine_logprobs(rp_engine *e, rp_gen *g, const float *row, rp_gen_token *t)
{
    rp_sampler_logprobs(g->smp, row, e->lp);
    t->logprob = t->id >= 0 ? e->lp[t->id] : 0.0f;
    int k = g->n_logprobs, n = 0;
    for (int32_t i = 0; i < e->n_vocab && k > 0; i++) {
        float v = e->lp[i];
        if (v == -INFINITY || (n == k && v <= t->top_logprobs[n - 1]))
            continue;
        int at = n < k ? n++ : k - 1;                         // full: the last one goes
        for (; at > 0 && t->top_logprobs[at - 1] < v; at--) { // strictly: equal ones keep the lower id first
            t->top_logprobs[at] = t->top_logprobs[at - 1];
            t->top_ids[at] = t->top_ids[at - 1];
        }
        t->top_logprobs[at] = v;
        t->top_ids[at] = i;
    }
    t->n_top = n;
}

void engine_emit(rp_engine *e, rp_gen *g)
{
    int32_t id = g->step[g->n_step].id;
    g->n_gen++;
    if (g->jm && rp_json_match_accept(g->jm, id)) { // the mask allowed it: cannot happen
        snprintf(e->step_err, sizeof(e->step_err), "JSON mode: %s", rp_error_message());
        g->done = RP_GEN_ERROR;
        g->done_msg = e->step_err;
        return;
    }
    if (!g->ignore_eos && engine_is_eog(e, id)) {
        g->done = RP_GEN_STOP;
        return;
    }
    if (g->n_tok == g->toks_cap) { // grows geometrically up to n_prompt + max_tokens
        int cap = g->toks_cap * 2, most = g->n_prompt + g->max_tokens;
        cap = cap < most ? cap : most;
        int32_t *nt = rp_realloc(g->toks, (size_t)cap * sizeof(int32_t));
        if (!nt) {
            g->done = RP_GEN_ERROR;
            g->done_msg = "out of memory for the request's tokens";
            return;
        }
        g->toks = nt;
        g->toks_cap = cap;
    }
    g->toks[g->n_tok++] = id;
    g->n_step++;
    if (g->n_gen >= g->max_tokens)
        g->done = RP_GEN_LENGTH;
}

// Draws g's next token from its logits row (JSON mask first): touches only g's own
// sampler and matcher, so rows of different requests can be drawn on different threads.
static void draw_row(rp_engine *e, rp_gen *g, float *row)
{
    if (g->jm)
        rp_json_match_mask(g->jm, row, e->n_vocab);
    g->step[g->n_step].id = rp_sampler_sample(g->smp, row);
}

typedef struct draw_job {
    rp_engine *e;
    int n;
} draw_job;

static void draw_task(void *p, int ith, int nth)
{
    const draw_job *j = p;
    for (int k = ith; k < j->n; k += nth)
        draw_row(j->e, j->e->draw_gens[k], j->e->draw_rows[k]);
}

// After draw_row: g's logprobs, then the token is accepted and emitted.
static void finish_row(rp_engine *e, rp_gen *g, float *row)
{
    rp_gen_token *t = &g->step[g->n_step];
    t->logprob = 0.0f;
    t->n_top = 0;
    if (g->n_logprobs >= 0)
        engine_logprobs(e, g, row, t);
    rp_sampler_accept(g->smp, t->id, false);
    engine_emit(e, g);
}

// After a step: the requests whose state reached snap_at give it (and the blocks before it)
// to the prefix cache. A snapshot is megabytes of copying: on the engine thread, outside e->mu.
static void save_states(rp_engine *e)
{
    for (int s = 0; s < e->n_b_seqs; s++) {
        rp_gen *g = e->b_gens[s];
        if (g->snap_at == 0 || g->n_comp < g->snap_at)
            continue;
        if (g->done != RP_GEN_ERROR && g->kv.state_pos == g->snap_at)
            rp_cache_publish_state(e->cache, g->toks, &g->kv, g->snap_at / e->block);
        g->snap_at = 0;
    }
}

static void run_step(rp_engine *e)
{
    rp_batch b = {e->n_b, e->b_tok, e->b_pos, e->b_seq, e->b_want, e->b_seqs, e->n_b_seqs, e->spec.want_hidden};
    double t0 = rp_time_s();
    rp_status st = rp_model_forward_ex(e->m, e->kv, &b, e->logits, e->spec.need_hidden ? e->spec.hidden : NULL);
    e->spec.t_fwd = rp_time_s() - t0;
    if (st) {
        snprintf(e->step_err, sizeof(e->step_err), "forward pass: %s", rp_error_message());
        for (int s = 0; s < e->n_b_seqs; s++) {
            e->b_gens[s]->done = RP_GEN_ERROR;
            e->b_gens[s]->done_msg = e->step_err;
        }
        return;
    }
    for (int s = 0; s < e->n_b_seqs; s++)
        e->b_gens[s]->n_comp += e->b_gens[s]->take;
    // The tokens of rows without drafts (one per request) are drawn first, on the pool when
    // there are several: a sampled draw over an 8k vocabulary costs ~45 us, over 152k ~0.8 ms,
    // and one thread drawing for every stream made a batched step that much longer.
    int n_draw = 0;
    for (int r = 0; r < e->n_b_rows;) {
        rp_gen *g = e->b_rows[r];
        if (g->spec.n_draft == 0) {
            e->draw_gens[n_draw] = g;
            e->draw_rows[n_draw++] = e->logits + (size_t)r * e->n_vocab;
        }
        r += 1 + g->spec.n_draft;
    }
    draw_job dj = {e, n_draw};
    if (n_draw > 1 && e->pool)
        rp_pool_run(e->pool, draw_task, &dj);
    else
        for (int k = 0; k < n_draw; k++)
            draw_row(e, e->draw_gens[k], e->draw_rows[k]);
    for (int r = 0; r < e->n_b_rows;) { // then in row order: verification, logprobs, emission
        rp_gen *g = e->b_rows[r];
        float *row = e->logits + (size_t)r * e->n_vocab;
        if (g->spec.n_draft > 0) {
            spec_verify(e, g, row); // rows r .. r + n_draft
            r += 1 + g->spec.n_draft;
        } else {
            finish_row(e, g, row);
            r++;
        }
    }
    spec_after_step(e);
    if (e->cache && e->stateful)
        save_states(e);
}

/* ---- publishing (engine thread, e->mu held) ------------------------------- */

static bool outbox_push(rp_gen *g, const rp_gen_token *t)
{
    if (g->out_len == g->out_cap) {
        if (g->out_head > 0) {
            memmove(g->out, g->out + g->out_head, (size_t)(g->out_len - g->out_head) * sizeof(*g->out));
            g->out_len -= g->out_head;
            g->out_head = 0;
        } else {
            rp_gen_token *no = rp_realloc(g->out, (size_t)g->out_cap * 2 * sizeof(*g->out));
            if (!no)
                return false;
            g->out = no;
            g->out_cap *= 2;
        }
    }
    g->out[g->out_len++] = *t;
    return true;
}

int rp_engine_batch_bucket(int n_tokens)
{
    int b = 0;
    while (b < RP_ENGINE_BATCH_BUCKETS - 1 && (1 << b) < n_tokens)
        b++;
    return b;
}

// The step's times into the stats: t_step from the turn's start to now.
static void count_step(rp_engine *e, double t_step)
{
    rp_engine_stats *s = &e->stats;
    double f = e->spec.t_fwd;
    s->step_s += t_step;
    s->step_max_s = t_step > s->step_max_s ? t_step : s->step_max_s;
    s->forward_s += f;
    int b = rp_engine_batch_bucket(e->n_b > 0 ? e->n_b : 1);
    if (s->forward_steps[b] == 0 || f < s->forward_min_s[b])
        s->forward_min_s[b] = f;
    s->forward_steps[b]++;
    s->forward_tokens[b] += (uint64_t)e->n_b;
    s->forward_bucket_s[b] += f;
}

// Hands the step's tokens to the readers and retires the requests that ended.
// A request cancelled meanwhile gets nothing more.
static void publish(rp_engine *e)
{
    e->stats.steps++;
    e->stats.tokens_prefilled += (uint64_t)e->n_b_prefill;
    double now = rp_time_s();
    for (int s = 0; s < e->n_b_seqs; s++) {
        rp_gen *g = e->b_gens[s];
        if (atomic_load(&g->cancel)) {
            finish(e, g, RP_GEN_CANCELLED, NULL);
            continue;
        }
        spec_publish(e, g);
        if (g->n_gen != g->stats.n_generated) { // sampled this step
            e->stats.tokens_generated += (uint64_t)(g->n_gen - g->stats.n_generated);
            g->stats.n_generated = g->n_gen;
            if (g->stats.t_first == 0)
                g->stats.t_first = now;
            g->stats.t_last = now;
        }
        for (int i = 0; i < g->n_step; i++)
            if (!outbox_push(g, &g->step[i])) {
                g->done = RP_GEN_ERROR;
                g->done_msg = "out of memory for the request's output";
                break;
            }
        if (g->done != RP_GEN_RUNNING)
            finish(e, g, g->done, g->done_msg);
        else if (g->n_step > 0)
            pthread_cond_signal(&g->cv);
    }
}

// The backend's device is lost (under e->mu): every request fails with why, later
// submits are refused, and the failure hook learns of it once.
static void engine_fail(rp_engine *e, const char *why)
{
    snprintf(e->fail_msg, sizeof(e->fail_msg), "the device failed: %s", why);
    e->failed = true;
    RP_LOGE("engine: %s", e->fail_msg);
    while (e->r_head)
        finish(e, e->r_head, RP_GEN_ERROR, e->fail_msg);
    while (e->q_head)
        finish(e, e->q_head, RP_GEN_ERROR, e->fail_msg);
    if (e->on_fail)
        e->on_fail(e->on_fail_ctx);
}

static void *engine_main(void *arg)
{
    rp_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        double t_turn = rp_time_s();
        sweep(e);
        if (e->stop)
            break;
        admit(e);
        reserve_decodes(e);
        if (!e->r_head) {
            if (!e->q_head) // else: reserve_decodes retired the last running one; admit again
                pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        spec_plan(e);
        pthread_mutex_unlock(&e->mu);
        spec_draft(e);
        build_batch(e);
        run_step(e);
        pthread_mutex_lock(&e->mu);
        publish(e);
        count_step(e, rp_time_s() - t_turn);
        const char *lost = rp_backend_lost(rp_model_backend(e->m));
        if (lost && !e->failed)
            engine_fail(e, lost);
    }
    while (e->r_head)
        finish(e, e->r_head, RP_GEN_CANCELLED, NULL);
    while (e->q_head)
        finish(e, e->q_head, RP_GEN_CANCELLED, NULL);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- the engine -------------------------------------------------------------- */

static rp_status check_param(const char *name, int v)
{
    if (v < 0 || v > PARAM_MAX)
        return RP_ERR(RP_ERR_INVALID, "engine parameter %s = %d is out of range: must be in [0, %d] (0 = default)",
                      name, v, PARAM_MAX);
    return RP_OK;
}

// The pool's size in blocks: kv_tokens, else kv_memory, else max(n_ctx, 4096)
// tokens. An explicit n_ctx the pool can never hold is refused with the numbers.
static rp_status plan_kv(const rp_model *m, const rp_engine_params *p, int n_ctx, int block, int *n_blocks)
{
    const rp_model_config *cfg = rp_model_get_config(m);
    size_t block_bytes =
        rp_kv_block_bytes(rp_model_kv_layers(m), cfg->n_kv_head, cfg->head_dim, block, rp_engine_kv_type(p));
    int64_t nb;
    if (p->kv_tokens) {
        nb = ((int64_t)p->kv_tokens + block - 1) / block;
    } else if (p->kv_memory) {
        uint64_t q = p->kv_memory / block_bytes;
        if (q == 0 || q > PARAM_MAX)
            return RP_ERR(RP_ERR_RANGE, "a KV cache of %llu bytes holds %s blocks of %d tokens (%zu bytes each)",
                          (unsigned long long)p->kv_memory, q ? "too many" : "no", block, block_bytes);
        nb = (int64_t)q;
    } else {
        int64_t t = n_ctx > DEFAULT_KV_MIN ? n_ctx : DEFAULT_KV_MIN;
        nb = (t + block - 1) / block;
    }
    if (p->n_ctx > 0 && n_ctx > nb * block)
        return RP_ERR(RP_ERR_RANGE,
                      "the context (%d tokens) is longer than the KV cache can ever hold (%lld tokens: %lld blocks "
                      "of %d, %.1f MiB); give the cache more memory or the context less",
                      n_ctx, (long long)(nb * block), (long long)nb, block, (double)nb * block_bytes / (1 << 20));
    *n_blocks = (int)nb;
    return RP_OK;
}

// Frees what create made (the thread is not running); the shell goes with the last reference.
static void engine_free_parts(rp_engine *e)
{
    rp_cache_destroy(e->cache); // writes what it holds to disk first: the pool must still be there
    e->cache = NULL;
    rp_kv_pool_destroy(e->kv);
    e->kv = NULL;
    rp_free(e->b_tok);
    rp_free(e->b_pos);
    rp_free(e->b_seq);
    rp_free(e->b_want);
    rp_free(e->b_seqs);
    rp_free(e->b_gens);
    rp_free(e->b_rows);
    rp_free(e->draw_gens);
    rp_free(e->draw_rows);
    if (e->logits)
        rp_backend_host_free(rp_model_backend(e->m), e->logits);
    rp_free(e->lp);
    spec_engine_deinit(e); // after the requests: their draft-model KV went back at retirement
    rp_json_vocab_destroy(e->jv);
    e->jv = NULL;
}

rp_status rp_engine_create(rp_model *m, const rp_tokenizer *tok, const rp_engine_params *p, rp_engine **out)
{
    *out = NULL;
    rp_engine_params dp;
    rp_engine_params_default(&dp);
    if (!p)
        p = &dp;
    rp_status st;
    if (!m || !tok)
        return RP_ERR(RP_ERR_INVALID, "engine: a model and a tokenizer are required");
    if ((st = check_param("n_ctx", p->n_ctx)) || (st = check_param("kv_tokens", p->kv_tokens)) ||
        (st = check_param("kv_block", p->kv_block)) || (st = check_param("max_running", p->max_running)) ||
        (st = check_param("max_queue", p->max_queue)) || (st = check_param("prefill_chunk", p->prefill_chunk)) ||
        (st = spec_check(m, &p->spec)))
        return st;
    if (isnan(p->cache_flush_s))
        return RP_ERR(RP_ERR_INVALID, "engine parameter cache_flush_s is not a number");
    const rp_model_config *cfg = rp_model_get_config(m);
    rp_engine *e = rp_calloc(1, sizeof(*e));
    if (!e)
        return RP_ERR(RP_ERR_NOMEM, "engine: out of memory");
    e->m = m;
    e->tok = tok;
    e->cfg = cfg;
    e->n_vocab = cfg->n_vocab;
    e->max_batch = rp_model_max_batch(m);
    e->n_ctx = p->n_ctx > 0 && p->n_ctx < cfg->max_ctx ? p->n_ctx : cfg->max_ctx;
    e->block = p->kv_block ? p->kv_block : DEFAULT_BLOCK;
    e->has_mtp = rp_model_has_mtp(m);
    e->prefill_chunk = p->prefill_chunk && p->prefill_chunk < e->max_batch ? p->prefill_chunk : e->max_batch;
    // Multiply-adds per prompt token: the layers' weights (no logits: prompt tokens
    // want none), against attention's per position of context (q·k and p·v per head).
    double w_mac =
        (double)cfg->n_layer * ((double)cfg->dim * (cfg->n_head + 2.0 * cfg->n_kv_head) * cfg->head_dim +
                                (double)cfg->n_head * cfg->head_dim * cfg->dim + 3.0 * cfg->dim * cfg->ffn_dim);
    double a_mac = 2.0 * cfg->n_layer * cfg->n_head * cfg->head_dim;
    e->attn_eq = a_mac > 0 && w_mac > 0 ? w_mac / a_mac : 1e30;
    e->chunk_work = prefill_work(e, 0, e->prefill_chunk);
    if ((st = plan_kv(m, p, e->n_ctx, e->block, &e->n_blocks))) {
        rp_free(e);
        return st;
    }
    if (e->n_ctx > e->n_blocks * e->block) // the model's context, but the pool holds less: one request gets that
        e->n_ctx = e->n_blocks * e->block;
    e->max_running = p->max_running ? p->max_running : DEFAULT_MAX_RUNNING;
    e->max_queue = p->max_queue ? p->max_queue : DEFAULT_MAX_QUEUE;
    atomic_init(&e->refs, 1);
    if (pthread_mutex_init(&e->mu, NULL)) {
        rp_free(e);
        return RP_ERR(RP_ERR_NOMEM, "engine: cannot create a mutex");
    }
    if (pthread_mutex_init(&e->jv_mu, NULL)) {
        pthread_mutex_destroy(&e->mu);
        rp_free(e);
        return RP_ERR(RP_ERR_NOMEM, "engine: cannot create a mutex");
    }
    if (pthread_cond_init(&e->cv, NULL)) {
        pthread_mutex_destroy(&e->jv_mu);
        pthread_mutex_destroy(&e->mu);
        rp_free(e);
        return RP_ERR(RP_ERR_NOMEM, "engine: cannot create a condition variable");
    }
    // A model with recurrent state: a state slot for each running request, rollback for a
    // verification step of up to the most drafts and the token before them.
    int log_cap = (p->spec.k_max ? p->spec.k_max : RP_ENGINE_SPEC_K_DEFAULT) + 1;
    if ((st = rp_model_kv_create_ex(m, e->block, e->n_blocks, rp_engine_kv_type(p), e->max_running, log_cap, &e->kv)))
        goto fail;
    e->stateful = rp_model_has_state(m);
    if (e->stateful) {
        rp_kv_state_geom g = rp_model_state_geom(m, e->max_running, log_cap);
        RP_LOGI("recurrent state: %d slots of %.1f MiB (%d Gated DeltaNet layers), %.1f MiB beside the KV cache",
                e->max_running, rp_kv_state_slot_bytes(&g) / 1048576.0, g.n_layer,
                e->max_running * rp_kv_state_slot_bytes(&g) / 1048576.0);
    }
    if (!p->no_prefix_cache) {
        uint8_t fp[16];
        rp_cache_params cp;
        rp_cache_params_default(&cp);
        cp.dir = p->cache_dir;
        cp.disk_budget = p->cache_disk_budget;
        cp.flush_s = p->cache_flush_s;
        cp.state_mem = p->cache_state_mem;
        if ((st = rp_model_fingerprint(m, fp)) || (st = rp_cache_create(e->kv, fp, &cp, &e->cache)))
            goto fail;
        if (e->stateful) {
            rp_cache_stats cs;
            rp_cache_get_stats(e->cache, &cs);
            RP_LOGI("prefix cache: a request's state at its prompt's last whole block is kept (%.1f MiB each, "
                    "up to %llu in memory%s)",
                    rp_kv_pool_state_bytes(e->kv) / 1048576.0, (unsigned long long)cs.state_cap,
                    rp_cache_dir(e->cache) ? ", and on disk" : "");
        }
    }
    if ((st = spec_engine_init(e, p)))
        goto fail;
    size_t B = (size_t)e->max_batch, R = (size_t)e->max_running, rows;
    e->b_tok = rp_malloc(B * sizeof(int32_t));
    e->b_pos = rp_malloc(B * sizeof(int32_t));
    e->b_seq = rp_malloc(B * sizeof(int32_t));
    e->b_want = rp_malloc(B * sizeof(bool));
    e->b_seqs = rp_malloc(R * sizeof(rp_kv_seq *));
    e->b_gens = rp_malloc(R * sizeof(rp_gen *));
    e->b_rows = rp_malloc((size_t)e->max_rows * sizeof(rp_gen *));
    e->draw_gens = rp_malloc(R * sizeof(rp_gen *));
    e->draw_rows = rp_malloc(R * sizeof(float *));
    e->pool = rp_backend_host_pool(rp_model_backend(e->m));
    e->lp = rp_malloc((size_t)e->n_vocab * sizeof(float));
    // Host memory the backend copies into at full speed (pinned on a GPU; a CUDA graph's
    // copies need it).
    if (rp_mul_size((size_t)e->max_rows * sizeof(float), (size_t)e->n_vocab, &rows) &&
        rp_backend_host_alloc(rp_model_backend(e->m), rows, (void **)&e->logits))
        e->logits = NULL;
    if (!e->b_tok || !e->b_pos || !e->b_seq || !e->b_want || !e->b_seqs || !e->b_gens || !e->b_rows || !e->draw_gens ||
        !e->draw_rows || !e->lp || !e->logits) {
        st = RP_ERR(RP_ERR_NOMEM, "engine: out of memory for the batch buffers (%d rows of logits)", e->max_rows);
        goto fail;
    }
    int rc = pthread_create(&e->thread, NULL, engine_main, e);
    if (rc) {
        st = RP_ERR(RP_ERR_NOMEM, "engine: cannot start the engine thread: %s", strerror(rc));
        goto fail;
    }
    e->thread_live = true;
    *out = e;
    return RP_OK;
fail:
    engine_free_parts(e);
    engine_unref(e);
    return st;
}

void rp_engine_destroy(rp_engine *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_live)
        pthread_join(e->thread, NULL);
    e->thread_live = false;
    engine_free_parts(e);
    engine_unref(e);
}

int rp_engine_n_ctx(const rp_engine *e)
{
    return e->n_ctx;
}

const char *rp_engine_cache_dir(const rp_engine *e)
{
    return e->cache ? rp_cache_dir(e->cache) : NULL;
}

void rp_engine_get_stats(rp_engine *e, rp_engine_stats *out)
{
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    out->queued = e->n_queued;
    out->running = e->n_running;
    out->kv_blocks = e->n_blocks;
    out->kv_blocks_used = e->kv ? e->n_blocks - rp_kv_pool_free_blocks(e->kv) : 0;
    out->kv_block_tokens = e->block;
    out->kv_type = e->kv ? rp_kv_pool_type(e->kv) : RP_DTYPE_F16;
    out->kv_bytes = e->kv ? (uint64_t)e->n_blocks * rp_kv_pool_block_bytes(e->kv) : 0;
    out->n_ctx = e->n_ctx;
    out->prefill_chunk = e->prefill_chunk;
    out->max_batch = e->max_batch;
    out->prefix_cache = e->cache != NULL;
    memset(&out->cache, 0, sizeof(out->cache));
    if (e->cache)
        rp_cache_get_stats(e->cache, &out->cache);
    for (int m = 0; m < RP_SPEC_N_METHODS; m++)
        out->spec_methods[m] = e->spec.on && e->spec.use[m];
    pthread_mutex_unlock(&e->mu);
}

/* ---- requests ---------------------------------------------------------------- */

static rp_status check_request(const rp_engine *e, const rp_gen_params *p)
{
    if (!p->prompt || p->n_prompt <= 0)
        return RP_ERR(RP_ERR_INVALID, "the prompt is empty");
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= e->n_vocab)
            return RP_ERR(RP_ERR_INVALID, "prompt token %d has id %d, outside the vocabulary [0, %d)", i,
                          (int)p->prompt[i], e->n_vocab);
    rp_status st = rp_sample_params_validate(&p->sample);
    if (st)
        return st;
    if (p->n_logprobs < -1 || p->n_logprobs > RP_GEN_TOP_MAX)
        return RP_ERR(RP_ERR_INVALID, "logprobs %d is out of range: must be -1 (none), 0 or up to %d", p->n_logprobs,
                      RP_GEN_TOP_MAX);
    if (p->n_prompt >= e->n_ctx)
        return RP_ERR(RP_ERR_RANGE,
                      "the prompt has %d tokens, the context is %d (at least one must be left to generate)",
                      p->n_prompt, e->n_ctx);
    if (blocks_for(e, p->n_prompt) > e->n_blocks)
        return RP_ERR(RP_ERR_RANGE, "the prompt has %d tokens, the KV cache holds %d", p->n_prompt,
                      e->n_blocks * e->block);
    return RP_OK;
}

rp_status rp_engine_submit(rp_engine *e, const rp_gen_params *p, rp_gen **out)
{
    if (!out)
        return RP_ERR(RP_ERR_INVALID, "submit: no place for the handle");
    *out = NULL;
    if (!e || !p)
        return RP_ERR(RP_ERR_INVALID, "submit: no engine or no parameters");
    rp_status st = check_request(e, p);
    if (st)
        return st;
    if (p->json) { // the grammar's token table, made once
        pthread_mutex_lock(&e->jv_mu);
        if (!e->jv)
            st = rp_json_vocab_create(e->tok, &e->jv);
        pthread_mutex_unlock(&e->jv_mu);
        if (st)
            return rp_error_prefix(st, "JSON mode");
    }
    int room = e->n_ctx - p->n_prompt;
    int max_tokens = p->max_tokens > 0 && p->max_tokens < room ? p->max_tokens : room;
    rp_gen *g = rp_calloc(1, sizeof(*g));
    if (!g)
        return RP_ERR(RP_ERR_NOMEM, "submit: out of memory");
    g->e = e;
    g->sp = p->sample;
    g->ignore_eos = p->ignore_eos;
    g->json = p->json;
    g->n_logprobs = p->n_logprobs;
    g->n_prompt = g->n_tok = p->n_prompt;
    g->max_tokens = max_tokens;
    g->toks_cap = p->n_prompt + (max_tokens < TOKS_SLACK ? max_tokens : TOKS_SLACK);
    g->toks = rp_malloc((size_t)g->toks_cap * sizeof(int32_t));
    g->out_cap = OUTBOX_MIN;
    g->out = rp_malloc((size_t)g->out_cap * sizeof(*g->out));
    g->step = rp_malloc((size_t)(1 + spec_k_cap(e)) * sizeof(*g->step));
    rp_kv_seq_init(&g->kv);
    atomic_init(&g->cancel, false);
    g->stats.n_prompt = p->n_prompt;
    g->stats.max_tokens = max_tokens;
    pthread_condattr_t ca;
    bool cv_ok = false;
    if (g->toks && g->out && g->step && !pthread_condattr_init(&ca)) {
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); // rp_gen_read's deadlines are monotonic
        cv_ok = pthread_cond_init(&g->cv, &ca) == 0;
        pthread_condattr_destroy(&ca);
    }
    if (!cv_ok) {
        rp_free(g->toks);
        rp_free(g->out);
        rp_free(g->step);
        rp_free(g);
        return RP_ERR(RP_ERR_NOMEM, "submit: out of memory for a prompt of %d tokens", p->n_prompt);
    }
    memcpy(g->toks, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
    g->schema = p->json ? rp_json_schema_ref(p->schema) : NULL;
    if (p->json && p->json_prefix_len) {
        if (!(g->json_prefix = rp_malloc(p->json_prefix_len))) {
            st = RP_ERR(RP_ERR_NOMEM, "submit: out of memory");
            goto refused;
        }
        memcpy(g->json_prefix, p->json_prefix, p->json_prefix_len);
        g->json_prefix_len = p->json_prefix_len;
    }

    pthread_mutex_lock(&e->mu);
    if (e->failed)
        st = RP_ERR(RP_ERR_DEVICE, "%s", e->fail_msg);
    else if (e->stop)
        st = RP_ERR(RP_ERR_LIMIT, "the engine is shutting down");
    else if (e->n_queued >= e->max_queue)
        st = RP_ERR(RP_ERR_LIMIT, "the queue is full (%d requests waiting)", e->n_queued);
    if (!st) {
        g->stats.t_submit = rp_time_s();
        g->in_engine = true;
        atomic_fetch_add(&e->refs, 1);
        list_append(&e->q_head, &e->q_tail, g);
        e->n_queued++;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (st) {
    refused:
        rp_json_schema_unref(g->schema);
        rp_free(g->json_prefix);
        pthread_cond_destroy(&g->cv);
        rp_free(g->toks);
        rp_free(g->out);
        rp_free(g->step);
        rp_free(g);
        return st;
    }
    *out = g;
    return RP_OK;
}

rp_gen_finish rp_gen_read(rp_gen *g, double timeout_s, rp_gen_token *out, int cap, int *n_out)
{
    rp_engine *e = g->e;
    struct timespec deadline;
    if (isnan(timeout_s))
        timeout_s = 0;
    if (timeout_s > 0) {
        if (timeout_s > 1e9) // ~30 years: as good as no limit, and no overflow
            timeout_s = 1e9;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        double whole = floor(timeout_s);
        deadline.tv_sec += (time_t)whole;
        deadline.tv_nsec += (long)((timeout_s - whole) * 1e9);
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&e->mu);
    while (g->out_len == g->out_head && g->finish == RP_GEN_RUNNING && timeout_s != 0) {
        if (timeout_s < 0)
            pthread_cond_wait(&g->cv, &e->mu);
        else if (pthread_cond_timedwait(&g->cv, &e->mu, &deadline) == ETIMEDOUT)
            break;
    }
    int n = g->out_len - g->out_head;
    if (cap < 0 || !out)
        cap = 0;
    n = n < cap ? n : cap;
    if (n > 0)
        memcpy(out, g->out + g->out_head, (size_t)n * sizeof(*out));
    g->out_head += n;
    if (g->out_head == g->out_len)
        g->out_head = g->out_len = 0;
    rp_gen_finish r = g->out_len == 0 ? g->finish : RP_GEN_RUNNING;
    pthread_mutex_unlock(&e->mu);
    if (n_out)
        *n_out = n;
    return r;
}

void rp_gen_cancel(rp_gen *g)
{
    rp_engine *e = g->e;
    pthread_mutex_lock(&e->mu);
    if (g->in_engine) {
        atomic_store(&g->cancel, true);
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
}

void rp_gen_release(rp_gen *g)
{
    if (!g)
        return;
    rp_engine *e = g->e;
    pthread_mutex_lock(&e->mu);
    bool engine_frees = g->in_engine;
    if (engine_frees) {
        g->released = true;
        atomic_store(&g->cancel, true);
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (!engine_frees)
        gen_free(g);
}

const char *rp_gen_error(const rp_gen *g)
{
    pthread_mutex_lock(&g->e->mu);
    bool err = g->finish == RP_GEN_ERROR; // err is written once, before finish is set
    pthread_mutex_unlock(&g->e->mu);
    return err ? g->err : "";
}

void rp_gen_get_stats(const rp_gen *g, rp_gen_stats *out)
{
    pthread_mutex_lock(&g->e->mu);
    *out = g->stats;
    pthread_mutex_unlock(&g->e->mu);
}

const char *rp_engine_failed(rp_engine *e)
{
    pthread_mutex_lock(&e->mu);
    const char *m = e->failed ? e->fail_msg : NULL; // set once, never changed after
    pthread_mutex_unlock(&e->mu);
    return m;
}

void rp_engine_on_failure(rp_engine *e, void (*fn)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&e->mu);
    e->on_fail = fn;
    e->on_fail_ctx = ctx;
    bool now = e->failed && fn;
    pthread_mutex_unlock(&e->mu);
    if (now)
        fn(ctx);
}
