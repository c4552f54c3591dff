// Cross-origin forgery test of `terret dev`'s back doors in headless Chromium (Debian's
// /usr/bin/chromium, driven by playwright-core). internal/webui's Go test
// (forgery_browser_test.go) serves an attacker's page on another origin and runs:
//
//   node web-tests/forgery.test.mjs http://127.0.0.1:PORT/
//
// The page sends its forged requests itself (CORS "simple requests": text/plain POSTs,
// no preflight) and sets its title to "done" when every one has settled; this script
// prints what each fetch saw, one line each, and exits non-zero only if the page could
// not run. Whether anything forged arrived is the Go test's to check. CHROMIUM (default
// /usr/bin/chromium).
import { chromium } from 'playwright-core';

const page_url = process.argv[2];
if (!page_url) {
  console.error('usage: node forgery.test.mjs ATTACK_PAGE_URL');
  process.exit(2);
}
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  chromiumSandbox: false,
  args: ['--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
try {
  const page = await browser.newPage();
  page.on('pageerror', (err) => console.error('page error: ' + err.message));
  await page.goto(page_url);
  await page.waitForFunction(() => document.title === 'done', null, { timeout: 60000 });
  const results = await page.evaluate(() => window.results);
  for (const r of results) console.log(r);
} finally {
  await browser.close();
}
