// anthropic.test.js - POST /v1/messages and /v1/messages/count_tokens through the
// official @anthropic-ai/sdk and on the wire: message and event shapes (an event:
// line on every frame), text / tool_use / thinking blocks streamed and assembled
// by the SDK's MessageStream, stop_reason for end_turn, max_tokens, stop_sequence
// and tool_use, tool_choice, system as string and blocks, tool_result turns,
// ?beta=true, and fields the server accepts without using them.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { assertAnthropicFrames, assertAnthropicMessage, assertAnthropicUsage, inputTotal, pickStop, textOf } from './checks.js';
import {
    ANTHROPIC_TOOLS,
    PROMPTS,
    SERVED,
    PENDING,
    SKIP,
    TIMEOUT,
    anthropicClient,
    assertHealthy,
    postSSE,
    request,
    sharedServer,
    stopSharedServer,
} from './harness.js';

const T = { timeout: TIMEOUT };

const user = (content) => [{ role: 'user', content }];
const THINKING = { type: 'enabled', budget_tokens: 1024 };

describe('Anthropic messages', { skip: SKIP || PENDING.anthropic }, () => {
    let server;
    let client;
    before(async () => {
        server = await sharedServer();
        client = anthropicClient(server);
    });
    after(async () => {
        if (server) await assertHealthy(server);
        await stopSharedServer();
    });

    const base = (extra) => ({ model: SERVED, max_tokens: 64, temperature: 0, ...extra });

    async function create(extra) {
        const m = await client.messages.create(base(extra));
        assertAnthropicMessage(m);
        return m;
    }

    async function streamRaw(extra, path = '/v1/messages') {
        const res = await postSSE(server, path, base({ ...extra, stream: true }), { 'anthropic-version': '2023-06-01' });
        return assertAnthropicFrames(res.frames);
    }

    test('non-stream: id, type, role, model, text block, stop_reason end_turn, usage', T, async () => {
        const res = await request(server, {
            method: 'POST',
            path: '/v1/messages',
            headers: { 'anthropic-version': '2023-06-01', 'x-api-key': 'k' },
            body: base({ messages: user(PROMPTS.short) }),
        });
        assert.equal(res.status, 200, res.text);
        assert.match(res.headers['content-type'] || '', /^application\/json/);
        const m = res.json();
        assertAnthropicMessage(m);
        assert.equal(m.content.length, 1);
        assert.equal(m.content[0].type, 'text');
        assert.ok(m.content[0].text.length > 0);
        assert.equal(m.stop_reason, 'end_turn', 'the bundled model ends this reply itself');
        assert.equal(m.stop_sequence, null);
    });

    test('stream: the SDK MessageStream assembles the non-stream message; raw frames in order', T, async () => {
        const extra = { messages: user(PROMPTS.short) };
        const ref = await create(extra);
        const stream = client.messages.stream(base(extra));
        let deltas = '';
        stream.on('text', (t) => {
            deltas += t;
        });
        const final = await stream.finalMessage();
        assert.equal(textOf(final), textOf(ref));
        assert.equal(deltas, textOf(ref));
        assert.equal(final.stop_reason, ref.stop_reason);
        assert.equal(final.usage.output_tokens, ref.usage.output_tokens);
        assert.equal(inputTotal(final.usage), inputTotal(ref.usage), 'the same prompt (cached or not)');

        const s = await streamRaw(extra);
        assert.equal(s.blocks.length, 1);
        assert.equal(s.blocks[0].type, 'text');
        assert.equal(s.blocks[0].text, textOf(ref));
        assert.equal(s.delta.stop_reason, 'end_turn');
        assert.equal(s.delta.stop_sequence, null);
        assert.equal(inputTotal(s.start.usage), inputTotal(ref.usage), 'message_start: the same prompt (cached or not)');
        assert.equal(s.usage.output_tokens, ref.usage.output_tokens, 'message_delta usage is cumulative');
        assertAnthropicUsage({ ...s.start.usage, ...s.usage });
    });

    test('max_tokens → stop_reason max_tokens with exactly that many tokens (stream too)', T, async () => {
        const m = await create({ messages: user(PROMPTS.endless), max_tokens: 8 });
        assert.equal(m.stop_reason, 'max_tokens');
        assert.equal(m.usage.output_tokens, 8);
        const s = await streamRaw({ messages: user(PROMPTS.endless), max_tokens: 8 });
        assert.equal(s.delta.stop_reason, 'max_tokens');
        assert.equal(s.usage.output_tokens, 8);
        assert.equal(s.blocks.map((b) => b.text).join(''), textOf(m));
    });

    test('stop_sequences → stop_reason stop_sequence naming it, text up to it (stream too)', T, async () => {
        const extra = { messages: user(PROMPTS.endless), max_tokens: 24 };
        const ref = await create(extra);
        const { stop, expected } = pickStop(textOf(ref));
        const m = await create({ ...extra, stop_sequences: ['\u0001never', stop] });
        assert.equal(m.stop_reason, 'stop_sequence');
        assert.equal(m.stop_sequence, stop);
        assert.equal(textOf(m), expected);
        const s = await streamRaw({ ...extra, stop_sequences: [stop] });
        assert.equal(s.delta.stop_reason, 'stop_sequence');
        assert.equal(s.delta.stop_sequence, stop);
        assert.equal(s.blocks.map((b) => b.text).join(''), expected);
    });

    test('tool_use: non-stream input equals the input assembled from input_json_delta (SDK and raw)', T, async () => {
        const extra = { messages: user(PROMPTS.tool), tools: ANTHROPIC_TOOLS };
        const m = await create(extra);
        assert.equal(m.stop_reason, 'tool_use');
        const uses = m.content.filter((b) => b.type === 'tool_use');
        assert.ok(uses.length >= 1, `a tool_use block: ${JSON.stringify(m.content)}`);
        assert.equal(uses[0].name, 'get_weather');
        assert.equal(typeof uses[0].input.city, 'string');

        const final = await client.messages.stream(base(extra)).finalMessage();
        const fu = final.content.filter((b) => b.type === 'tool_use');
        assert.equal(fu.length, uses.length);
        assert.equal(fu[0].name, 'get_weather');
        assert.deepEqual(fu[0].input, uses[0].input);
        assert.equal(final.stop_reason, 'tool_use');

        const s = await streamRaw(extra);
        const tb = s.blocks.filter((b) => b.type === 'tool_use');
        assert.equal(tb.length, uses.length);
        assert.equal(tb[0].start.name, 'get_weather');
        assert.deepEqual(JSON.parse(tb[0].partial_json), uses[0].input, 'the partial_json pieces make the input');
        assert.equal(s.delta.stop_reason, 'tool_use');
    });

    test('tool_choice auto, any, tool, none', T, async () => {
        const auto = await create({ messages: user(PROMPTS.tool), tools: ANTHROPIC_TOOLS, tool_choice: { type: 'auto' } });
        assert.ok(auto.content.some((b) => b.type === 'tool_use'), `auto: ${JSON.stringify(auto.content)}`);
        const any = await create({ messages: user(PROMPTS.short), tools: ANTHROPIC_TOOLS, tool_choice: { type: 'any' } });
        assert.ok(any.content.some((b) => b.type === 'tool_use'), `any: a tool_use block: ${JSON.stringify(any.content)}`);
        assert.equal(any.stop_reason, 'tool_use');
        const named = await create({
            messages: user(PROMPTS.tool),
            tools: ANTHROPIC_TOOLS,
            tool_choice: { type: 'tool', name: 'get_time' },
        });
        const nu = named.content.filter((b) => b.type === 'tool_use');
        assert.ok(nu.length >= 1, `tool: a tool_use block: ${JSON.stringify(named.content)}`);
        assert.equal(nu[0].name, 'get_time');
        const none = await create({ messages: user(PROMPTS.tool), tools: ANTHROPIC_TOOLS, tool_choice: { type: 'none' }, max_tokens: 32 });
        assert.ok(!none.content.some((b) => b.type === 'tool_use'), `none: no tool_use: ${JSON.stringify(none.content)}`);
        assert.notEqual(none.stop_reason, 'tool_use');
    });

    test('tool_result round trip (with the thinking block sent back, as Claude Code does)', T, async () => {
        const m = await create({
            messages: [
                { role: 'user', content: PROMPTS.tool },
                {
                    role: 'assistant',
                    content: [
                        { type: 'thinking', thinking: 'I should call the tool.', signature: 'sig-opaque' },
                        { type: 'text', text: 'Let me check.' },
                        { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } },
                    ],
                },
                {
                    role: 'user',
                    content: [
                        { type: 'tool_result', tool_use_id: 'toolu_01', content: 'Sunny, 22 C' },
                        { type: 'text', text: 'Thanks.' },
                    ],
                },
            ],
            tools: ANTHROPIC_TOOLS,
            max_tokens: 16,
        });
        assert.ok(m.content.length >= 1);
        const m2 = await create({
            messages: [
                { role: 'user', content: PROMPTS.tool },
                { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } }] },
                { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: [{ type: 'text', text: 'Sunny' }] }] },
            ],
            tools: ANTHROPIC_TOOLS,
            max_tokens: 16,
        });
        assert.ok(m2.content.length >= 1);
    });

    test('thinking enabled → a thinking block, streamed as thinking_delta; disabled → none', T, async () => {
        const extra = { messages: user(PROMPTS.think), thinking: THINKING, max_tokens: 1100 };
        const m = await create(extra);
        assert.equal(m.content[0].type, 'thinking', `the first block is thinking: ${JSON.stringify(m.content)}`);
        assert.ok(m.content[0].thinking.trim().length > 0);
        assert.ok(!/<\/?think>/.test(m.content[0].thinking), 'no think tags in the thinking text');
        assert.ok(!/<\/?think>/.test(textOf(m)), 'no think tags in the text');

        const s = await streamRaw(extra);
        assert.equal(s.blocks[0].type, 'thinking');
        assert.equal(s.blocks[0].thinking, m.content[0].thinking, 'thinking_delta pieces == non-stream thinking');
        assert.equal(s.blocks.filter((b) => b.type === 'text').map((b) => b.text).join(''), textOf(m));

        const final = await client.messages.stream(base(extra)).finalMessage();
        assert.equal(final.content[0].type, 'thinking');
        assert.equal(final.content[0].thinking, m.content[0].thinking);
        assert.equal(textOf(final), textOf(m));

        const off = await create({ messages: user(PROMPTS.think), thinking: { type: 'disabled' } });
        assert.ok(!off.content.some((b) => b.type === 'thinking'), `disabled: no thinking block: ${JSON.stringify(off.content)}`);
        const dflt = await create({ messages: user(PROMPTS.think) });
        assert.ok(!dflt.content.some((b) => b.type === 'thinking'), `no thinking param: no thinking block: ${JSON.stringify(dflt.content)}`);
    });

    test('system as a string equals system as blocks (with cache_control)', T, async () => {
        const a = await create({ system: 'Answer briefly.', messages: user(PROMPTS.short) });
        const b = await create({
            system: [{ type: 'text', text: 'Answer briefly.', cache_control: { type: 'ephemeral' } }],
            messages: user(PROMPTS.short),
        });
        assert.equal(textOf(b), textOf(a));
        assert.equal(inputTotal(b.usage), inputTotal(a.usage));
        const none = await create({ messages: user(PROMPTS.short) });
        assert.ok(inputTotal(a.usage) > inputTotal(none.usage), 'the system text is in the prompt');
        const blocks = await create({ messages: user([{ type: 'text', text: PROMPTS.short, cache_control: { type: 'ephemeral' } }]) });
        assert.equal(textOf(blocks), textOf(none), 'user content as blocks == as a string');
    });

    test('?beta=true, metadata, cache_control, unknown fields are accepted', T, async () => {
        const body = base({
            messages: user(PROMPTS.short),
            metadata: { user_id: 'e2e-user' },
            output_config: { effort: 'low' },
            context_management: { edits: [] },
            service_tier: 'auto',
            some_future_field: { nested: [1, 2, 3] },
            tools: [{ ...ANTHROPIC_TOOLS[0], cache_control: { type: 'ephemeral' } }],
            tool_choice: { type: 'auto', disable_parallel_tool_use: true },
            max_tokens: 16,
        });
        const res = await request(server, {
            method: 'POST',
            path: '/v1/messages?beta=true',
            headers: { 'anthropic-version': '2023-06-01', 'anthropic-beta': 'interleaved-thinking-2025-05-14' },
            body,
        });
        assert.equal(res.status, 200, res.text);
        assertAnthropicMessage(res.json());
        const s = await streamRaw({ messages: user(PROMPTS.short), max_tokens: 8 }, '/v1/messages?beta=true');
        assert.ok(s.blocks.length >= 1);
        const beta = await client.beta.messages.create(base({ messages: user(PROMPTS.short), max_tokens: 8 }));
        assert.equal(beta.type, 'message');
    });

    test('count_tokens equals the whole prompt of the same request (input + cache read + cache creation)', T, async () => {
        for (const extra of [
            { messages: user(PROMPTS.short) },
            { system: 'Answer briefly.', messages: user(PROMPTS.tool), tools: ANTHROPIC_TOOLS },
        ]) {
            const m = await create({ ...extra, max_tokens: 1 });
            const c = await client.messages.countTokens({ model: SERVED, ...extra });
            assert.equal(c.input_tokens, inputTotal(m.usage), `${JSON.stringify(extra)}: ${JSON.stringify(m.usage)}`);
        }
        const res = await request(server, {
            method: 'POST',
            path: '/v1/messages/count_tokens?beta=true',
            body: { model: SERVED, messages: user(PROMPTS.short) },
        });
        assert.equal(res.status, 200, res.text);
        assert.ok(Number.isInteger(res.json().input_tokens));
    });

    test('multi-byte UTF-8 streams whole: text_delta pieces == non-stream text, no U+FFFD', T, async () => {
        const extra = { messages: user('Echo this JSON object: {"name": "Zoë 日本 🎉"}'), max_tokens: 40 };
        const m = await create(extra);
        assert.ok(!textOf(m).includes('\uFFFD'), textOf(m));
        const s = await streamRaw(extra);
        assert.equal(s.blocks.map((b) => b.text).join(''), textOf(m));
    });

    test('a repeated prompt reads the prefix cache: cache_read_input_tokens > 0, the same reply', T, async () => {
        const extra = { messages: user(PROMPTS.tool), tools: ANTHROPIC_TOOLS };
        const a = await create(extra);
        const b = await create(extra);
        assert.ok(b.usage.cache_read_input_tokens > 0, `the second request reads the cache: ${JSON.stringify(b.usage)}`);
        assert.equal(inputTotal(b.usage), inputTotal(a.usage));
        assert.deepEqual(b.content.map((x) => ({ ...x, id: undefined })), a.content.map((x) => ({ ...x, id: undefined })));
        const s = await streamRaw(extra);
        assert.ok(s.usage.cache_read_input_tokens > 0, `message_delta usage: ${JSON.stringify(s.usage)}`);
        assert.equal(inputTotal(s.usage), inputTotal(a.usage), 'message_delta: the whole prompt');
        // The service knows the cache read when it starts the message, and says so there.
        assert.deepEqual(
            { input: s.start.usage.input_tokens, cache_read: s.start.usage.cache_read_input_tokens },
            { input: s.usage.input_tokens, cache_read: s.usage.cache_read_input_tokens },
            'message_start usage has the same input / cache read split as message_delta',
        );
    });

    test('any model name is answered by the served model, which the response names', T, async () => {
        const m = await client.messages.create({ model: 'claude-sonnet-4-5', max_tokens: 4, messages: user(PROMPTS.short) });
        assert.equal(m.model, SERVED);
    });
});
