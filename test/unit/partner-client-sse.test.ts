import { describe, expect, it } from 'vitest';
import { SseParser } from '../../clients/typescript/src/sse.js';

// The typed client's Server-Sent Events parser (clients/typescript/src/sse.ts); the listener over
// it, cut mid-stream, is in test/integration/partner-client.process.test.ts.
function parseAll(chunks: string[], lastEventId?: string) {
  const parser = new SseParser(lastEventId);
  return { messages: chunks.flatMap((chunk) => parser.push(chunk)), parser };
}

describe('the SSE parser', () => {
  it('joins multi-line data with newlines and takes id and event', () => {
    const { messages, parser } = parseAll(['id: 7\nevent: agent.disabled\ndata: {"a":\ndata:1}\n\n']);
    expect(messages).toEqual([{ id: '7', type: 'agent.disabled', data: '{"a":\n1}' }]);
    expect(parser.lastEventId).toBe('7');
  });

  it('skips comments (heartbeats), dispatches nothing without data, and keeps the id across messages', () => {
    const { messages, parser } = parseAll([': heartbeat\n\nid: 3\n\n: again\ndata: x\n\nevent: e\ndata: y\n\n'], '1');
    expect(messages).toEqual([
      { id: '3', type: 'message', data: 'x' },
      { id: '3', type: 'e', data: 'y' },
    ]);
    expect(parser.lastEventId).toBe('3');
  });

  it('CRLF, CR and LF line ends alike, a CRLF split between chunks counted once, a BOM dropped', () => {
    const crlf = parseAll(['\uFEFFid: 1\r\ndata: a\r', '\n\r', '\nid: 2\rdata: b\r\r']).messages;
    expect(crlf).toEqual([
      { id: '1', type: 'message', data: 'a' },
      { id: '2', type: 'message', data: 'b' },
    ]);
  });

  it('a message split anywhere, one character a chunk, is the same message', () => {
    const text = 'id: 42\nevent: partner-agent-status.agent.enabled\ndata: {"id":"x"}\ndata\n\n';
    const whole = parseAll([text]).messages;
    expect(parseAll([...text]).messages).toEqual(whole);
    expect(whole).toEqual([{ id: '42', type: 'partner-agent-status.agent.enabled', data: '{"id":"x"}\n' }]);
  });

  it('an unfinished message is not dispatched; retry: is kept; an id with NUL is ignored', () => {
    const { messages, parser } = parseAll(['retry: 1500\nid: 5\n\nid: bad\0id\ndata: half']);
    expect(messages).toEqual([]);
    expect(parser.retryMs).toBe(1500);
    expect(parser.lastEventId).toBe('5');
  });
});
