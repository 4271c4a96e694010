// app.js - the page's entry: the two views (tabs, keyboard: arrow keys between
// them, Alt+1 / Alt+2 from anywhere), the API-key form, and the first call.
//
// At start it asks GET /v1/models: the served model's name goes to the header
// and the chat's requests; a 401 means the server was started with --api-key,
// and the key form opens with a message saying whether a key was sent and
// refused or none was given. The key is kept by api.js (localStorage).

import { ApiError, getJSON, getKey, setKey } from './api.js';
import { Chat } from './chat.js';
import { Status } from './status.js';
import { $ } from './dom.js';

function banner(text) {
    const b = $('banner');
    b.textContent = text || '';
    b.hidden = !text;
}

function askKey(e) {
    const had = !!getKey();
    $('key-label').textContent = had
        ? 'The server refused this API key. Enter the key it was started with (--api-key).'
        : 'This server needs an API key (it was started with --api-key).';
    banner(had ? `Wrong API key: ${e?.message || 'the server answered 401'}` : 'An API key is needed to use this server.');
    if (!$('key-form').hidden) return; // already asking: leave the focus where it is
    $('key-form').hidden = false;
    $('key-input').focus();
}

async function connect(chat) {
    try {
        const models = await getJSON('/v1/models');
        const name = models.data?.[0]?.id || '';
        chat.model = name || null;
        $('model-name').textContent = name;
        banner('');
        $('key-form').hidden = true;
        return true;
    } catch (e) {
        if (e instanceof ApiError && e.status === 401) askKey(e);
        else banner(`Cannot reach the server: ${e.message}`);
        return false;
    }
}

function boot() {
    const status = new Status({ onAuth: askKey });
    const chat = new Chat({ onAuth: askKey });
    const tabs = [
        ['tab-chat', 'view-chat'],
        ['tab-status', 'view-status'],
    ];
    const select = (i, focus) => {
        tabs.forEach(([t, v], j) => {
            const on = i === j;
            $(t).setAttribute('aria-selected', String(on));
            $(t).tabIndex = on ? 0 : -1;
            $(v).hidden = !on;
        });
        status.show(i === 1);
        if (focus) $(tabs[i][0]).focus();
        history.replaceState(null, '', i === 1 ? '#status' : '#chat');
    };
    tabs.forEach(([t], i) => {
        $(t).addEventListener('click', () => select(i, false));
        $(t).addEventListener('keydown', (ev) => {
            if (ev.key === 'ArrowRight' || ev.key === 'ArrowLeft') {
                ev.preventDefault();
                select((i + 1) % 2, true);
            }
        });
    });
    document.addEventListener('keydown', (ev) => {
        if (ev.altKey && (ev.key === '1' || ev.key === '2')) {
            ev.preventDefault();
            select(Number(ev.key) - 1, true);
        }
    });
    $('key-button').addEventListener('click', () => {
        $('key-label').textContent = 'API key for this server (kept in this browser):';
        $('key-form').hidden = false;
        $('key-input').value = getKey();
        $('key-input').focus();
    });
    $('key-cancel').addEventListener('click', () => {
        $('key-form').hidden = true;
    });
    $('key-form').addEventListener('submit', async (ev) => {
        ev.preventDefault();
        setKey($('key-input').value.trim());
        $('key-input').value = '';
        if (await connect(chat)) status.poll();
    });
    select(location.hash === '#status' ? 1 : 0, false);
    connect(chat).then(() => status.start());
}

boot();
