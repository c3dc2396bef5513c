// The kind workflow cannot run on the CI machine (no Docker engine), so its scripts are checked
// statically instead: shellcheck, the shebang, strict mode and the executable bit.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));
const scripts = [
  ...readdirSync(join(root, 'k8s-dev'))
    .filter((name) => name.endsWith('.sh'))
    .sort()
    .map((name) => `k8s-dev/${name}`),
  '.ci/run',
];

describe('the k8s-dev scripts and .ci/run', () => {
  it('include one script for each step of the kind workflow', () => {
    for (const step of ['create-cluster', 'build-and-load', 'install', 'port-forward', 'run-e2e', 'teardown']) {
      expect(scripts, step).toContain(`k8s-dev/${step}.sh`);
    }
  });

  it('has shellcheck available (the CI entry installs the Debian package)', () => {
    const result = spawnSync('shellcheck', ['--version'], { encoding: 'utf8' });
    expect(result.error, 'shellcheck is not installed: apt-get install shellcheck').toBeUndefined();
    expect(result.status).toBe(0);
  });

  it.each(scripts)('%s passes shellcheck', (script) => {
    // --external-sources follows `source k8s-dev/lib.sh` (the scripts point shellcheck at it).
    const result = spawnSync('shellcheck', ['--external-sources', '--format=gcc', script], { cwd: root, encoding: 'utf8' });
    if (result.error) throw result.error;
    expect(result.stdout + result.stderr, `shellcheck ${script}`).toBe('');
    expect(result.status).toBe(0);
  });

  it.each(scripts)('%s starts with #!/usr/bin/env bash and set -euo pipefail before any command', (script) => {
    const lines = readFileSync(join(root, script), 'utf8').split('\n');
    expect(lines[0]).toBe('#!/usr/bin/env bash');
    const firstCommand = lines.slice(1).find((line) => line.trim() !== '' && !line.trim().startsWith('#'));
    expect(firstCommand?.trim()).toBe('set -euo pipefail');
  });

  it.each(scripts)('%s is executable', (script) => {
    expect(statSync(join(root, script)).mode & 0o111, `chmod +x ${script}`).not.toBe(0);
  });
});
