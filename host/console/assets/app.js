// The agenthost console: a single page reading the HTTP API
// (docs/http-api.md) with the token the user gives, kept for the tab.
// Routes live in the fragment: #/threads, #/threads/{id}, #/runs/{id}.
import { streamRunEvents } from './sse.js';
import { buildModel, render, clock, shortID } from './timeline.js';

const TOKEN_KEY = 'agenthost.token';
// The API lives beside /ui/ (also behind a proxy that adds a prefix).
const BASE = location.pathname.replace(/ui\/[^/]*$/, '');
// A waiting run is active in the store, waiting for answers to tool calls.
const OPEN = new Set(['queued', 'active', 'waiting']);
const MAX_STREAMS = 4; // a browser opens at most 6 connections to one server

// Inputs this tab saw rejected, by thread: the server keeps no trace of them.
const rejectedByThread = new Map();

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  cleanup: null,
  // Endpoints this server turned out not to have (404/501), by name.
  missing: new Set(),
};

// ---- DOM helpers: text always goes in as text, never as markup. ----

function h(tag, attrs, ...kids) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) n.addEventListener(k.slice(2), v);
    else if (k === 'class') n.className = v;
    else if (v === true) n.setAttribute(k, '');
    else n.setAttribute(k, String(v));
  }
  append(n, kids);
  return n;
}
function append(n, kids) {
  for (const k of kids.flat(Infinity)) {
    if (k === null || k === undefined || k === false) continue;
    n.append(typeof k === 'string' || typeof k === 'number' ? document.createTextNode(String(k)) : k);
  }
}
// put replaces n's children with kids, skipping null, false and undefined.
function put(n, ...kids) {
  n.replaceChildren();
  append(n, kids);
}
const main = () => document.getElementById('main');
const threadHref = (id) => '#/threads/' + encodeURIComponent(id);
const runHref = (id) => '#/runs/' + encodeURIComponent(id);
const when = (t) => (t ? new Date(t).toLocaleString() + ' (' + clock(Date.parse(t), true) + ')' : '—');
function badge(runState) { return h('span', { class: 'badge st-' + runState }, runState); }
function notice(kind, ...kids) { return h('p', { class: 'notice ' + kind, role: kind === 'error' ? 'alert' : 'status' }, ...kids); }

// ---- The API. ----

export class APIError extends Error {
  constructor(status, code, detail, problem) {
    super(detail || code);
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.problem = problem || {}; // the problem document, for its extra fields
  }
}

// request is fetch() with the token, answering the Response or throwing an
// APIError made of the problem the server sent.
async function request(path, init = {}) {
  const headers = { ...(init.headers || {}) };
  if (state.token) headers.Authorization = 'Bearer ' + state.token;
  let res;
  try {
    const { probe, ...rest } = init;
    res = await fetch(BASE.replace(/\/$/, '') + path, { ...rest, headers, cache: 'no-store' });
  } catch (e) {
    if (init.signal && init.signal.aborted) throw e;
    throw new APIError(0, 'network', 'The server did not answer (' + e.message + ').');
  }
  if (res.ok) return res;
  let p = {};
  try { p = await res.json(); } catch { /* not a problem document */ }
  const err = new APIError(res.status, p.code || 'http_' + res.status, p.detail || res.statusText, p);
  if (res.status === 401 && !init.probe) unauthorized();
  throw err;
}

// api calls the API and answers the JSON it sent. body is sent as JSON;
// rawBody, a JSON text, is sent as it is.
async function api(path, { method = 'GET', body, rawBody, headers = {}, signal } = {}) {
  const init = { method, headers: { Accept: 'application/json', ...headers }, signal };
  if (body !== undefined || rawBody !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = rawBody !== undefined ? rawBody : JSON.stringify(body);
  }
  const res = await request(path, init);
  return res.json();
}

// missing reports whether err says the server has no such endpoint: a 404
// for a route (the API names the route in its detail) or a 501.
function isMissing(err) {
  return err instanceof APIError && (err.status === 501 || err.status === 405 || (err.status === 404 && /no such route/.test(err.detail || '')));
}

// pages reads every page of a paginated list (?after=&limit=, next_cursor),
// up to max items. A server that does not paginate answers everything at
// once with no next_cursor.
async function pages(path, field, { limit = 200, max = 5000, signal } = {}) {
  const out = [];
  let after = '';
  for (;;) {
    const sep = path.includes('?') ? '&' : '?';
    const q = sep + 'limit=' + limit + (after ? '&after=' + encodeURIComponent(after) : '');
    const page = await api(path + q, { signal });
    out.push(...(page[field] || []));
    if (!page.next_cursor || out.length >= max || page.next_cursor === after) return { items: out, more: !!page.next_cursor && out.length >= max };
    after = page.next_cursor;
  }
}

function describe(err) {
  if (!(err instanceof APIError)) return String(err && err.message ? err.message : err);
  if (err.status === 0) return err.detail;
  return err.detail + ' (' + err.status + ' ' + err.code + ')';
}

// ---- The token. ----

let authWaiters = [];
function unauthorized() {
  if (document.getElementById('token-form')) return;
  const had = !!state.token;
  setToken('');
  showTokenForm(had ? 'The server no longer accepts the token this tab had (401 unauthorized). Give the current one.' : '');
}

function setToken(t) {
  state.token = t;
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
  document.getElementById('forget').hidden = !t;
}

// checkAccess answers true when the API lets this tab in (with its token,
// or without one on a server that asks none).
async function checkAccess() {
  try {
    await request('/v1/threads?limit=1', { headers: { Accept: 'application/json' }, probe: true });
    return true;
  } catch (e) {
    if (e.status === 401) return false;
    return true; // any other answer means we were let in
  }
}

function showTokenForm(message) {
  stopPage();
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'current-password', required: true, 'aria-describedby': 'token-help token-msg' });
  const msg = h('div', { id: 'token-msg', 'aria-live': 'assertive' }, message ? notice('error', message) : null);
  const form = h('form', {
    id: 'token-form', class: 'box token-box',
    onsubmit: async (e) => {
      e.preventDefault();
      const t = input.value.trim();
      if (!t) return;
      put(msg, h('p', { class: 'muted' }, 'Checking the token…'));
      state.token = t;
      if (await checkAccess()) {
        setToken(t);
        route();
      } else {
        state.token = '';
        put(msg, notice('error', 'The server refused this token (401 unauthorized). Check the token in the server\'s configuration (token, AGENTHOST_TOKEN or --token) and try again.'));
        input.select();
        input.focus();
      }
    },
  },
  h('h1', {}, 'Sign in to agenthost'),
  h('div', { class: 'field' },
    h('label', { for: 'token' }, 'API token'),
    input,
    h('p', { class: 'help', id: 'token-help' }, 'The bearer token of this server. It is kept for this tab only and sent to this server only.')),
  msg,
  h('button', { type: 'submit', class: 'primary' }, 'Sign in'));
  put(main(), form);
  input.focus();
}

// ---- Routing. ----

function stopPage() {
  if (state.cleanup) state.cleanup();
  state.cleanup = null;
}

async function route() {
  stopPage();
  const ctl = new AbortController();
  const timers = new Set();
  const page = {
    signal: ctl.signal,
    every(ms, f) { const t = setInterval(f, ms); timers.add(t); },
    later(ms, f) { const t = setTimeout(f, ms); timers.add(t); },
  };
  state.cleanup = () => { ctl.abort(); for (const t of timers) { clearInterval(t); clearTimeout(t); } };
  const hash = location.hash.replace(/^#/, '') || '/threads';
  const [path, query] = hash.split('?');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query || '');
  try {
    if (parts[0] === 'threads' && parts.length === 2) await threadPage(page, parts[1]);
    else if (parts[0] === 'runs' && parts.length === 2) await runPage(page, parts[1]);
    else await threadsPage(page, params);
  } catch (e) {
    if (ctl.signal.aborted || e.status === 401) return;
    put(main(), h('h1', { tabindex: -1 }, e.status === 404 ? 'Not found' : 'Something went wrong'), notice('error', describe(e)),
      h('p', {}, h('a', { href: '#/threads' }, 'Back to the threads')));
  }
  const h1 = main().querySelector('h1');
  if (h1 && !document.getElementById('token-form') && document.activeElement === document.body) {
    h1.setAttribute('tabindex', '-1');
    h1.focus({ preventScroll: true });
  }
}

// ---- Threads. ----

async function threadsPage(page, params) {
  const q = (params.get('q') || '').trim();
  const after = params.get('after') || '';
  const back = params.get('back') || '';
  const input = h('input', { id: 'q', name: 'q', type: 'search', value: q, autocomplete: 'off', 'aria-describedby': 'q-help' });
  const list = h('div', { 'aria-live': 'polite' }, h('p', { class: 'muted' }, 'Loading threads…'));
  put(main(),
    h('h1', {}, 'Threads'),
    h('form', {
      class: 'row', role: 'search',
      onsubmit: (e) => {
        e.preventDefault();
        const v = input.value.trim();
        location.hash = '#/threads' + (v ? '?q=' + encodeURIComponent(v) : '');
      },
    },
    h('div', { class: 'field' },
      h('label', { for: 'q' }, 'Search by thread id'),
      input,
      h('p', { class: 'help', id: 'q-help' }, 'Finds the thread with this exact id and, when the server lists threads, those whose id starts with it.')),
    h('div', { class: 'field fit' }, h('button', { type: 'submit', class: 'primary' }, 'Search'))),
    list,
    h('h2', {}, 'Start or continue a thread'),
    submitForm(null, page),
  );

  const load = async () => {
    const out = [];
    if (q) {
      // The exact id, whether or not the server can list threads.
      try {
        const runs = await api('/v1/threads/' + encodeURIComponent(q) + '/runs?limit=200', { signal: page.signal });
        const rs = runs.runs || [];
        out.push(h('p', { class: 'notice ok' }, 'Thread ', h('a', { href: threadHref(q) }, q), ' exists: ', String(rs.length) + (runs.next_cursor ? '+' : ''), ' runs',
          rs.some((r) => OPEN.has(r.state)) ? ', busy' : '', rs.some((r) => r.state === 'waiting') ? ', a run waits for approval.' : '.'));
      } catch (e) {
        if (e.status === 404 && !isMissing(e)) out.push(h('p', { class: 'notice warn', role: 'status' }, 'No thread has the id ', h('code', {}, q), ' yet. Submitting an input to it below starts it.'));
        else throw e;
      }
    }
    let listing;
    try {
      const start = q ? predecessor(q) : after;
      listing = await api('/v1/threads?limit=50' + (start ? '&after=' + encodeURIComponent(start) : ''), { signal: page.signal });
    } catch (e) {
      if (isMissing(e) || e.status === 404) {
        state.missing.add('threads');
        out.push(notice('warn', 'This server cannot list threads (GET /v1/threads answered ' + e.status + '). Search for a thread by its exact id above.'));
        return out;
      }
      if (q && e.status === 400) return out; // the server's cursors are not ids: exact search only
      throw e;
    }
    let threads = listing.threads || [];
    if (q) threads = threads.filter((t) => t.id.startsWith(q) && t.id !== q);
    const waiting = await waitingRuns(threads, page.signal);
    if (threads.length === 0) {
      out.push(h('p', { class: 'muted' }, q ? 'No other thread id starts with “' + q + '”.' : 'No threads yet. Submit an input below to start one.'));
    } else {
      out.push(h('table', {},
        h('caption', { class: 'muted' }, q ? 'Threads whose id starts with “' + q + '”' : 'Threads, by id'),
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Thread'), h('th', { scope: 'col' }, 'Status'), h('th', { scope: 'col' }, 'Open runs'), h('th', { scope: 'col' }, 'Version'), h('th', { scope: 'col' }, 'Updated'))),
        h('tbody', {}, threads.map((t) => h('tr', { 'data-thread': t.id, 'data-busy': t.busy ? '1' : '0', 'data-waiting': waiting.has(t.id) ? '1' : '0' },
          h('td', { class: 'mono' }, h('a', { href: threadHref(t.id) }, t.id)),
          h('td', {}, t.busy ? h('span', { class: 'badge busy' }, 'busy') : h('span', { class: 'badge idle' }, 'idle'),
            (waiting.get(t.id) || []).map((r) => [' ', h('a', {
              href: runHref(r.id), class: 'badge waiting', 'data-waiting-run': r.id,
              'aria-label': 'Run ' + r.id + ' waits for approval of ' + plural((r.pending_approvals || r.pending_call_ids || []).length, 'tool call') + ': open it',
            }, 'waiting for approval')])),
          h('td', {}, String((t.open_run_ids || []).length)),
          h('td', {}, String(t.version ?? '')),
          h('td', {}, t.updated_at ? when(t.updated_at) : '—'))))));
    }
    if (!q) {
      const nav = h('nav', { class: 'pager', 'aria-label': 'Pages of threads' });
      if (after) nav.append(h('a', { href: back ? '#/threads?after=' + encodeURIComponent(back) : '#/threads' }, 'Previous page'), h('a', { href: '#/threads' }, 'First page'));
      if (listing.next_cursor) nav.append(h('a', { href: '#/threads?after=' + encodeURIComponent(listing.next_cursor) + (after ? '&back=' + encodeURIComponent(after) : '') }, 'Next page'));
      if (nav.childNodes.length) out.push(nav);
    }
    return out;
  };
  const refresh = async () => {
    try {
      put(list, ...(await load()));
    } catch (e) {
      if (!page.signal.aborted && e.status !== 401) put(list, notice('error', 'Could not read the threads: ' + describe(e)));
    }
  };
  await refresh();
  // Busy marks change: read the page again every few seconds.
  if (!state.missing.has('threads') || q) page.every(5000, refresh);
}

// waitingRuns answers, by thread id, the runs of the listed busy threads
// that wait for approval. The listing says whether a thread is busy, not
// why: the open runs of busy threads are read, a few at a time.
async function waitingRuns(threads, signal) {
  const out = new Map();
  const todo = threads.filter((t) => t.busy).flatMap((t) => (t.open_run_ids || []).slice(0, 4).map((id) => [t.id, id]));
  let next = 0;
  const worker = async () => {
    while (next < todo.length) {
      const [thread, id] = todo[next++];
      try {
        const r = await api('/v1/runs/' + encodeURIComponent(id), { signal });
        if (r.state === 'waiting') out.set(thread, [...(out.get(thread) || []), r]);
      } catch (e) {
        if (signal.aborted || e.status === 401) throw e;
        // A run that ended and went away meanwhile: the next refresh tells.
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(3, todo.length) }, worker));
  return out;
}

function plural(n, word) { return n + ' ' + word + (n === 1 ? '' : 's'); }

// predecessor is a string that sorts just before s, so that listing after
// it starts at s (ids are compared byte by byte).
function predecessor(s) {
  const last = s.codePointAt(s.length - 1);
  if (last === undefined || last === 0) return '';
  const head = s.slice(0, s.length - (last > 0xffff ? 2 : 1));
  return head + String.fromCodePoint(last - 1) + '\u{10FFFF}';
}

// ---- Submitting an input. ----

function newKey() {
  const b = new Uint8Array(8);
  crypto.getRandomValues(b);
  return 'ui-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

// submitForm posts an input to thread (or to the thread named in the form
// when thread is null). onRejected(entry) hears of inputs the policy
// rejected; onAccepted(admission) of the others.
function submitForm(thread, page, { onAccepted, onRejected } = {}) {
  const id = (s) => 'submit-' + s;
  const threadInput = thread === null ? h('input', { id: id('thread'), name: 'thread', required: true, autocomplete: 'off' }) : null;
  const content = h('textarea', { id: id('content'), name: 'content', required: true, rows: 3 });
  const hint = h('input', { id: id('hint'), name: 'hint', autocomplete: 'off', 'aria-describedby': id('hint-help') });
  const key = h('input', { id: id('key'), name: 'key', value: newKey(), autocomplete: 'off', 'aria-describedby': id('key-help'), class: 'mono' });
  const result = h('div', { id: id('result'), 'aria-live': 'polite' });
  const button = h('button', { type: 'submit', class: 'primary' }, 'Submit input');
  return h('form', {
    class: 'box', id: 'submit-form', 'aria-label': 'Submit an input',
    onsubmit: async (e) => {
      e.preventDefault();
      const t = thread ?? threadInput.value.trim();
      if (!t || !content.value.trim()) {
        put(result, notice('error', !t ? 'Give the thread id.' : 'The input is empty.'));
        return;
      }
      button.disabled = true;
      const body = { content: content.value };
      if (hint.value.trim()) body.hint = hint.value.trim();
      const headers = key.value.trim() ? { 'Idempotency-Key': key.value.trim() } : {};
      try {
        const adm = await api('/v1/threads/' + encodeURIComponent(t) + '/inputs', { method: 'POST', body, headers });
        put(result, notice('ok', 'Accepted: input ', h('code', {}, adm.input_message_id), ' is answered by run ',
          h('a', { href: runHref(adm.run_id), 'data-run-link': adm.run_id }, adm.run_id), thread === null ? [' on thread ', h('a', { href: threadHref(t) }, t)] : null, '.'));
        content.value = '';
        key.value = newKey();
        onAccepted && onAccepted(adm);
      } catch (err) {
        if (err.status === 401) return;
        let text = describe(err);
        if (err.code === 'busy') {
          text = 'Rejected: the thread is busy and its input policy rejected the input. Nothing was written; submit it again later.';
          const entry = { time: Date.now(), content: body.content, key: headers['Idempotency-Key'] || '' };
          if (!rejectedByThread.has(t)) rejectedByThread.set(t, []);
          rejectedByThread.get(t).push(entry);
          onRejected && onRejected(entry);
        } else if (err.code === 'key_reused') {
          text = 'Refused: the idempotency key was already used on this thread with other content. Use a new key. (' + err.detail + ')';
        } else if (err.code === 'unavailable') {
          text = 'The server is unavailable: ' + err.detail + ' Submit again with the same key: it cannot be taken twice.';
        }
        put(result, notice('error', text));
      } finally {
        button.disabled = false;
      }
    },
  },
  threadInput ? h('div', { class: 'field' }, h('label', { for: id('thread') }, 'Thread id'), threadInput) : null,
  h('div', { class: 'field' }, h('label', { for: id('content') }, 'Input'), content),
  h('div', { class: 'row' },
    h('div', { class: 'field' }, h('label', { for: id('hint') }, 'Hint (optional)'), hint,
      h('p', { class: 'help', id: id('hint-help') }, 'Read by the input policy, e.g. refine or redirect.')),
    h('div', { class: 'field' }, h('label', { for: id('key') }, 'Idempotency key'), key,
      h('p', { class: 'help', id: id('key-help') }, 'The same key on this thread returns the same admission. A new one is made after each accepted input.'))),
  button, result);
}

// ---- Following runs: their events and step records. ----

// RunFeed keeps what the console knows of a set of runs: their events
// (streamed; live for open runs) and their step records, and calls changed()
// when something arrives. At most MAX_STREAMS streams are open at once.
class RunFeed {
  constructor(signal, changed) {
    this.signal = signal;
    this.changed = changed;
    this.events = new Map(); // runID -> [event]
    this.steps = new Map(); // runID -> [step]
    this.streams = new Map(); // runID -> {done, ctl}
    this.stepsWanted = new Set();
    this.stepsBusy = false;
    this.errors = new Map();
  }

  // want makes sure the runs' events are read, open runs first.
  want(runs) {
    const order = [...runs].sort((a, b) => rank(a) - rank(b) || b.seq - a.seq);
    for (const r of order) {
      if (this.streams.has(r.id)) continue;
      if ([...this.streams.values()].filter((s) => !s.done).length >= MAX_STREAMS) break;
      this.follow(r.id);
    }
  }

  follow(runID) {
    const s = { done: false };
    this.streams.set(runID, s);
    this.events.set(runID, this.events.get(runID) || []);
    streamRunEvents(request, runID, {
      signal: this.signal,
      onEvent: (ev) => {
        const list = this.events.get(runID);
        if (!list.some((x) => sameEvent(x, ev))) list.push(ev);
        if (['input_taken', 'step_finished', 'waiting', 'resumed', 'terminal'].includes(ev.type)) this.stepsWanted.add(runID);
        this.changed(runID, ev);
      },
    }).catch((e) => {
      if (!this.signal.aborted) this.errors.set(runID, e);
    }).finally(() => {
      s.done = true;
      if (!this.signal.aborted) this.changed(runID, null);
    });
  }

  // readSteps reads the step records of the runs that asked for them, when
  // the server keeps step records.
  async readSteps() {
    if (state.missing.has('steps') || this.stepsBusy || this.stepsWanted.size === 0) return;
    this.stepsBusy = true;
    try {
      for (const runID of [...this.stepsWanted]) {
        this.stepsWanted.delete(runID);
        try {
          const { items } = await pages('/v1/runs/' + encodeURIComponent(runID) + '/steps', 'steps', { signal: this.signal });
          this.steps.set(runID, items);
          this.changed(runID, null);
        } catch (e) {
          if (e.status === 404 || e.status === 501 || e.status === 405) {
            state.missing.add('steps');
            this.changed(runID, null);
            return;
          }
          if (this.signal.aborted) return;
        }
      }
    } finally {
      this.stepsBusy = false;
    }
  }
}

// sameEvent reports whether a and b are one event seen twice (a stream
// resumed after a broken connection sends some again). A durable event is
// known by its seq; ephemeral ones all have seq 0 and are told apart by
// what they say.
function sameEvent(a, b) {
  if (a.seq !== b.seq) return false;
  if (a.seq > 0) return true;
  return a.type === b.type && a.time === b.time && JSON.stringify(a.data) === JSON.stringify(b.data);
}

function rank(r) { return r.state === 'active' ? 0 : r.state === 'queued' ? 1 : 2; }

// ---- A thread. ----


async function threadPage(page, thread) {
  const rejected = rejectedByThread.get(thread) || [];
  rejectedByThread.set(thread, rejected);
  const status = h('p', { class: 'muted', id: 'thread-status', 'aria-live': 'polite' }, 'Loading…');
  const figure = h('figure', { class: 'timeline', id: 'timeline' });
  const notes = h('div', {});
  const table = h('div', {});
  put(main(),
    h('p', { class: 'crumbs' }, h('a', { href: '#/threads' }, 'Threads'), ' / '),
    h('h1', {}, 'Thread ', h('code', {}, thread)),
    status, notes,
    h('section', { id: 'timeline-section', 'aria-labelledby': 'timeline-h' },
      h('h2', { id: 'timeline-h' }, 'Timeline'),
      figure,
      h('ul', { class: 'legend', 'aria-label': 'Legend' },
        ['queued', 'active', 'waiting', 'completed', 'failed', 'interrupted', 'superseded'].map((s) => h('li', {}, h('span', { class: 'sw ' + s }), s === 'waiting' ? 'waiting for approval' : s)),
        h('li', {}, h('span', { class: 'sw absorbed' }), 'absorbed: answered by the run it points to'),
        h('li', {}, h('span', { class: 'sw taken' }), 'taken at a step, not yet answered'),
        h('li', {}, '◇ input, with the policy’s decision'))),
    h('h2', {}, 'Submit an input'),
    submitForm(thread, page, {
      onAccepted: () => { refresh(); },
      onRejected: () => { draw(); },
    }),
    h('h2', {}, 'Runs'),
    table,
  );

  let runs = [];
  let more = false;
  let exists = true;
  const feed = new RunFeed(page.signal, () => { schedule(); });
  let drawPending = false;
  function schedule() {
    if (drawPending) return;
    drawPending = true;
    requestAnimationFrame(() => { drawPending = false; draw(); feed.want(runs); feed.readSteps(); });
  }

  function draw() {
    const model = buildModel(runs, feed.events, feed.steps, rejected, Date.now());
    const focused = document.activeElement && document.activeElement.closest && document.activeElement.closest('[data-run]');
    const focusID = focused && figure.contains(focused) ? focused.getAttribute('data-run') : '';
    const width = figure.clientWidth - 16 || 900;
    const svg = render(model, width, (id) => { location.hash = runHref(id); });
    const cap = h('figcaption', {},
      runs.length + ' runs' + (more ? ' (the latest are not all shown)' : '') + '. Each bar runs from a run’s start to its end; a dotted line is time spent queued, a hatched stretch time spent waiting for approval. Select a run to open it.');
    put(figure, svg, cap);
    if (focusID) {
      const again = figure.querySelector('[data-run="' + CSS.escape(focusID) + '"]');
      if (again) again.focus({ preventScroll: true });
    }
    const open = runs.filter((r) => OPEN.has(r.state));
    const live = [...feed.streams.values()].filter((s) => !s.done).length;
    const waiting = open.filter((r) => r.state === 'waiting');
    status.textContent = exists
      ? (open.length ? 'Busy: ' + plural(open.length, 'open run') + (waiting.length ? ', ' + waiting.length + ' waiting for approval' : '') + '.' : 'Idle.') + (live ? ' Following ' + live + ' run stream' + (live > 1 ? 's' : '') + ' live.' : '')
      : 'No runs yet.';
    put(notes,
      state.missing.has('steps') ? notice('warn', 'This server keeps no step records (GET /v1/runs/{id}/steps answered 404): arrows point where a run’s events say it took an input, or at the end of the run that answered it.') : null,
      runs.some((r) => !feed.events.has(r.id)) && feed.events.size > 0 ? h('p', { class: 'muted' }, 'Reading the events of older runs…') : null,
    );
    put(table, runsTable(runs, model));
  }

  async function refresh() {
    try {
      const res = await pages('/v1/threads/' + encodeURIComponent(thread) + '/runs', 'runs', { signal: page.signal, max: 1000 });
      runs = res.items.sort((a, b) => a.seq - b.seq);
      more = res.more;
      exists = true;
      for (const r of runs) {
        // A run absorbed into another: read the absorbing run's steps.
        if (r.absorbed_into_run_id && !feed.steps.has(r.absorbed_into_run_id)) feed.stepsWanted.add(r.absorbed_into_run_id);
      }
    } catch (e) {
      if (page.signal.aborted || e.status === 401) return;
      if (e.status === 404 && !isMissing(e)) {
        exists = false;
        runs = [];
      } else {
        put(notes, notice('error', 'Could not read the thread’s runs: ' + describe(e)));
        return;
      }
    }
    schedule();
  }

  await refresh();
  // Runs appear and change state without an event on the runs already
  // followed (another client submits): read the list again now and then,
  // and redraw while a run is open so that its bar grows.
  page.every(2000, refresh);
  page.every(1000, () => { if (runs.some((r) => OPEN.has(r.state))) schedule(); });
  let lastWidth = figure.clientWidth;
  const ro = new ResizeObserver(() => { if (Math.abs(figure.clientWidth - lastWidth) > 4) { lastWidth = figure.clientWidth; schedule(); } });
  ro.observe(figure);
  page.signal.addEventListener('abort', () => ro.disconnect());
}

function runsTable(runs, model) {
  if (runs.length === 0) return h('p', { class: 'muted' }, 'No runs.');
  const rows = new Map(model.rows.map((r) => [r.id, r]));
  return h('table', {},
    h('thead', {}, h('tr', {}, ['#', 'Run', 'State', 'Inputs and decisions', 'Started', 'Ended', 'Answered by'].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, [...runs].reverse().map((r) => h('tr', { 'data-run-row': r.id },
      h('td', {}, String(r.seq)),
      h('td', { class: 'mono' }, h('a', { href: runHref(r.id) }, shortID(r.id))),
      h('td', {}, badge(r.state), r.terminal_reason && r.terminal_reason !== r.state ? ' ' + r.terminal_reason : ''),
      h('td', {}, (rows.get(r.id)?.inputs || []).map((i, n) => h('div', {}, h('code', {}, shortID(i.id)), ' ', i.coalesced ? (i.decision || 'queue') + ', coalesced' : i.decision || (n === 0 ? '' : '')))),
      h('td', {}, r.started_at ? clock(Date.parse(r.started_at), true) : '—'),
      h('td', {}, r.ended_at ? clock(Date.parse(r.ended_at), true) : '—'),
      h('td', {}, r.absorbed_into_run_id ? h('a', { href: runHref(r.absorbed_into_run_id) }, shortID(r.absorbed_into_run_id)) : r.state === 'completed' ? 'itself' : '—')))));
}

// ---- Tool calls waiting for approval. ----

const ACTION_DONE = { approve: 'Approved', edit: 'Edited and approved', reject: 'Rejected', respond: 'Answered in the tool’s place' };

// relative says when t (ms) is from now, in words: "in 23 hours",
// "2 minutes ago".
function relative(t, now = Date.now()) {
  const d = (t - now) / 1000;
  // In English, as the rest of the page.
  const fmt = new Intl.RelativeTimeFormat('en', { numeric: 'auto' });
  for (const [unit, s] of [['day', 86400], ['hour', 3600], ['minute', 60]]) {
    if (Math.abs(d) >= s) return fmt.format(Math.round(d / s), unit);
  }
  return fmt.format(Math.round(d), 'second');
}

// prettyArguments is a call's arguments as the API gives them (JSON, or a
// string holding the model's text when it was not JSON) for reading.
function prettyArguments(args) {
  if (args === undefined) return '';
  if (typeof args === 'string') return args;
  return JSON.stringify(args, null, 2);
}

// checkArguments parses the edited arguments: the JSON object the call
// runs with. It answers the error to show, or ''.
function checkArguments(text) {
  if (!text.trim()) return 'The arguments are empty: write the JSON object the call runs with, such as {"q": "notes"}. Nothing was sent.';
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    return 'The arguments are not valid JSON: ' + e.message + '. Nothing was sent.';
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    const kind = v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v === 'string' ? 'a string' : 'a ' + typeof v;
    return 'The arguments must be a JSON object ({…}), not ' + kind + '. Nothing was sent.';
  }
  return '';
}

// approvalsPanel is the run page's section of the tool calls the run waits
// on, each with approve, edit, reject and respond. update(run) shows the
// run as read from the API (it keeps the forms being filled in); answered
// (run) is called with the run an answer returned.
function approvalsPanel(runID, page, answered) {
  const list = h('div', { id: 'approvals-list' });
  const intro = h('p', { class: 'help', id: 'approvals-help' });
  const log = h('div', { class: 'approval-log', id: 'approvals-log' });
  const heading = h('h2', { id: 'approvals-h', tabindex: -1 }, 'Pending approvals');
  const section = h('section', { class: 'box approvals', 'aria-labelledby': 'approvals-h', id: 'approvals' }, heading, intro, list, log);
  const items = new Map(); // call_id -> item
  let serial = 0;
  let current = null;

  // outcome shows what the server answered, newest first, and moves the
  // focus to it when asked (the button that was clicked may be gone).
  function outcome(kind, callID, result, focus, ...kids) {
    const n = notice(kind, ...kids);
    n.setAttribute('tabindex', '-1');
    n.setAttribute('data-approval-outcome', result);
    n.setAttribute('data-call', callID);
    log.prepend(n);
    while (log.childNodes.length > 6) log.lastChild.remove();
    if (focus) n.focus();
    return n;
  }

  function item(p) {
    const n = ++serial;
    const id = (s) => 'pc' + n + '-' + s;
    const it = { p, form: null, busy: false };
    const facts = h('dl', { class: 'facts' });
    const args = h('pre', { id: id('args'), 'data-arguments': '' });
    const formSlot = h('div', {});
    const status = h('div', { id: id('status'), 'aria-live': 'polite' });
    const buttons = {};
    const button = (action, label, cls, opens) => {
      const b = h('button', {
        type: 'button', class: cls, 'data-action': action, 'aria-describedby': id('h'),
        'aria-expanded': opens ? 'false' : undefined, 'aria-controls': opens ? id('form') : undefined,
        onclick: () => (opens ? openForm(action) : send(action, {})),
      }, label);
      buttons[action] = b;
      return b;
    };
    it.el = h('article', { class: 'pending', 'data-pending-call': p.call_id, 'aria-labelledby': id('h') },
      h('h3', { id: id('h') }, 'Call ', h('code', {}, p.tool), p.server ? [' on server ', h('code', {}, p.server)] : ' (a tool of the host’s)'),
      h('p', { class: 'prompt', 'data-prompt': '' }, h('strong', {}, 'The policy asks: '), p.prompt || 'Run this call?'),
      facts,
      h('div', { class: 'who muted' }, 'Arguments, as the model wrote them'),
      args,
      h('div', { class: 'actions', role: 'group', 'aria-label': 'Answer the call ' + p.call_id },
        button('approve', 'Approve', 'primary', false),
        button('edit', 'Edit…', '', true),
        button('reject', 'Reject…', 'danger', true),
        button('respond', 'Respond…', '', true)),
      h('div', { id: id('form') }, formSlot),
      status);

    let factsEl = facts;
    it.update = (p) => {
      it.p = p;
      const dl = h('dl', { class: 'facts' });
      fillFacts(dl, p);
      factsEl.replaceWith(dl);
      factsEl = dl;
      args.textContent = prettyArguments(p.arguments);
      if (typeof p.arguments === 'string') args.append(h('span', { class: 'help' }, '\n(not JSON: the model’s text as it wrote it)'));
    };

    function closeForm(focusBack) {
      if (!it.form) return;
      const action = it.form.action;
      it.form = null;
      put(formSlot);
      buttons[action].setAttribute('aria-expanded', 'false');
      if (focusBack) buttons[action].focus();
    }

    function openForm(action) {
      if (it.form && it.form.action === action) { it.form.first.focus(); return; }
      closeForm(false);
      const fid = (s) => id(action + '-' + s);
      let field;
      let help;
      let label;
      let sendLabel;
      if (action === 'edit') {
        label = 'New arguments (a JSON object)';
        field = h('textarea', { id: fid('text'), class: 'json', spellcheck: 'false', autocomplete: 'off', 'aria-describedby': fid('help') + ' ' + fid('err'), rows: 8 });
        field.value = prettyArguments(it.p.arguments);
        help = 'The call runs once with these arguments instead of the model’s. They are checked here before anything is sent.';
        sendLabel = 'Run with these arguments';
      } else if (action === 'reject') {
        label = 'Message for the model (optional)';
        field = h('textarea', { id: fid('text'), rows: 3, 'aria-describedby': fid('help') + ' ' + fid('err') });
        help = 'The call is not run; the model reads this as the tool’s result. Empty: the host says a person rejected the call.';
        sendLabel = 'Reject the call';
      } else {
        label = 'Your answer, in the tool’s place';
        field = h('textarea', { id: fid('text'), rows: 3, 'aria-required': 'true', 'aria-describedby': fid('help') + ' ' + fid('err') });
        help = 'The call is not run; the model reads your answer as the tool’s result.';
        sendLabel = 'Send the answer';
      }
      const err = h('p', { id: fid('err'), class: 'field-error', role: 'alert', hidden: true });
      const showErr = (text) => {
        err.textContent = text;
        err.hidden = !text;
        if (text) field.setAttribute('aria-invalid', 'true');
        else field.removeAttribute('aria-invalid');
      };
      field.addEventListener('input', () => { if (!err.hidden) showErr(''); });
      const form = h('form', {
        'data-form': action, novalidate: true, 'aria-label': { edit: 'Edit the arguments', reject: 'Reject the call', respond: 'Respond in the tool’s place' }[action],
        onsubmit: (e) => {
          e.preventDefault();
          if (it.busy) return;
          const text = field.value;
          if (action === 'edit') {
            const bad = checkArguments(text);
            if (bad) { showErr(bad); field.focus(); return; }
            send('edit', { rawArguments: text.trim() });
          } else if (action === 'reject') {
            send('reject', { message: text.trim() });
          } else {
            if (!text.trim()) { showErr('Write the answer the model reads in the tool’s place. Nothing was sent.'); field.focus(); return; }
            send('respond', { message: text });
          }
        },
        onkeydown: (e) => { if (e.key === 'Escape') { e.preventDefault(); closeForm(true); } },
      },
      h('div', { class: 'field' }, h('label', { for: fid('text') }, label), field, h('p', { class: 'help', id: fid('help') }, help), err),
      h('button', { type: 'submit', class: action === 'reject' ? 'danger' : 'primary', 'data-send': action }, sendLabel), ' ',
      h('button', { type: 'button', onclick: () => closeForm(true) }, 'Cancel'));
      it.form = { action, first: field, showErr };
      buttons[action].setAttribute('aria-expanded', 'true');
      put(formSlot, form);
      field.focus();
    }

    // send answers the call. One click is one answer: its idempotency key
    // is made here, once, and every retry of it (after the server did not
    // answer) sends the same key, so the answer cannot count twice.
    function send(action, { message, rawArguments }) {
      const key = newKey();
      const body = rawArguments !== undefined
        ? '{"action":"edit","arguments":' + rawArguments + '}'
        : JSON.stringify(message ? { action, message } : { action });
      attempt(action, key, body);
    }

    async function attempt(action, key, body) {
      it.busy = true;
      for (const b of it.el.querySelectorAll('button')) b.disabled = true;
      put(status, h('p', { class: 'muted' }, 'Sending…'));
      let err = null;
      let reply = null;
      for (let i = 0; i < 3; i++) {
        try {
          reply = await api('/v1/runs/' + encodeURIComponent(runID) + '/approvals/' + encodeURIComponent(it.p.call_id),
            { method: 'POST', rawBody: body, headers: { 'Idempotency-Key': key } });
          err = null;
          break;
        } catch (e) {
          err = e;
          // The server did not answer, or answered that it could not
          // now: the same answer again, with the same key, a moment later.
          if (!(e instanceof APIError) || !(e.status === 0 || e.status >= 500) || e.status === 501 || i === 2) break;
          if (page.signal.aborted) return;
          put(status, h('p', { class: 'muted' }, 'The server did not answer; trying again with the same key…'));
          await new Promise((r) => setTimeout(r, 1000 * (i + 1)));
        }
      }
      it.busy = false;
      if (page.signal.aborted) return;
      for (const b of it.el.querySelectorAll('button')) b.disabled = false;
      put(status);
      const callID = it.p.call_id;
      if (reply) {
        closeForm(false);
        const done = ACTION_DONE[action] + ' call ' + callID + ' (' + it.p.tool + ')';
        const a = reply.answer || {};
        const stillPending = (reply.run.pending_approvals || []).some((x) => x.call_id === callID);
        const text = reply.duplicate
          ? 'Already recorded: this answer was given before (key ' + key + '); nothing new was written.'
          : done + '. ' + (stillPending ? 'The call needs more approvals.' : reply.run.state === 'waiting' ? 'The run waits for its other calls.' : 'The run goes on.');
        outcome('ok', callID, action, !stillPending, text, ' ', h('span', { class: 'help' }, 'Key ', h('code', {}, a.key || key), '.'));
        answered(reply.run);
        if (stillPending) it.el.querySelector('[data-action="approve"]').focus();
        return;
      }
      if (err.status === 401) return;
      let text;
      let retry = false;
      if (err.code === 'answered') {
        const rec = err.problem.recorded || {};
        text = 'Not recorded: this call already has another answer' + (rec.action ? ' (' + rec.action + (rec.message ? ': “' + rec.message + '”' : '') + ')' : '') +
          ', given from elsewhere or with this key before. Nothing changed.';
      } else if (err.code === 'not_waiting') {
        text = 'Not recorded: the run no longer waits for this call (it ended, or the call was decided). Nothing changed.';
      } else if (err.status === 400) {
        text = 'The server refused this answer as malformed: ' + err.detail;
      } else if (err.status === 404) {
        text = 'The server knows no such call of this run (404): ' + err.detail;
      } else if (err.status === 501) {
        text = 'This server cannot hold tool calls for approval: ' + err.detail;
      } else {
        text = 'The server did not take the answer: ' + describe(err) + '. Try again: the same key is sent, so it cannot count twice.';
        retry = true;
      }
      const n = outcome('error', callID, err.code || 'error', false, text);
      n.setAttribute('role', 'alert');
      if (retry) {
        n.append(' ', h('button', { type: 'button', 'data-retry': key, onclick: (e) => { e.target.disabled = true; n.remove(); attempt(action, key, body); } }, 'Try again'));
      }
      n.focus();
      current && reread();
    }
    it.update(p);
    return it;
  }

  function fillFacts(dl, p) {
    const add = (k, ...v) => dl.append(h('dt', {}, k), h('dd', {}, ...v));
    add('Call', h('code', {}, p.call_id), ' · model step ' + p.model_step);
    const deadline = Date.parse(p.deadline);
    if (Number.isFinite(deadline)) {
      const abs = new Date(deadline).toLocaleString();
      add('Deadline', h('span', { 'data-deadline': p.deadline },
        deadline > Date.now() ? relative(deadline) + ' (' + abs + ')' : 'passed ' + relative(deadline) + ' (' + abs + '): the host rejects the call shortly'),
      deadline > Date.now() ? h('div', { class: 'help' }, 'Unanswered by then, the call is rejected.') : null);
    }
    if (p.approvals > 1) add('Approvals', p.approved + ' of ' + p.approvals + ' given');
  }

  async function reread() {
    try {
      const run = await api('/v1/runs/' + encodeURIComponent(runID), { signal: page.signal });
      answered(run);
    } catch { /* the next event or poll reads it */ }
  }

  function update(run) {
    current = run;
    const pending = run.state === 'waiting' ? run.pending_approvals || [] : [];
    const ids = new Set(pending.map((p) => p.call_id));
    let lostFocus = false;
    for (const [callID, it] of items) {
      if (ids.has(callID)) continue;
      if (it.el.contains(document.activeElement)) lostFocus = true;
      it.el.remove();
      items.delete(callID);
    }
    for (const p of pending) {
      const it = items.get(p.call_id);
      if (it) { if (!it.busy) it.update(p); continue; }
      const fresh = item(p);
      items.set(p.call_id, fresh);
      list.append(fresh.el);
    }
    section.classList.toggle('waiting', pending.length > 0);
    if (pending.length) {
      intro.textContent = 'The tool policy asked a person about ' + (pending.length === 1 ? 'this call' : 'these ' + pending.length + ' calls') +
        '. The run waits until ' + (pending.length === 1 ? 'it is' : 'each is') + ' answered: approve runs the call as the model asked, edit runs it with other arguments, reject and respond do not run it and give the model a text as its result.';
    } else if (run.state === 'queued' || run.state === 'active') {
      intro.textContent = 'No tool call of this run waits for approval. A call the tool policy asks about shows here as it happens.';
    } else if (run.state === 'waiting') {
      intro.textContent = 'The run waits for answers; reading its calls…';
    } else {
      intro.textContent = 'No tool call waits: the run ended. Its asks and answers, if any, are in the transcript.';
    }
    if (lostFocus && !log.contains(document.activeElement)) {
      const next = list.querySelector('[data-action="approve"]');
      (next || log.firstChild || heading).focus();
    }
  }

  function tick() {
    for (const it of items.values()) if (!it.busy) it.update(it.p);
  }

  return { section, update, tick };
}

// ---- A run. ----

async function runPage(page, runID) {
  let run = await api('/v1/runs/' + encodeURIComponent(runID), { signal: page.signal });
  const facts = h('div', {});
  const actions = h('div', { 'aria-live': 'polite' });
  const transcript = h('div', {});
  const eventsBox = h('div', {});
  const approvals = approvalsPanel(runID, page, (r) => { run = r; drawFacts(); if (!confirming) drawActions(); approvals.update(run); readTranscript(); });
  put(main(),
    h('p', { class: 'crumbs' }, h('a', { href: '#/threads' }, 'Threads'), ' / ', h('a', { href: threadHref(run.thread_id) }, run.thread_id), ' / '),
    h('h1', {}, 'Run ', h('code', {}, runID)),
    h('div', { class: 'grid2' },
      h('div', {},
        facts, actions,
        approvals.section,
        h('h2', {}, 'Transcript'), transcript),
      h('div', {},
        h('h2', { class: 'first' }, 'Submit an input to ', h('code', {}, run.thread_id)),
        submitForm(run.thread_id, page),
        h('h2', {}, 'Events'), eventsBox)));

  const events = [];
  let steps = null;
  let messages = null;
  let streamErr = null;
  let confirming = false;
  let cancelNote = null; // what the last cancel from this page answered

  function drawFacts() {
    const dl = h('dl', { class: 'facts' });
    const add = (k, ...v) => dl.append(h('dt', {}, k), h('dd', {}, ...v));
    add('State', h('span', { id: 'run-state', 'data-state': run.state }, badge(run.state)), run.terminal_reason && run.terminal_reason !== run.state ? ' reason: ' + run.terminal_reason : '',
      run.state === 'waiting' ? [' — waits for a person to answer ', h('a', { href: '#approvals', onclick: (e) => { e.preventDefault(); document.getElementById('approvals-h').focus(); } },
        plural((run.pending_approvals || run.pending_call_ids || []).length, 'tool call')), '; nothing runs until then'] : null);
    add('Thread', h('a', { href: threadHref(run.thread_id) }, run.thread_id), ' · run #' + run.seq);
    add('Attempt', String(run.attempt));
    add('Created', when(run.created_at));
    add('Started', when(run.started_at));
    add('Ended', when(run.ended_at));
    add('Inputs', (run.input_message_ids || []).map((id) => h('div', {}, h('code', {}, id))));
    if (run.assistant_message_id && run.state === 'completed') add('Answer', h('code', {}, run.assistant_message_id));
    if (run.absorbed_into_run_id) add('Answered by', h('a', { href: runHref(run.absorbed_into_run_id) }, run.absorbed_into_run_id), ' (this run’s inputs were absorbed into it)');
    if (run.taken_by) add('Taken by', h('a', { href: runHref(run.taken_by) }, run.taken_by), ' (its inputs were taken at a step boundary)');
    put(facts, dl, run.error ? h('div', { class: 'notice error', role: 'alert', id: 'run-error' }, h('strong', {}, 'Error: '), run.error) : null);
  }

  function drawActions() {
    if (!OPEN.has(run.state)) { put(actions, cancelNote); return; }
    if (!confirming) {
      put(actions, h('p', {}, h('button', { type: 'button', id: 'cancel', class: 'danger', onclick: () => { confirming = true; drawActions(); actions.querySelector('#cancel-yes').focus(); } }, 'Cancel run…')));
      return;
    }
    put(actions, h('div', { class: 'notice warn', role: 'group', 'aria-labelledby': 'cancel-q' },
      h('p', { id: 'cancel-q', class: 'first' }, run.state === 'waiting'
        ? 'Cancel this waiting run? The calls it waits on are not run; it ends interrupted (canceled), and its inputs leave the conversation.'
        : run.state === 'active'
        ? 'Cancel this active run? It stops at once, ends interrupted (canceled), and its inputs leave the conversation.'
        : 'Cancel this queued run? It ends interrupted (canceled) without running, and its inputs leave the conversation.'),
      h('button', {
        type: 'button', id: 'cancel-yes', class: 'danger',
        onclick: async (e) => {
          e.target.disabled = true;
          try {
            run = await api('/v1/runs/' + encodeURIComponent(runID) + '/cancel', { method: 'POST' });
            confirming = false;
            cancelNote = notice('ok', 'Canceled: the run ended ' + run.state + (run.terminal_reason ? ' (' + run.terminal_reason + ')' : '') + '.');
            drawAll();
          } catch (err) {
            if (err.status === 401) return;
            confirming = false;
            run = await api('/v1/runs/' + encodeURIComponent(runID)).catch(() => run);
            cancelNote = notice('error', err.code === 'not_queued' ? 'Not canceled: the run already ended (' + run.state + ').' : 'Not canceled: ' + describe(err));
            drawAll();
            if (OPEN.has(run.state)) actions.prepend(cancelNote);
          }
        },
      }, 'Yes, cancel the run'), ' ',
      h('button', { type: 'button', onclick: () => { confirming = false; drawActions(); actions.querySelector('#cancel').focus(); } }, 'Keep it')));
  }

  function drawEvents() {
    const shown = events.filter((e) => e.type !== 'delta');
    const deltas = events.length - shown.length;
    put(eventsBox,
      streamErr ? notice('error', 'Could not read the events: ' + describe(streamErr)) : null,
      shown.length === 0 ? h('p', { class: 'muted' }, 'No events yet.') : h('table', { class: 'events' },
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, '#'), h('th', { scope: 'col' }, 'Time'), h('th', { scope: 'col' }, 'Event'), h('th', { scope: 'col' }, 'Details'))),
        h('tbody', {}, shown.map((e) => h('tr', { 'data-event': e.type },
          h('td', {}, String(e.seq)), h('td', {}, clock(Date.parse(e.time), true)), h('td', {}, e.type),
          h('td', { class: 'mono' }, Object.entries(e.data || {}).filter(([, v]) => v !== '').map(([k, v]) => h('div', {}, k + ': ', linkIfRun(k, v)))))))),
      deltas ? h('p', { class: 'muted' }, deltas + ' delta events (the answer as it streamed) not listed.') : null,
      h('p', { class: 'help' }, 'Events are kept in memory by the server that saw them: after a restart a settled run shows only its end.'));
  }

  function drawTranscript() {
    const callKeys = new Map(); // call_id -> idempotency key, from events
    const callErrors = new Map();
    for (const e of events) {
      if (e.type === 'tool_call') callKeys.set(e.data.call_id, e.data.idempotency_key);
      if (e.type === 'tool_result' && e.data.error) callErrors.set(e.data.call_id, e.data.error);
    }
    const keyOf = (call, step, index) => callKeys.get(call.id) || (step !== undefined ? run.id + '/step' + step + '/' + index : '');
    const streaming = events.filter((e) => e.type === 'delta');
    const out = [];
    if (steps && steps.length) {
      let cur = -1;
      let box = null;
      for (const s of steps) {
        if (s.model_step !== cur) {
          cur = s.model_step;
          box = h('section', { class: 'step', 'aria-label': 'Model step ' + cur }, h('h3', {}, 'Step ' + cur));
          out.push(box);
        }
        if (s.kind === 'take') {
          box.append(h('div', { class: 'msg', 'data-step-kind': 'take' }, h('div', { class: 'who' }, 'Inputs taken at this boundary'),
            (s.taken || []).map((t) => h('div', {}, 'from run ', h('a', { href: runHref(t.run_id) }, t.run_id), ': ', (t.input_message_ids || []).map((id) => h('code', {}, id + ' '))))));
        } else if (s.kind === 'ask' && s.ask) {
          box.append(askView(s));
        } else if (s.kind === 'answer' && s.answer) {
          box.append(answerView(s));
        } else if (s.message) {
          box.append(messageView(s.message, (c, i) => keyOf(c, s.model_step, i), callErrors, s.attempt));
        }
      }
    } else if (messages) {
      const mine = messages.filter((m) => m.run_id === run.id || absorbedInputs.has(m.id));
      for (const m of mine) out.push(messageView(m, (c) => keyOf(c), callErrors));
      if (mine.length === 0) out.push(h('p', { class: 'muted' }, run.state === 'superseded' && run.absorbed_into_run_id
        ? 'This run’s inputs were answered by run ' + run.absorbed_into_run_id + '; its transcript holds them.'
        : 'This run added nothing to the conversation (' + (run.terminal_reason || run.state) + ').'));
    }
    if (state.missing.has('steps')) {
      out.unshift(h('p', { class: 'help' }, 'This server keeps no step records (GET /v1/runs/{id}/steps answered 404): the transcript is the settled conversation, shown once the run ends; until then follow the events.'));
    }
    if (OPEN.has(run.state)) {
      const last = streaming.length ? streaming[streaming.length - 1].data.step : null;
      const text = streaming.filter((e) => e.data.step === last).map((e) => e.data.text).join('');
      if (text) out.push(h('div', { class: 'msg' }, h('div', { class: 'who' }, 'assistant, streaming (step ' + last + ')'), h('pre', {}, text)));
      const taken = events.filter((e) => e.type === 'input_taken');
      if (taken.length && !(steps && steps.length)) {
        out.push(h('div', { class: 'msg' }, h('div', { class: 'who' }, 'Inputs taken so far (answered by this run if it completes)'),
          taken.map((e) => h('div', {}, h('code', {}, e.data.input_message_id), ' from run ', h('a', { href: runHref(e.data.from_run_id) }, e.data.from_run_id)))));
      }
      if (!out.length || (out.length === 1 && state.missing.has('steps'))) out.push(h('p', { class: 'muted' }, run.state === 'queued' ? 'Queued: nothing ran yet.' : 'Running…'));
    }
    put(transcript, ...out);
  }

  let absorbedInputs = new Set();
  async function readTranscript() {
    if (!state.missing.has('steps')) {
      try {
        steps = (await pages('/v1/runs/' + encodeURIComponent(runID) + '/steps', 'steps', { signal: page.signal })).items;
      } catch (e) {
        if (page.signal.aborted || e.status === 401) return;
        if (e.status === 404 || e.status === 501 || e.status === 405) state.missing.add('steps');
      }
    }
    if ((!steps || !steps.length) && !OPEN.has(run.state)) {
      try {
        const [msgs, runs] = await Promise.all([
          pages('/v1/threads/' + encodeURIComponent(run.thread_id) + '/messages', 'messages', { signal: page.signal, max: 20000 }),
          pages('/v1/threads/' + encodeURIComponent(run.thread_id) + '/runs', 'runs', { signal: page.signal, max: 5000 }),
        ]);
        messages = msgs.items;
        absorbedInputs = new Set(runs.items.filter((r) => r.absorbed_into_run_id === run.id).flatMap((r) => r.input_message_ids || []));
      } catch (e) {
        if (page.signal.aborted || e.status === 401) return;
        put(transcript, notice('error', 'Could not read the conversation: ' + describe(e)));
        return;
      }
    }
    drawTranscript();
  }

  function drawAll() { drawFacts(); drawActions(); approvals.update(run); drawEvents(); drawTranscript(); }
  drawAll();
  readTranscript();

  let pending = false;
  const reread = () => {
    if (pending) return;
    pending = true;
    page.later(150, async () => {
      pending = false;
      try {
        const was = run.state;
        run = await api('/v1/runs/' + encodeURIComponent(runID), { signal: page.signal });
        if (!confirming) drawActions();
        drawFacts();
        approvals.update(run);
        if (was !== run.state || OPEN.has(run.state)) readTranscript();
      } catch { /* the next event or poll tries again */ }
    });
  };
  streamRunEvents(request, runID, {
    signal: page.signal,
    onEvent: (ev) => {
      if (!events.some((x) => sameEvent(x, ev))) events.push(ev);
      drawEvents();
      if (ev.type !== 'delta') reread(); else drawTranscript();
    },
  }).catch((e) => { if (!page.signal.aborted) { streamErr = e; drawEvents(); } });
  // A queued run's state changes with no event of its own (it is absorbed
  // or canceled elsewhere): read it now and then.
  page.every(3000, () => { if (OPEN.has(run.state)) reread(); });
  // Deadlines are shown relative to now.
  page.every(15000, () => approvals.tick());
}

function linkIfRun(key, v) {
  return /run_id$/.test(key) ? h('a', { href: runHref(v) }, v) : v;
}

// askView shows an ask step: a tool call the tool policy asked a person
// about.
function askView(s) {
  const a = s.ask;
  return h('div', { class: 'msg ask', 'data-step-kind': 'ask', 'data-ask-call': a.call_id },
    h('div', { class: 'who' }, 'Asked for approval · call ', h('code', {}, a.call_id)),
    h('div', {}, h('code', {}, a.tool), a.server ? [' on server ', h('code', {}, a.server)] : '', ': ', a.prompt,
      a.approvals > 1 ? ' (needs ' + a.approvals + ' approvals)' : ''),
    h('pre', {}, prettyArguments(a.arguments)));
}

// answerView shows an answer step: a person's answer to an asked call.
function answerView(s) {
  const a = s.answer;
  const what = {
    approve: 'Approved: the call runs as the model asked.',
    edit: 'Edited: the call runs with these arguments instead.',
    reject: 'Rejected: the call is not run; the model reads this as its result.',
    respond: 'Answered in the tool’s place: the call is not run; the model reads this as its result.',
  }[a.action] || a.action;
  return h('div', { class: 'msg answer', 'data-step-kind': 'answer', 'data-answer-call': a.call_id, 'data-action': a.action },
    h('div', { class: 'who' }, 'Answer · call ', h('code', {}, a.call_id), a.answered_at ? ' · ' + clock(Date.parse(a.answered_at), true) : ''),
    h('div', {}, what),
    a.arguments !== undefined ? h('pre', {}, prettyArguments(a.arguments)) : null,
    a.message ? h('pre', {}, a.message) : null,
    a.key ? h('div', { class: 'help' }, 'Idempotency key: ', h('code', {}, a.key)) : null);
}

function messageView(m, keyOf, callErrors, attempt) {
  const who = m.role === 'user' ? 'input' : m.role === 'tool' ? 'tool result' : m.role;
  return h('div', { class: 'msg', 'data-message': m.id, 'data-role': m.role },
    h('div', { class: 'who' }, who, ' ', h('code', { class: 'muted' }, m.id), attempt > 1 ? ' · attempt ' + attempt : '', m.tool_call_id ? [' · for call ', h('code', {}, m.tool_call_id)] : ''),
    m.content ? h('pre', {}, m.content) : null,
    m.tool_call_id && callErrors.has(m.tool_call_id) ? notice('error', 'The tool failed: ' + callErrors.get(m.tool_call_id)) : null,
    (m.tool_calls || []).map((c, i) => h('div', { class: 'call', 'data-call': c.id },
      h('div', {}, h('strong', {}, 'Tool call '), h('code', {}, c.name), ' · call ', h('code', {}, c.id)),
      h('div', { class: 'help' }, 'Idempotency key: ', h('code', {}, keyOf(c, i) || 'not kept')),
      c.arguments ? h('pre', {}, c.arguments) : null)));
}

// ---- Start. ----

document.getElementById('forget').addEventListener('click', () => {
  setToken('');
  showTokenForm('');
});
window.addEventListener('hashchange', () => { if (!document.getElementById('token-form') || state.token) route(); });

(async () => {
  document.getElementById('forget').hidden = !state.token;
  if (await checkAccess()) route();
  else showTokenForm(state.token ? 'The server refused the token this tab had (401 unauthorized). Give the current one.' : '');
})();
