// The committed generated files are current, and `npm pack` makes a package whose
// files, exports and types resolve for a consumer.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildPage, pageOut } from '../scripts/build-page.mjs';
import { generate, outPath, schemaPath } from '../scripts/gen-types.mjs';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..');

test('src/protocol.gen.ts is generated from internal/protocol/schema/v1.json (npm run gen)', () => {
  assert.ok(readFileSync(outPath, 'utf8') === generate(readFileSync(schemaPath, 'utf8')), 'src/protocol.gen.ts is stale: run npm run gen');
});

test('internal/webui/static/app.js is built from the current sources (npm run build:page)', async () => {
  assert.ok(readFileSync(pageOut, 'utf8') === (await buildPage()), 'internal/webui/static/app.js is stale: run npm run build:page');
});

test('npm pack: files, exports and types resolve', () => {
  const dir = mkdtempSync(join(tmpdir(), 'terret-pack-'));
  try {
    const [info] = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', dir], { cwd: pkg, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }));
    const files = info.files.map((f) => f.path).sort();
    for (const want of ['package.json', 'README.md', 'dist/index.js', 'dist/index.d.ts', 'dist/client.js', 'dist/protocol.gen.d.ts']) {
      assert.ok(files.includes(want), `package lacks ${want}: ${files}`);
    }
    assert.deepEqual(files.filter((f) => !f.startsWith('dist/') && !['package.json', 'README.md'].includes(f)), [], 'package carries more than dist/, README.md and package.json');
    assert.ok(!files.some((f) => f.endsWith('.ts') && !f.endsWith('.d.ts')), 'package carries TypeScript sources');

    // A consumer project: the tarball installed by hand (no registry), imported by name.
    const app = join(dir, 'app');
    const into = join(app, 'node_modules', '@terret', 'client');
    mkdirSync(into, { recursive: true });
    execFileSync('tar', ['-xzf', join(dir, info.filename), '-C', into, '--strip-components=1']);
    writeFileSync(join(app, 'package.json'), '{"type":"module"}');
    writeFileSync(join(app, 'main.mjs'), `import { TerretClient, SessionProjection, ERROR_CODES, PROTO } from '@terret/client';
console.log(JSON.stringify([typeof TerretClient, typeof SessionProjection, ERROR_CODES.length, PROTO]));`);
    assert.equal(execFileSync(process.execPath, ['main.mjs'], { cwd: app, encoding: 'utf8' }).trim(), '["function","function",9,1]');
    writeFileSync(join(app, 'main.ts'), `import { TerretClient, ProtocolError, type KnownEvent, type StreamItem } from '@terret/client';
const c: TerretClient = new TerretClient({ url: 'ws://h/agents/a/ws' });
const f = (e: KnownEvent): string => (e.type === 'tool/call' ? e.payload.name : e.type);
const g = (i: StreamItem): number => (i.kind === 'event' ? i.event.seq : 0);
const h = (e: unknown): boolean => ProtocolError.is(e, 'superseded');
void c.inject('x', { wake: true }); void f; void g; void h;
`);
    writeFileSync(join(app, 'tsconfig.json'), JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', target: 'ES2022', strict: true, noEmit: true, types: [], lib: ['ES2022'] }, files: ['main.ts'] }));
    execFileSync(process.execPath, [join(pkg, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', app], { encoding: 'utf8' });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
