// The TypeScript SDK v2 client (@modelcontextprotocol/client 2.4.0) under the same load as
// albedo's (see albedo-mcp-bench). Usage: node ts-client.mjs '<job JSON>'; prints one JSON
// line with the results. The job is the one albedo-mcp-bench gives every client:
//   {"transport": "stdio", "command": ..., "args": [...]} or {"transport": "http", "url": ...},
//   "tool", "arguments", "levels" (calls in flight), "duration_ms" and "warmup_ms" (time-boxed)
//   or "calls" (a fixed count), and "node_modules" (where the SDK is installed; it is imported
//   from there by absolute path).
// The client runs as the SDK documents it: Client with versionNegotiation 'auto' (2026-07-28
// when the server offers it), StdioClientTransport or StreamableHTTPClientTransport, tools
// listed once, then callTool.
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const job = JSON.parse(process.argv[2] ?? '{}');
const nm = job.node_modules ?? process.env.PEERS_NPM_MODULES;
const sdk = await import(pathToFileURL(path.join(nm, '@modelcontextprotocol/client/dist/index.mjs')).href);
const { Client, StreamableHTTPClientTransport } = sdk;

function cpuUs() {
  const u = process.cpuUsage();
  return u.user + u.system;
}

function pct(sorted, p) {
  if (sorted.length === 0) return 0;
  const i = Math.round((sorted.length - 1) * p);
  return sorted[Math.min(i, sorted.length - 1)];
}

const t0 = performance.now();
let transport;
if (job.transport === 'stdio') {
  const { StdioClientTransport } = await import(
    pathToFileURL(path.join(nm, '@modelcontextprotocol/client/dist/stdio.mjs')).href
  );
  transport = new StdioClientTransport({
    command: job.command,
    args: job.args ?? [],
    stderr: 'ignore',
    // The default (10 MiB) is below a 10 MiB result's line; albedo allows 16 MiB.
    maxBufferSize: 32 * 1024 * 1024,
  });
} else {
  transport = new StreamableHTTPClientTransport(new URL(job.url));
}
const client = new Client(
  { name: 'albedo-bench-ts', version: '1.0.0' },
  { versionNegotiation: { mode: 'auto' } },
);
try {
  await client.connect(transport);
  await client.listTools();
} catch (e) {
  console.log(JSON.stringify({ error: `connect: ${e?.message ?? e}` }));
  process.exit(1);
}
const connectMs = performance.now() - t0;

async function one() {
  const r = await client.callTool({ name: job.tool ?? 'echo', arguments: job.arguments ?? {} });
  if (r.isError) throw new Error('the tool answered isError');
  let n = 0;
  for (const c of r.content ?? []) if (typeof c.text === 'string') n += Buffer.byteLength(c.text);
  return n;
}

async function runLevel(concurrency, until, calls) {
  const lat = [];
  let bytes = 0;
  let errors = 0;
  let started = 0;
  const worker = async () => {
    for (;;) {
      if (until !== null && performance.now() >= until) break;
      if (calls !== null && started++ >= calls) break;
      const t = performance.now();
      try {
        const n = await one();
        bytes += n;
        lat.push(Math.round((performance.now() - t) * 1000));
      } catch (e) {
        if (errors++ === 0) console.error(`ts client: call failed: ${e?.message ?? e}`);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { lat, bytes, errors };
}

const levels = [];
const calls = job.calls ?? null;
for (const c of job.levels ?? [1]) {
  if (calls === null) await runLevel(c, performance.now() + (job.warmup_ms ?? 200), null);
  else await runLevel(1, null, 1);
  const cpu0 = cpuUs();
  const t = performance.now();
  const until = calls === null ? performance.now() + (job.duration_ms ?? 1000) : null;
  const { lat, bytes, errors } = await runLevel(c, until, calls);
  const elapsed = (performance.now() - t) / 1000;
  const cpu = cpuUs() - cpu0;
  lat.sort((a, b) => a - b);
  levels.push({
    concurrency: c,
    calls: lat.length,
    errors,
    elapsed_s: elapsed,
    p50_us: pct(lat, 0.5),
    p99_us: pct(lat, 0.99),
    cpu_us: cpu,
    result_bytes: bytes,
  });
}
console.log(JSON.stringify({ connect_ms: connectMs, levels }));
await client.close().catch(() => {});
process.exit(0);
