// The array parameters of the hot statements (src/stores/array-params.ts): what PostgreSQL reads from
// the literal is exactly the list given, in order, whatever the text holds.
import { randomUUID } from 'node:crypto';
import { type DatabasePool, sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { textArray, uuidArray } from '../../src/stores/array-params.js';
import { createDatabasePool } from '../../src/stores/postgres.js';
import { databaseUrl } from '../support/database-url.js';

let pool: DatabasePool;

beforeAll(async () => {
  pool = await createDatabasePool({ url: databaseUrl(), maxPoolSize: 1, statementTimeoutMs: 5_000 });
});

afterAll(async () => {
  await pool?.end();
});

const listRow = z.object({ list: z.array(z.string()), n: z.number() });

describe('array parameters', () => {
  it('reads back every text exactly, in order: quotes, backslashes, commas, braces, spaces, NULL, empty, unicode', async () => {
    const values = ['us-east-1:a', 'say "hi"', 'back\\slash', 'a,b', '{x}', ' padded ', 'NULL', '', 'ünï 字', '\\"', 'us-east-1:a'];
    const row = await pool.one(
      sql.type(listRow)`SELECT coalesce(array_agg(v ORDER BY n), '{}') AS list, count(*)::int AS n
                        FROM unnest(${textArray(values)}) WITH ORDINALITY AS t(v, n)`,
    );
    expect(row).toEqual({ list: values, n: values.length });
  });

  it('reads back uuids in order, and an empty list as no rows', async () => {
    const ids = Array.from({ length: 250 }, () => randomUUID());
    const row = await pool.one(
      sql.type(listRow)`SELECT coalesce(array_agg(v::text ORDER BY n), '{}') AS list, count(*)::int AS n
                        FROM unnest(${uuidArray(ids)}) WITH ORDINALITY AS t(v, n)`,
    );
    expect(row).toEqual({ list: ids, n: ids.length });
    const empty = await pool.one(sql.type(listRow)`SELECT '{}'::text[] AS list, count(*)::int AS n FROM unnest(${uuidArray([])})`);
    expect(empty.n).toBe(0);
  });

  it('refuses a value that is not a uuid before anything is sent, so no text can add elements to the list', () => {
    const id = randomUUID();
    for (const bad of [`${id},${randomUUID()}`, `${id}}`, 'not-a-uuid', '', `{${id}}`]) {
      expect(() => uuidArray([id, bad])).toThrow(TypeError);
    }
    expect(() => uuidArray([id.toUpperCase()])).not.toThrow(); // PostgreSQL reads either case
  });
});
