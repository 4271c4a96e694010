// limits.test.js - servers started with limits: --ctx (prompt too long → 400
// context_length_exceeded with both numbers; max_tokens clamped), --max-request-bytes
// (413), --strict-model-name (404 for another name), --api-key (401; x-api-key and
// Bearer), --max-queue (503 with Retry-After). The server keeps serving after each.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import { assertAnthropicMessage, assertChatCompletion, inputTotal } from './checks.js';
import {
    PROMPTS,
    PENDING,
    SKIP,
    TIMEOUT,
    anthropicClient,
    anthropicErrorShape,
    assertHealthy,
    openaiClient,
    openaiErrorShape,
    request,
    startServer,
    waitFor,
} from './harness.js';

const T = { timeout: TIMEOUT };

const user = (content) => [{ role: 'user', content }];
const LONG = 'Please repeat these words back to me exactly: ' + 'apple banana cherry '.repeat(40);
const numbersIn = (s) => (s.match(/\d+/g) || []).map(Number);

async function served(server) {
    const res = await request(server, { path: '/v1/models' });
    assert.equal(res.status, 200, res.text);
    return res.json().data[0].id;
}

describe('--ctx 64 and --max-request-bytes 4096', { skip: SKIP }, () => {
    let server;
    let name;
    before(async () => {
        server = await startServer(['--ctx', '64', '--max-request-bytes', '4096']);
        name = await served(server);
    });
    after(async () => {
        if (server) {
            await assertHealthy(server);
            await server.stop();
        }
    });

    const tooLong = {
        '/v1/chat/completions': () => ({ model: name, messages: user(LONG), max_tokens: 4 }),
        '/v1/completions': () => ({ model: name, prompt: LONG, max_tokens: 4 }),
        '/v1/responses': () => ({ model: name, input: LONG, max_output_tokens: 16 }),
    };
    for (const [path, body] of Object.entries(tooLong)) {
        const skip = path === '/v1/responses' && PENDING.responses;
        test(`${path}: a prompt longer than the context → 400 context_length_exceeded naming both numbers`, { ...T, skip }, async () => {
            const res = await request(server, { method: 'POST', path, body: body() });
            assert.equal(res.status, 400, `${path}: ${res.text}`);
            const b = res.json();
            assert.equal(openaiErrorShape(b), null);
            assert.equal(b.error.code, 'context_length_exceeded', `${path}: ${res.text}`);
            const n = numbersIn(b.error.message);
            assert.ok(n.includes(64), `${path}: the message names the context (64): ${b.error.message}`);
            assert.ok(n.some((x) => x > 64), `${path}: the message names the prompt's length: ${b.error.message}`);
            await assertHealthy(server);
        });
    }

    test('stream: true with a prompt longer than the context → the same 400 as JSON, not a stream', T, async () => {
        const res = await request(server, {
            method: 'POST',
            path: '/v1/chat/completions',
            body: { model: name, messages: user(LONG), max_tokens: 4, stream: true },
        });
        assert.equal(res.status, 400, res.text);
        assert.match(res.headers['content-type'] || '', /^application\/json/);
        assert.equal(res.json().error.code, 'context_length_exceeded');
        if (!PENDING.anthropic) {
            const r2 = await request(server, {
                method: 'POST',
                path: '/v1/messages',
                body: { model: name, messages: user(LONG), max_tokens: 4, stream: true },
            });
            assert.equal(r2.status, 400, r2.text);
            assert.equal(anthropicErrorShape(r2.json()), null);
        }
        await assert.rejects(
            openaiClient(server).chat.completions.create({ model: name, messages: user(LONG), max_tokens: 4, stream: true }),
            (e) => e.status === 400,
        );
    });

    test('/v1/messages: a prompt longer than the context → 400 invalid_request_error naming both numbers', { ...T, skip: PENDING.anthropic }, async () => {
        const res = await request(server, {
            method: 'POST',
            path: '/v1/messages',
            body: { model: name, messages: user(LONG), max_tokens: 4 },
        });
        assert.equal(res.status, 400, res.text);
        const b = res.json();
        assert.equal(anthropicErrorShape(b), null);
        assert.equal(b.error.type, 'invalid_request_error');
        const n = numbersIn(b.error.message);
        assert.ok(n.includes(64) && n.some((x) => x > 64), `both numbers: ${b.error.message}`);
        await assertHealthy(server);
    });

    test('OpenAI: max_tokens beyond the context is clamped: 200, length, prompt + completion = context', T, async () => {
        const client = openaiClient(server);
        const r = await client.chat.completions.create({ model: name, messages: user(PROMPTS.endless), max_tokens: 1000, temperature: 0 });
        assertChatCompletion(r, { model: name });
        assert.equal(r.choices[0].finish_reason, 'length');
        assert.equal(r.usage.total_tokens, 64, JSON.stringify(r.usage));
        const r2 = await client.chat.completions.create({ model: name, messages: user(PROMPTS.endless), temperature: 0 });
        assert.equal(r2.choices[0].finish_reason, 'length', 'without max_tokens: to the end of the context');
        assert.equal(r2.usage.total_tokens, 64, JSON.stringify(r2.usage));
    });

    test('Anthropic: max_tokens beyond the context is clamped: 200, max_tokens, input + output = context', { ...T, skip: PENDING.anthropic }, async () => {
        const m = await anthropicClient(server).messages.create({
            model: name,
            messages: user(PROMPTS.endless),
            max_tokens: 1000,
            temperature: 0,
        });
        assertAnthropicMessage(m, { model: name });
        assert.equal(m.stop_reason, 'max_tokens');
        assert.equal(inputTotal(m.usage) + m.usage.output_tokens, 64, JSON.stringify(m.usage));
    });

    test('a body over --max-request-bytes → 413 (Content-Length and chunked); under it → 200', T, async () => {
        const pad = (n) => 'x'.repeat(n);
        const big = { model: name, messages: user(PROMPTS.short), max_tokens: 2, padding: pad(8192) };
        const r1 = await request(server, { method: 'POST', path: '/v1/chat/completions', body: big });
        assert.equal(r1.status, 413, r1.text);
        assert.equal(openaiErrorShape(r1.json()), null);
        await assertHealthy(server);
        const r2 = await request(server, { method: 'POST', path: '/v1/messages', body: big });
        assert.equal(r2.status, 413, r2.text);
        assert.equal(anthropicErrorShape(r2.json()), null);
        await assertHealthy(server);
        const json = JSON.stringify(big);
        const r3 = await request(server, {
            method: 'POST',
            path: '/v1/chat/completions',
            body: [json.slice(0, 3000), json.slice(3000, 6000), json.slice(6000)],
        });
        assert.equal(r3.status, 413, `chunked: ${r3.text}`);
        await assertHealthy(server);
        const small = { model: name, messages: user(PROMPTS.short), max_tokens: 2, padding: pad(3000) };
        const r4 = await request(server, { method: 'POST', path: '/v1/chat/completions', body: small });
        assert.equal(r4.status, 200, r4.text);
        const sj = JSON.stringify(small);
        const r5 = await request(server, { method: 'POST', path: '/v1/chat/completions', body: [sj.slice(0, 100), sj.slice(100)] });
        assert.equal(r5.status, 200, `chunked under the limit: ${r5.text}`);
    });
});

describe('--strict-model-name', { skip: SKIP }, () => {
    let server;
    let name;
    before(async () => {
        server = await startServer(['--strict-model-name', '--ctx', '4096']);
        name = await served(server);
    });
    after(async () => {
        if (server) {
            await assertHealthy(server);
            await server.stop();
        }
    });

    test('the served name → 200; /v1/models/{other} → 404; the SDK sees 404', T, async () => {
        const ok = await request(server, {
            method: 'POST',
            path: '/v1/chat/completions',
            body: { model: name, messages: user(PROMPTS.short), max_tokens: 2 },
        });
        assert.equal(ok.status, 200, ok.text);
        assert.equal(ok.json().model, name);
        const m = await request(server, { path: '/v1/models/gpt-4o' });
        assert.equal(m.status, 404);
        await assert.rejects(
            openaiClient(server).chat.completions.create({ model: 'gpt-4o', messages: user('x'), max_tokens: 2 }),
            (e) => e.status === 404,
        );
    });

    for (const [path, body] of Object.entries({
        '/v1/chat/completions': { model: 'gpt-4o', messages: user('x'), max_tokens: 2 },
        '/v1/completions': { model: 'gpt-4o', prompt: 'x', max_tokens: 2 },
        '/v1/responses': { model: 'gpt-4o', input: 'x' },
    })) {
        const skip = path === '/v1/responses' && PENDING.responses;
        test(`${path}: another model name → 404 model_not_found`, { ...T, skip }, async () => {
            const res = await request(server, { method: 'POST', path, body });
            assert.equal(res.status, 404, `${path}: ${res.text}`);
            const b = res.json();
            assert.equal(openaiErrorShape(b), null);
            assert.equal(b.error.code, 'model_not_found', `${path}: ${res.text}`);
            assert.match(b.error.message, /gpt-4o/);
        });
    }

    test('/v1/messages: another model name → 404 not_found_error', { ...T, skip: PENDING.anthropic }, async () => {
        const res = await request(server, {
            method: 'POST',
            path: '/v1/messages',
            body: { model: 'claude-sonnet-4-5', messages: user('x'), max_tokens: 2 },
        });
        assert.equal(res.status, 404, res.text);
        const b = res.json();
        assert.equal(anthropicErrorShape(b), null);
        assert.equal(b.error.type, 'not_found_error');
        assert.match(b.error.message, /claude-sonnet-4-5/);
    });
});

describe('--api-key', { skip: SKIP }, () => {
    const KEY = 'e2e-secret-key';
    let server;
    before(async () => {
        server = await startServer(['--api-key', KEY, '--ctx', '4096']);
    });
    after(async () => {
        if (server) {
            await assertHealthy(server, { Authorization: `Bearer ${KEY}` });
            await server.stop();
        }
    });

    const chatBody = { model: 'm', messages: user(PROMPTS.short), max_tokens: 2 };
    const msgBody = { model: 'm', messages: user(PROMPTS.short), max_tokens: 2 };

    test('OpenAI routes: no key or a wrong key → 401; Bearer with the key → 200', T, async () => {
        for (const headers of [{}, { Authorization: 'Bearer wrong' }, { Authorization: KEY }]) {
            const res = await request(server, { method: 'POST', path: '/v1/chat/completions', body: chatBody, headers });
            assert.equal(res.status, 401, `${JSON.stringify(headers)}: ${res.text}`);
            assert.equal(openaiErrorShape(res.json()), null);
            await assertHealthy(server, { Authorization: `Bearer ${KEY}` });
        }
        const models = await request(server, { path: '/v1/models' });
        assert.equal(models.status, 401);
        const ok = await request(server, {
            method: 'POST',
            path: '/v1/chat/completions',
            body: chatBody,
            headers: { Authorization: `Bearer ${KEY}` },
        });
        assert.equal(ok.status, 200, ok.text);
        await assert.rejects(
            openaiClient(server, { apiKey: 'wrong' }).chat.completions.create(chatBody),
            (e) => e.status === 401,
        );
        const r = await openaiClient(server, { apiKey: KEY }).chat.completions.create(chatBody);
        assert.equal(r.object, 'chat.completion');
    });

    test('Anthropic routes: x-api-key or Bearer with the key → 200; none or wrong → 401 authentication_error', { ...T, skip: PENDING.anthropic }, async () => {
        for (const headers of [{}, { 'x-api-key': 'wrong' }, { Authorization: 'Bearer wrong' }]) {
            const res = await request(server, { method: 'POST', path: '/v1/messages', body: msgBody, headers });
            assert.equal(res.status, 401, `${JSON.stringify(headers)}: ${res.text}`);
            const b = res.json();
            assert.equal(anthropicErrorShape(b), null);
            assert.equal(b.error.type, 'authentication_error');
        }
        for (const headers of [{ 'x-api-key': KEY }, { Authorization: `Bearer ${KEY}` }]) {
            const res = await request(server, { method: 'POST', path: '/v1/messages', body: msgBody, headers });
            assert.equal(res.status, 200, `${JSON.stringify(headers)}: ${res.text}`);
        }
        const ct = await request(server, {
            method: 'POST',
            path: '/v1/messages/count_tokens',
            body: { model: 'm', messages: user('x') },
        });
        assert.equal(ct.status, 401);
        const m = await anthropicClient(server, { apiKey: KEY }).messages.create(msgBody);
        assert.equal(m.type, 'message');
        const m2 = await anthropicClient(server, { apiKey: null, authToken: KEY }).messages.create(msgBody);
        assert.equal(m2.type, 'message');
        await assert.rejects(anthropicClient(server, { apiKey: 'wrong' }).messages.create(msgBody), (e) => e.status === 401);
    });
});

describe('--parallel 1 --max-queue 1', { skip: SKIP }, () => {
    let server;
    before(async () => {
        // A context long enough that the held streams cannot finish while the test looks at
        // the full queue: the tiny model ends the "endless" reply by itself after ~2,500
        // tokens, which took 0.5 s in CI (at ~5,000 tok/s), before the last check ran; with
        // ignore_eos and 30,000 tokens they last until the test lets them go.
        server = await startServer(['--parallel', '1', '--max-queue', '1', '--ctx', '32768']);
    });
    after(async () => {
        if (server) {
            await assertHealthy(server);
            await server.stop();
        }
    });

    test('more requests than the queue holds → 503 with Retry-After; the server recovers', T, async (t) => {
        const body = JSON.stringify({ model: 'm', messages: user(PROMPTS.endless), max_tokens: 30000, ignore_eos: true, stream: true, temperature: 0 });
        const reqs = [];
        const answers = [];
        for (let i = 0; i < 6; i++) {
            const req = http.request({
                host: server.host,
                port: server.port,
                method: 'POST',
                path: '/v1/chat/completions',
                agent: false,
                headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
            });
            req.on('error', () => {});
            req.on('response', (res) => {
                const a = { status: res.statusCode, headers: res.headers, body: '' };
                answers.push(a);
                if (res.statusCode !== 200) {
                    res.on('data', (d) => {
                        a.body += d;
                    });
                    res.on('end', () => {
                        a.ended = true;
                    });
                } else {
                    res.resume();
                }
            });
            req.end(body);
            reqs.push(req);
            // One after the other, so the first is running before the rest arrive.
            await new Promise((r) => setTimeout(r, 100));
        }
        try {
            const busy = await waitFor(() => answers.find((a) => a.status === 503 && a.ended), 30_000, 'a 503 answer');
            assert.match(String(busy.headers['retry-after']), /^\d+$/, `Retry-After: ${busy.headers['retry-after']}`);
            assert.equal(openaiErrorShape(JSON.parse(busy.body)), null);
            assert.ok(answers.every((a) => a.status === 200 || a.status === 503), JSON.stringify(answers.map((a) => a.status)));
            // The Anthropic route answers in its own shape while the queue is full.
            if (PENDING.anthropic) t.diagnostic(`the /v1/messages part is skipped: ${PENDING.anthropic}`);
            else {
                const res = await request(server, {
                    method: 'POST',
                    path: '/v1/messages',
                    body: { model: 'm', messages: user(PROMPTS.short), max_tokens: 2 },
                });
                assert.equal(res.status, 503, res.text);
                assert.match(String(res.headers['retry-after']), /^\d+$/);
                assert.equal(anthropicErrorShape(res.json()), null);
            }
        } finally {
            for (const r of reqs) r.destroy();
        }
        await assertHealthy(server);
        // Once the streams are gone the server takes requests again.
        await waitFor(
            async () => {
                const r = await request(server, {
                    method: 'POST',
                    path: '/v1/chat/completions',
                    body: { model: 'm', messages: user(PROMPTS.short), max_tokens: 2 },
                });
                return r.status === 200;
            },
            30_000,
            'a 200 after the queue drained',
        );
    });
});
