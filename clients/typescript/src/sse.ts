/**
 * A parser of the Server-Sent Events format (the WHATWG HTML standard's "event stream
 * interpretation"), fed text as it arrives: lines end with CRLF, LF or CR (a CR at the end of one
 * chunk and an LF at the start of the next are one line end), a line starting with `:` is a comment,
 * `data:` lines join with "\n", a blank line dispatches the message (none when it had no data), and
 * `id:` (without a NUL) sets the last event id, which holds across messages.
 */
export interface SseMessage {
  /** The last event id as of this message (what `Last-Event-ID` should carry on a reconnect). */
  id: string;
  /** The `event:` field; "message" when none was sent. */
  type: string;
  data: string;
}

export class SseParser {
  private buffer = '';
  private started = false;
  /** The previous chunk ended with CR: an LF first in the next one belongs to that line end. */
  private afterCr = false;
  private data: string[] = [];
  private type = '';
  lastEventId: string;
  /** The stream's last `retry:` in milliseconds, if it sent one. */
  retryMs: number | undefined;

  constructor(lastEventId = '') {
    this.lastEventId = lastEventId;
  }

  /** Takes the next piece of the stream's text; answers the messages it completed, in order. */
  push(chunk: string): SseMessage[] {
    let text = chunk;
    if (!this.started && text.length > 0) {
      this.started = true;
      if (text.startsWith('\uFEFF')) text = text.slice(1);
    }
    if (this.afterCr && text.startsWith('\n')) text = text.slice(1);
    this.afterCr = false;
    this.buffer += text;
    const messages: SseMessage[] = [];
    for (;;) {
      const end = this.buffer.search(/[\r\n]/);
      if (end < 0) break;
      const line = this.buffer.slice(0, end);
      let next = end + 1;
      if (this.buffer[end] === '\r') {
        if (end + 1 === this.buffer.length) this.afterCr = true;
        else if (this.buffer[end + 1] === '\n') next += 1;
      }
      this.buffer = this.buffer.slice(next);
      const message = this.line(line);
      if (message) messages.push(message);
    }
    return messages;
  }

  private line(line: string): SseMessage | undefined {
    if (line === '') return this.dispatch();
    if (line.startsWith(':')) return undefined;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.type = value;
    else if (field === 'id' && !value.includes('\0')) this.lastEventId = value;
    else if (field === 'retry' && /^\d+$/.test(value)) this.retryMs = Number(value);
    return undefined;
  }

  private dispatch(): SseMessage | undefined {
    const data = this.data;
    const type = this.type;
    this.data = [];
    this.type = '';
    if (data.length === 0) return undefined;
    return { id: this.lastEventId, type: type || 'message', data: data.join('\n') };
  }
}
