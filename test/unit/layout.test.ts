import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
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
