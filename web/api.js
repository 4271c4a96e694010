// api.js - how the page talks to `rapid serve`: the API key, JSON calls, and
// the chat stream (server-sent events read from fetch's body).
//
// The key (asked for by app.js when the server answers 401) is kept in the
// browser's localStorage and sent as "Authorization: Bearer KEY" on every call.
// The page is served from the same server, so every address is relative.
// A call the server refuses throws an ApiError with the HTTP status and the
// server's own message ({"error": {"message"}}).

const KEY = 'rapid.key';

export class ApiError extends Error {
    constructor(status, message) {
        super(message);
        this.status = status;
    }
}

export function getKey() {
    return localStorage.getItem(KEY) || '';
}

export function setKey(k) {
    if (k) localStorage.setItem(KEY, k);
    else localStorage.removeItem(KEY);
}

function headers(extra = {}) {
    const h = { ...extra };
    const k = getKey();
    if (k) h.Authorization = `Bearer ${k}`;
    return h;
}

async function failure(res) {
    let msg = `${res.status} ${res.statusText}`;
    try {
        const body = await res.json();
        if (body?.error?.message) msg = body.error.message;
    } catch {
        // not JSON: keep the status line
    }
    return new ApiError(res.status, msg);
}

export async function getJSON(path) {
    const res = await fetch(path, { headers: headers(), cache: 'no-store' });
    if (!res.ok) throw await failure(res);
    return res.json();
}

export async function getText(path) {
    const res = await fetch(path, { headers: headers(), cache: 'no-store' });
    if (!res.ok) throw await failure(res);
    return res.text();
}

// POSTs body (stream: true is set here) to /v1/chat/completions and calls
// onChunk(json) for each event until [DONE]. signal (an AbortController's)
// stops it: the connection closes and the server cancels the generation.
export async function streamChat(body, onChunk, signal) {
    const res = await fetch('/v1/chat/completions', {
        method: 'POST',
        headers: headers({ 'Content-Type': 'application/json' }),
        body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
        signal,
    });
    if (!res.ok) throw await failure(res);
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let end;
        while ((end = buf.indexOf('\n\n')) >= 0) {
            const frame = buf.slice(0, end);
            buf = buf.slice(end + 2);
            for (const line of frame.split('\n')) {
                if (!line.startsWith('data: ')) continue; // comments (keep-alives), event names
                const data = line.slice(6);
                if (data === '[DONE]') return;
                const json = JSON.parse(data);
                if (json.error) throw new ApiError(500, json.error.message || 'the generation failed');
                onChunk(json);
            }
        }
    }
}

// Prometheus text as { name: value } for the samples without labels, and
// name{labels} keys for the rest.
export function parseMetrics(text) {
    const out = {};
    for (const line of text.split('\n')) {
        if (!line || line.startsWith('#')) continue;
        const sp = line.lastIndexOf(' ');
        // Keyed by name and labels without model_name (one model is served): "name", "name{le=\"1\"}".
        const key = line.slice(0, sp).replace(/\{model_name="(?:[^"\\]|\\.)*",?/, '{').replace(/\{\}$/, '');
        out[key] = Number(line.slice(sp + 1));
    }
    return out;
}
