// `npm run keys -- <command>` (and `node dist/keys.js <command>` in the image): the operator's key
// tool, CONTRACT.md section 12. See tool.ts.
import { runKeysTool } from './tool.js';

process.exitCode = await runKeysTool(process.argv.slice(2), {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
});
