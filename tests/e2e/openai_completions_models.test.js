// openai_completions_models.test.js - POST /v1/completions (stream and not),
// GET /v1/models and /v1/models/{id}, and the operations endpoints: HEAD /,
// GET /health, GET /metrics (Prometheus text with requests by route and status).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { assertOpenAIUsage, assertSchema, assertUnixSeconds, pickStop } from './checks.js';
import {
    SERVED,
    SKIP,
    TIMEOUT,
    assertHealthy,
    metricNames,
    metrics,
    openaiClient,
    openaiErrorShape,
    postSSE,
    request,
    sharedServer,
    stopSharedServer,
} from './harness.js';

const T = { timeout: TIMEOUT };

const PROMPT = 'def add(a, b):';

function assertTextCompletion(body) {
    assertSchema(body, 'Completion');
    assert.equal(typeof body.id, 'string');
    assert.ok(body.id.startsWith('cmpl-'), `id ${JSON.stringify(body.id)} starts with cmpl-`);
    assert.equal(body.object, 'text_completion');
    assertUnixSeconds(body.created, 'created');
    assert.equal(body.model, SERVED);
    assert.equal(body.choices.length, 1);
    const c = body.choices[0];
    assert.equal(c.index, 0);
    assert.equal(typeof c.text, 'string');
    assert.ok('logprobs' in c, 'choices[0].logprobs present');
    assert.ok(['stop', 'length'].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
    assertOpenAIUsage(body.usage);
    return c;
}

describe('OpenAI completions, models, operations', { skip: SKIP }, () => {
    let server;
    let client;
    before(async () => {
        server = await sharedServer();
        client = openaiClient(server);
    });
    after(async () => {
        if (server) await assertHealthy(server);
        await stopSharedServer();
    });

    test('/v1/completions non-stream: shape, max_tokens → length', T, async () => {
        const body = await client.completions.create({ model: SERVED, prompt: PROMPT, max_tokens: 12, temperature: 0 });
        const c = assertTextCompletion(body);
        assert.equal(c.logprobs, null);
        assert.equal(c.finish_reason, 'length');
        assert.equal(body.usage.completion_tokens, 12);
        assert.ok(c.text.length > 0);
    });

    test('/v1/completions stream: chunks, [DONE], usage, same text as non-stream', T, async () => {
        const req = { model: SERVED, prompt: PROMPT, max_tokens: 12, temperature: 0 };
        const body = await client.completions.create(req);
        const res = await postSSE(server, '/v1/completions', { ...req, stream: true, stream_options: { include_usage: true } });
        const frames = res.frames;
        assert.equal(frames[frames.length - 1].data, '[DONE]');
        const chunks = frames.slice(0, -1).map((f) => f.json);
        chunks.forEach((ch, i) => assertSchema(ch, 'CompletionChunk', `chunk ${i}`));
        const usageChunk = chunks.pop();
        assert.deepEqual(usageChunk.choices, [], 'usage chunk has choices: []');
        assertOpenAIUsage(usageChunk.usage);
        assert.equal(usageChunk.usage.completion_tokens, body.usage.completion_tokens);
        let text = '';
        chunks.forEach((ch, i) => {
            const w = JSON.stringify(ch);
            assert.equal(ch.object, 'text_completion', w);
            assert.equal(ch.id, chunks[0].id, w);
            assert.ok(ch.id.startsWith('cmpl-'), w);
            assertUnixSeconds(ch.created, 'created');
            assert.equal(ch.model, SERVED, w);
            assert.equal(ch.choices.length, 1, w);
            assert.equal(ch.choices[0].index, 0, w);
            assert.equal(typeof ch.choices[0].text, 'string', w);
            assert.ok('finish_reason' in ch.choices[0], w);
            if (i < chunks.length - 1) assert.equal(ch.choices[0].finish_reason, null, `finish_reason null until the last: ${w}`);
            text += ch.choices[0].text;
        });
        assert.equal(chunks[chunks.length - 1].choices[0].finish_reason, 'length');
        assert.equal(text, body.choices[0].text, 'streamed text == non-stream text');

        // The SDK reads the same stream.
        const s = await client.completions.create({ ...req, stream: true });
        let t2 = '';
        for await (const ch of s) t2 += ch.choices[0]?.text || '';
        assert.equal(t2, body.choices[0].text);
    });

    test('/v1/completions stop string', T, async () => {
        const req = { model: SERVED, prompt: PROMPT, max_tokens: 24, temperature: 0 };
        const body = await client.completions.create(req);
        const { stop, expected } = pickStop(body.choices[0].text);
        const r = await client.completions.create({ ...req, stop });
        assert.equal(r.choices[0].finish_reason, 'stop');
        assert.equal(r.choices[0].text, expected);
    });

    test('GET /v1/models lists the served model; /v1/models/{id}; unknown id → 404', T, async () => {
        const res = await request(server, { path: '/v1/models' });
        assert.equal(res.status, 200);
        const list = res.json();
        assertSchema(list, 'ModelList');
        assert.equal(list.object, 'list');
        assert.ok(Array.isArray(list.data) && list.data.length >= 1, res.text);
        const m = list.data.find((x) => x.id === SERVED);
        assert.ok(m, `the served name ${SERVED} is listed: ${res.text}`);
        assert.equal(m.object, 'model');
        assertUnixSeconds(m.created, 'model.created');
        assert.equal(typeof m.owned_by, 'string');

        const ids = [];
        for await (const x of client.models.list()) ids.push(x.id);
        assert.ok(ids.includes(SERVED), `SDK models.list(): ${ids}`);

        const one = await client.models.retrieve(SERVED);
        assertSchema(one, 'Model');
        assert.equal(one.id, SERVED);
        assert.equal(one.object, 'model');

        const nf = await request(server, { path: '/v1/models/no-such-model' });
        assert.equal(nf.status, 404, nf.text);
        assert.equal(openaiErrorShape(nf.json()), null);
        await assert.rejects(client.models.retrieve('no-such-model'), (e) => e.status === 404);
    });

    test('HEAD / → 200 without a body; GET /health → 200; unknown route → 404', T, async () => {
        const head = await request(server, { method: 'HEAD', path: '/' });
        assert.equal(head.status, 200);
        assert.equal(head.body.length, 0);
        const health = await request(server, { path: '/health' });
        assert.equal(health.status, 200);
        const nf = await request(server, { path: '/v1/no-such-route' });
        assert.equal(nf.status, 404);
    });

    test('GET /metrics: Prometheus text with requests by route and status, tokens, queue, running, KV', T, async () => {
        await client.completions.create({ model: SERVED, prompt: PROMPT, max_tokens: 2, temperature: 0 });
        const res = await request(server, { path: '/metrics' });
        assert.equal(res.status, 200);
        assert.match(res.headers['content-type'] || '', /^text\/plain/);
        assert.match(res.text, /^# (HELP|TYPE) /m, 'HELP/TYPE comments');
        const samples = await metrics(server);
        const names = metricNames(samples);
        // The route label may be the path or a name for it ("/v1/completions", "completions").
        const isRoute = (v) => v.replace(/^\/?(v1\/)?/, '').replace(/\//g, '_') === 'completions';
        const byRoute = samples.find(
            (s) => Object.values(s.labels).some(isRoute) && Object.values(s.labels).includes('200'),
        );
        assert.ok(byRoute, `a request counter labelled with route /v1/completions and status 200 (metrics: ${names})`);
        assert.ok(byRoute.value >= 1);
        for (const [what, re] of [
            ['prompt tokens', /prompt.*token|token.*prompt/i],
            ['completion tokens', /(completion|generat).*token|token.*(completion|generat)/i],
            ['queue depth', /queue/i],
            ['running requests', /running/i],
            ['KV blocks', /kv/i],
            ['cancelled requests', /cancel/i],
            ['time to first token', /first_token|ttft/i],
        ]) {
            assert.ok(samples.some((s) => re.test(s.name)), `a metric for ${what} (${re}) among: ${names}`);
        }
    });
});
