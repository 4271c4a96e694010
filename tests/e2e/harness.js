// harness.js - starts and stops `rapid serve` for the end-to-end suite, and talks
// to it below the SDKs: raw HTTP (node:http), strict SSE framing, Prometheus text.
//
// Each test file is one process (node --test); it shares one server started with
// sharedServer() and starts extra ones (api key, strict names, small limits) with
// startServer(). A server is started with --port 0 and found through the line it
// prints once listening: "rapid: listening on http://HOST:PORT". stop() sends
// SIGTERM and fails when the server does not exit cleanly (status 0, no sanitizer
// report in its stderr), so the ASan build of the suite checks the server too.
//
// Environment: RAPID_BINARY (the rapid binary; default ../../build/rapid),
// RP_SOURCE_DIR (the source tree; default ../..), RAPID_E2E_SLOW (a factor for
// every deadline, e.g. 10 under ASan), RAPID_E2E_LOGS (a folder for each server's
// stderr), CI (under CI=true missing prerequisites are a failure, not a skip).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { schemaProblem } from './openai_schema.js';

const here = path.dirname(fileURLToPath(import.meta.url));

export const SOURCE_DIR = process.env.RP_SOURCE_DIR || path.resolve(here, '../..');
export const BINARY = process.env.RAPID_BINARY || path.join(SOURCE_DIR, 'build', 'rapid');
export const SLOW = Math.max(1, Number(process.env.RAPID_E2E_SLOW) || 1);
export const SERVED = 'rapid-e2e'; // --served-model-name of the shared server
// A per-test limit: generous, the assertions never time anything.
export const TIMEOUT = 60_000 * SLOW;

// The SDKs are imported dynamically so that a missing node_modules skips the suite
// with a message (or fails it under CI=true) instead of crashing every file.
async function loadSdks() {
    const missing = [];
    if (!fs.existsSync(BINARY)) missing.push(`the rapid binary (${BINARY}; build it, or set RAPID_BINARY)`);
    let OpenAI = null;
    let Anthropic = null;
    try {
        OpenAI = (await import('openai')).default;
        Anthropic = (await import('@anthropic-ai/sdk')).default;
    } catch (e) {
        missing.push(`the SDKs in tests/e2e/node_modules (run: npm ci --prefix tests/e2e): ${e.message}`);
    }
    if (missing.length === 0) return { OpenAI, Anthropic, skip: false };
    const msg = `e2e prerequisites missing: ${missing.join('; ')}`;
    if (process.env.CI === 'true') throw new Error(`${msg} (under CI=true that is a failure)`);
    process.stderr.write(`skipping: ${msg}\n`);
    return { OpenAI, Anthropic, skip: msg };
}

const sdks = await loadSdks();
// Pass as a test option: { skip: SKIP }. false when everything is there.
export const SKIP = sdks.skip;

let serverCount = 0;
const live = new Set();
const tmpDirs = new Set();
// A test file that ends without stopping its servers (a crash, a failed hook) must
// not leave them running, nor their cache folders behind.
process.on('exit', () => {
    for (const proc of live) proc.kill('SIGKILL');
    for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

// Starts a server: `rapid serve [model] --port 0 ...args`. Resolves once it listens.
// Returns { url, host, port, proc, args, log(), stop() }.
export async function startServer(args = [], { model = null, env = {} } = {}) {
    const argv = ['serve'];
    if (model) argv.push(model);
    argv.push('--host', '127.0.0.1', '--port', '0', ...args);
    let stderr = '';
    // Each server's prefix-cache disk tier (default $XDG_CACHE_HOME/rapid/kv) goes to a
    // folder of its own, removed after stop: nothing lands in $HOME, runs stay independent.
    const cacheHome = fs.mkdtempSync(path.join(os.tmpdir(), 'rapid-e2e-'));
    tmpDirs.add(cacheHome);
    const proc = spawn(BINARY, argv, {
        env: { RAPID_MODELS: path.join(SOURCE_DIR, 'models'), ...process.env, XDG_CACHE_HOME: cacheHome, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
    });
    live.add(proc);
    proc.on('error', (e) => {
        stderr += `\n(spawning ${BINARY} failed: ${e.message})\n`;
    });
    const id = `${process.pid}-${++serverCount}`;
    let logFile = null;
    if (process.env.RAPID_E2E_LOGS) {
        fs.mkdirSync(process.env.RAPID_E2E_LOGS, { recursive: true });
        const name = path.basename(process.argv[1] || 'e2e', '.js');
        logFile = path.join(process.env.RAPID_E2E_LOGS, `${name}-${id}.log`);
        fs.writeFileSync(logFile, `$ ${BINARY} ${argv.join(' ')}\n`);
    }
    const keep = 1 << 20; // the last MiB of stderr, for messages
    const server = {
        args,
        proc,
        exited: null,
        log: () => stderr,
        logTail: (n = 3000) => stderr.slice(-n),
    };
    const exited = new Promise((resolve) => {
        // 'close': the process has exited and its stderr is read to the end.
        proc.on('close', (code, signal) => {
            live.delete(proc);
            server.exited = { code, signal };
            resolve(server.exited);
        });
    });
    proc.stdout.on('data', (d) => {
        if (logFile) fs.appendFileSync(logFile, d);
    });
    const listening = new Promise((resolve, reject) => {
        const timer = setTimeout(
            () => reject(new Error(`rapid serve did not print "rapid: listening on" within ${30 * SLOW} s:\n${stderr}`)),
            30_000 * SLOW,
        );
        proc.stderr.on('data', (d) => {
            stderr += d.toString('utf8');
            if (stderr.length > 2 * keep) stderr = stderr.slice(-keep);
            if (logFile) fs.appendFileSync(logFile, d);
            const m = /rapid: listening on http:\/\/([^\s:]+|\[[^\]]+\]):(\d+)/.exec(stderr);
            if (m) {
                clearTimeout(timer);
                resolve({ host: m[1].replace(/^\[|\]$/g, ''), port: Number(m[2]) });
            }
        });
        exited.then((e) => {
            clearTimeout(timer);
            reject(new Error(`rapid serve exited (${JSON.stringify(e)}) before listening:\n${stderr}`));
        });
    });
    let host;
    let port;
    try {
        ({ host, port } = await listening);
    } catch (e) {
        proc.kill('SIGKILL');
        fs.rmSync(cacheHome, { recursive: true, force: true });
        tmpDirs.delete(cacheHome);
        throw e;
    }
    server.host = host;
    server.port = port;
    server.url = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
    // SIGTERM, then wait; a server that hangs is killed and reported.
    server.stop = async () => {
        if (!server.exited) {
            proc.kill('SIGTERM');
            const timer = setTimeout(() => proc.kill('SIGKILL'), 20_000 * SLOW);
            await exited;
            clearTimeout(timer);
        }
        const e = server.exited;
        fs.rmSync(cacheHome, { recursive: true, force: true });
        tmpDirs.delete(cacheHome);
        const problems = [];
        if (e.signal === 'SIGKILL') problems.push(`did not exit within ${20 * SLOW} s of SIGTERM`);
        else if (e.code !== 0) problems.push(`exited with ${e.signal ? `signal ${e.signal}` : `status ${e.code}`}`);
        for (const re of [/ERROR: AddressSanitizer/, /ERROR: LeakSanitizer/, /runtime error:/]) {
            if (re.test(stderr)) problems.push(`its stderr has a sanitizer report (${re.source})`);
        }
        if (problems.length)
            throw new Error(`rapid serve ${args.join(' ')}: ${problems.join('; ')}\n--- stderr tail ---\n${server.logTail(6000)}`);
    };
    return server;
}

// Routes a server under construction answers 501 (not implemented yet): their tests
// skip with that reason instead of failing, so the suite gates what exists; a 501 is
// the server's own word. { anthropic, responses }: false, or the reason.
async function probePending() {
    if (SKIP) return { anthropic: false, responses: false };
    const s = await startServer(['--ctx', '512']);
    try {
        const out = {};
        for (const [k, p, body] of [
            ['anthropic', '/v1/messages', { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }],
            ['responses', '/v1/responses', { model: 'm', input: 'hi', max_output_tokens: 16 }],
        ]) {
            const r = await request(s, { method: 'POST', path: p, body });
            out[k] = r.status === 501 ? `POST ${p} answers 501, not implemented yet: ${r.text.slice(0, 160)}` : false;
        }
        return out;
    } finally {
        await s.stop();
    }
}
export const PENDING = await probePending();

let shared = null;
// The server most tests use: the bundled model under the name SERVED.
export function sharedServer() {
    if (!shared) shared = startServer(['--served-model-name', SERVED, '--ctx', '4096']);
    return shared;
}

// Stops the shared server if this process started one (call from after()).
export async function stopSharedServer() {
    if (!shared) return;
    const s = await shared;
    shared = null;
    await s.stop();
}

export function openaiClient(server, opts = {}) {
    return new sdks.OpenAI({
        baseURL: `${server.url}/v1`,
        apiKey: 'sk-e2e',
        maxRetries: 0,
        timeout: TIMEOUT,
        ...opts,
    });
}

export function anthropicClient(server, opts = {}) {
    return new sdks.Anthropic({
        baseURL: server.url,
        apiKey: 'sk-ant-e2e',
        maxRetries: 0,
        timeout: TIMEOUT,
        ...opts,
    });
}

// One HTTP request on its own connection. body: string, Buffer, object (sent as JSON)
// or an array of Buffers/strings sent with chunked transfer encoding. Resolves to
// { status, headers, body (Buffer), text, json() }. A server that answers (e.g. 413)
// and closes before the whole body went out still gives its answer.
export function request(server, { method = 'GET', path: p = '/', headers = {}, body = null, timeout = TIMEOUT } = {}) {
    return new Promise((resolve, reject) => {
        let payload = null;
        let chunks = null;
        const h = { ...headers };
        if (Array.isArray(body)) {
            chunks = body.map((c) => (Buffer.isBuffer(c) ? c : Buffer.from(c)));
        } else if (body !== null && body !== undefined) {
            payload = Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
            if (!Object.keys(h).some((k) => k.toLowerCase() === 'content-type')) h['Content-Type'] = 'application/json';
            h['Content-Length'] = payload.length;
        }
        if (chunks && !Object.keys(h).some((k) => k.toLowerCase() === 'content-type')) h['Content-Type'] = 'application/json';
        const req = http.request({ host: server.host, port: server.port, method, path: p, headers: h, agent: false });
        let answered = false;
        const timer = setTimeout(() => {
            req.destroy(new Error(`${method} ${p}: no complete answer within ${timeout / 1000} s`));
        }, timeout);
        req.on('response', (res) => {
            answered = true;
            const parts = [];
            res.on('data', (d) => parts.push(d));
            res.on('end', () => {
                clearTimeout(timer);
                const buf = Buffer.concat(parts);
                const text = buf.toString('utf8');
                resolve({
                    status: res.statusCode,
                    headers: res.headers,
                    body: buf,
                    text,
                    json() {
                        try {
                            return JSON.parse(text);
                        } catch (e) {
                            throw new Error(`${method} ${p} → ${res.statusCode}: body is not JSON (${e.message}): ${text.slice(0, 500)}`);
                        }
                    },
                });
            });
            res.on('error', (e) => {
                clearTimeout(timer);
                reject(e);
            });
        });
        req.on('error', (e) => {
            if (answered && (e.code === 'EPIPE' || e.code === 'ECONNRESET')) return;
            clearTimeout(timer);
            reject(new Error(`${method} ${p}: ${e.message}`));
        });
        if (chunks) {
            for (const c of chunks) req.write(c);
            req.end();
        } else {
            req.end(payload ?? undefined);
        }
    });
}

// POST a JSON body and return the response with its body split into SSE frames
// (parseSSE). Fails unless the status is 200 and the type text/event-stream.
export async function postSSE(server, p, body, headers = {}) {
    const res = await request(server, { method: 'POST', path: p, body, headers });
    if (res.status !== 200) throw new Error(`POST ${p} → ${res.status}: ${res.text.slice(0, 1000)}`);
    const ct = res.headers['content-type'] || '';
    if (!ct.startsWith('text/event-stream'))
        throw new Error(`POST ${p}: content-type "${ct}", expected text/event-stream`);
    return { ...res, frames: parseSSE(res.text) };
}

// Splits an SSE body into frames { event, data, json, raw } and checks the framing
// both services use: lines "field: value" (event, data, id, retry) or comments
// (":..."), exactly one data line per frame, frames ended by a blank line, nothing
// after the last one. Comment-only frames (keep-alives) are dropped.
export function parseSSE(text) {
    const norm = text.replace(/\r\n/g, '\n');
    if (norm.length === 0) throw new Error('SSE: empty body');
    if (!norm.endsWith('\n\n')) throw new Error(`SSE: the body does not end with a blank line: ${JSON.stringify(norm.slice(-200))}`);
    const frames = [];
    for (const raw of norm.slice(0, -2).split('\n\n')) {
        let event = null;
        const data = [];
        let comments = 0;
        const lines = raw.split('\n');
        for (const line of lines) {
            if (line.startsWith(':')) {
                comments++;
                continue;
            }
            const m = /^(event|data|id|retry): (.*)$/.exec(line);
            if (!m) throw new Error(`SSE: malformed line ${JSON.stringify(line)} in frame ${JSON.stringify(raw)}`);
            if (m[1] === 'event') {
                if (event !== null) throw new Error(`SSE: two event lines in frame ${JSON.stringify(raw)}`);
                event = m[2];
            } else if (m[1] === 'data') {
                data.push(m[2]);
            }
        }
        if (comments === lines.length) continue;
        if (data.length !== 1) throw new Error(`SSE: ${data.length} data lines in frame ${JSON.stringify(raw)}`);
        let json = null;
        if (data[0] !== '[DONE]') {
            try {
                json = JSON.parse(data[0]);
            } catch (e) {
                throw new Error(`SSE: data is not JSON (${e.message}): ${data[0].slice(0, 300)}`);
            }
        }
        frames.push({ event, data: data[0], json, raw });
    }
    return frames;
}

// Opens a streaming POST and hands the raw response to the caller, who reads some
// of it and may destroy the socket. Resolves to { req, res } once headers arrive.
export function openStream(server, p, body, headers = {}) {
    return new Promise((resolve, reject) => {
        const payload = Buffer.from(JSON.stringify(body));
        const req = http.request({
            host: server.host,
            port: server.port,
            method: 'POST',
            path: p,
            agent: false,
            headers: { 'Content-Type': 'application/json', 'Content-Length': payload.length, ...headers },
        });
        req.on('response', (res) => resolve({ req, res }));
        req.on('error', reject);
        req.end(payload);
    });
}

// Reads from a streaming response until `count` SSE data frames have arrived.
export function readFrames(res, count) {
    return new Promise((resolve, reject) => {
        let buf = '';
        const onData = (d) => {
            buf += d.toString('utf8');
            const n = (buf.match(/\n\n/g) || []).length;
            if (n >= count) {
                res.off('data', onData);
                res.pause();
                resolve(buf);
            }
        };
        res.on('data', onData);
        res.on('end', () => reject(new Error(`the stream ended after ${buf.length} bytes, before ${count} frames`)));
        res.on('error', reject);
    });
}

// GET /metrics parsed: [{ name, labels: {k: v}, value }]. Checks the text format.
export async function metrics(server, headers = {}) {
    const res = await request(server, { path: '/metrics', headers });
    if (res.status !== 200) throw new Error(`GET /metrics → ${res.status}: ${res.text.slice(0, 300)}`);
    return parseMetrics(res.text);
}

export function parseMetrics(text) {
    const samples = [];
    for (const line of text.split('\n')) {
        if (line === '' || line.startsWith('#')) continue;
        const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? ([^ ]+)( -?\d+)?$/.exec(line);
        if (!m) throw new Error(`/metrics: not a Prometheus sample line: ${JSON.stringify(line)}`);
        const labels = {};
        if (m[3]) {
            const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)/gy;
            let lm;
            let end = 0;
            while ((lm = re.exec(m[3])) !== null) {
                labels[lm[1]] = lm[2].replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
                end = re.lastIndex;
                if (lm[3] === '') break;
            }
            if (end !== m[3].length) throw new Error(`/metrics: bad labels in ${JSON.stringify(line)}`);
        }
        const value = m[4] === '+Inf' ? Infinity : m[4] === '-Inf' ? -Infinity : Number(m[4]);
        if (Number.isNaN(value) && m[4] !== 'NaN') throw new Error(`/metrics: bad value in ${JSON.stringify(line)}`);
        samples.push({ name: m[1], labels, value });
    }
    return samples;
}

// The sum of the samples whose name matches re (histogram/summary parts and
// _created excluded), or null when there is none.
export function metricSum(samples, re) {
    const hits = samples.filter((s) => re.test(s.name) && !/_(bucket|sum|count|created)$/.test(s.name));
    if (hits.length === 0) return null;
    return hits.reduce((a, s) => a + s.value, 0);
}

export function metricNames(samples) {
    return [...new Set(samples.map((s) => s.name))].join(', ');
}

// What a cancel changes in /metrics: { cancelled, running, generated } (the engine's own
// count of generated tokens: a per-request counter of the HTTP layer may be added only when
// the handler ends, after the engine has let the request go). Fails when one is missing.
export async function generationCounters(server) {
    const s = await metrics(server);
    const c = { cancelled: metricSum(s, /cancel/i), running: metricSum(s, /running/i), generated: metricSum(s, /generated/i) };
    for (const [k, v] of Object.entries(c)) if (v === null) throw new Error(`/metrics has no ${k} metric (${metricNames(s)})`);
    return c;
}

// After a client stopped a generation: waits (generous deadline, nothing timed) until
// /metrics counts one more cancelled request than `before` (generationCounters) and
// nothing running, then checks that the generated-token count stands still. Returns
// the counters; throws with what it saw otherwise.
export async function waitCancelled(server, before) {
    const after1 = await waitFor(
        async () => {
            const c = await generationCounters(server);
            return c.cancelled > before.cancelled && c.running === 0 ? c : null;
        },
        10_000,
        'the cancelled count to rise and running to fall to 0 in /metrics',
    );
    await new Promise((r) => setTimeout(r, 300));
    const after2 = await generationCounters(server);
    if (after2.generated !== after1.generated || after2.running !== 0)
        throw new Error(`tokens were generated after the cancel: ${JSON.stringify(after1)} then ${JSON.stringify(after2)}`);
    return after2;
}

// Polls fn until it returns a truthy value or the deadline (ms, scaled by SLOW) passes.
export async function waitFor(fn, ms, what) {
    const deadline = Date.now() + ms * SLOW;
    let last;
    for (;;) {
        last = await fn();
        if (last) return last;
        if (Date.now() > deadline) throw new Error(`timed out after ${(ms * SLOW) / 1000} s waiting for ${what}`);
        await new Promise((r) => setTimeout(r, 50));
    }
}

export async function assertHealthy(server, headers = {}) {
    const res = await request(server, { path: '/health', headers, timeout: 30_000 * SLOW });
    if (res.status !== 200) throw new Error(`GET /health → ${res.status}: ${res.text.slice(0, 300)}`);
}

// The tools the bundled model calls reliably: with these it answers "What is the
// weather in Paris?" with get_weather({"city": "Paris"}).
export const OPENAI_TOOLS = [
    {
        type: 'function',
        function: {
            name: 'get_weather',
            description: 'Get the current weather for a city',
            parameters: {
                type: 'object',
                properties: { city: { type: 'string', description: 'City name' } },
                required: ['city'],
            },
        },
    },
    {
        type: 'function',
        function: {
            name: 'get_time',
            description: 'Get the current time in a timezone',
            parameters: {
                type: 'object',
                properties: { timezone: { type: 'string', description: 'IANA timezone name' } },
                required: ['timezone'],
            },
        },
    },
];

export const ANTHROPIC_TOOLS = OPENAI_TOOLS.map((t) => ({
    name: t.function.name,
    description: t.function.description,
    input_schema: t.function.parameters,
}));

export const RESPONSES_TOOLS = OPENAI_TOOLS.map((t) => ({
    type: 'function',
    name: t.function.name,
    description: t.function.description,
    parameters: t.function.parameters,
    strict: false,
}));

// Prompts whose greedy behaviour with the bundled model is known (checked with
// `rapid run`): a tool call, a short answer ending in end-of-turn, a think block,
// a reply that never ends on its own.
export const PROMPTS = {
    tool: 'What is the weather in Paris?',
    short: 'Say hello.',
    think: 'Say hello.',
    endless: 'Tell me a joke.',
};

// Checks the shape of an OpenAI error body: {"error": {"message", "type", "param", "code"}}.
export function openaiErrorShape(body) {
    const bad = schemaProblem(body, 'ErrorResponse'); // the document's required fields and types
    if (bad) return `${bad} in ${JSON.stringify(body)}`;
    const e = body && body.error;
    if (!e || typeof e !== 'object') return `no "error" object in ${JSON.stringify(body)}`;
    if (typeof e.message !== 'string' || e.message.length === 0) return `error.message is not a non-empty string: ${JSON.stringify(body)}`;
    if (typeof e.type !== 'string') return `error.type is not a string: ${JSON.stringify(body)}`;
    if (!('param' in e)) return `error.param is missing: ${JSON.stringify(body)}`;
    if (!('code' in e)) return `error.code is missing: ${JSON.stringify(body)}`;
    return null;
}

// Checks the shape of an Anthropic error body: {"type": "error", "error": {"type", "message"}}.
export function anthropicErrorShape(body) {
    if (!body || body.type !== 'error') return `type is not "error": ${JSON.stringify(body)}`;
    const e = body.error;
    if (!e || typeof e.type !== 'string' || typeof e.message !== 'string' || e.message.length === 0)
        return `error.type/error.message missing: ${JSON.stringify(body)}`;
    return null;
}
