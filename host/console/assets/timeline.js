// The thread timeline: a pure model built from what the API says (runs,
// their events, their step records), and its drawing as SVG.

const SVGNS = 'http://www.w3.org/2000/svg';

const ms = (t) => (t ? Date.parse(t) : NaN);
const OPEN = new Set(['queued', 'active', 'waiting']);

// buildModel turns the API's records into rows (one per run, in seq order,
// then one per input this tab saw rejected), input marks and arrows.
//
//   runs:      run records (GET /v1/threads/{id}/runs)
//   events:    Map runID -> events (GET /v1/runs/{id}/events), maybe partial
//   steps:     Map runID -> step records (GET /v1/runs/{id}/steps), if any
//   rejected:  [{time, content, key}] inputs this tab submitted that the
//              policy rejected: the server writes nothing about them
//   now:       the current time in ms
export function buildModel(runs, events, steps, rejected, now) {
  const rows = [];
  const byID = new Map();
  // The inputs of runs absorbed into (or taken by) another run: that run's
  // record may list them too, but they are drawn where they arrived.
  const foreign = new Map(); // runID -> Set of input ids it answered for others
  for (const r of runs) {
    const to = r.absorbed_into_run_id || r.taken_by;
    if (!to) continue;
    if (!foreign.has(to)) foreign.set(to, new Set());
    for (const id of r.input_message_ids || []) foreign.get(to).add(id);
  }
  for (const r of runs) {
    const evs = events.get(r.id) || [];
    const admitted = evs.filter((e) => e.type === 'admitted');
    const others = foreign.get(r.id) || new Set();
    const inputs = (r.input_message_ids || []).filter((id) => !others.has(id)).map((id, i) => {
      const ev = admitted.find((e) => e.data && e.data.input_message_id === id);
      const time = ev ? ms(ev.time) : i === 0 ? ms(r.created_at) : NaN;
      return {
        id,
        runID: r.id,
        time: Number.isFinite(time) ? time : ms(r.created_at),
        decision: ev ? ev.data.decision : '',
        coalesced: i > 0,
      };
    });
    const row = {
      kind: 'run',
      run: r,
      id: r.id,
      seq: r.seq,
      state: r.state,
      reason: r.terminal_reason || '',
      created: ms(r.created_at),
      started: ms(r.started_at),
      ended: OPEN.has(r.state) ? NaN : ms(r.ended_at),
      inputs,
      waits: [],
    };
    row.waits = waitsOf(row, evs, steps.get(r.id));
    rows.push(row);
    byID.set(r.id, row);
  }
  for (const x of rejected) {
    rows.push({
      kind: 'rejected', id: 'rejected-' + x.time, seq: 0, state: 'rejected', reason: '', created: x.time,
      started: NaN, ended: NaN, content: x.content,
      inputs: [{ id: '', runID: '', time: x.time, decision: 'reject', coalesced: false }],
    });
  }

  // Takes: where a run took another run's inputs, from its durable step
  // records (take steps), its input_taken events and its taken_by field.
  const takes = new Map(); // fromRunID -> {toRunID, time, stepSeq, modelStep}
  const noteTake = (from, to, time, step) => {
    const cur = takes.get(from);
    if (!cur || (step && !cur.step)) takes.set(from, { to, time, step });
  };
  for (const [runID, list] of steps) {
    for (const s of list || []) {
      if (s.kind !== 'take') continue;
      for (const t of s.taken || []) noteTake(t.run_id, runID, ms(s.created_at), s);
    }
  }
  for (const [runID, evs] of events) {
    for (const e of evs || []) {
      if (e.type === 'input_taken' && e.data) noteTake(e.data.from_run_id, runID, ms(e.time), null);
    }
  }
  for (const r of runs) if (r.taken_by) noteTake(r.id, r.taken_by, NaN, null);

  const arrows = [];
  for (const row of rows) {
    if (row.kind !== 'run') continue;
    const r = row.run;
    const take = takes.get(r.id);
    let to = '';
    let kind = '';
    if (r.terminal_reason === 'absorbed' && r.absorbed_into_run_id) {
      to = r.absorbed_into_run_id;
      kind = 'absorbed';
    } else if (take && OPEN.has(r.state)) {
      to = take.to;
      kind = 'taken';
    }
    if (!to || !byID.has(to)) continue;
    const target = byID.get(to);
    let time = take && take.to === to ? take.time : NaN;
    if (!Number.isFinite(time)) time = kind === 'absorbed' && Number.isFinite(target.ended) ? target.ended : NaN;
    for (const inp of row.inputs) {
      arrows.push({ kind, fromRun: r.id, fromInput: inp.id, toRun: to, time, step: take && take.to === to ? take.step : null });
    }
  }

  let t0 = Infinity;
  let t1 = -Infinity;
  let open = false;
  for (const row of rows) {
    for (const t of [row.created, row.started, row.ended, ...row.inputs.map((i) => i.time)]) {
      if (Number.isFinite(t)) { t0 = Math.min(t0, t); t1 = Math.max(t1, t); }
    }
    if (OPEN.has(row.state)) open = true;
  }
  for (const a of arrows) if (Number.isFinite(a.time)) t1 = Math.max(t1, a.time);
  if (open) t1 = Math.max(t1, now);
  if (!Number.isFinite(t0)) { t0 = now - 1000; t1 = now; }
  if (t1 - t0 < 1000) t1 = t0 + 1000;
  return { rows, arrows, t0, t1, open, now };
}

// waitsOf answers the stretches [from, to] a run spent waiting for answers
// to tool calls (to NaN: it still waits). Its step records are durable and
// say it best: a stretch starts at the first ask of a model step and ends
// at the answer that decided the last of its calls. Without them, its
// waiting and resumed events (kept in memory by the server) say it.
function waitsOf(row, evs, steps) {
  const out = [];
  const asks = (steps || []).filter((s) => s.kind === 'ask' && s.ask);
  if (asks.length) {
    const answers = (steps || []).filter((s) => s.kind === 'answer' && s.answer);
    for (const m of new Set(asks.map((s) => s.model_step))) {
      const mine = asks.filter((s) => s.model_step === m);
      const calls = new Set(mine.map((s) => s.ask.call_id));
      const from = Math.min(...mine.map((s) => ms(s.created_at)));
      // A call is decided by its last answer (approvals counted by the
      // server): the wait ended when the last call's last answer came,
      // unless the run still waits on this step.
      const got = answers.filter((s) => calls.has(s.answer.call_id));
      const stillWaits = row.state === 'waiting' && m === Math.max(...asks.map((s) => s.model_step));
      const to = stillWaits || got.length === 0 ? NaN : Math.max(...got.map((s) => ms(s.created_at)));
      if (Number.isFinite(from)) out.push([from, to]);
    }
    return out;
  }
  let from = NaN;
  for (const e of evs) {
    if (e.type === 'waiting' && !Number.isFinite(from)) from = ms(e.time);
    else if ((e.type === 'resumed' || e.type === 'terminal') && Number.isFinite(from)) {
      out.push([from, ms(e.time)]);
      from = NaN;
    }
  }
  if (Number.isFinite(from)) out.push([from, NaN]);
  if (out.length === 0 && row.state === 'waiting') out.push([row.started, NaN]);
  return out;
}

const TICKS = [100, 200, 500, 1e3, 2e3, 5e3, 1e4, 15e3, 3e4, 6e4, 12e4, 3e5, 6e5, 9e5, 18e5, 36e5, 72e5, 216e5, 432e5, 864e5];

function pad(n, w = 2) { return String(n).padStart(w, '0'); }
export function clock(t, withMs) {
  const d = new Date(t);
  const s = pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
  return withMs ? s + '.' + pad(d.getMilliseconds(), 3) : s;
}

function el(tag, attrs, ...kids) {
  const n = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, String(v));
  }
  for (const k of kids) if (k != null) n.append(typeof k === 'string' ? document.createTextNode(k) : k);
  return n;
}

const LEFT = 190;
const RIGHT = 24;
const TOP = 30;
const ROW = 44;

function describeRun(row) {
  const r = row.run;
  const parts = ['Run ' + r.seq + ', ' + r.id + ': ' + r.state + (r.terminal_reason && r.terminal_reason !== r.state ? ' (' + r.terminal_reason + ')' : '')];
  for (const i of row.inputs) {
    parts.push('input ' + i.id + ' arrived ' + clock(i.time, true) + (i.decision ? ', decision ' + i.decision : '') + (i.coalesced ? ', coalesced' : ''));
  }
  if (Number.isFinite(row.started)) parts.push('started ' + clock(row.started, true));
  for (const [from, to] of row.waits) {
    parts.push(Number.isFinite(to) ? 'waited for approval from ' + clock(from, true) + ' to ' + clock(to, true)
      : 'waits for approval' + (Number.isFinite(from) ? ' since ' + clock(from, true) : ''));
  }
  if (Number.isFinite(row.ended)) parts.push('ended ' + clock(row.ended, true));
  if (r.absorbed_into_run_id) parts.push('answered by ' + r.absorbed_into_run_id);
  return parts.join('; ');
}

function decisionLabel(inp) {
  if (inp.coalesced) return (inp.decision || 'queue') + ' · coalesced';
  return inp.decision || 'decision not kept';
}

// render draws the model into a new <svg> width pixels wide. open(runID) is
// called when a run's bar is activated (click, Enter or Space).
export function render(model, width, open) {
  const { rows, arrows, t0, t1 } = model;
  width = Math.max(640, Math.floor(width));
  const height = TOP + rows.length * ROW + 16;
  const x = (t) => LEFT + ((t - t0) / (t1 - t0)) * (width - LEFT - RIGHT);
  const svg = el('svg', {
    xmlns: SVGNS, viewBox: `0 0 ${width} ${height}`, width, height, role: 'group',
    'aria-label': 'Timeline of the thread: inputs as they arrived, runs from start to end, arrows from absorbed inputs to the runs that answered them',
  });
  const defs = el('defs');
  // Time spent waiting for approval: stripes, so that it reads without
  // colour too.
  defs.append(el('pattern', { id: 'hatch-waiting', width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
    el('rect', { class: 'tl-hatch-bg', width: 6, height: 6 }),
    el('rect', { class: 'tl-hatch', width: 3, height: 6 })));
  for (const k of ['absorbed', 'taken']) {
    defs.append(el('marker', { id: 'head-' + k, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
      el('path', { d: 'M0,0 L10,5 L0,10 z', class: 'tl-head ' + k })));
  }
  svg.append(defs);

  // The axis and its grid.
  const span = t1 - t0;
  const step = TICKS.find((s) => span / s <= 8) || TICKS[TICKS.length - 1];
  const axis = el('g', { class: 'tl-axis', 'aria-hidden': 'true' });
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    axis.append(el('line', { class: 'tl-grid', x1: x(t), x2: x(t), y1: TOP - 6, y2: height - 8 }));
    axis.append(el('text', { x: x(t), y: TOP - 12, 'text-anchor': 'middle' }, clock(t, step < 1000)));
  }
  if (model.open) axis.append(el('line', { class: 'tl-now', x1: x(model.now), x2: x(model.now), y1: TOP - 6, y2: height - 8 }));
  svg.append(axis);

  const rowY = new Map();
  rows.forEach((row, i) => rowY.set(row.id, TOP + i * ROW));
  const barY = (id) => rowY.get(id) + 24;

  rows.forEach((row) => {
    const y = rowY.get(row.id);
    if (row.kind === 'rejected') {
      const g = el('g', { class: 'tl-rejected', 'data-rejected': '1' },
        el('title', {}, 'Input rejected by the policy (seen by this tab only; the server writes nothing): ' + row.content));
      g.append(el('text', { class: 'tl-label', x: 8, y: y + 20 }, 'rejected'));
      g.append(el('text', { class: 'tl-label sub', x: 8, y: y + 34 }, 'not stored'));
      const ix = x(row.inputs[0].time);
      g.append(el('path', { class: 'tl-input reject', d: `M${ix - 5},${y + 19} l10,10 m0,-10 l-10,10` }));
      g.append(el('text', { class: 'tl-decision', x: ix + 7, y: y + 13 }, 'reject'));
      svg.append(g);
      return;
    }
    const r = row.run;
    const g = el('g', {
      class: 'tl-run', tabindex: 0, role: 'link', 'aria-label': describeRun(row),
      'data-run': r.id, 'data-state': r.state, 'data-reason': r.terminal_reason || '',
      onclick: () => open(r.id),
      onkeydown: (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); open(r.id); } },
    }, el('title', {}, describeRun(row)));
    g.append(el('rect', { class: 'tl-hit', x: 2, y: y + 2, width: width - 4, height: ROW - 4, rx: 4 }));
    g.append(el('text', { class: 'tl-label', x: 8, y: y + 20 }, '#' + r.seq + ' ' + shortID(r.id)));
    g.append(el('text', { class: 'tl-label sub', x: 8, y: y + 34 }, r.state + (r.terminal_reason && r.terminal_reason !== r.state ? ' · ' + r.terminal_reason : '')));
    const created = Number.isFinite(row.created) ? row.created : t0;
    const end = Number.isFinite(row.ended) ? row.ended : model.now;
    const startBar = Number.isFinite(row.started) ? row.started : NaN;
    // Waiting: from admission to start (or to its end when it never started).
    const waitEnd = Number.isFinite(startBar) ? startBar : end;
    if (waitEnd > created) g.append(el('line', { class: 'tl-wait', x1: x(created), x2: x(waitEnd), y1: y + 24, y2: y + 24 }));
    if (Number.isFinite(startBar)) {
      const w = Math.max(3, x(end) - x(startBar));
      g.append(el('rect', { class: 'tl-bar ' + r.state, x: x(startBar), y: y + 18, width: w, height: 12, 'data-bar': r.id }));
      for (const [from, to] of row.waits) {
        const a = x(Number.isFinite(from) ? Math.max(from, startBar) : startBar);
        const b = x(Number.isFinite(to) ? to : end);
        g.append(el('rect', { class: 'tl-waitseg', x: a, y: y + 16, width: Math.max(4, b - a), height: 16, 'data-wait': Number.isFinite(to) ? 'ended' : 'open' }));
      }
    }
    for (const inp of row.inputs) {
      const ix = x(inp.time);
      g.append(el('path', {
        class: 'tl-input', d: `M${ix},${y + 18} l6,6 l-6,6 l-6,-6 z`,
        'data-input': inp.id, 'data-decision': inp.decision || '', 'data-coalesced': inp.coalesced ? '1' : '0',
      }));
      g.append(el('text', { class: 'tl-decision', x: ix + 8, y: y + 13 }, decisionLabel(inp)));
    }
    svg.append(g);
  });

  // Arrows from absorbed (or taken) inputs to the run, at the step that
  // took them when known, else at the end of the run that answered them.
  for (const a of arrows) {
    const from = rows.find((r) => r.id === a.fromRun);
    const inp = from.inputs.find((i) => i.id === a.fromInput) || from.inputs[0];
    const target = rows.find((r) => r.id === a.toRun);
    const tx = x(Number.isFinite(a.time) ? a.time : Number.isFinite(target.ended) ? target.ended : model.now);
    const ty = barY(a.toRun) + (rowY.get(a.toRun) < rowY.get(a.fromRun) ? 6 : -6);
    const fx = x(inp.time);
    const fy = barY(a.fromRun) + (rowY.get(a.toRun) < rowY.get(a.fromRun) ? -6 : 6);
    const my = (fy + ty) / 2;
    const title = (a.kind === 'absorbed' ? 'Input ' + inp.id + ' of run ' + a.fromRun + ' was absorbed into run ' + a.toRun + ', which answered it'
      : 'Input ' + inp.id + ' of run ' + a.fromRun + ' was taken by run ' + a.toRun + ' (answered by it only if that run completes)')
      + (a.step ? ' at step record ' + a.step.seq + ' (model step ' + a.step.model_step + ')' : '');
    const g = el('g', {
      class: 'tl-arrowg', 'data-arrow': '1', 'data-kind': a.kind, 'data-from-run': a.fromRun,
      'data-from-input': inp.id, 'data-to-run': a.toRun, 'data-step': a.step ? a.step.seq : '',
    }, el('title', {}, title));
    g.append(el('path', { class: 'tl-arrow ' + a.kind, d: `M${fx},${fy} C${fx},${my} ${tx},${my} ${tx},${ty}`, 'marker-end': `url(#head-${a.kind})` }));
    if (a.step) g.append(el('circle', { class: 'tl-step', cx: tx, cy: barY(a.toRun), r: 4 }));
    svg.append(g);
  }
  return svg;
}

export function shortID(id) {
  return id.length > 16 ? id.slice(0, 8) + '…' + id.slice(-6) : id;
}
