import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { parseSync } from 'oxc-parser';
import { describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');

/** The image's programs, as scripts/build.ts bundles them. */
function entryPoints(): string[] {
  const build = readFileSync(join(root, 'scripts/build.ts'), 'utf8');
  const list = /entryPoints:\s*\[([^\]]*)\]/.exec(build)?.[1];
  if (!list) throw new Error('scripts/build.ts: no entryPoints list found');
  return [...list.matchAll(/'([^']+)'/g)].map(([, path]) => join(root, path!));
}

/** Every relative import (static, dynamic or type-only) of a module, as a source path. */
function relativeImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const specifiers = [...text.matchAll(/(?:from|import)\s*\(?\s*'(\.{1,2}\/[^']+)'/g)].map(([, specifier]) => specifier!);
  return specifiers.map((specifier) => {
    const path = resolve(dirname(file), specifier);
    const source = path.replace(/\.js$/, '.ts');
    return existsSync(source) ? source : path;
  });
}

/** The source files an entry point reaches through relative imports. */
function reachable(entries: string[]): Set<string> {
  const seen = new Set<string>();
  const queue = [...entries];
  while (queue.length > 0) {
    const file = queue.pop()!;
    if (seen.has(file) || !file.endsWith('.ts')) continue;
    seen.add(file);
    queue.push(...relativeImports(file));
  }
  return seen;
}

describe('the image is built from src/ alone', () => {
  it('finds the programs of the build', () => {
    expect(entryPoints().map((path) => relative(root, path))).toContain('src/main.ts');
  });

  it('imports nothing from the tests, the e2e suite or the npm run dev set-up', () => {
    const files = [...reachable(entryPoints())].map((path) => relative(root, path));
    expect(files.length).toBeGreaterThan(20);
    expect(files.filter((path) => !path.startsWith('src/') || path.startsWith('src/dev/'))).toEqual([]);
  });
});

// The floors of src/, bottom first. A module may import from its own floor or a lower one, never
// from a higher one: the arrows of the house run one way, down. A room is a folder under src/ or a
// single file at its top; a new room needs a floor here before its first import is checked.
const floors: ReadonlyArray<{ name: string; rooms: readonly string[] }> = [
  // What everything may use: the configuration, the telemetry handles, the schema's migrations,
  // the clock the protocol's timings read and the stand-alone spend-management simulator (a program
  // of its own).
  {
    name: 'foundation',
    rooms: ['config.ts', 'api-versions.ts', 'resources.ts', 'clock.ts', 'observability', 'db', 'spend-simulator', 'types'],
  },
  // The background loops (src/workers/): one poll loop and one housekeeping loop, which the
  // protocol's and the events' workers are instances of; they know no store and no feature.
  { name: 'workers', rooms: ['workers'] },
  // The stores and the partner keys: each talks to one outside party (PostgreSQL, Redis, spend
  // management, the key set) and knows nothing of the protocol above it.
  { name: 'stores', rooms: ['stores', 'auth'] },
  // The protocol (a partner's status change, the runs, the worker), the background workers of the
  // events and the key-set tool: they use the stores.
  { name: 'agents', rooms: ['agents', 'events', 'keys'] },
  // The HTTP surface: routes, problems, guards; it drives the protocol.
  { name: 'http', rooms: ['http'] },
  // The composition root: the one place that builds every piece and ties them together.
  { name: 'composition', rooms: ['service.ts'] },
  // The programs: the service's entry point, its telemetry preload and the `npm run dev` set-up.
  { name: 'programs', rooms: ['main.ts', 'telemetry.ts', 'dev'] },
];

const src = join(root, 'src');

/** Every TypeScript module under src/ (declaration files declare, they import nothing). */
function sourceFiles(dir = src): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [path] : [];
  });
}

/** The room of a src/ file: its folder under src/, or the file itself when it sits at the top. */
function roomOf(file: string): string {
  return relative(src, file).split('/')[0]!;
}

/** The floor of a src/ file (its index in `floors`), or undefined for a room on no floor. */
function floorOf(file: string): number | undefined {
  const room = roomOf(file);
  const index = floors.findIndex((floor) => floor.rooms.includes(room));
  return index === -1 ? undefined : index;
}

/** The imports of src/ files that name other src/ files, as [importer, imported] (repository paths). */
function sourceImports(): Array<[string, string]> {
  return sourceFiles().flatMap((file) =>
    relativeImports(file)
      .filter((target) => target.startsWith(`${src}/`) && target.endsWith('.ts'))
      .map((target): [string, string] => [file, target]),
  );
}

/** The import circles among `edges`: each as the files of one strongly connected component (Tarjan). */
function circles(edges: ReadonlyArray<[string, string]>): string[][] {
  const next = new Map<string, string[]>();
  for (const [from, to] of edges) next.set(from, [...(next.get(from) ?? []), to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (file: string) => {
    index.set(file, index.size);
    low.set(file, index.get(file)!);
    stack.push(file);
    onStack.add(file);
    for (const target of next.get(file) ?? []) {
      if (!index.has(target)) {
        visit(target);
        low.set(file, Math.min(low.get(file)!, low.get(target)!));
      } else if (onStack.has(target)) {
        low.set(file, Math.min(low.get(file)!, index.get(target)!));
      }
    }
    if (low.get(file) !== index.get(file)) return;
    const component: string[] = [];
    for (;;) {
      const member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
      if (member === file) break;
    }
    const selfImport = (next.get(file) ?? []).includes(file);
    if (component.length > 1 || selfImport) found.push(component.sort());
  };
  for (const file of next.keys()) if (!index.has(file)) visit(file);
  return found;
}

const repo = (path: string) => relative(root, path);

describe('the floors of src/', () => {
  it('puts every room of src/ on a floor', () => {
    const files = sourceFiles();
    expect(files.length).toBeGreaterThan(20);
    const homeless = files.filter((file) => floorOf(file) === undefined).map(repo);
    expect(homeless, 'files in a room on no floor: give the room a floor in test/unit/layout.test.ts').toEqual([]);
  });

  it('reads the imports between rooms', () => {
    const between = sourceImports().filter(([from, to]) => roomOf(from) !== roomOf(to));
    expect(between.map(([from, to]) => `${roomOf(from)} -> ${roomOf(to)}`)).toEqual(
      expect.arrayContaining(['service.ts -> agents', 'http -> agents', 'agents -> stores', 'stores -> observability']),
    );
  });

  it('has no import from a lower floor up to a higher one', () => {
    const upward = sourceImports()
      .filter(([from, to]) => (floorOf(from) ?? Number.POSITIVE_INFINITY) < (floorOf(to) ?? Number.NEGATIVE_INFINITY))
      .map(([from, to]) => `${repo(from)} -> ${repo(to)}`);
    expect(upward).toEqual([]);
  });

  it('has no import circle among the files of src/', () => {
    expect(circles(sourceImports()).map((component) => component.map(repo))).toEqual([]);
  });

  it('finds an upward import and a circle when there is one', () => {
    const [low, high] = [join(src, 'config.ts'), join(src, 'http/app.ts')];
    expect((floorOf(low) ?? 0) < (floorOf(high) ?? 0)).toBe(true);
    expect(circles([[low, high]])).toEqual([]);
    expect(
      circles([
        [low, high],
        [high, join(src, 'agents/a.ts')],
        [join(src, 'agents/a.ts'), low],
      ]),
    ).toHaveLength(1);
    expect(circles([[low, low]])).toEqual([[low]]);
  });
});

/** Every TypeScript file under test/ (the tests and their support). */
function testFiles(dir = join(root, 'test')): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'fixtures' || entry.name === 'results' ? [] : testFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

const copyLines = 6;

/**
 * Blocks of `copyLines` lines that stand, the same to the letter (leading spaces aside), in two
 * files: each as "a.ts:line ~ b.ts:line". Only lines with a word in them count (a run of closing
 * brackets is no copy), and a copy is named once, where it starts.
 */
function verbatimCopies(files: readonly string[]): string[] {
  const firstSeen = new Map<string, { file: string; line: number }>();
  const copies: string[] = [];
  const reported = new Set<string>();
  for (const file of files) {
    const lines = readFileSync(file, 'utf8')
      .split('\n')
      .map((text, index) => ({ text: text.trim(), line: index + 1 }))
      .filter(({ text }) => /[A-Za-z]{2}/.test(text) && !text.startsWith('import ') && !text.startsWith('//'));
    let previous: string | undefined;
    for (let start = 0; start + copyLines <= lines.length; start += 1) {
      const block = lines.slice(start, start + copyLines);
      const key = block.map(({ text }) => text).join('\n');
      const seen = firstSeen.get(key);
      if (!seen) {
        firstSeen.set(key, { file, line: block[0]!.line });
        previous = undefined;
        continue;
      }
      if (seen.file === file) continue;
      const pair = `${repo(seen.file)} ~ ${repo(file)}`;
      if (previous !== pair && !reported.has(`${pair}:${block[0]!.line}`)) {
        copies.push(`${repo(seen.file)}:${seen.line} ~ ${repo(file)}:${block[0]!.line}`);
      }
      reported.add(`${pair}:${block[0]!.line}`);
      previous = pair;
    }
  }
  return copies;
}

describe('the tests share their helpers instead of copying them', () => {
  it(`has no block of ${copyLines} lines copied verbatim from one test file to another`, () => {
    const files = testFiles();
    expect(files.length).toBeGreaterThan(50);
    expect(verbatimCopies(files), 'move the block to test/support and use it from both').toEqual([]);
  });

  it('finds a block copied from one file to another, and not a block repeated within one file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'pas-layout-'));
    try {
      const block = ['const a = one();', 'const b = two(a);', 'if (b) three(b);', 'await four(a, b);', 'expect(a).toBe(b);', 'five();'];
      const [first, second] = [join(dir, 'first.ts'), join(dir, 'second.ts')];
      writeFileSync(first, [...block, ...block].join('\n'));
      expect(verbatimCopies([first])).toEqual([]);
      writeFileSync(second, ['other();', ...block.map((line) => `    ${line}`)].join('\n'));
      expect(verbatimCopies([first, second])).toEqual([`${repo(first)}:1 ~ ${repo(second)}:2`]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

// The longest a function of src/ may run (the statement and metric factories are the longest), and
// a method (of a class or an object): a longer one holds several jobs that want names of their own.
const maxFunctionLines = 220;
const maxMethodLines = 120;
// Closure state: a function whose inner functions share more than this many `let`s is a state
// machine in disguise (three background loops were, before src/workers/): give it a class.
const maxClosureLets = 3;
// No exemption: every background loop is a class or an instance of src/workers/.
const closureLetExemptions = new Set<string>();

interface Block {
  kind: 'function' | 'method';
  name: string;
  lines: number;
  /** Variables declared with `let` at the top of its body, when an inner function may share them: its closure state. */
  closureLets: number;
}

/** The names of `let`s declared directly in a function body (not in its blocks or loops), when the body holds an inner function. */
function closureLetsOf(body: unknown): number {
  const statements = (body as { type?: string; body?: unknown[] } | undefined)?.body;
  if ((body as { type?: string } | undefined)?.type !== 'BlockStatement' || !Array.isArray(statements)) return 0;
  const lets = statements
    .filter(
      (statement) =>
        (statement as { type?: string; kind?: string }).type === 'VariableDeclaration' && (statement as { kind?: string }).kind === 'let',
    )
    .reduce((count: number, statement) => count + (statement as { declarations: unknown[] }).declarations.length, 0);
  return lets > 0 && /"type":"(?:ArrowFunctionExpression|FunctionExpression|FunctionDeclaration)"/.test(JSON.stringify(statements))
    ? lets
    : 0;
}

/** Every function and method of a module, with its length in lines, from the module's syntax tree. */
function blocksOf(file: string): Block[] {
  const text = readFileSync(file, 'utf8');
  const lineStarts = [0];
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) lineStarts.push(i + 1);
  const lineOf = (offset: number) => {
    let low = 0;
    let high = lineStarts.length - 1;
    while (low < high) {
      const middle = (low + high + 1) >> 1;
      if (lineStarts[middle]! <= offset) low = middle;
      else high = middle - 1;
    }
    return low + 1;
  };
  const blocks: Block[] = [];
  type Node = { type?: string; start: number; end: number; [key: string]: unknown };
  const nameOf = (node: unknown) => ((node as { name?: string } | undefined)?.name ?? '(anonymous)') as string;
  const visit = (value: unknown, context: { name: string; method: boolean }): void => {
    if (Array.isArray(value)) {
      for (const item of value) visit(item, context);
      return;
    }
    if (!value || typeof value !== 'object') return;
    const node = value as Node;
    const isFunction = ['FunctionDeclaration', 'FunctionExpression', 'ArrowFunctionExpression'].includes(node.type ?? '');
    if (isFunction) {
      const name = node.id ? nameOf(node.id) : context.name;
      blocks.push({
        kind: context.method ? 'method' : 'function',
        name,
        lines: lineOf(node.end) - lineOf(node.start) + 1,
        closureLets: closureLetsOf(node.body),
      });
    }
    for (const [key, child] of Object.entries(node)) {
      if (key === 'type' || key === 'start' || key === 'end') continue;
      if (node.type === 'MethodDefinition' || (node.type === 'Property' && (node.method || node.kind !== 'init'))) {
        visit(child, { name: nameOf(node.key), method: key === 'value' });
      } else if (node.type === 'VariableDeclarator' || node.type === 'Property' || node.type === 'PropertyDefinition') {
        visit(child, { name: nameOf(node.id ?? node.key), method: false });
      } else {
        visit(child, { name: context.name, method: false });
      }
    }
  };
  visit(parseSync(file, text).program, { name: '(module)', method: false });
  return blocks;
}

describe('the functions of src/ are of a readable length', () => {
  const blocks = sourceFiles().flatMap((file) => blocksOf(file).map((block) => ({ ...block, file: repo(file) })));

  it('reads the functions and methods of every module', () => {
    expect(blocks.filter((block) => block.kind === 'method').length).toBeGreaterThan(50);
    expect(blocks.find((block) => block.file === 'src/service.ts' && block.name === 'assemble')?.lines).toBeGreaterThan(20);
    // A method is told from a function: DisableRunner.run is a method of a class.
    expect(blocks.find((block) => block.file === 'src/agents/disable-runs.ts' && block.name === 'run')?.kind).toBe('method');
  });

  it(`keeps at most ${maxClosureLets} closure-level lets in a function: more is a state machine that wants a class`, () => {
    const stateful = blocks
      .filter((block) => block.closureLets > maxClosureLets && !closureLetExemptions.has(block.file))
      .map((block) => `${block.file}: ${block.kind} ${block.name}, ${block.closureLets} closure-level lets`);
    expect(stateful).toEqual([]);
  });

  it('counts the closure-level lets of a function, and not those of its blocks or of a function with no inner one', () => {
    const dir = mkdtempSync(join(tmpdir(), 'pas-layout-'));
    try {
      const file = join(dir, 'lets.ts');
      writeFileSync(
        file,
        [
          'export function machine() {',
          '  let a = 0;',
          '  let b = 0, c = 0;',
          '  let d = 0;',
          '  for (let i = 0; i < 2; i += 1) a += i;',
          '  return () => a + b + c + d;',
          '}',
          'export function plain() {',
          '  let a = 0;',
          '  let b = 0;',
          '  let c = 0;',
          '  let d = 0;',
          '  return a + b + c + d;',
          '}',
        ].join('\n'),
      );
      expect(blocksOf(file).map((block) => [block.name, block.closureLets])).toEqual([
        ['machine', 4],
        ['(module)', 0],
        ['plain', 0],
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it(`has no function over ${maxFunctionLines} lines and no method over ${maxMethodLines}`, () => {
    const tooLong = blocks
      .filter((block) => block.lines > (block.kind === 'method' ? maxMethodLines : maxFunctionLines))
      .map((block) => `${block.file}: ${block.kind} ${block.name}, ${block.lines} lines`);
    expect(tooLong).toEqual([]);
  });
});
