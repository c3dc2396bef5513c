import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// What a partner installs: `npm pack` of clients/typescript (its prepack builds dist/) holds the
// build, its type declarations, the README and package.json, nothing else (no sources, tests,
// generator, source maps or lock file), and the package declares no runtime dependency.
const packageDir = fileURLToPath(new URL('../../clients/typescript/', import.meta.url));

describe('the typed client package', () => {
  it('npm pack lists only the build, its types and the README', { timeout: 120_000 }, () => {
    const output = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts=false'], {
      cwd: packageDir,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const [packed] = JSON.parse(output.slice(output.indexOf('['))) as Array<{ files: Array<{ path: string }> }>;
    const files = packed!.files.map((file) => file.path).sort();
    expect(files.filter((path) => !/^dist\/.+\.(js|d\.ts)$/.test(path))).toEqual(['README.md', 'package.json']);
    expect(files).toEqual(expect.arrayContaining(['dist/index.js', 'dist/index.d.ts', 'dist/webhooks.js', 'dist/generated/versions.d.ts']));
  });

  it('has no runtime dependencies and names its entry points in dist/', () => {
    const manifest = JSON.parse(readFileSync(`${packageDir}package.json`, 'utf8'));
    expect(manifest.dependencies ?? {}).toEqual({});
    expect(manifest.exports['.']).toEqual({ types: './dist/index.d.ts', default: './dist/index.js' });
    expect(manifest.engines.node).toBe('>=20');
  });
});
