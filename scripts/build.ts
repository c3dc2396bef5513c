// `npm run build`: the five programs of the image, each bundled into one ES module under dist/ by
// esbuild (types are checked by `npm run typecheck`, not here), plus the migrations as files.
//
// Why bundle: an unbundled start resolved, read and compiled about a thousand module files (half
// of a 0.85 s start to ready) and kept every module's source and wrapper around (benchmark, issue
// 12). Bundled, the start to ready takes 0.5 to 0.6 s instead of 0.8 to 0.9, and RSS at ready is
// about 11 MiB lower (measured on this project's benchmark machine).
//
// What stays outside the bundle, loaded from node_modules at run time:
// - pg, ioredis and the AWS SDK: the tracing preload patches them as they are loaded, which it can
//   only do for modules that are loaded by name;
// - OpenTelemetry and import-in-the-middle: shared between the preload and the app;
// - pino: its worker-thread transports load files by path (none is used, but nothing may break if
//   one is configured);
// - the reference page's renderer (@scalar): 5 MB, loaded on the first visit to the page only.
import { cpSync, rmSync } from 'node:fs';
import { build } from 'esbuild';

const external = [
  'pg',
  'pg-native',
  'ioredis',
  '@aws-sdk/*',
  '@opentelemetry/*',
  'import-in-the-middle',
  'import-in-the-middle/*',
  'pino',
  '@scalar/*',
];

rmSync('dist', { recursive: true, force: true });
await build({
  entryPoints: [
    'src/main.ts',
    'src/telemetry.ts',
    'src/db/migrate-cli.ts',
    'src/spend-simulator/main.ts',
    // the operator's key tool, `node dist/keys.js <command>` in the image
    { in: 'src/keys/main.ts', out: 'keys' },
  ],
  outdir: 'dist',
  outbase: 'src',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node24',
  external,
  // CommonJS code inside an ES bundle calls require() (Node's own modules, the externals above).
  banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
  // Readable stack traces: names are kept, only whitespace and syntax are minified; maps beside.
  minifyWhitespace: true,
  minifySyntax: true,
  sourcemap: 'linked',
  legalComments: 'linked',
  logLevel: 'warning',
});
cpSync('src/db/migrations', 'dist/db/migrations', { recursive: true });
