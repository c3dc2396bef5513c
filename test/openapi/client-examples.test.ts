import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

// The TypeScript examples of the partner guides and of the client's README compile against the
// client as it is: a renamed method, option or field fails here, not in a partner's editor.
const root = fileURLToPath(new URL('../../', import.meta.url));
const documents = ['docs/partner-guide.md', 'docs/partner-webhooks.md', 'clients/typescript/README.md'];
const scratch = mkdtempSync(join(tmpdir(), 'pas-client-examples-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** What the examples take as given: the values a partner's own code has. */
const prelude = `declare const agentId: string;
declare const rawBody: string;
declare const request: { headers: Record<string, string | string[] | undefined> };
declare const currentSecret: string;
declare const previousSecret: string;
declare const agentIds: string[];
declare const caseId: string;
declare const savedCursor: string | undefined;
declare function handle(type: string, event: unknown): Promise<void>;
declare function saveCursor(cursor: string): Promise<void>;
`;

/** A document's ts blocks, in order, as one module importing the client's source. */
function examplesOf(document: string): string {
  const text = readFileSync(join(root, document), 'utf8');
  const blocks = [...text.matchAll(/```ts\n([\s\S]*?)```/g)].map((match) => match[1]!);
  return prelude + blocks.join('\n').replaceAll("'@partner-agent-status/client'", `'${join(root, 'clients/typescript/src/index.js')}'`);
}

describe('the client examples in the docs', () => {
  it('every document has TypeScript examples, and they type-check against the client', { timeout: 60_000 }, () => {
    const files = documents.map((document, index) => {
      const source = examplesOf(document);
      expect(source, `${document} has no \`\`\`ts example importing the client`).toContain('clients/typescript/src/index.js');
      const file = join(scratch, `example-${index}.ts`);
      writeFileSync(file, source);
      return file;
    });
    writeFileSync(join(scratch, 'package.json'), '{"type": "module"}');
    writeFileSync(
      join(scratch, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'es2024',
          lib: ['es2024'],
          module: 'nodenext',
          moduleResolution: 'nodenext',
          strict: true,
          noEmit: true,
          skipLibCheck: true,
          types: ['node'],
          typeRoots: [join(root, 'node_modules/@types')],
        },
        files,
      }),
    );
    let diagnostics = '';
    try {
      execFileSync(join(root, 'node_modules/.bin/tsc'), ['-p', join(scratch, 'tsconfig.json')], { encoding: 'utf8', stdio: 'pipe' });
    } catch (error) {
      diagnostics = `${(error as { stdout?: string }).stdout ?? ''}${(error as Error).message}`;
    }
    expect(diagnostics).toBe('');
  });
});
