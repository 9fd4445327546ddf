// Server-Sent Events read with fetch(). EventSource cannot send the
// Authorization header the API asks for, so the stream is read and parsed
// here (the format of the HTML standard's "server-sent events": lines of
// "field: value", an event ends at a blank line, lines starting with ":"
// are comments such as the server's keep-alive).

// parseSSE feeds text chunks and calls onEvent({id, event, data}) for every
// complete event. It returns a function taking the next chunk.
export function parseSSE(onEvent) {
  let buf = '';
  let ev = { id: '', event: '', data: [] };
  return (chunk) => {
    buf += chunk;
    for (;;) {
      const m = /\r\n|\r|\n/.exec(buf);
      if (!m) return;
      // A lone "\r" at the end of a chunk may be the first half of "\r\n".
      if (m[0] === '\r' && m.index === buf.length - 1) return;
      const line = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      if (line === '') {
        if (ev.data.length) onEvent({ id: ev.id, event: ev.event || 'message', data: ev.data.join('\n') });
        ev = { id: ev.id, event: '', data: [] };
        continue;
      }
      if (line.startsWith(':')) continue;
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      let value = i < 0 ? '' : line.slice(i + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'data') ev.data.push(value);
      else if (field === 'event') ev.event = value;
      else if (field === 'id') ev.id = value;
    }
  };
}

// streamRunEvents follows GET /v1/runs/{id}/events until the run's stream
// ends (after its terminal or absorbed event) or signal aborts. It calls
// onEvent with each event's JSON, resumes with Last-Event-ID after a broken
// connection, and throws what the server answered when it refuses (401,
// 404, ...): request(path, init) is the console's authenticated fetch.
export async function streamRunEvents(request, runID, { signal, onEvent, onState }) {
  let last = 0;
  let failures = 0;
  for (;;) {
    const headers = { Accept: 'text/event-stream' };
    if (last > 0) headers['Last-Event-ID'] = String(last);
    let res;
    try {
      res = await request('/v1/runs/' + encodeURIComponent(runID) + '/events', { headers, signal });
    } catch (e) {
      if (signal.aborted) return;
      if (e && e.status) throw e; // the server answered with a problem
      failures++;
      onState && onState('reconnecting');
      await sleep(Math.min(1000 * failures, 10000), signal);
      continue;
    }
    onState && onState('live');
    let ended = false;
    const feed = parseSSE((ev) => {
      let data;
      try { data = JSON.parse(ev.data); } catch { return; }
      const seq = Number(ev.id);
      if (Number.isFinite(seq) && seq > last) last = seq;
      if (data.type === 'terminal' || data.type === 'absorbed') ended = true;
      onEvent(data);
    });
    try {
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        feed(value);
        failures = 0;
      }
    } catch (e) {
      if (signal.aborted) return;
    }
    if (ended || signal.aborted) {
      onState && onState('ended');
      return;
    }
    // The connection closed before the run ended: resume after the last
    // event seen.
    failures++;
    onState && onState('reconnecting');
    await sleep(Math.min(1000 * failures, 10000), signal);
  }
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
}
