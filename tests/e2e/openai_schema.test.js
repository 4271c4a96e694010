// openai_schema.test.js - the schema checker itself (no server): objects as the
// document wants them pass; each kind of departure (a required field missing, a
// wrong type, null where the document has no null, an unknown item or event type)
// fails with the path named. So a check of Rapid's replies that passes means something.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { schemaProblem } from './openai_schema.js';

const usage = () => ({
    input_tokens: 10,
    input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
    output_tokens: 2,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 12,
});

const response = () => ({
    id: 'resp_1',
    object: 'response',
    created_at: 1700000000,
    status: 'completed',
    error: null,
    incomplete_details: null,
    instructions: null,
    metadata: {},
    model: 'm',
    output: [
        { id: 'rs_1', type: 'reasoning', summary: [], content: [{ type: 'reasoning_text', text: 'hm' }] },
        { id: 'msg_1', type: 'message', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text: 'hi', annotations: [] }] },
        { id: 'fc_1', type: 'function_call', status: 'completed', call_id: 'c', name: 'f', arguments: '{}' },
    ],
    parallel_tool_calls: true,
    temperature: 1,
    tool_choice: 'auto',
    tools: [],
    top_p: 1,
    usage: usage(),
    output_text: 'hi',
});

describe('the OpenAI schema checker', () => {
    test('valid objects pass', () => {
        assert.equal(schemaProblem(response(), 'Response'), null);
        const created = { ...response(), output: [] };
        delete created.usage;
        assert.equal(schemaProblem({ type: 'response.created', sequence_number: 0, response: created }, 'ResponseStreamEvent'), null);
        assert.equal(schemaProblem({ error: { message: 'x', type: 'invalid_request_error', param: null, code: null } }, 'ErrorResponse'), null);
        const chunk = { id: 'c', object: 'text_completion', created: 1, model: 'm', choices: [{ index: 0, text: 'a', logprobs: null, finish_reason: null }] };
        assert.equal(schemaProblem(chunk, 'CompletionChunk'), null);
        assert.match(schemaProblem(chunk, 'Completion'), /finish_reason/); // the non-streaming object has no null there
    });

    test('departures fail, naming the path', () => {
        const u = usage();
        delete u.input_tokens_details.cache_write_tokens; // what Rapid sent before issue 21
        assert.match(schemaProblem(u, 'ResponseUsage'), /input_tokens_details\.cache_write_tokens: required/);
        assert.match(schemaProblem({ ...response(), usage: u }, 'Response'), /cache_write_tokens/);
        assert.match(schemaProblem({ ...response(), usage: null }, 'Response'), /Response\.usage: expected an object/);
        assert.match(schemaProblem({ ...response(), user: null }, 'Response'), /Response\.user: expected a string/);
        assert.match(schemaProblem({ ...response(), created_at: '1' }, 'Response'), /created_at: expected a number/);
        const r = response();
        delete r.output[1].content[0].annotations;
        assert.match(schemaProblem(r, 'Response'), /output\[1\]\.content\[0\]\.annotations: required/);
        const r2 = response();
        r2.output.push({ id: 'x', type: 'web_search_call' });
        assert.match(schemaProblem(r2, 'Response'), /output\[3\]\.type: "web_search_call" is none of/);
        assert.match(schemaProblem({ type: 'response.output_text.delta', sequence_number: 1, item_id: 'm', output_index: 0, content_index: 0, delta: 'x' }, 'ResponseStreamEvent'), /logprobs: required/);
        assert.match(schemaProblem({ type: 'response.bogus', sequence_number: 1 }, 'ResponseStreamEvent'), /"response.bogus" is none of/);
        assert.match(schemaProblem({ error: { message: 'x', type: 'e', code: null } }, 'ErrorResponse'), /error\.param: required/);
    });
});
