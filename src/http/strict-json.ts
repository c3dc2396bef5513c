import type { FastifyRequest } from 'fastify';

/** A body the partner API refuses before validation; the error handler maps `code` to a problem. */
class StrictContentError extends Error {
  override readonly name = 'StrictContentError';
  constructor(
    readonly code: 'PAS_ERR_CHARSET' | 'PAS_ERR_CONTENT_ENCODING' | 'PAS_ERR_DUPLICATE_MEMBER',
    readonly statusCode: 400 | 415,
  ) {
    super(code);
  }
}

/** The `charset` parameter of a Content-Type, lower-cased and unquoted; undefined when there is none. */
export function charsetOf(contentType: string): string | undefined {
  for (const parameter of contentType.split(';').slice(1)) {
    const at = parameter.indexOf('=');
    if (at < 0 || parameter.slice(0, at).trim().toLowerCase() !== 'charset') continue;
    return parameter
      .slice(at + 1)
      .trim()
      .replace(/^"(.*)"$/, '$1')
      .toLowerCase();
  }
  return undefined;
}

/**
 * Whether an object of a JSON text has a member name twice (`{"agentId": a, "agentId": b}`).
 * JSON.parse keeps the last one; a gateway or firewall that reads the first would see another
 * request than the one acted on. Runs on text JSON.parse accepted, so it only tracks strings and
 * nesting; names are compared decoded (`"a"` and `"\u0061"` are the same name).
 *
 * npm has no well-kept parser that reports duplicates without building a whole syntax tree
 * (secure-json-parse, Fastify's own, has no such option; json-dup-key-validator is unmaintained),
 * so this small scanner does it (test/unit/strict-json.test.ts).
 */
export function hasDuplicateMember(text: string): boolean {
  // One entry per open container: the member names of an object, or null for an array.
  const open: Array<Set<string> | null> = [];
  let expectName = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      const start = i;
      let escaped = false;
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c /* \ */) {
          escaped = true;
          i++;
        } else if (d === 0x22) break;
      }
      const names = open.at(-1);
      if (expectName && names) {
        const raw = text.slice(start, i + 1);
        const name = escaped ? (JSON.parse(raw) as string) : raw.slice(1, -1);
        if (names.has(name)) return true;
        names.add(name);
        expectName = false;
      }
    } else if (c === 0x7b /* { */) {
      open.push(new Set());
      expectName = true;
    } else if (c === 0x5b /* [ */) {
      open.push(null);
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      open.pop();
    } else if (c === 0x2c /* , */) {
      expectName = open.at(-1) != null;
    }
  }
  return false;
}

type JsonParser = (request: FastifyRequest, body: string, done: (error: Error | null, value?: unknown) => void) => void;

/**
 * The partner API's only body parser, for `application/json`: UTF-8 only (no charset, or
 * charset=utf-8, in any case), no Content-Encoding at all (415), then Fastify's own JSON parser
 * (prototype-poisoning protection, 400 for malformed or empty JSON), then no member name twice in
 * one object (400).
 */
export function strictJsonParser(defaultParser: JsonParser): JsonParser {
  return (request, body, done) => {
    if (request.headers['content-encoding'] !== undefined) {
      done(new StrictContentError('PAS_ERR_CONTENT_ENCODING', 415));
      return;
    }
    const charset = charsetOf(request.headers['content-type'] ?? '');
    if (charset !== undefined && charset !== 'utf-8') {
      done(new StrictContentError('PAS_ERR_CHARSET', 415));
      return;
    }
    defaultParser(request, body, (error, value) => {
      if (error) done(error);
      else if (hasDuplicateMember(body)) done(new StrictContentError('PAS_ERR_DUPLICATE_MEMBER', 400));
      else done(null, value);
    });
  };
}
