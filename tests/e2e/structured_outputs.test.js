// structured_outputs.test.js - JSON Schema enforced by the grammar, through the
// server with the bundled model: OpenAI chat `response_format: json_schema`,
// Responses `text.format` json_schema and Anthropic `output_config.format`, on
// schemas of the corpus (tests/data/schemas). Every reply that finishes parses
// and validates against its schema under ajv (greedy and sampled, streamed and
// not; streamed text equals the non-streamed one); with speculation on (the
// shared server: prompt lookup drafts from the document in the prompt) the text
// is byte-identical to a server with --no-spec-decode; a schema outside the
// supported subset is a 400 naming the keyword and its JSON path.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
    OPENAI_TOOLS,
    SERVED,
    SKIP,
    TIMEOUT,
    anthropicClient,
    assertHealthy,
    metricSum,
    metrics,
    postSSE,
    request,
    sharedServer,
    startServer,
    stopSharedServer,
} from './harness.js';
import { corpus, schemaValidator } from './schemas.js';

const T = { timeout: TIMEOUT };
const NOTHINK = { chat_template_kwargs: { enable_thinking: false } };
const SCHEMAS = ['person', 'weather_tool', 'sentiment', 'linked_list', 'calendar_event', 'search_query', 'free_payload'];

const entries = corpus().filter((e) => SCHEMAS.includes(e.name));
const prompt = (e) => `Return this JSON unchanged:\n\`\`\`json\n${JSON.stringify(e.valid[0])}\n\`\`\``;
const chatBody = (e, extra = {}) => ({
    model: SERVED,
    messages: [{ role: 'user', content: prompt(e) }],
    response_format: { type: 'json_schema', json_schema: { name: e.name, schema: e.schema, strict: true } },
    max_tokens: 160,
    temperature: 0,
    ...NOTHINK,
    ...extra,
});

async function post(server, path, body) {
    const res = await request(server, { method: 'POST', path, body });
    return { status: res.status, json: res.status ? JSON.parse(res.text) : null };
}

// A finished reply validates; a cut one (max_tokens) is still checked to be a prefix the grammar allowed
// by the server's own rule (nothing here can check a prefix against a schema), so only finished ones count.
function checkReply(e, text, finished, what) {
    if (!finished) return 0;
    let v;
    assert.doesNotThrow(() => {
        v = JSON.parse(text);
    }, `${e.name} ${what}: the reply is JSON: ${JSON.stringify(text)}`);
    const validate = schemaValidator().compile(e.schema);
    assert.ok(validate(v), `${e.name} ${what}: ${JSON.stringify(text)} fails the schema: ${JSON.stringify(validate.errors)}`);
    return 1;
}

describe('structured outputs (json_schema)', { skip: SKIP }, () => {
    let server;
    let plain; // no speculation
    before(async () => {
        server = await sharedServer();
        plain = await startServer(['--served-model-name', SERVED, '--ctx', '4096', '--no-spec-decode']);
    });
    after(async () => {
        if (server) await assertHealthy(server);
        if (plain) await plain.stop();
        await stopSharedServer();
    });

    test('chat: greedy and sampled replies validate; streamed text equals non-streamed', T, async () => {
        let finished = 0;
        for (const e of entries) {
            for (const extra of [{}, { temperature: 1, seed: 7 }, { temperature: 0.8, top_p: 0.9, seed: 11 }]) {
                const r = await post(server, '/v1/chat/completions', chatBody(e, extra));
                assert.equal(r.status, 200, JSON.stringify(r.json));
                const c = r.json.choices[0];
                finished += checkReply(e, c.message.content, c.finish_reason === 'stop', JSON.stringify(extra));
                const s = await postSSE(server, '/v1/chat/completions', chatBody(e, { ...extra, stream: true }));
                let acc = '';
                let finish = null;
                for (const f of s.frames) {
                    const ch = f.json && f.json.choices && f.json.choices[0];
                    if (!ch) continue;
                    if (typeof ch.delta.content === 'string') acc += ch.delta.content;
                    if (ch.finish_reason) finish = ch.finish_reason;
                }
                assert.equal(acc, c.message.content, `${e.name}: streamed == non-streamed`);
                assert.equal(finish, c.finish_reason);
            }
        }
        assert.ok(finished >= entries.length, `only ${finished} replies finished within max_tokens`);
    });

    test('speculation on and off give byte-identical text for schema requests', T, async () => {
        let compared = 0;
        const accepted = async () => metricSum(await metrics(server), /^rapid_spec_decode_accepted_tokens_total/);
        const before = await accepted();
        for (const e of entries) {
            for (const extra of [{}, { temperature: 1, seed: 3 }]) {
                const a = await post(server, '/v1/chat/completions', chatBody(e, extra));
                const b = await post(plain, '/v1/chat/completions', chatBody(e, extra));
                assert.equal(a.status, 200);
                assert.equal(b.status, 200);
                assert.equal(a.json.choices[0].message.content, b.json.choices[0].message.content, `${e.name} ${JSON.stringify(extra)}`);
                assert.equal(a.json.choices[0].finish_reason, b.json.choices[0].finish_reason);
                compared++;
            }
        }
        // The shared server did speculate on these requests (prompt lookup finds the document in the prompt).
        assert.ok((await accepted()) > before, 'drafts were accepted under the schema grammar');
        assert.ok(compared > 0);
    });

    test('Responses text.format json_schema and Anthropic output_config.format validate', T, async () => {
        let finished = 0;
        const anthropic = anthropicClient(server);
        for (const e of entries) {
            const r = await post(server, '/v1/responses', {
                model: SERVED,
                input: prompt(e),
                text: { format: { type: 'json_schema', name: e.name, schema: e.schema, strict: true } },
                max_output_tokens: 160,
                temperature: 0,
                reasoning: { effort: 'none' },
            });
            assert.equal(r.status, 200, JSON.stringify(r.json));
            const msg = r.json.output.find((o) => o.type === 'message');
            const text = msg ? msg.content.map((p) => p.text).join('') : '';
            finished += checkReply(e, text, r.json.status === 'completed', 'responses');

            const a = await anthropic.messages.create({
                model: SERVED,
                max_tokens: 160,
                temperature: 0,
                messages: [{ role: 'user', content: prompt(e) }],
                output_config: { format: { type: 'json_schema', schema: e.schema } },
            });
            const at = a.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
            finished += checkReply(e, at, a.stop_reason === 'end_turn', 'anthropic');
        }
        assert.ok(finished >= entries.length, `only ${finished} replies finished`);
    });

    test('tool_choice named and required: the call always matches (the named tool\'s parameters validate)', T, async () => {
        // A strict-style tool with an enum and a bounded integer beside the suite's two tools.
        const tools = [...OPENAI_TOOLS, {
            type: 'function',
            function: {
                name: 'set_alarm', strict: true,
                parameters: {
                    type: 'object', additionalProperties: false, required: ['hour', 'label', 'repeat'],
                    properties: { hour: { type: 'integer', minimum: 0, maximum: 23 }, label: { type: 'string' }, repeat: { enum: ['never', 'daily'] } },
                },
            },
        }];
        let calls = 0;
        for (const [choice, seed] of [['set_alarm', 1], ['set_alarm', 2], ['get_time', 3], ['required', 4], ['required', 5]]) {
            const named = choice !== 'required';
            const r = await post(server, '/v1/chat/completions', {
                model: SERVED, messages: [{ role: 'user', content: 'Wake me at 7 every day, and what time is it in Paris?' }],
                tools, tool_choice: named ? { type: 'function', function: { name: choice } } : 'required',
                max_tokens: 96, temperature: 1, seed, ...NOTHINK,
            });
            assert.equal(r.status, 200, JSON.stringify(r.json));
            const c = r.json.choices[0];
            if (c.finish_reason === 'length') continue; // cut inside the arguments: nothing to validate
            const tc = c.message.tool_calls;
            assert.ok(Array.isArray(tc) && tc.length === 1, `${choice}: one call: ${JSON.stringify(c.message)}`);
            const fn = tc[0].function;
            if (named) assert.equal(fn.name, choice);
            const tool = tools.find((t) => t.function.name === fn.name);
            assert.ok(tool, `a tool that exists: ${fn.name}`);
            const args = JSON.parse(fn.arguments);
            assert.ok(args && typeof args === 'object' && !Array.isArray(args), fn.arguments);
            if (named) {
                const validate = schemaValidator().compile(tool.function.parameters);
                assert.ok(validate(args), `${fn.name}(${fn.arguments}): ${JSON.stringify(validate.errors)}`);
            }
            calls++;
        }
        assert.ok(calls >= 3, `only ${calls} calls finished`);

        // Anthropic's tool_choice {type: tool} is the same forced call: its input validates.
        const alarm = tools[2].function;
        const a = await anthropicClient(server).messages.create({
            model: SERVED, max_tokens: 96, temperature: 1, messages: [{ role: 'user', content: 'Wake me at 7.' }],
            tools: [{ name: alarm.name, description: 'Set an alarm', input_schema: alarm.parameters }],
            tool_choice: { type: 'tool', name: alarm.name },
        });
        if (a.stop_reason !== 'max_tokens') {
            const use = a.content.find((b) => b.type === 'tool_use');
            assert.ok(use, JSON.stringify(a.content));
            const validate = schemaValidator().compile(alarm.parameters);
            assert.ok(validate(use.input), `${JSON.stringify(use.input)}: ${JSON.stringify(validate.errors)}`);
        }
    });

    test('a schema outside the subset is a 400 naming the keyword and its path (all three APIs)', T, async () => {
        const bad = { type: 'object', properties: { when: { type: 'string', format: 'hostname' }, n: { not: {} } } };
        const chat = await post(server, '/v1/chat/completions', {
            model: SERVED, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4,
            response_format: { type: 'json_schema', json_schema: { name: 'x', schema: bad } },
        });
        assert.equal(chat.status, 400);
        assert.equal(chat.json.error.param, 'response_format.json_schema.schema/properties/when/format');
        assert.match(chat.json.error.message, /'format' at #\/properties\/when\/format/);
        assert.equal(chat.json.error.code, 'unsupported_schema');

        const resp = await post(server, '/v1/responses', {
            model: SERVED, input: 'hi', max_output_tokens: 4,
            text: { format: { type: 'json_schema', name: 'x', schema: { type: 'object', properties: { n: { not: {} } } } } },
        });
        assert.equal(resp.status, 400);
        assert.equal(resp.json.error.param, 'text.format.schema/properties/n/not');

        const anth = await post(server, '/v1/messages', {
            model: SERVED, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }],
            output_config: { format: { type: 'json_schema', schema: { type: 'array', items: [{}] } } },
        });
        assert.equal(anth.status, 400);
        assert.equal(anth.json.type, 'error');
        assert.match(anth.json.error.message, /'items' at #\/items/);

        // Limits and malformed schemas are 400s too; a json_schema without a schema as well.
        const deep = JSON.parse('{"type":"array","items":'.repeat(40) + '{}' + '}'.repeat(40));
        for (const [schema, code] of [[deep, 'schema_too_complex'], [{ type: 'string', pattern: '^(a|b)*a(a|b){12}$' }, 'schema_too_complex'],
            [{ type: 'integer', minimum: 3, maximum: 1 }, 'invalid_schema'], [{ $ref: '#/$defs/none' }, 'invalid_schema']]) {
            const r = await post(server, '/v1/chat/completions', {
                model: SERVED, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4,
                response_format: { type: 'json_schema', json_schema: { name: 'x', schema } },
            });
            assert.equal(r.status, 400, JSON.stringify(schema));
            assert.equal(r.json.error.code, code, JSON.stringify(r.json));
        }
        const none = await post(server, '/v1/chat/completions', {
            model: SERVED, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4,
            response_format: { type: 'json_schema', json_schema: { name: 'x' } },
        });
        assert.equal(none.status, 400);
        assert.equal(none.json.error.param, 'response_format.json_schema.schema');
    });
});
