// http.test.js - the HTTP layer as clients meet it, below and beside the SDKs:
// Node's fetch (which writes the whole body before it reads) and raw sockets that
// write a whole request before reading get the early answers (413, 401, 404);
// a request path with %0a, %1b and raw bytes makes one escaped log line; errors
// quoting client bytes stay 4xx JSON with their message; two Content-Lengths, a
// transfer coding other than chunked, a long target, a large head and a raw NUL in
// the body are JSON errors; a client that half-closes after its request still gets
// its reply (whole and streamed); /v1/status needs the key, /health and /metrics do
// not; --port N serves on N; and --max-connections, --max-connections-per-client and --timeout: slow
// clients from one address keep neither that address nor another out, and are
// dropped after the timeout.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { SKIP, SLOW, TIMEOUT, anthropicErrorShape, assertHealthy, openaiClient, openaiErrorShape, startServer, waitFor } from './harness.js';

const T = { timeout: TIMEOUT };
const KEY = 'e2e-http-key';
const AUTH = { Authorization: `Bearer ${KEY}` };
const BIG = 24 << 20; // past the limit, and far past what the sockets hold

// One request written whole (head, then body) on a socket of its own, before
// anything is read; with halfClose the socket's sending side is shut after it.
// Resolves to { status, headers, body (Buffer), text, json() } once the server
// closes; interim 1xx replies are skipped, chunked bodies de-chunked.
function rawExchange(server, head, body = Buffer.alloc(0), { halfClose = false, localAddress } = {}) {
    return new Promise((resolve, reject) => {
        const sock = net.connect({ host: server.host, port: server.port, localAddress, allowHalfOpen: true });
        const parts = [];
        const timer = setTimeout(() => {
            sock.destroy();
            reject(new Error(`no complete answer within ${TIMEOUT / 1000} s`));
        }, TIMEOUT);
        sock.on('data', (d) => parts.push(d));
        sock.on('error', (e) => {
            clearTimeout(timer);
            reject(e);
        });
        sock.on('end', () => {
            clearTimeout(timer);
            sock.destroy();
            try {
                resolve(parseResponse(Buffer.concat(parts)));
            } catch (e) {
                reject(e);
            }
        });
        sock.write(Buffer.isBuffer(head) ? head : Buffer.from(head, 'latin1'));
        if (body.length) sock.write(body);
        if (halfClose) sock.end();
    });
}

function parseResponse(buf) {
    let start = 0;
    for (;;) {
        const end = buf.indexOf('\r\n\r\n', start);
        if (end < 0) throw new Error(`no response head in ${JSON.stringify(buf.toString('latin1').slice(0, 300))}`);
        const head = buf.subarray(start, end).toString('latin1');
        const m = /^HTTP\/1\.\d (\d{3})/.exec(head);
        if (!m) throw new Error(`not an HTTP response: ${JSON.stringify(head.slice(0, 200))}`);
        const status = Number(m[1]);
        if (status >= 100 && status < 200) {
            start = end + 4;
            continue;
        }
        const headers = {};
        for (const line of head.split('\r\n').slice(1)) {
            const i = line.indexOf(':');
            headers[line.slice(0, i).toLowerCase()] = line.slice(i + 1).trim();
        }
        let body = buf.subarray(end + 4);
        if ((headers['transfer-encoding'] || '').toLowerCase() === 'chunked') {
            const out = [];
            let p = 0;
            for (;;) {
                const eol = body.indexOf('\r\n', p);
                const n = parseInt(body.subarray(p, eol).toString('latin1'), 16);
                if (!n) break;
                out.push(body.subarray(eol + 2, eol + 2 + n));
                p = eol + 2 + n + 2;
            }
            body = Buffer.concat(out);
        }
        const text = body.toString('utf8');
        return {
            status,
            headers,
            body,
            text,
            json() {
                return JSON.parse(text);
            },
        };
    }
}

const chatBody = (extra = {}) => JSON.stringify({ messages: [{ role: 'user', content: 'Tell me a joke.' }], max_tokens: 24, ...extra });
const post = (path, body, extra = '') =>
    `POST ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer ${KEY}\r\nanthropic-version: 2023-06-01\r\n` +
    `Content-Type: application/json\r\n${extra}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n`;

describe('HTTP edges: --api-key, --max-request-bytes 4096', { skip: SKIP }, () => {
    let server;
    before(async () => {
        server = await startServer(['--api-key', KEY, '--max-request-bytes', '4096', '--ctx', '1024']);
    });
    after(async () => {
        if (server) {
            await assertHealthy(server);
            await server.stop();
        }
    });

    test('fetch (whole body first): 413 over the limit, 401 without the key, 404 for no route, every time', T, async () => {
        const big = Buffer.alloc(BIG, 0x20);
        for (let i = 0; i < 3; i++) {
            const r1 = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { ...AUTH, 'Content-Type': 'application/json' }, body: big });
            assert.equal(r1.status, 413);
            assert.equal(openaiErrorShape(await r1.json()), null);
            const r2 = await fetch(`${server.url}/v1/messages`, { method: 'POST', headers: { 'x-api-key': 'wrong' }, body: big });
            assert.equal(r2.status, 401);
            assert.equal(anthropicErrorShape(await r2.json()), null);
            const r3 = await fetch(`${server.url}/nowhere`, { method: 'POST', headers: AUTH, body: big });
            assert.equal(r3.status, 404);
            assert.equal(openaiErrorShape(await r3.json()), null);
        }
    });

    test('a raw socket that writes the whole request, then reads: 413 and 401', T, async () => {
        const big = Buffer.alloc(BIG, 0x20);
        const r1 = await rawExchange(server, post('/v1/chat/completions', big), big);
        assert.equal(r1.status, 413, r1.text);
        assert.equal(openaiErrorShape(r1.json()), null);
        const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: ${BIG}\r\n\r\n`;
        const r2 = await rawExchange(server, head, big);
        assert.equal(r2.status, 401, r2.text);
        assert.equal(openaiErrorShape(r2.json()), null);
    });

    test('a path with %0a, %1b, a tab and raw bytes: one log line, escaped', T, async () => {
        const head = Buffer.concat([
            Buffer.from('GET /e2e%0aFORGED%20rapid:%20#1%20GET%20/%20200%1b[2J%09'),
            Buffer.from([0x01, 0xff]),
            Buffer.from(' HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'),
        ]);
        const r = await rawExchange(server, head);
        assert.equal(r.status, 404);
        const id = r.headers['x-request-id'];
        const line = await waitFor(() => server.log().split('\n').find((l) => l.startsWith(`rapid: #${id} GET `)), 10_000, 'the log line');
        assert.ok(line.includes('/e2e\\nFORGED\\x20rapid:\\x20#1\\x20GET\\x20/\\x20200\\x1B[2J\\t\\x01\\xFF 404 | '), line);
        assert.equal(server.log().split('\n').filter((l) => l.includes('FORGED')).length, 1);
        assert.ok(!/[\x1b\x01]/.test(server.log()), 'no raw control bytes in the log');
    });

    test('errors quoting client bytes: 4xx JSON with the message (a %ff path, a role of 700 "é")', T, async () => {
        const r1 = await rawExchange(server, post('/v1/messages%ff', '{}') + '{}');
        assert.equal(r1.status, 404, r1.text);
        assert.equal(anthropicErrorShape(r1.json()), null);
        const r2 = await rawExchange(server, post('/v1/chat/completions%ff', '{}') + '{}');
        assert.equal(r2.status, 404, r2.text);
        assert.equal(openaiErrorShape(r2.json()), null);
        for (const role of ['é'.repeat(700), `x${'é'.repeat(700)}`]) {
            for (const path of ['/v1/chat/completions', '/v1/messages']) {
                const body = JSON.stringify({ max_tokens: 4, messages: [{ role, content: 'hi' }] });
                const r = await rawExchange(server, post(path, body), Buffer.from(body));
                assert.equal(r.status, 400, `${path}: ${r.text}`);
                const b = r.json();
                assert.equal(path === '/v1/messages' ? anthropicErrorShape(b) : openaiErrorShape(b), null, r.text);
            }
        }
    });

    test('framing and the head: two Content-Lengths 400, gzip 501, long target 414, large head 431, NUL 400; JSON', T, async () => {
        const body = chatBody();
        const dup = await rawExchange(server, post('/v1/chat/completions', body, 'Content-Length: 3\r\n') + body);
        assert.equal(dup.status, 400, dup.text);
        assert.equal(openaiErrorShape(dup.json()), null);
        assert.match(dup.json().error.message, /Content-Length/);
        const te = await rawExchange(server, post('/v1/chat/completions', body, 'Transfer-Encoding: gzip\r\n').replace(/Content-Length: \d+\r\n/, '') + body);
        assert.equal(te.status, 501, te.text);
        assert.equal(openaiErrorShape(te.json()), null);
        const long = await rawExchange(server, `GET /v1/${'a'.repeat(20000)} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
        assert.equal(long.status, 414, long.text);
        assert.equal(openaiErrorShape(long.json()), null);
        const pad = 'b'.repeat(20000);
        const large = await rawExchange(server, `GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${[1, 2, 3, 4].map((i) => `X-P${i}: ${pad}\r\n`).join('')}\r\n`);
        assert.equal(large.status, 431, large.text);
        assert.equal(openaiErrorShape(large.json()), null);
        const nul = Buffer.from(chatBody().replace('"max_tokens":24', '"max_tokens":24\u0000'));
        const r = await rawExchange(server, post('/v1/chat/completions', nul), nul);
        assert.equal(r.status, 400, r.text);
        assert.match(r.json().error.message, /NUL/);
    });

    test('a client that half-closes after its request gets its reply, whole and streamed', T, async () => {
        const body = chatBody({ ignore_eos: true });
        const r1 = await rawExchange(server, post('/v1/chat/completions', body), Buffer.from(body), { halfClose: true });
        assert.equal(r1.status, 200, r1.text);
        assert.equal(r1.json().usage.completion_tokens, 24);
        const sbody = chatBody({ ignore_eos: true, stream: true });
        const r2 = await rawExchange(server, post('/v1/chat/completions', sbody), Buffer.from(sbody), { halfClose: true });
        assert.equal(r2.status, 200, r2.text);
        assert.ok(r2.text.endsWith('data: [DONE]\n\n'), r2.text.slice(-200));
        const abody = JSON.stringify({ messages: [{ role: 'user', content: 'Tell me a joke.' }], max_tokens: 24, stream: true });
        const r3 = await rawExchange(server, post('/v1/messages', abody), Buffer.from(abody), { halfClose: true });
        assert.equal(r3.status, 200, r3.text);
        assert.ok(r3.text.includes('event: message_stop\n'), r3.text.slice(-300));
    });

    test('/v1/status needs the key; /health and /metrics do not, and /metrics names no path', T, async () => {
        const no = await fetch(`${server.url}/v1/status`);
        assert.equal(no.status, 401);
        assert.equal(openaiErrorShape(await no.json()), null);
        const yes = await fetch(`${server.url}/v1/status`, { headers: AUTH });
        assert.equal(yes.status, 200);
        assert.ok('prefix_cache' in (await yes.json()));
        assert.equal((await fetch(`${server.url}/health`)).status, 200);
        const m = await fetch(`${server.url}/metrics`);
        assert.equal(m.status, 200);
        const samples = (await m.text()).split('\n').filter((l) => l && !l.startsWith('#'));
        assert.ok(samples.length > 20);
        assert.deepEqual(samples.filter((l) => l.includes('/')), []);
    });
});

// A port given on the command line is the one served: the socket bound before the model
// loads is the one the server answers on (once, the server bound a second socket, which a
// fixed port refused as in use, while --port 0 hid it behind another free port).
describe('--port N', { skip: SKIP }, () => {
    test('serves on the port it was given, and /health answers there', T, async () => {
        const port = await new Promise((resolve, reject) => {
            const probe = net.createServer();
            probe.on('error', reject);
            probe.listen(0, '127.0.0.1', () => {
                const p = probe.address().port;
                probe.close(() => resolve(p));
            });
        });
        const server = await startServer(['--port', String(port)]);
        try {
            assert.equal(server.port, port, server.logTail());
            const r = await fetch(`http://127.0.0.1:${port}/health`);
            assert.equal(r.status, 200);
            assert.doesNotMatch(server.log(), /cannot listen/);
        } finally {
            await server.stop();
        }
    });
});

describe('--max-connections 8 --max-connections-per-client 4 --timeout 2', { skip: SKIP }, () => {
    let server;
    before(async () => {
        server = await startServer(['--max-connections', '8', '--max-connections-per-client', '4', '--timeout', String(2 * SLOW), '--ctx', '1024']);
    });
    after(async () => {
        if (server) {
            await assertHealthy(server);
            await server.stop();
        }
    });

    test('slow clients from 127.0.0.1 keep out neither 127.0.0.1 nor 127.0.0.2, and are dropped after the timeout', T, async () => {
        const slow = [];
        const closed = new Set();
        for (let i = 0; i < 20; i++) {
            const s = net.connect({ host: server.host, port: server.port, localAddress: '127.0.0.1' });
            s.on('error', () => closed.add(s));
            s.on('close', () => closed.add(s));
            s.write('GET /health HTTP/1.1\r\nX-a: ');
            slow.push(s);
        }
        try {
            await waitFor(() => closed.size >= 16, 10_000, '16 of the 20 slow connections to give way');
            const r = await openaiClient(server).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 4 });
            assert.equal(r.object, 'chat.completion');
            const other = await rawExchange(server, 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', undefined, { localAddress: '127.0.0.2' });
            assert.equal(other.status, 200);
            await waitFor(() => closed.size === 20, 20_000, 'every slow connection to be dropped after the timeout');
            assert.match(server.log(), /connection limits \(8 connections, 4 per client address/);
        } finally {
            for (const s of slow) s.destroy();
        }
    });
});
