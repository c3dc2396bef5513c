import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
// The migration linter's binary, as npm run lint:migrations calls it (an optional dependency: squawk
// publishes its Linux x64 binary alone on the registry this project uses).
const squawk = join('node_modules', '@squawk-cli', 'linux-x64', 'bin', 'squawk');
const migrations = readdirSync('src/db/migrations').map((name) => join('src/db/migrations', name));
const scratch = mkdtempSync(join(tmpdir(), 'pas-squawk-'));

afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** squawk's findings as JSON, whatever its exit code. */
async function lint(files: string[]): Promise<Array<{ rule_name: string; file: string }>> {
  const result = await run(squawk, ['--config', '.squawk.toml', '--reporter', 'json', ...files]).catch(
    (error: { stdout: string }) => error,
  );
  return JSON.parse(result.stdout) as Array<{ rule_name: string; file: string }>;
}

describe('the migration linter (npm run lint:migrations)', () => {
  it('finds nothing in the shipped migrations', async () => {
    expect(migrations.length).toBeGreaterThanOrEqual(8);
    expect(await lint(migrations)).toEqual([]);
  });

  it('would refuse an index built without CONCURRENTLY on a platform table, and a migration without lock_timeout', async () => {
    const file = join(scratch, '999.do.sql');
    writeFileSync(file, 'CREATE INDEX IF NOT EXISTS campaigns_paused_idx ON campaigns (paused);\n');
    const rules = (await lint([file])).map((finding) => finding.rule_name);
    expect(rules).toContain('require-concurrent-index-creation');
    expect(rules).toContain('require-lock-timeout');
  });
});
