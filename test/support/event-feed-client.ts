/**
 * A partner's client of the events feed (docs/interfaces.md §17) for the tests: pages read to the
 * end, and a Server-Sent Events stream parsed as a client does (id:, event:, data:, comments),
 * each message stamped with when it arrived.
 */
export interface FeedMessage {
  id: string;
  event: string;
  data: string;
  at: number;
}

export interface FeedPageBody {
  events: Array<{ id: string; type: string; data: { agentId: string; networkId: string; changeId: number } }>;
  nextCursor: string;
  hasMore: boolean;
}

/** Every event after `after` (the oldest kept when undefined), page by page; the raw JSON text of each page too. */
export async function readAllPages(baseUrl: string, key: string, options: { after?: string; limit?: number; query?: string } = {}) {
  const events: FeedPageBody['events'] = [];
  const bodies: string[] = [];
  let after = options.after;
  for (let pages = 0; pages < 10_000; pages += 1) {
    const params = new URLSearchParams();
    if (after) params.set('after', after);
    if (options.limit) params.set('limit', String(options.limit));
    const url = `${baseUrl}/partner/events?${params}${options.query ? `&${options.query}` : ''}`;
    let response = await fetch(url, { headers: { 'x-api-key': key } });
    // Shed (a busy replica, Retry-After: 1): a partner's loop tries again.
    for (let tries = 0; response.status === 503 && tries < 5; tries += 1) {
      await response.arrayBuffer();
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      response = await fetch(url, { headers: { 'x-api-key': key } });
    }
    if (response.status !== 200) throw new Error(`page answered ${response.status}: ${await response.text()}`);
    const text = await response.text();
    bodies.push(text);
    const page = JSON.parse(text) as FeedPageBody;
    events.push(...page.events);
    after = page.nextCursor;
    if (!page.hasMore) return { events, bodies, cursor: after };
  }
  throw new Error('the feed never ended');
}

/** A stream opened now; `messages` fills as they arrive; `close()` cuts it as a client going away does. */
export async function openStream(baseUrl: string, key: string, options: { lastEventId?: string; after?: string; query?: string } = {}) {
  const controller = new AbortController();
  const headers: Record<string, string> = { 'x-api-key': key, accept: 'text/event-stream' };
  if (options.lastEventId) headers['last-event-id'] = options.lastEventId;
  const params = new URLSearchParams();
  if (options.after) params.set('after', options.after);
  const response = await fetch(`${baseUrl}/partner/events?${params}${options.query ? `&${options.query}` : ''}`, {
    headers,
    signal: controller.signal,
  });
  const messages: FeedMessage[] = [];
  const comments: number[] = [];
  let ended = false;
  const done = (async () => {
    if (response.status !== 200 || !response.body) return;
    const decoder = new TextDecoder();
    let buffer = '';
    try {
      for await (const chunk of response.body) {
        buffer += decoder.decode(chunk as Uint8Array, { stream: true });
        let cut = buffer.indexOf('\n\n');
        while (cut >= 0) {
          const frame = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          cut = buffer.indexOf('\n\n');
          if (frame.startsWith(':')) {
            comments.push(Date.now());
            continue;
          }
          const field = (name: string) =>
            frame
              .split('\n')
              .find((line) => line.startsWith(`${name}: `))
              ?.slice(name.length + 2) ?? '';
          messages.push({ id: field('id'), event: field('event'), data: field('data'), at: Date.now() });
        }
      }
    } catch {
      // cut by close(), or by the server
    } finally {
      ended = true;
    }
  })();
  return {
    response,
    messages,
    comments,
    get ended() {
      return ended;
    },
    /** Resolves when the server ended the stream (or it was cut). */
    done,
    close() {
      controller.abort();
      return done;
    },
  };
}

export type FeedStream = Awaited<ReturnType<typeof openStream>>;
