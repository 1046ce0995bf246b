// A legacy-era (2025-11-25) stdio server written with the TypeScript SDK v1
// (@modelcontextprotocol/sdk, installed as a dependency of the SDK v2 packages).
// Usage: node ts_v1_server.cjs NODE_MODULES_DIR
// Tools: echo(message); probe_client() sends the client a `ping` and a `roots/list` request
// and reports what came back for each.
const path = require("path");
const modules = process.argv[2] || path.join(__dirname, "../../.peers/npm/node_modules");
const sdk = (p) => require(path.join(modules, "@modelcontextprotocol/sdk/dist/cjs", p));
const { McpServer } = sdk("server/mcp.js");
const { StdioServerTransport } = sdk("server/stdio.js");
const z = require(path.join(modules, "zod"));

const server = new McpServer({ name: "ts-v1-test", version: "1.0.0" });
server.tool("echo", { message: z.string() }, async ({ message }) => ({
  content: [{ type: "text", text: `Echo: ${message}` }],
}));
server.tool("probe_client", {}, async () => {
  const out = [];
  try {
    const r = await server.server.ping();
    out.push(`ping: result ${JSON.stringify(r)}`);
  } catch (e) {
    out.push(`ping: error ${e.code} ${e.message}`);
  }
  try {
    const r = await server.server.request({ method: "roots/list" }, sdk("types.js").ListRootsResultSchema);
    out.push(`roots/list: result ${JSON.stringify(r)}`);
  } catch (e) {
    out.push(`roots/list: error ${e.code} ${e.message}`);
  }
  return { content: [{ type: "text", text: out.join("\n") }] };
});
server.connect(new StdioServerTransport());
