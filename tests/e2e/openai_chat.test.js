// openai_chat.test.js - POST /v1/chat/completions through the official openai SDK
// and on the wire: body and chunk shapes, streaming == non-streaming (greedy),
// usage, stop strings, length limits, tools (assembled by the SDK's stream helper),
// tool_choice, json_object, logprobs, seeds, reasoning_content, content parts.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
    assertChatChunks,
    assertChatCompletion,
    assertOpenAIUsage,
    isJsonObjectPrefix,
    parseArgs,
    pickStop,
} from './checks.js';
import {
    OPENAI_TOOLS,
    PROMPTS,
    SERVED,
    SKIP,
    TIMEOUT,
    assertHealthy,
    openaiClient,
    postSSE,
    request,
    sharedServer,
    stopSharedServer,
} from './harness.js';

const T = { timeout: TIMEOUT };

const user = (content) => [{ role: 'user', content }];
const NOTHINK = { chat_template_kwargs: { enable_thinking: false } };
const THINK = { chat_template_kwargs: { enable_thinking: true } };
const DEFAULT = { chat_template_kwargs: undefined }; // JSON.stringify drops it: what plain clients send

describe('OpenAI chat completions', { skip: SKIP }, () => {
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

    // Thinking off unless a test turns it on (or, with DEFAULT, leaves the server's default):
    // the tests that compare text need the reply in content.
    const base = (extra = {}) => ({ model: SERVED, temperature: 0, ...NOTHINK, ...extra });

    // A greedy request without stream through the SDK, checked field by field.
    async function complete(extra) {
        const body = await client.chat.completions.create(base({ stream: false, ...extra }));
        const choice = assertChatCompletion(body);
        return { body, choice };
    }

    // The same request streamed on the wire: framing, chunks, [DONE].
    async function streamRaw(extra, { includeUsage = true } = {}) {
        const req = base({ stream: true, ...extra });
        if (includeUsage) req.stream_options = { include_usage: true };
        const res = await postSSE(server, '/v1/chat/completions', req);
        const frames = res.frames;
        assert.equal(frames[frames.length - 1].data, '[DONE]', 'the stream ends with data: [DONE]');
        assert.equal(frames.filter((f) => f.data === '[DONE]').length, 1, 'one [DONE]');
        const chunks = frames.slice(0, -1).map((f) => {
            assert.ok(f.json, `chunk is JSON: ${f.raw}`);
            return f.json;
        });
        return assertChatChunks(chunks, { includeUsage });
    }

    test('non-stream body: id, object, created, model, message, finish_reason, usage', T, async () => {
        const res = await request(server, {
            method: 'POST',
            path: '/v1/chat/completions',
            body: base({ messages: user(PROMPTS.short), max_tokens: 64, ...DEFAULT }),
        });
        assert.equal(res.status, 200, res.text);
        assert.match(res.headers['content-type'] || '', /^application\/json/);
        const body = res.json();
        const c = assertChatCompletion(body);
        assert.equal(typeof c.message.content, 'string');
        assert.ok(c.message.content.length > 0, 'some text');
        assert.equal(c.logprobs, null, 'logprobs null when not asked');
        assert.equal(c.finish_reason, 'stop', 'the bundled model ends this reply itself');
        assert.ok(c.message.tool_calls === undefined || c.message.tool_calls === null || c.message.tool_calls.length === 0);
    });

    test('stream through the SDK equals the non-stream reply (greedy), usage chunk last', T, async () => {
        const extra = { messages: user(PROMPTS.short), max_tokens: 64, ...DEFAULT };
        const { body, choice } = await complete(extra);
        const stream = await client.chat.completions.create(
            base({ ...extra, stream: true, stream_options: { include_usage: true } }),
        );
        let text = '';
        let finish = null;
        let usage = null;
        for await (const chunk of stream) {
            if (chunk.choices.length) {
                text += chunk.choices[0].delta.content || '';
                if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
            }
            if (chunk.usage) usage = chunk.usage;
        }
        assert.equal(text, choice.message.content);
        assert.equal(finish, choice.finish_reason);
        assertOpenAIUsage(usage);
        assert.equal(usage.prompt_tokens, body.usage.prompt_tokens);
        assert.equal(usage.completion_tokens, body.usage.completion_tokens);
    });

    test('raw stream: every chunk complete, role first, finish_reason last, include_usage, [DONE]', T, async () => {
        const extra = { messages: user(PROMPTS.short), max_tokens: 64 };
        const { body, choice } = await complete(extra);
        const s = await streamRaw(extra, { includeUsage: true });
        assert.equal(s.content, choice.message.content, 'streamed text == non-stream text');
        assert.equal(s.finish, choice.finish_reason);
        assert.equal(s.usage.completion_tokens, body.usage.completion_tokens);
        assert.equal(s.usage.prompt_tokens, body.usage.prompt_tokens);
        // Without include_usage there is no usage chunk.
        const s2 = await streamRaw(extra, { includeUsage: false });
        assert.equal(s2.content, choice.message.content);
    });

    test('stop strings: the text ends before the stop string, finish_reason stop (stream too)', T, async () => {
        const extra = { messages: user(PROMPTS.endless), max_tokens: 24 };
        const { choice } = await complete(extra);
        assert.equal(choice.finish_reason, 'length');
        const { stop, expected } = pickStop(choice.message.content);
        const r = await complete({ ...extra, stop });
        assert.equal(r.choice.finish_reason, 'stop', `stop ${JSON.stringify(stop)}`);
        assert.equal(r.choice.message.content, expected, `stop ${JSON.stringify(stop)}: the reply up to it`);
        const r2 = await complete({ ...extra, stop: ['\u0001never', stop] });
        assert.equal(r2.choice.message.content, expected, 'stop as an array');
        assert.equal(r2.choice.finish_reason, 'stop');
        const s = await streamRaw({ ...extra, stop });
        assert.equal(s.content, expected, 'streamed: the text up to the stop string, nothing of it');
        assert.equal(s.finish, 'stop');
        const r3 = await complete({ ...extra, stop: ['\u0001never'] });
        assert.equal(r3.choice.message.content, choice.message.content, 'a stop string that never occurs changes nothing');
        assert.equal(r3.choice.finish_reason, 'length');
    });

    test('max_tokens and max_completion_tokens → finish_reason length with exactly that many tokens', T, async () => {
        const r = await complete({ messages: user(PROMPTS.endless), max_tokens: 5 });
        assert.equal(r.choice.finish_reason, 'length');
        assert.equal(r.body.usage.completion_tokens, 5);
        const r2 = await complete({ messages: user(PROMPTS.endless), max_completion_tokens: 7 });
        assert.equal(r2.choice.finish_reason, 'length');
        assert.equal(r2.body.usage.completion_tokens, 7);
        const s = await streamRaw({ messages: user(PROMPTS.endless), max_tokens: 5 });
        assert.equal(s.finish, 'length');
        assert.equal(s.usage.completion_tokens, 5);
        assert.equal(s.content, r.choice.message.content);
    });

    test('tools: the non-stream call equals the one the SDK assembles from the stream', T, async () => {
        const extra = { messages: user(PROMPTS.tool), tools: OPENAI_TOOLS, max_tokens: 64, ...NOTHINK };
        const { choice } = await complete(extra);
        assert.equal(choice.finish_reason, 'tool_calls');
        assert.equal(choice.message.content, null, 'content is null when the reply is only tool calls');
        const calls = choice.message.tool_calls;
        assert.ok(Array.isArray(calls) && calls.length >= 1, `tool_calls: ${JSON.stringify(choice.message)}`);
        assert.equal(calls[0].type, 'function');
        assert.ok(typeof calls[0].id === 'string' && calls[0].id.length > 0);
        assert.equal(calls[0].function.name, 'get_weather');
        const args = parseArgs(calls[0].function.arguments);
        assert.equal(typeof args.city, 'string');

        // The SDK's own stream helper assembles the chunks into a ChatCompletion.
        const stream = client.chat.completions.stream(base({ ...extra, stream: true }));
        const final = await stream.finalChatCompletion();
        const fc = final.choices[0];
        assert.equal(fc.finish_reason, 'tool_calls');
        assert.equal(fc.message.tool_calls.length, calls.length);
        fc.message.tool_calls.forEach((tc, i) => {
            assert.equal(tc.type, 'function');
            assert.equal(tc.function.name, calls[i].function.name);
            assert.deepEqual(parseArgs(tc.function.arguments), parseArgs(calls[i].function.arguments));
        });

        // On the wire: index on every fragment, id/type/name on the first.
        const s = await streamRaw(extra);
        assert.equal(s.finish, 'tool_calls');
        assert.equal(s.toolCalls.length, calls.length);
        assert.equal(s.toolCalls[0].name, 'get_weather');
        assert.deepEqual(parseArgs(s.toolCalls[0].arguments), args);
        assert.equal(s.content, '', 'no content deltas for a tool-call-only reply');
    });

    test('tool_choice: required, named, none; parallel_tool_calls accepted', T, async () => {
        const req = await complete({
            messages: user(PROMPTS.short),
            tools: OPENAI_TOOLS,
            tool_choice: 'required',
            max_tokens: 64,
            ...NOTHINK,
        });
        const rc = req.choice.message.tool_calls;
        assert.ok(Array.isArray(rc) && rc.length >= 1, `required: a tool call: ${JSON.stringify(req.choice.message)}`);
        assert.ok(['get_weather', 'get_time'].includes(rc[0].function.name));
        parseArgs(rc[0].function.arguments, 'required: arguments');

        const named = await complete({
            messages: user(PROMPTS.tool),
            tools: OPENAI_TOOLS,
            tool_choice: { type: 'function', function: { name: 'get_time' } },
            max_tokens: 64,
            ...NOTHINK,
        });
        const nc = named.choice.message.tool_calls;
        assert.ok(Array.isArray(nc) && nc.length >= 1, `named: a tool call: ${JSON.stringify(named.choice.message)}`);
        assert.equal(nc[0].function.name, 'get_time', 'named: the named function');
        parseArgs(nc[0].function.arguments, 'named: arguments');

        const none = await complete({
            messages: user(PROMPTS.tool),
            tools: OPENAI_TOOLS,
            tool_choice: 'none',
            max_tokens: 32,
            ...NOTHINK,
        });
        const tc = none.choice.message.tool_calls;
        assert.ok(tc === undefined || tc === null || tc.length === 0, `none: no tool calls: ${JSON.stringify(none.choice.message)}`);
        assert.notEqual(none.choice.finish_reason, 'tool_calls');
        assert.equal(typeof none.choice.message.content, 'string');

        const auto = await complete({
            messages: user(PROMPTS.tool),
            tools: OPENAI_TOOLS,
            tool_choice: 'auto',
            parallel_tool_calls: false,
            max_tokens: 64,
            ...NOTHINK,
        });
        assert.equal(auto.choice.message.tool_calls.length, 1, 'parallel_tool_calls false: one call');
    });

    test('tool result round trip: assistant tool_calls + role tool message', T, async () => {
        const { choice } = await complete({
            messages: [
                { role: 'system', content: 'You answer briefly.' },
                { role: 'user', content: PROMPTS.tool },
                {
                    role: 'assistant',
                    content: null,
                    tool_calls: [
                        { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } },
                    ],
                },
                { role: 'tool', tool_call_id: 'call_1', content: 'Sunny, 22 C' },
            ],
            tools: OPENAI_TOOLS,
            max_tokens: 16,
            ...NOTHINK,
        });
        assert.ok(choice.message.content !== null || (choice.message.tool_calls || []).length > 0);
    });

    test('response_format json_object: the reply parses as a JSON object (stream too)', T, async () => {
        // A prompt the bundled model answers with a closed object under the JSON mask.
        const extra = {
            messages: user('Return this JSON unchanged:\n```json\n{"name": "Bob", "age": 3}\n```'),
            response_format: { type: 'json_object' },
            max_tokens: 64,
        };
        const { choice } = await complete(extra);
        assert.equal(choice.finish_reason, 'stop', `the object ends before max_tokens: ${JSON.stringify(choice.message.content)}`);
        let v;
        assert.doesNotThrow(() => {
            v = JSON.parse(choice.message.content);
        }, `content is JSON: ${choice.message.content}`);
        assert.ok(v && typeof v === 'object' && !Array.isArray(v), `a JSON object: ${choice.message.content}`);
        const s = await streamRaw(extra);
        assert.equal(s.content, choice.message.content);
        assert.equal(s.finish, 'stop');
    });

    test('response_format json_object: every streamed prefix can still become a JSON object', T, async () => {
        // A prompt the bundled model would answer with a fenced block: the mask must hold it
        // to an object prefix at every token, whether or not it closes in time.
        const extra = {
            messages: user('Return a JSON object with a key name set to Bob.'),
            response_format: { type: 'json_object' },
            max_tokens: 48,
        };
        const { choice } = await complete(extra);
        const text = choice.message.content;
        assert.ok(isJsonObjectPrefix(text), `an object prefix: ${JSON.stringify(text)}`);
        if (choice.finish_reason === 'stop') assert.doesNotThrow(() => JSON.parse(text), `finished, so JSON: ${text}`);
        const res = await postSSE(server, '/v1/chat/completions', base({ ...extra, stream: true }));
        let acc = '';
        for (const f of res.frames) {
            const d = f.json && f.json.choices[0] && f.json.choices[0].delta;
            if (!d || typeof d.content !== 'string') continue;
            acc += d.content;
            assert.ok(isJsonObjectPrefix(acc), `streamed prefix is an object prefix: ${JSON.stringify(acc)}`);
        }
        assert.equal(acc, text, 'streamed == non-stream');
    });

    test('logprobs and top_logprobs: shape, greedy choice on top, bytes spell the text; stream equal', T, async () => {
        const extra = { messages: user(PROMPTS.endless), max_tokens: 8, logprobs: true, top_logprobs: 2 };
        const { body, choice } = await complete(extra);
        assert.equal(choice.finish_reason, 'length');
        const lp = choice.logprobs;
        assert.ok(lp && Array.isArray(lp.content), `logprobs.content: ${JSON.stringify(lp)}`);
        assert.ok('refusal' in lp, 'logprobs.refusal present');
        assert.equal(lp.content.length, body.usage.completion_tokens, 'one entry per generated token');
        const bytes = [];
        for (const t of lp.content) {
            const w = JSON.stringify(t);
            assert.equal(typeof t.token, 'string', w);
            assert.ok(typeof t.logprob === 'number' && t.logprob <= 0, `logprob <= 0: ${w}`);
            assert.ok(Array.isArray(t.bytes) && t.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256), `bytes: ${w}`);
            assert.equal(t.top_logprobs.length, 2, `two alternatives: ${w}`);
            for (const a of t.top_logprobs) {
                assert.equal(typeof a.token, 'string', w);
                assert.ok(typeof a.logprob === 'number' && a.logprob <= 0, w);
                assert.ok(Array.isArray(a.bytes), w);
            }
            assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob, `sorted: ${w}`);
            assert.equal(t.top_logprobs[0].token, t.token, `greedy: the chosen token is the most likely: ${w}`);
            assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4, w);
            bytes.push(...t.bytes);
        }
        assert.equal(Buffer.from(bytes).toString('utf8'), choice.message.content, 'the tokens\' bytes spell the content');

        const res = await postSSE(server, '/v1/chat/completions', base({ ...extra, stream: true }));
        const streamed = [];
        for (const f of res.frames) {
            if (!f.json || !f.json.choices.length) continue;
            const l = f.json.choices[0].logprobs;
            if (l && l.content) streamed.push(...l.content);
        }
        assert.deepEqual(streamed.map((t) => t.token), lp.content.map((t) => t.token), 'streamed logprobs tokens');
        streamed.forEach((t, i) => assert.ok(Math.abs(t.logprob - lp.content[i].logprob) < 1e-4));

        const none = await complete({ messages: user(PROMPTS.endless), max_tokens: 4, logprobs: false });
        assert.equal(none.choice.logprobs, null);
    });

    test('seed: the same seed gives the same sample; different seeds differ', T, async () => {
        const extra = { messages: user(PROMPTS.endless), max_tokens: 16, temperature: 1.5, top_p: 1 };
        const a = await complete({ ...extra, seed: 1234 });
        const b = await complete({ ...extra, seed: 1234 });
        assert.equal(a.choice.message.content, b.choice.message.content, 'same seed, same text');
        const texts = new Set([a.choice.message.content]);
        for (const seed of [1, 2, 3, 4]) texts.add((await complete({ ...extra, seed })).choice.message.content);
        assert.ok(texts.size > 1, 'five seeds at temperature 1.5 do not all give the same text');
    });

    test('reasoning_content with chat_template_kwargs.enable_thinking (stream too), none without', T, async () => {
        const extra = { messages: user(PROMPTS.think), max_tokens: 96, ...THINK };
        const { choice } = await complete(extra);
        const r = choice.message.reasoning_content;
        assert.ok(typeof r === 'string' && r.trim().length > 0, `reasoning_content: ${JSON.stringify(choice.message)}`);
        assert.ok(!/<\/?think>/.test(r), 'no think tags in reasoning_content');
        assert.ok(!/<\/?think>/.test(choice.message.content || ''), 'no think tags in content');
        const s = await streamRaw(extra);
        assert.equal(s.reasoning, r, 'streamed reasoning_content == non-stream');
        assert.equal(s.content, choice.message.content);

        const off = await complete({ messages: user(PROMPTS.think), max_tokens: 96, ...NOTHINK });
        const ro = off.choice.message.reasoning_content;
        assert.ok(ro === undefined || ro === null || ro === '', `no reasoning with enable_thinking false: ${JSON.stringify(ro)}`);
        const eff = await complete({ messages: user(PROMPTS.think), max_tokens: 96, reasoning_effort: 'none', ...DEFAULT });
        const re = eff.choice.message.reasoning_content;
        assert.ok(re === undefined || re === null || re === '', `no reasoning with reasoning_effort none: ${JSON.stringify(re)}`);
    });

    test('reasoning then a tool call in one reply', T, async () => {
        const { choice } = await complete({ messages: user(PROMPTS.tool), tools: OPENAI_TOOLS, max_tokens: 96, ...THINK });
        assert.ok(typeof choice.message.reasoning_content === 'string' && choice.message.reasoning_content.length > 0,
            `reasoning_content: ${JSON.stringify(choice.message)}`);
        assert.equal(choice.finish_reason, 'tool_calls');
        assert.equal(choice.message.tool_calls[0].function.name, 'get_weather');
        parseArgs(choice.message.tool_calls[0].function.arguments);
    });

    test('content as an array of text parts equals the same text as a string; developer role', T, async () => {
        const a = await complete({ messages: user(PROMPTS.short), max_tokens: 48 });
        const b = await complete({ messages: user([{ type: 'text', text: PROMPTS.short }]), max_tokens: 48 });
        assert.equal(b.choice.message.content, a.choice.message.content);
        assert.equal(b.body.usage.prompt_tokens, a.body.usage.prompt_tokens);
        const sys = await complete({
            messages: [{ role: 'system', content: [{ type: 'text', text: 'Be brief.' }] }, ...user(PROMPTS.short)],
            max_tokens: 16,
        });
        assert.ok(sys.body.usage.prompt_tokens > a.body.usage.prompt_tokens, 'the system text is in the prompt');
        const dev = await complete({ messages: [{ role: 'developer', content: 'Be brief.' }, ...user(PROMPTS.short)], max_tokens: 16 });
        assert.ok(dev.body.usage.prompt_tokens > a.body.usage.prompt_tokens, 'the developer text is in the prompt');
    });

    test('multi-byte UTF-8 (é, CJK, emoji) streams whole: stream == non-stream, no U+FFFD', T, async () => {
        // The bundled model echoes this one, so the reply has 2-, 3- and 4-byte characters
        // whose bytes come from several tokens.
        const extra = { messages: user('Echo this JSON object: {"name": "Zoë 日本 🎉"}'), max_tokens: 40 };
        const { choice } = await complete(extra);
        assert.ok(!choice.message.content.includes('\uFFFD'), `no replacement characters: ${choice.message.content}`);
        assert.ok(/[^\x00-\x7f]/.test(choice.message.content), `the reply has non-ASCII text: ${choice.message.content}`);
        const s = await streamRaw(extra);
        assert.equal(s.content, choice.message.content);
    });

    test('a repeated prompt reads the prefix cache: cached_tokens > 0, the same reply', T, async () => {
        // The tool prompt is ~200 tokens: whole KV blocks of it can be reused.
        const extra = { messages: user(PROMPTS.tool), tools: OPENAI_TOOLS, max_tokens: 48 };
        const a = await complete(extra);
        const b = await complete(extra);
        const cached = b.body.usage.prompt_tokens_details.cached_tokens;
        assert.ok(cached > 0, `the second request reports cached prompt tokens: ${JSON.stringify(b.body.usage)}`);
        assert.equal(b.body.usage.prompt_tokens, a.body.usage.prompt_tokens, 'prompt_tokens counts cached tokens too');
        // The same reply from cached KV (tool call ids are fresh per request).
        const shape = (m) => ({ ...m, tool_calls: (m.tool_calls || []).map((t) => ({ ...t, id: undefined })) });
        assert.deepEqual(shape(b.choice.message), shape(a.choice.message));
        const s = await streamRaw(extra);
        assert.ok(s.usage.prompt_tokens_details.cached_tokens > 0, `streamed usage chunk too: ${JSON.stringify(s.usage)}`);
    });

    test('any model name is answered by the served model, which the response names', T, async () => {
        const r = await client.chat.completions.create({
            model: 'gpt-4o-mini',
            messages: user(PROMPTS.short),
            max_tokens: 8,
            temperature: 0,
        });
        assert.equal(r.model, SERVED);
        const s = await client.chat.completions.create({
            model: 'some-agent-default',
            messages: user(PROMPTS.short),
            max_tokens: 4,
            stream: true,
        });
        for await (const chunk of s) assert.equal(chunk.model, SERVED);
    });
});
