// errors.test.js - bad requests on the wire, each answered with its API's own
// error shape and status: malformed JSON, wrong types, out-of-range values, missing
// fields (named in the message and, for OpenAI, in `param`), n > 1, invalid UTF-8,
// 10,000-deep nesting. After every one the server still answers /health.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
    PROMPTS,
    SERVED,
    PENDING,
    SKIP,
    TIMEOUT,
    anthropicErrorShape,
    assertHealthy,
    openaiErrorShape,
    request,
    sharedServer,
    stopSharedServer,
} from './harness.js';

const T = { timeout: TIMEOUT };

const msgs = [{ role: 'user', content: PROMPTS.short }];
const chat = (extra) => JSON.stringify({ model: SERVED, messages: msgs, max_tokens: 4, ...extra });
const anth = (extra) => JSON.stringify({ model: SERVED, messages: msgs, max_tokens: 4, ...extra });
const withoutKey = (obj, key) => {
    const o = { ...obj };
    delete o[key];
    return JSON.stringify(o);
};

// [name, path, raw body, field the message must name (and OpenAI's param), status]
const OPENAI_CASES = [
    ['malformed JSON', '/v1/chat/completions', '{"model": "x", "messages": [', null],
    ['empty body', '/v1/chat/completions', '', null],
    ['a JSON array instead of an object', '/v1/chat/completions', '[]', null],
    ['NaN is not JSON', '/v1/chat/completions', chat().replace('"max_tokens":4', '"max_tokens":4,"temperature":NaN'), null],
    ['temperature 1e999 (out of double range)', '/v1/chat/completions', chat().replace('"max_tokens":4', '"max_tokens":4,"temperature":1e999'), null],
    ['missing messages', '/v1/chat/completions', withoutKey({ model: SERVED, messages: msgs, max_tokens: 4 }, 'messages'), 'messages'],
    ['messages not an array', '/v1/chat/completions', chat({ messages: 'hello' }), 'messages'],
    ['messages empty', '/v1/chat/completions', chat({ messages: [] }), 'messages'],
    ['a message with an unknown role', '/v1/chat/completions', chat({ messages: [{ role: 'wizard', content: 'hi' }] }), 'role'],
    ['max_tokens a string', '/v1/chat/completions', chat({ max_tokens: 'ten' }), 'max_tokens'],
    ['max_tokens negative', '/v1/chat/completions', chat({ max_tokens: -1 }), 'max_tokens'],
    ['max_completion_tokens negative', '/v1/chat/completions', chat({ max_tokens: undefined, max_completion_tokens: -5 }), 'max_completion_tokens'],
    ['temperature 3', '/v1/chat/completions', chat({ temperature: 3 }), 'temperature'],
    ['temperature a string', '/v1/chat/completions', chat({ temperature: 'hot' }), 'temperature'],
    ['top_p 1.5', '/v1/chat/completions', chat({ top_p: 1.5 }), 'top_p'],
    ['presence_penalty 5', '/v1/chat/completions', chat({ presence_penalty: 5 }), 'presence_penalty'],
    ['frequency_penalty -3', '/v1/chat/completions', chat({ frequency_penalty: -3 }), 'frequency_penalty'],
    ['top_logprobs 21', '/v1/chat/completions', chat({ logprobs: true, top_logprobs: 21 }), 'top_logprobs'],
    ['stop a number', '/v1/chat/completions', chat({ stop: 5 }), 'stop'],
    ['stream a string', '/v1/chat/completions', chat({ stream: 'yes' }), 'stream'],
    ['seed a string', '/v1/chat/completions', chat({ seed: 'abc' }), 'seed'],
    ['tools not an array', '/v1/chat/completions', chat({ tools: 'get_weather' }), 'tools'],
    ['response_format of an unknown type', '/v1/chat/completions', chat({ response_format: { type: 'bogus' } }), 'response_format'],
    ['n = 2', '/v1/chat/completions', chat({ n: 2 }), 'n'],
    ['completions: missing prompt', '/v1/completions', JSON.stringify({ model: SERVED, max_tokens: 4 }), 'prompt'],
    ['completions: max_tokens negative', '/v1/completions', JSON.stringify({ model: SERVED, prompt: 'x', max_tokens: -1 }), 'max_tokens'],
    ['completions: malformed JSON', '/v1/completions', '{"prompt": ', null],
    ['responses: missing input', '/v1/responses', JSON.stringify({ model: SERVED }), 'input'],
    ['responses: malformed JSON', '/v1/responses', '{"input": ', null],
    ['responses: temperature 3', '/v1/responses', JSON.stringify({ model: SERVED, input: 'hi', temperature: 3 }), 'temperature'],
];

const ANTHROPIC_CASES = [
    ['malformed JSON', '/v1/messages', '{"model": "x", "messages": [', null],
    ['missing messages', '/v1/messages', withoutKey({ model: SERVED, messages: msgs, max_tokens: 4 }, 'messages'), 'messages'],
    ['messages not an array', '/v1/messages', anth({ messages: 'hello' }), 'messages'],
    ['missing max_tokens (required by the Messages API)', '/v1/messages', withoutKey({ model: SERVED, messages: msgs, max_tokens: 4 }, 'max_tokens'), 'max_tokens'],
    ['max_tokens negative', '/v1/messages', anth({ max_tokens: -1 }), 'max_tokens'],
    ['max_tokens a string', '/v1/messages', anth({ max_tokens: 'ten' }), 'max_tokens'],
    ['temperature 3', '/v1/messages', anth({ temperature: 3 }), 'temperature'],
    ['system a number', '/v1/messages', anth({ system: 5 }), 'system'],
    ['malformed JSON with ?beta=true', '/v1/messages?beta=true', '{"messages": ', null],
    ['count_tokens: missing messages', '/v1/messages/count_tokens', JSON.stringify({ model: SERVED }), 'messages'],
];

// 10,000 nested arrays in a field the server does not know.
const deep = (open, close) => `{"model": "${SERVED}", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "x": ${open.repeat(10000)}${close.repeat(10000)}}`;
// A user message whose text has bytes that are not UTF-8.
const badUtf8 = () =>
    Buffer.concat([
        Buffer.from(`{"model": "${SERVED}", "max_tokens": 4, "messages": [{"role": "user", "content": "caf`),
        Buffer.from([0xc3, 0x28, 0xff, 0xfe]),
        Buffer.from('"}]}'),
    ]);

describe('errors: each API\'s own error shape, then the server keeps serving', { skip: SKIP }, () => {
    let server;
    before(async () => {
        server = await sharedServer();
    });
    after(async () => {
        if (server) await assertHealthy(server);
        await stopSharedServer();
    });

    async function expectOpenAI(path, body, field, status = 400) {
        const res = await request(server, { method: 'POST', path, body });
        assert.equal(res.status, status, `${path} ${String(body).slice(0, 120)} → ${res.status}: ${res.text}`);
        assert.match(res.headers['content-type'] || '', /^application\/json/);
        const b = res.json();
        assert.equal(openaiErrorShape(b), null);
        if (status === 400) assert.equal(b.error.type, 'invalid_request_error');
        if (field) {
            assert.ok(b.error.message.includes(field), `the message names ${field}: ${b.error.message}`);
            assert.ok(typeof b.error.param === 'string' && b.error.param.includes(field), `error.param names the field: ${res.text}`);
        }
        await assertHealthy(server);
        return b;
    }

    async function expectAnthropic(path, body, field, status = 400) {
        const res = await request(server, { method: 'POST', path, body, headers: { 'anthropic-version': '2023-06-01' } });
        assert.equal(res.status, status, `${path} ${String(body).slice(0, 120)} → ${res.status}: ${res.text}`);
        assert.match(res.headers['content-type'] || '', /^application\/json/);
        const b = res.json();
        assert.equal(anthropicErrorShape(b), null);
        if (status === 400) assert.equal(b.error.type, 'invalid_request_error');
        if (field) assert.ok(b.error.message.includes(field), `the message names ${field}: ${b.error.message}`);
        await assertHealthy(server);
        return b;
    }

    for (const [name, path, body, field] of OPENAI_CASES) {
        const skip = path === '/v1/responses' && PENDING.responses;
        test(`OpenAI ${name} → 400`, { ...T, skip }, () => expectOpenAI(path, body, field));
    }
    for (const [name, path, body, field] of ANTHROPIC_CASES) {
        test(`Anthropic ${name} → 400`, { ...T, skip: PENDING.anthropic }, () => expectAnthropic(path, body, field));
    }

    test('unknown fields are ignored (200); n = 1 is fine', T, async () => {
        const res = await request(server, {
            method: 'POST',
            path: '/v1/chat/completions',
            body: chat({ n: 1, some_future_field: { a: [1] }, user: 'u1', store: false, metadata: { k: 'v' } }),
        });
        assert.equal(res.status, 200, res.text);
    });

    test('OpenAI invalid UTF-8 in the body → 400', T, () => expectOpenAI('/v1/chat/completions', badUtf8(), null));
    test('Anthropic invalid UTF-8 in the body → 400', { ...T, skip: PENDING.anthropic }, () => expectAnthropic('/v1/messages', badUtf8(), null));

    test('OpenAI 10,000-deep nesting → 400, not a crash', T, async () => {
        await expectOpenAI('/v1/chat/completions', deep('[', ']'), null);
        await expectOpenAI('/v1/chat/completions', deep('{"a":', '}'), null);
    });
    test('Anthropic 10,000-deep nesting → 400, not a crash', { ...T, skip: PENDING.anthropic }, () => expectAnthropic('/v1/messages', deep('[', ']'), null));

    test('a body that stops early (Content-Length larger than the bytes sent) does not hurt the server', T, async () => {
        const net = await import('node:net');
        await new Promise((resolve, reject) => {
            const sock = net.connect(server.port, server.host, () => {
                sock.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model": ');
                setTimeout(() => {
                    sock.destroy();
                    resolve();
                }, 100);
            });
            sock.on('error', reject);
        });
        await assertHealthy(server);
    });
});
