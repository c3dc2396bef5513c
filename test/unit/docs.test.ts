import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { changesNothing, type ProblemKind, problem, problemTypes } from '../../src/http/problems.js';

/**
 * Issue 37: the README, the partner guide and the code disagreed (error tables without 409
 * key-in-use, 412, 422 or 500 internal, "changed nothing" lists without 412, 417 and 422, an alert
 * list missing three rules, settings only in interfaces.md). These hold the documents to the code:
 * the error tables to the problem catalogue, the alert list to the rule file, the settings table
 * to every variable src/config.ts reads, and the README to an entrance's size.
 */
const root = fileURLToPath(new URL('../..', import.meta.url));
const read = (path: string) => readFileSync(`${root}/${path}`, 'utf8');
const readme = read('README.md');

/** The rows of the first Markdown table whose header row starts with `header`, as trimmed cells. */
function table(markdown: string, header: RegExp): string[][] {
  const lines = markdown.split('\n');
  const start = lines.findIndex((line) => header.test(line));
  if (start < 0) throw new Error(`no table with a header like ${header}`);
  const rows: string[][] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith('|')) break;
    rows.push(
      line
        .slice(1, -1)
        .split(' | ')
        .map((cell) => cell.trim()),
    );
  }
  return rows;
}

const kinds = Object.keys(problemTypes) as ProblemKind[];
const catalogue = kinds.map((kind) => ({ status: problemTypes[kind].status, type: problem(kind, '', '').type }));
const byType = (rows: Array<{ status: number; type: string }>) => [...rows].sort((a, b) => a.type.localeCompare(b.type));
const typeOf = (cell: string) => cell.replace(/`/g, '');
const unchangedStatuses = [...new Set(kinds.map((kind) => problemTypes[kind].status))]
  .filter((status) => kinds.filter((kind) => problemTypes[kind].status === status).every((kind) => changesNothing.has(kind)))
  .sort();

describe('the error tables are the problem catalogue (src/http/problems.ts)', () => {
  for (const [name, markdown, header] of [
    ['the partner guide', read('docs/partner-guide.md'), /^\| Status \| `type` \| When \| Changed \|/],
    ['the README', readme, /^\| status \| type \| changed \|/],
  ] as const) {
    it(`${name}: one row per problem type, with its status, and "nothing" changed exactly where the catalogue says so`, () => {
      const rows = table(markdown, header);
      const changedColumn = name === 'the README' ? 2 : 3;
      expect(byType(rows.map((row) => ({ status: Number(row[0]), type: typeOf(row[1]!) })))).toEqual(byType(catalogue));
      const nothing = rows.filter((row) => row[changedColumn]!.startsWith('nothing')).map((row) => typeOf(row[1]!));
      expect(nothing.sort()).toEqual(
        kinds
          .filter((kind) => changesNothing.has(kind))
          .map((kind) => problem(kind, '', '').type)
          .sort(),
      );
    });
  }

  it('every status that only ever changes nothing is in the "changed nothing" lists of the README, the partner guide, interfaces.md and the OpenAPI text', () => {
    // The sentences that say so: statuses listed in them, 409 aside (one 409 changes nothing, another does).
    const sentences = (text: string, says: RegExp) =>
      text
        .replace(/\s+/g, ' ')
        .split(/\.\s/)
        .filter((sentence) => says.test(sentence));
    const lists: Record<string, string[]> = {
      'README.md': sentences(readme, /changed nothing/),
      'docs/partner-guide.md': sentences(read('docs/partner-guide.md'), /nothing was changed\b(?! by this)/),
      'docs/interfaces.md': sentences(read('docs/interfaces.md'), /nothing has changed \(by that/),
      'src/http/routes/openapi.ts': sentences(read('src/http/routes/openapi.ts'), /none of these changed anything/),
    };
    const expected = unchangedStatuses.filter((status) => status !== 409);
    for (const [file, found] of Object.entries(lists)) {
      expect(found.length, file).toBeGreaterThan(0);
      const listed = new Set(found.flatMap((sentence) => sentence.match(/\b[45]\d\d\b/g) ?? []).map(Number));
      listed.delete(409);
      expect([...listed].sort(), `${file}: ${found.join(' / ')}`).toEqual(expected);
    }
  });
});

describe("the README's alert list is the rule file", () => {
  it('names every alert of charts/partner-agent-status/rules/partner-agent-status.rules.yaml once, each linked to its runbook section', () => {
    const rules = [...read('charts/partner-agent-status/rules/partner-agent-status.rules.yaml').matchAll(/^\s*- alert: (\S+)$/gm)].map(
      (m) => m[1]!,
    );
    const rows = table(readme, /^\| alert \| fires when \|/);
    const listed = rows.map((row) => /\[`(\w+)`\]/.exec(row[0]!)?.[1]);
    expect(listed.sort()).toEqual([...rules].sort());
    const runbook = read('docs/runbook.md');
    for (const row of rows) {
      const [, name, anchor] = /\[`(\w+)`\]\(docs\/runbook\.md#([\w-]+)\)/.exec(row[0]!) ?? [];
      expect(anchor, row[0]).toBe(name?.toLowerCase());
      expect(runbook, name).toMatch(new RegExp(`^## ${name}$`, 'm'));
    }
  });
});

describe('the settings table (docs/configuration.md) names every variable the service reads', () => {
  // Read generically: the helpers take (env, 'NAME', …); direct reads are env.NAME or env['NAME'].
  const readsOf = (source: string) =>
    new Set(
      [...source.matchAll(/\(env, '([A-Z][A-Z0-9_]+)'|\benv\.([A-Z][A-Z0-9_]+)|\benv\[['"]([A-Z][A-Z0-9_]+)['"]\]/g)].map(
        (m) => m[1] ?? m[2] ?? m[3]!,
      ),
    );
  const documented = new Set(
    read('docs/configuration.md')
      .split('\n')
      .filter((line) => line.startsWith('| `'))
      .flatMap((line) => [...line.split(' | ')[0]!.matchAll(/`([A-Z][A-Z0-9_]+)`/g)].map((m) => m[1]!)),
  );

  it('every variable src/config.ts reads has a row', () => {
    const reads = readsOf(read('src/config.ts'));
    expect(reads.size).toBeGreaterThan(50);
    expect([...reads].filter((name) => !documented.has(name))).toEqual([]);
  });

  it('every variable npm run dev reads of its own has a row (DEV_DATABASE_PORT, DEV_SIMULATOR_PORT)', () => {
    const devReads = [...read('src/dev/main.ts').matchAll(/process\.env\.([A-Z][A-Z0-9_]+)/g)].map((m) => m[1]!);
    expect(devReads).toEqual(expect.arrayContaining(['DEV_DATABASE_PORT', 'DEV_SIMULATOR_PORT']));
    expect(devReads.filter((name) => !documented.has(name))).toEqual([]);
  });

  it('the README links it', () => {
    expect(readme).toContain('](docs/configuration.md)');
  });
});

describe('the README is an entrance', () => {
  const lines = readme.split('\n');
  const firstScreen = lines.slice(0, 25).join('\n');

  it('is under 400 lines, with the two commands and Node 24 on its first screen', () => {
    expect(lines.length).toBeLessThan(400);
    expect(firstScreen).toContain('npm ci && npm run dev');
    expect(firstScreen).toContain('npm ci && npm test');
    expect(firstScreen).toMatch(/Node 24/);
  });

  it('links only documents that exist', () => {
    for (const [, target] of readme.matchAll(/\]\(((?:docs|charts|test)\/[^)#]+)(?:#[^)]*)?\)/g)) {
      expect(() => read(target!), target).not.toThrow();
    }
  });
});

describe('no runtime files are committed', () => {
  it('tracks no Redis snapshot or append-only file, and ignores them', () => {
    const tracked = spawnSync('git', ['ls-files'], { cwd: root, encoding: 'utf8' });
    if (tracked.status === 0) expect(tracked.stdout.split('\n').filter((path) => /(^|\/)(dump\.rdb|.*\.aof)$/.test(path))).toEqual([]);
    expect(read('.gitignore')).toMatch(/^dump\.rdb$/m);
  });
});
