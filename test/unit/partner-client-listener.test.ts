import { describe, expect, it } from 'vitest';
import { PartnerApiError, PartnerEventError } from '../../clients/typescript/src/errors.js';
import { listenToEvents } from '../../clients/typescript/src/events.js';
import { createTransport, defaultRetry } from '../../clients/typescript/src/transport.js';
import { waitFor } from '../support/wait.js';

// The typed client's live listener (clients/typescript/src/events.ts) over a scripted fetch: what it
// sends on a reconnect, how long it waits, what ends it. Against the built service, cut and
// black-holed mid-stream: test/integration/partner-client.process.test.ts.
type Script = (signal: AbortSignal) => Response;

function problem(status: number, type: string, headers: Record<string, string> = {}): Script {
  const body = JSON.stringify({ type: `urn:partner-agent-status:problem:${type}`, title: type, status });
  return () => new Response(body, { status, headers: { 'content-type': 'application/problem+json', ...headers } });
}

/** A stream answer whose text the test pushes; an abort of the request errors it, as fetch does. */
function stream(opening = '', end = false) {
  const encoder = new TextEncoder();
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
  });
  const script: Script = (signal) => {
    signal.addEventListener('abort', () => controller.error(signal.reason), { once: true });
    if (opening) controller.enqueue(encoder.encode(opening));
    if (end) controller.close();
    return new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream' } });
  };
  return { script, push: (text: string) => controller.enqueue(encoder.encode(text)) };
}

function listener(scripts: Script[], options: Parameters<typeof listenToEvents>[1]) {
  const requests: Array<{ lastEventId: string | null; accept: string | null; signal: AbortSignal }> = [];
  const waits: number[] = [];
  const transport = createTransport({
    baseUrl: 'http://partner.invalid',
    apiKey: 'partner-test-key-made-here',
    apiVersion: '2026-12-01',
    retry: { ...defaultRetry, maxAttempts: 1, attemptTimeoutMs: 20 },
    onWarning: () => undefined,
    sleep: async () => undefined,
    fetch: async (_input, init) => {
      const headers = new Headers(init?.headers);
      const signal = init?.signal as AbortSignal;
      requests.push({ lastEventId: headers.get('last-event-id'), accept: headers.get('accept'), signal });
      const next = scripts.shift();
      if (!next) throw new Error('no more answers scripted');
      return next(signal);
    },
  });
  const events = listenToEvents(
    {
      open: transport.open,
      path: () => '/partner/events',
      sleep: async (ms) => {
        // A wait that rejects ends the listener, so that a reconnect loop cannot spin for ever here.
        if (waits.push(ms) > 10) throw new Error('too many reconnects');
      },
      random: () => 0.5,
    },
    options,
  );
  return { events, requests, waits };
}

const event = (id: string) => `id: ${id}\nevent: partner-agent-status.agent.disabled\ndata: {"id":"${id}"}\n\n`;

describe('the live listener', () => {
  it('waits a 429 too-many-streams out (Retry-After plus jitter), resumes an ended stream with Last-Event-ID', async () => {
    const ended = stream(event('c1'), true);
    const open = stream(': heartbeat\n\n');
    const stop = new AbortController();
    const run = listener([problem(429, 'too-many-streams', { 'retry-after': '3' }), ended.script, open.script], {
      after: 'c0',
      signal: stop.signal,
    });
    expect((await run.events.next()).value).toMatchObject({ id: 'c1', type: 'partner-agent-status.agent.disabled', event: { id: 'c1' } });
    const second = run.events.next();
    await waitFor(() => run.requests.length === 3, { timeoutMs: 2_000, intervalMs: 5, failure: 'no reconnect' });
    // Ten times the attempt timeout (20 ms) after its headers, the stream is still open: that timeout
    // bounds only the wait for headers.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(run.requests[2]!.signal.aborted).toBe(false);
    open.push(event('c2'));
    expect((await second).value).toMatchObject({ id: 'c2' });
    expect(run.requests.map((request) => request.lastEventId)).toEqual(['c0', 'c0', 'c1']);
    expect(run.requests.every((request) => request.accept === 'text/event-stream')).toBe(true);
    // Retry-After (3 s) plus half the first backoff (500 ms); then half the first backoff again.
    expect(run.waits).toEqual([3_250, 250]);
    stop.abort();
    expect(await run.events.next()).toEqual({ done: true, value: undefined });
    expect(run.requests[2]!.signal.aborted).toBe(true);
  });

  it('a stream that goes silent past idleTimeoutMs is reconnected; backoff doubles up to its cap', async () => {
    const silent = stream();
    const run = listener([problem(503, 'unavailable'), problem(503, 'unavailable'), silent.script, stream(event('c5')).script], {
      idleTimeoutMs: 50,
      reconnect: { baseDelayMs: 100, maxDelayMs: 150 },
    });
    expect((await run.events.next()).value).toMatchObject({ id: 'c5' });
    expect(run.waits).toEqual([50, 75, 50]);
    expect(run.requests.map((request) => request.lastEventId)).toEqual([null, null, null, null]);
    await run.events.return(undefined);
  });

  it('a 410 events-gone (or any 4xx but 429) ends it with the typed error', async () => {
    const run = listener([problem(410, 'events-gone')], { after: 'old' });
    const failure = await run.events.next().catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(PartnerApiError);
    expect(failure).toMatchObject({ status: 410, type: 'urn:partner-agent-status:problem:events-gone' });
    expect(run.waits).toEqual([]);
  });

  it('an event whose data is not JSON ends it with PartnerEventError naming the event, without a reconnect', async () => {
    const bad = 'id: c2\nevent: partner-agent-status.agent.disabled\ndata: {"id":\n\n';
    const run = listener([stream(event('c1') + bad).script], { after: 'c0' });
    expect((await run.events.next()).value).toMatchObject({ id: 'c1' });
    const failure = await run.events.next().catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(PartnerEventError);
    expect(failure).toMatchObject({ eventId: 'c2', previousEventId: 'c1' });
    expect(String((failure as Error).message)).not.toContain('partner-test-key-made-here');
    expect(run.waits).toEqual([]);
    expect(run.requests).toHaveLength(1);
  });

  it("waits at least the stream's retry: before a later reconnect, and the backoff when that is longer", async () => {
    const run = listener([stream(`retry: 2000\n\n${event('c1')}`, true).script, problem(503, 'unavailable'), stream(event('c2')).script], {
      reconnect: { baseDelayMs: 10_000, maxDelayMs: 10_000 },
    });
    expect((await run.events.next()).value).toMatchObject({ id: 'c1' });
    expect((await run.events.next()).value).toMatchObject({ id: 'c2' });
    // The ended stream: half of 10 s (the backoff is longer); the 503: the same, the retry's 2 s being less.
    expect(run.waits).toEqual([5_000, 5_000]);
    await run.events.return(undefined);
    const short = listener([stream(`retry: 2000\n\n${event('c1')}`, true).script, stream(event('c2')).script], {});
    expect((await short.events.next()).value).toMatchObject({ id: 'c1' });
    expect((await short.events.next()).value).toMatchObject({ id: 'c2' });
    // Half of the 500 ms base is less than the stream's 2 s: the stream's retry wins.
    expect(short.waits).toEqual([2_000]);
    await short.events.return(undefined);
  });
});
