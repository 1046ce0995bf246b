// Drives the system's Chromium (headless, puppeteer-core) for tests/browser.rs: signs the web
// pane in with a one-time link and uses it, then opens the attacker's pages and reports what
// each attack saw. Run with Node 22 and NODE_PATH=.peers/browser/node_modules:
//   node drive.cjs '<json config>'   -> prints one JSON line with the results
// Config: {chromium, link, attackers: [url...], rebind: url, rules: "MAP ... , MAP ..."}.
"use strict";
const puppeteer = require("puppeteer-core");

async function waitDone(page, what) {
  await page.waitForFunction(() => window.done === true, { timeout: 30000 }).catch((e) => {
    throw new Error(`${what}: the page did not finish: ${e.message}`);
  });
  return page.evaluate(() => window.results);
}

(async () => {
  const cfg = JSON.parse(process.argv[2]);
  const browser = await puppeteer.launch({
    executablePath: cfg.chromium,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-dev-shm-usage",
      "--no-first-run",
      // Plain http to a test name must stay plain http (no HTTPS-first attempt).
      "--disable-features=HttpsUpgrades,HttpsFirstBalancedModeAutoEnable",
      `--host-resolver-rules=${cfg.rules}`,
    ],
  });
  const out = { version: await browser.version() };
  try {
    // 1. The pane: the one-time link signs in and lands on the pane, which works.
    const pane = await browser.newPage();
    const resp = await pane.goto(cfg.link, { waitUntil: "load" });
    out.signin = { status: resp.status(), url: pane.url() };
    await pane.waitForFunction(() => !document.getElementById("mcp-enabled").disabled, { timeout: 20000 });
    out.pane_health = await pane.$eval("#health", (e) => e.textContent);
    await pane.click("#open");
    await pane.waitForFunction(
      () => document.getElementById("session-id").textContent.startsWith("session ")
        || document.getElementById("settings-status").classList.contains("error"),
      { timeout: 60000 });
    out.pane_session = await pane.$eval("#session-id", (e) => e.textContent);
    out.pane_servers = await pane.$$eval("#servers tbody tr", (rows) => rows.map((r) => r.children[0].textContent + ":" + r.children[1].textContent));
    out.pane_error = await pane.$eval("#settings-status", (e) => e.textContent);
    // The cookie the link set: HttpOnly, SameSite=Strict.
    const cookies = await browser.cookies();
    out.cookies = cookies.map((c) => ({ name: c.name, httpOnly: c.httpOnly, sameSite: c.sameSite, domain: c.domain }));
    // 2. Pages of other origins (another port of 127.0.0.1, another site), while signed in.
    out.attacks = {};
    for (const url of cfg.attackers) {
      const p = await browser.newPage();
      await p.goto(url, { waitUntil: "load" });
      out.attacks[url] = await waitDone(p, url);
      await p.close();
    }
    // 3. A page whose name was rebound to the daemon's address.
    const r = await browser.newPage();
    await r.goto(cfg.rebind, { waitUntil: "load" });
    out.rebind = await waitDone(r, "rebind");
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error(`drive.cjs: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
