// `npm run keys -- <command>` (and `node dist/keys.js <command>` in the image): the operator's key
// tool, docs/interfaces.md §12. See tool.ts.
import { text } from 'node:stream/consumers';
import { runKeysTool } from './tool.js';

process.exitCode = await runKeysTool(process.argv.slice(2), {
  stdout: (data) => process.stdout.write(data),
  stderr: (line) => process.stderr.write(line),
  stdin: () => text(process.stdin),
});
