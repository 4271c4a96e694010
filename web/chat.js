// chat.js - the Chat view: conversations, the thread, the composer, settings.
//
// Conversations live in localStorage ("rapid.conversations": [{id, title,
// system, messages, updated}]) and the sampling settings in "rapid.settings".
// A message is {role: "user" | "assistant", content, reasoning, tool_calls,
// stats, error}. Sending streams /v1/chat/completions (api.js): each chunk's
// delta grows the last assistant message, which is drawn again at the next
// animation frame (markdown.js builds its DOM: model text is never HTML).
// Stop aborts the fetch, which closes the connection, and the server cancels
// the generation. Edit puts the last user turn back into the composer, and
// sending then replaces it and what followed; Regenerate asks again for the
// last answer. Tools (a JSON array in Settings) go with each request, and the
// model's calls are shown under its answer (and sent back with the history). Per answer the stats line shows what the server reported in its
// final chunk: tokens, time to first token, decode speed, draft tokens accepted.

import { ApiError, streamChat } from './api.js';
import { render } from './markdown.js';
import { $, el } from './dom.js';

const STORE = 'rapid.conversations';
const SETTINGS = 'rapid.settings';
const DEFAULTS = { temperature: 0.7, top_p: 1, max_tokens: 1024, thinking: true, tools: '' };

function load(key, fallback) {
    try {
        const v = JSON.parse(localStorage.getItem(key));
        return v ?? fallback;
    } catch {
        return fallback;
    }
}

export class Chat {
    // onAuth(error): called when the server answers 401 (app.js asks for a key).
    constructor({ onAuth }) {
        this.onAuth = onAuth;
        this.model = null;
        this.convs = load(STORE, []).filter((c) => c && Array.isArray(c.messages));
        this.settings = { ...DEFAULTS, ...load(SETTINGS, {}) };
        this.current = this.convs[0] || this.newConv();
        this.abort = null;
        this.editing = false;
        this.frame = 0;
        this.bind();
        this.drawList();
        this.drawThread();
    }

    newConv() {
        const c = { id: `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`, title: '', system: '', messages: [], updated: Date.now() };
        this.convs.unshift(c);
        return c;
    }

    save() {
        this.current.updated = Date.now();
        // Keep the newest 50 conversations; a full storage drops the oldest.
        const keep = this.convs.filter((c) => c.messages.length || c === this.current).slice(0, 50);
        for (let n = keep.length; n > 0; n--) {
            try {
                localStorage.setItem(STORE, JSON.stringify(keep.slice(0, n)));
                break;
            } catch {
                // quota: try with fewer
            }
        }
    }

    bind() {
        const s = this.settings;
        for (const k of ['temperature', 'top_p']) {
            const input = $(k);
            input.value = s[k];
            $(`${k}-out`).textContent = s[k];
            input.addEventListener('input', () => {
                s[k] = Number(input.value);
                $(`${k}-out`).textContent = s[k];
                localStorage.setItem(SETTINGS, JSON.stringify(s));
            });
        }
        $('max_tokens').value = s.max_tokens;
        $('max_tokens').addEventListener('change', () => {
            s.max_tokens = Math.max(1, Number($('max_tokens').value) || DEFAULTS.max_tokens);
            localStorage.setItem(SETTINGS, JSON.stringify(s));
        });
        $('thinking').checked = s.thinking;
        $('thinking').addEventListener('change', () => {
            s.thinking = $('thinking').checked;
            localStorage.setItem(SETTINGS, JSON.stringify(s));
        });
        $('tools').value = s.tools;
        $('tools').addEventListener('change', () => {
            s.tools = $('tools').value;
            localStorage.setItem(SETTINGS, JSON.stringify(s));
        });
        $('system').addEventListener('input', () => {
            this.current.system = $('system').value;
            this.save();
        });
        $('new-chat').addEventListener('click', () => {
            if (this.abort) return;
            this.current = this.newConv();
            this.drawList();
            this.drawThread();
            $('prompt').focus();
        });
        $('composer').addEventListener('submit', (ev) => {
            ev.preventDefault();
            this.send();
        });
        $('prompt').addEventListener('keydown', (ev) => {
            if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
                ev.preventDefault();
                this.send();
            } else if (ev.key === 'Escape') {
                if (this.abort) this.stop();
                else if (this.editing) this.cancelEdit();
            }
        });
        $('stop').addEventListener('click', () => this.stop());
        document.addEventListener('keydown', (ev) => {
            if (ev.key === 'Escape' && this.abort) this.stop();
        });
    }

    drawList() {
        const ul = $('conversations');
        ul.replaceChildren();
        for (const c of this.convs) {
            if (!c.messages.length && c !== this.current) continue;
            const li = el('li', c === this.current ? 'current' : null);
            const open = el('button', 'open', c.title || 'New chat');
            open.type = 'button';
            open.title = c.title || 'New chat';
            if (c === this.current) open.setAttribute('aria-current', 'true');
            open.addEventListener('click', () => {
                if (this.abort) return;
                this.current = c;
                this.editing = false;
                this.drawList();
                this.drawThread();
            });
            const del = el('button', 'delete', '×');
            del.type = 'button';
            del.title = 'Delete this conversation';
            del.setAttribute('aria-label', `Delete "${c.title || 'New chat'}"`);
            del.addEventListener('click', () => {
                if (this.abort) return;
                this.convs = this.convs.filter((x) => x !== c);
                if (c === this.current) this.current = this.convs[0] || this.newConv();
                this.save();
                this.drawList();
                this.drawThread();
            });
            li.append(open, del);
            ul.appendChild(li);
        }
    }

    // The whole thread, drawn again (a conversation switch, an edit, the end of a reply).
    drawThread() {
        $('system').value = this.current.system || '';
        const ol = $('messages');
        ol.replaceChildren();
        const msgs = this.current.messages;
        if (!msgs.length) {
            const hello = el('li', 'hello');
            hello.append(el('p', null, 'Ask the model something.'), el('p', null, 'Enter sends, Shift+Enter starts a new line, Escape stops an answer.'));
            ol.appendChild(hello);
        }
        msgs.forEach((m, i) => ol.appendChild(this.drawMessage(m, i === msgs.length - 1, i)));
        ol.scrollTop = ol.scrollHeight;
    }

    drawMessage(m, last, index) {
        const li = el('li', `msg ${m.error ? 'error' : m.role}`);
        li.dataset.index = index;
        li.appendChild(el('div', 'who', m.error ? 'Error' : m.role === 'user' ? 'You' : 'Model'));
        li.appendChild(this.drawBody(m));
        if (m.stats) li.appendChild(el('div', 'stats', statsLine(m.stats)));
        const busy = !!this.abort;
        const msgs = this.current.messages;
        const lastUser = msgs.map((x) => x.role).lastIndexOf('user');
        if (!busy && m.role === 'user' && index === lastUser) {
            li.appendChild(actions([['Edit', () => this.edit()]]));
        }
        if (!busy && last && m.role === 'assistant') {
            li.appendChild(actions([['Regenerate', () => this.regenerate()]]));
        }
        return li;
    }

    drawBody(m) {
        const body = el('div', 'body');
        if (m.role === 'user' || m.error) {
            body.textContent = m.content;
            return body;
        }
        if (m.reasoning) {
            const d = el('details', 'reasoning');
            d.open = !!m.streaming && !m.content;
            d.appendChild(el('summary', null, m.streaming && !m.content ? 'Thinking…' : 'Reasoning'));
            d.appendChild(el('div', 'text', m.reasoning));
            body.appendChild(d);
        }
        if (m.content) body.appendChild(render(m.content));
        for (const t of m.tool_calls || []) {
            const box = el('div', 'tool-call');
            box.append(el('span', 'label', 'Tool call '), el('span', 'name', t.function?.name || '?'));
            let args = t.function?.arguments || '';
            try {
                args = JSON.stringify(JSON.parse(args), null, 2);
            } catch {
                // still streaming, or not JSON: as sent
            }
            box.appendChild(el('pre', null, args));
            body.appendChild(box);
        }
        if (!m.content && !m.reasoning && !(m.tool_calls || []).length)
            body.appendChild(el('span', 'empty', m.streaming ? '…' : m.stopped ? '(stopped)' : '(no text)'));
        return body;
    }

    // Redraws only the streaming message, once per animation frame.
    redrawLast() {
        if (this.frame) return;
        this.frame = requestAnimationFrame(() => {
            this.frame = 0;
            const ol = $('messages');
            const msgs = this.current.messages;
            const i = msgs.length - 1;
            const li = ol.querySelector(`li.msg[data-index="${i}"]`);
            if (!li) return;
            const stick = ol.scrollHeight - ol.scrollTop - ol.clientHeight < 40;
            li.replaceWith(this.drawMessage(msgs[i], true, i));
            if (stick) ol.scrollTop = ol.scrollHeight;
        });
    }

    edit() {
        const msgs = this.current.messages;
        const i = msgs.map((x) => x.role).lastIndexOf('user');
        if (i < 0) return;
        this.editing = true;
        $('prompt').value = msgs[i].content;
        $('send').textContent = 'Save and send';
        $('prompt').focus();
    }

    cancelEdit() {
        this.editing = false;
        $('prompt').value = '';
        $('send').textContent = 'Send';
    }

    regenerate() {
        const msgs = this.current.messages;
        while (msgs.length && msgs[msgs.length - 1].role !== 'user') msgs.pop();
        if (msgs.length) this.run();
    }

    send() {
        if (this.abort) return;
        const text = $('prompt').value;
        if (!text.trim()) return;
        const msgs = this.current.messages;
        if (this.editing) {
            const i = msgs.map((x) => x.role).lastIndexOf('user');
            if (i >= 0) msgs.splice(i);
            this.editing = false;
            $('send').textContent = 'Send';
        }
        msgs.push({ role: 'user', content: text });
        if (!this.current.title) this.current.title = text.trim().slice(0, 60);
        $('prompt').value = '';
        this.drawList();
        this.run();
    }

    stop() {
        if (this.abort) this.abort.abort();
    }

    // What the server gets: the system prompt, then the turns (errors left out;
    // reasoning is not sent back, tool calls are).
    requestBody() {
        const s = this.settings;
        const messages = [];
        if (this.current.system?.trim()) messages.push({ role: 'system', content: this.current.system });
        for (const m of this.current.messages) {
            if (m.error) continue;
            const out = { role: m.role, content: m.content || '' };
            if (m.tool_calls?.length) out.tool_calls = m.tool_calls;
            messages.push(out);
        }
        const body = { messages, temperature: s.temperature, top_p: s.top_p, max_tokens: s.max_tokens };
        if (this.model) body.model = this.model;
        if (!s.thinking) body.reasoning_effort = 'none';
        if (s.tools.trim()) {
            let tools;
            try {
                tools = JSON.parse(s.tools);
            } catch (e) {
                throw new Error(`the tools in Settings are not JSON (${e.message})`);
            }
            if (!Array.isArray(tools)) throw new Error('the tools in Settings are not a JSON array');
            body.tools = tools;
        }
        return body;
    }

    async run() {
        const msgs = this.current.messages;
        let body;
        try {
            body = this.requestBody();
        } catch (e) {
            msgs.push({ role: 'assistant', error: true, content: e.message });
            this.save();
            this.drawThread();
            return;
        }
        const ans = { role: 'assistant', content: '', reasoning: '', tool_calls: [], streaming: true };
        msgs.push(ans);
        this.abort = new AbortController();
        $('send').disabled = true;
        $('stop').hidden = false;
        this.drawThread();
        const t0 = performance.now();
        let tFirst = 0;
        try {
            await streamChat(
                body,
                (chunk) => {
                    const d = chunk.choices?.[0]?.delta;
                    if (d) {
                        if (d.content) ans.content += d.content;
                        if (d.reasoning_content) ans.reasoning += d.reasoning_content;
                        for (const t of d.tool_calls || []) {
                            const slot = (ans.tool_calls[t.index] ??= { id: t.id, type: 'function', function: { name: '', arguments: '' } });
                            if (t.id) slot.id = t.id;
                            if (t.function?.name) slot.function.name = t.function.name;
                            if (t.function?.arguments) slot.function.arguments += t.function.arguments;
                        }
                        if (!tFirst && (d.content || d.reasoning_content || d.tool_calls)) tFirst = performance.now();
                        this.redrawLast();
                    }
                    if (chunk.choices?.[0]?.finish_reason) ans.finish = chunk.choices[0].finish_reason;
                    if (chunk.usage) ans.stats = { ...chunk.usage, ...(chunk.timings || {}) };
                },
                this.abort.signal,
            );
        } catch (e) {
            if (e.name === 'AbortError') {
                ans.stopped = true;
            } else {
                if (!ans.content && !ans.reasoning && !ans.tool_calls.length) msgs.pop();
                msgs.push({ role: 'assistant', error: true, content: errorText(e) });
                if (e instanceof ApiError && e.status === 401) this.onAuth(e);
            }
        } finally {
            delete ans.streaming;
            if (!ans.tool_calls.length) delete ans.tool_calls;
            if (!ans.stats && tFirst) ans.stats = { time_to_first_token_s: (tFirst - t0) / 1000, measured: true };
            if (ans.stats && ans.stopped) ans.stats.stopped = true;
            this.abort = null;
            $('send').disabled = false;
            $('stop').hidden = true;
            this.save();
            this.drawList();
            this.drawThread();
            $('prompt').focus();
        }
    }
}

function actions(list) {
    const div = el('div', 'actions');
    for (const [label, fn] of list) {
        const b = el('button', 'ghost', label);
        b.type = 'button';
        b.addEventListener('click', fn);
        div.appendChild(b);
    }
    return div;
}

function errorText(e) {
    if (e instanceof ApiError && e.status === 401) return `The server refused the API key: ${e.message}`;
    if (e instanceof ApiError) return `The server answered ${e.status}: ${e.message}`;
    return `The request failed: ${e.message}`;
}

function fmt(v, digits) {
    return Number(v).toLocaleString(undefined, { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

// "12 prompt (8 cached) · 40 tokens · first token 0.21 s · 35.2 tok/s · drafts 12/20 accepted".
export function statsLine(s) {
    const parts = [];
    if (s.prompt_tokens !== undefined) {
        const cached = s.prompt_tokens_details?.cached_tokens;
        parts.push(`${s.prompt_tokens} prompt${cached ? ` (${cached} cached)` : ''}`);
    }
    if (s.completion_tokens !== undefined) parts.push(`${s.completion_tokens} tokens`);
    if (s.time_to_first_token_s != null) {
        const t = s.time_to_first_token_s;
        parts.push(`first token ${t < 1 ? `${fmt(t * 1000, 0)} ms` : `${fmt(t, 2)} s`}${s.measured ? ' (measured here)' : ''}`);
    }
    if (s.decode_tokens_per_second != null) parts.push(`${fmt(s.decode_tokens_per_second, 1)} tok/s`);
    if (s.draft_tokens) parts.push(`drafts ${s.draft_tokens_accepted}/${s.draft_tokens} accepted`);
    if (s.stopped) parts.push('stopped');
    return parts.join(' · ');
}
