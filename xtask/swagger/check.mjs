#!/usr/bin/env node
// The Swagger UI as a usable door, driven in headless Chromium (`cargo xtask swagger-check` runs it
// against a fresh debug gatewayd; it also runs by hand against any gateway):
//
//   node xtask/swagger/check.mjs <base-url> <bearer-token>
//   GATEWAY_URL=http://127.0.0.1:8080 GATEWAY_TOKEN=eyJ… node xtask/swagger/check.mjs
//
// Checks, on <base>/swagger-ui/:
//   1. every operation of <base>/api-docs/openapi.json (method + path) is rendered as an .opblock;
//   2. the bearer scheme works: Authorize with the token, then GET /identity/did through
//      "Try it out" / "Execute" answers 200 with the token's DID (its `sub` claim);
//   3. the rendered description of POST /v1/auth/verify says what to sign (nonce, sign, hex);
//   4. the page's own scripts log no console errors (a missing favicon is ignored).
// Exits 0 when all pass, 1 with the reasons otherwise, 2 on bad usage.
//
// The browser is the system Chromium (CHROMIUM, default /usr/bin/chromium; Debian: apt-get install
// -y chromium); playwright-core downloads none. SWAGGER_CHECK_SCREENSHOT=<file.png> saves the page
// when a check fails. SWAGGER_CHECK_TIMEOUT_MS bounds each browser step (default 30000).

import { existsSync } from "node:fs";
import { chromium } from "playwright-core";

const METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
const VERIFY_WORDS = ["nonce", "sign", "hex"];
const SUGGESTED_VERIFY_TEXT =
  "What to sign: the `nonce` string from POST /v1/auth/challenge. Sign its UTF-8 bytes (the 64 hex " +
  "characters as text) with the Ed25519 key of `did`; signing the 32 bytes the nonce hex-decodes to is " +
  "accepted too. Send the 64-byte signature as 128 hex characters in `signature`, with the `did`, the " +
  "`challenge_id`, and for a token in a cooperative `coop_id` and `scopes`.";

const base = (process.argv[2] ?? process.env.GATEWAY_URL ?? "").replace(/\/+$/, "");
const token = process.argv[3] ?? process.env.GATEWAY_TOKEN ?? "";
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const stepTimeout = Number(process.env.SWAGGER_CHECK_TIMEOUT_MS || 30000);

if (!/^https?:\/\//.test(base) || !token) {
  console.error("usage: node check.mjs <base-url> <bearer-token>   (or GATEWAY_URL and GATEWAY_TOKEN)");
  process.exit(2);
}
if (!existsSync(executablePath)) {
  console.error(`swagger-check: no Chromium at ${executablePath}: apt-get install -y chromium (or set CHROMIUM)`);
  process.exit(1);
}
// Never hang CI: the whole run gets a bound well above the sum of its steps.
setTimeout(() => {
  console.error("swagger-check: gave up after 180 s");
  process.exit(1);
}, 180_000).unref();

/** The `sub` claim of a JWT: the DID GET /identity/did must answer. */
function tokenDid(jwt) {
  try {
    const claims = JSON.parse(Buffer.from(jwt.split(".")[1], "base64url").toString("utf8"));
    return typeof claims.sub === "string" ? claims.sub : null;
  } catch {
    return null;
  }
}

/** Every `METHOD path` of the OpenAPI document. */
function specOperations(spec) {
  const ops = [];
  for (const [path, item] of Object.entries(spec.paths ?? {})) {
    for (const method of METHODS) {
      if (item && item[method]) ops.push(`${method.toUpperCase()} ${path}`);
    }
  }
  return ops;
}

/** The .opblock of one operation (its path is the summary's data-path attribute). */
function opblock(page, method, path) {
  return page
    .locator(`.opblock.opblock-${method.toLowerCase()}`)
    .filter({ has: page.locator(`.opblock-summary [data-path="${path}"]`) })
    .first();
}

/** Opens an operation unless it is open already. */
async function expand(page, method, path) {
  const block = opblock(page, method, path);
  await block.waitFor({ state: "attached" });
  if (!(await block.evaluate((el) => el.classList.contains("is-open")))) {
    const control = block.locator(".opblock-summary-control, .opblock-summary").first();
    await control.click();
  }
  await block.locator(".opblock-body").waitFor();
  return block;
}

const results = [];
function record(name, ok, detail) {
  results.push({ name, ok, detail });
}

async function main() {
  const did = tokenDid(token);
  if (!did) throw new Error("the token is not a JWT with a `sub` claim (the DID)");

  const specUrl = `${base}/api-docs/openapi.json`;
  const specResponse = await fetch(specUrl).catch((err) => {
    throw new Error(`GET ${specUrl}: ${err.cause?.message ?? err.message}`);
  });
  if (!specResponse.ok) throw new Error(`GET ${specUrl}: ${specResponse.status}`);
  const spec = await specResponse.json();
  const expected = specOperations(spec);
  if (expected.length === 0) throw new Error(`${specUrl} has no operations`);

  const browser = await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
  try {
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
    const page = await context.newPage();
    page.setDefaultTimeout(stepTimeout);

    // Console errors of the page itself; a missing favicon is the browser's business, not ours.
    const consoleErrors = [];
    page.on("console", (msg) => {
      if (msg.type() !== "error") return;
      const where = msg.location()?.url ?? "";
      if (/favicon/i.test(where) || /favicon/i.test(msg.text())) return;
      consoleErrors.push(`${msg.text()}${where ? ` (${where})` : ""}`);
    });
    page.on("pageerror", (err) => consoleErrors.push(`uncaught: ${err.message}`));

    let stopped = false;
    try {
      await page.goto(`${base}/swagger-ui/`, { waitUntil: "load" });
      await page.locator(".swagger-ui .information-container .title").first().waitFor();
      // The tag sections are there whether or not the operations are expanded (docExpansion).
      await page.locator(".swagger-ui .opblock-tag-section").first().waitFor();

      // Spec errors Swagger UI shows at the top (resolver or schema errors).
      const uiErrors = (await page.locator(".swagger-ui .errors-wrapper").allInnerTexts()).join(" ").trim();
      record("no Swagger UI spec errors", uiErrors === "", uiErrors.replace(/\s+/g, " ").slice(0, 400));

      await checkOperations(page, expected);
      await checkBearer(page, did);
      await checkVerifyDescription(page);

      // Give late console messages a moment, then judge them.
      await page.waitForTimeout(300);
      record(
        "no console errors from the page",
        consoleErrors.length === 0,
        consoleErrors.map((e) => `\n      ${e}`).join(""),
      );
    } catch (err) {
      stopped = true;
      if (consoleErrors.length) record("no console errors from the page", false, consoleErrors.map((e) => `\n      ${e}`).join(""));
      throw err;
    } finally {
      if ((stopped || results.some((r) => !r.ok)) && process.env.SWAGGER_CHECK_SCREENSHOT) {
        await page.screenshot({ path: process.env.SWAGGER_CHECK_SCREENSHOT, fullPage: true }).catch(() => {});
        console.error(`swagger-check: screenshot in ${process.env.SWAGGER_CHECK_SCREENSHOT}`);
      }
    }
  } finally {
    await browser.close();
  }
}

/** Check 1: every operation of the document is rendered, exactly once. */
async function checkOperations(page, expected) {
  // Open every collapsed tag section (the default docExpansion "list" opens them; others may not).
  const closed = page.locator(".opblock-tag-section:not(.is-open) > .opblock-tag");
  for (let round = 0; round < 3 && (await closed.count()) > 0; round++) {
    for (let i = (await closed.count()) - 1; i >= 0; i--) await closed.nth(i).click();
    await page.waitForTimeout(200);
  }
  const stillClosed = await closed.allInnerTexts();
  if (stillClosed.length) {
    record("every tag opens", false, stillClosed.map((t) => t.split("\n")[0]).join(", "));
  }
  await page.locator(".swagger-ui .opblock").first().waitFor();
  const rendered = await page.$$eval(".swagger-ui .opblock", (blocks) =>
    blocks.map((block) => {
      const method = (block.querySelector(".opblock-summary-method")?.textContent ?? "").trim().toUpperCase();
      const pathEl = block.querySelector(".opblock-summary [data-path]");
      const path =
        pathEl?.getAttribute("data-path") ??
        (block.querySelector(".opblock-summary-path")?.textContent ?? "").replace(/\u200b/g, "").trim();
      return `${method} ${path}`;
    }),
  );
  const renderedSet = new Set(rendered);
  const expectedSet = new Set(expected);
  const missing = expected.filter((op) => !renderedSet.has(op));
  const extra = [...renderedSet].filter((op) => !expectedSet.has(op));
  const duplicated = rendered.filter((op, i) => rendered.indexOf(op) !== i);
  const ok = rendered.length === expected.length && missing.length === 0 && extra.length === 0;
  let detail = `${rendered.length} rendered of ${expected.length} in the document`;
  for (const op of missing) detail += `\n      missing: ${op}`;
  for (const op of extra) detail += `\n      not in the document: ${op}`;
  for (const op of new Set(duplicated)) detail += `\n      rendered more than once: ${op}`;
  record("every operation rendered", ok, detail);
}

/** Check 2: Authorize with the bearer token, then try GET /identity/did. */
async function checkBearer(page, did) {
  await page.locator(".auth-wrapper button.authorize").first().click();
  const modal = page.locator(".modal-ux");
  await modal.waitFor();
  const container = modal.locator(".auth-container").filter({ hasText: /bearer/i }).first();
  const input = container.locator("input").first();
  if ((await container.count()) === 0 || (await input.count()) === 0) {
    record("bearer scheme in Authorize", false, "no bearer field in the Authorize dialog");
    return;
  }
  await input.fill(token);
  await container.locator("button.authorize, button[type=submit]").first().click();
  // Authorized: the dialog offers "Logout" for the scheme.
  const logout = container.locator("button", { hasText: /logout/i });
  const authorized = await logout.waitFor({ timeout: 5000 }).then(
    () => true,
    () => false,
  );
  await modal.locator("button.btn-done, button.close-modal").first().click();
  await modal.waitFor({ state: "detached" });
  record("bearer scheme in Authorize", authorized, authorized ? "authorized" : "the dialog did not accept the token");
  if (!authorized) return;

  const block = await expand(page, "GET", "/identity/did");
  await block.locator("button.try-out__btn").click();
  const sent = page.waitForRequest((req) => new URL(req.url()).pathname.endsWith("/identity/did"));
  await block.locator("button.execute").click();
  const request = await sent;
  const header = (await request.allHeaders()).authorization ?? "";
  const live = block.locator(".live-responses-table");
  const status = live.locator("tr.response .response-col_status").first();
  await status.waitFor();
  const code = (await status.innerText()).trim();
  const body = (await live.locator("tr.response .response-col_description pre").first().innerText()).trim();
  const ok = header === `Bearer ${token}` && code === "200" && body.includes(did);
  let detail = `GET /identity/did → ${code}, body ${body.replace(/\s+/g, " ").slice(0, 160)}`;
  if (header !== `Bearer ${token}`) detail += `\n      the request's Authorization header was ${JSON.stringify(header.slice(0, 30))}`;
  if (!body.includes(did)) detail += `\n      expected the DID ${did}`;
  record("bearer token used by Try it out", ok, detail);
}

/** Check 3: POST /v1/auth/verify says, as rendered, what to sign. */
async function checkVerifyDescription(page) {
  const block = await expand(page, "POST", "/v1/auth/verify");
  const summary = await block.locator(".opblock-summary-description").first().innerText().catch(() => "");
  // The operation's own description (the parameters' "No parameters" shares the wrapper class).
  const descriptionEl = block.locator(".opblock-description");
  const description = (await descriptionEl.count()) ? await descriptionEl.first().innerText() : "";
  const text = `${summary}\n${description}`.toLowerCase();
  const absent = VERIFY_WORDS.filter((word) => !text.includes(word));
  let detail = absent.length === 0 ? "says what to sign" : `the rendered description lacks ${absent.join(", ")}`;
  if (absent.length) {
    detail += `\n      rendered: ${JSON.stringify(`${summary} ${description}`.replace(/\s+/g, " ").trim().slice(0, 300))}`;
    detail += `\n      suggested (doc comment of verify in crates/gateway-http/src/routes/auth.rs):\n      ${SUGGESTED_VERIFY_TEXT}`;
  }
  record("POST /v1/auth/verify explains what to sign", absent.length === 0, detail);
}

let fatal = null;
try {
  await main();
} catch (err) {
  fatal = err;
}
console.log(`swagger-check: ${base}/swagger-ui/ in ${executablePath}`);
for (const { name, ok, detail } of results) {
  console.log(`  ${ok ? "ok  " : "FAIL"} ${name}${detail ? `: ${detail}` : ""}`);
}
if (fatal) console.error(`swagger-check: ${fatal.message ?? fatal}`);
const failed = results.filter((r) => !r.ok).length;
if (fatal || failed) {
  console.error(`swagger-check: ${fatal ? "stopped early" : `${failed} of ${results.length} checks failed`}`);
  process.exit(1);
}
console.log(`swagger-check: all ${results.length} checks passed`);
