// dashboard_check.js URL OUTDIR: loads the coordinator's dashboard in Debian's headless chromium
// (driven by playwright-core), while a run is going on, and checks what a person would look at:
// the numbers change between two reads, the group lanes are there, cancelled groups carry their
// marker, the d_K histogram has its threshold line. It measures the page's main-thread
// responsiveness over a few seconds of live updates (long tasks and the largest gap between
// animation frames), saves a screenshot as OUTDIR/dashboard.png and prints one JSON line of
// figures. Exits 1 with a reason on the first failed check.
"use strict";
const { chromium } = require("playwright-core");

const url = process.argv[2];
const outdir = process.argv[3] || ".";
const chromePath = process.env.SELROLL_CHROMIUM || "/usr/bin/chromium";
const measureMs = +(process.env.DASH_MEASURE_MS || 5000);

function fail(msg) {
  console.error("FAIL " + msg);
  process.exitCode = 1;
}

(async () => {
  const browser = await chromium.launch({
    executablePath: chromePath,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.addInitScript(() => {
      window.__long = [];
      window.__gaps = [];
      try {
        new PerformanceObserver((l) => l.getEntries().forEach((e) => window.__long.push(e.duration)))
          .observe({ type: "longtask", buffered: true });
      } catch (e) { /* no long-task support: the frame gaps still tell */ }
    });
    // The browser starts with the run: wait for the coordinator to listen (30 s at most).
    for (let t0 = Date.now(); ; ) {
      try {
        await page.goto(url, { waitUntil: "domcontentloaded" });
        break;
      } catch (e) {
        if (Date.now() - t0 > 30000) throw e;
        await new Promise((r) => setTimeout(r, 250));
      }
    }
    await page.waitForSelector(".group-row .lane", { timeout: 30000 });
    const first = await page.evaluate(() => ({
      actions: document.getElementById("actions").textContent,
      updates: +document.getElementById("updates").textContent,
    }));
    await page.waitForTimeout(1500);
    const second = await page.evaluate(() => ({
      actions: document.getElementById("actions").textContent,
      updates: +document.getElementById("updates").textContent,
    }));
    if (first.actions === second.actions) fail(`steps seen did not change: ${first.actions}`);
    if (second.updates <= first.updates) fail(`no live update arrived (${first.updates} -> ${second.updates})`);
    else console.log(`ok   numbers change: steps seen ${first.actions} -> ${second.actions}, updates ${first.updates} -> ${second.updates}`);

    const lanes = await page.$$eval(".group-row", (rows) => ({
      rows: rows.length,
      lanes: rows.reduce((n, r) => n + r.querySelectorAll(".lane").length, 0),
    }));
    if (lanes.rows < 1 || lanes.lanes < lanes.rows) fail(`group lanes missing: ${JSON.stringify(lanes)}`);
    else console.log(`ok   ${lanes.rows} group rows with ${lanes.lanes} lanes`);
    if (!(await page.$("#hist #threshold"))) fail("the d_K histogram has no threshold line");

    // responsiveness while updates stream in
    const perf = await page.evaluate((ms) => new Promise((resolve) => {
      const gaps = [];
      let last = performance.now();
      const t0 = last;
      const u0 = +document.getElementById("updates").textContent;
      function frame(now) {
        gaps.push(now - last);
        last = now;
        if (now - t0 < ms) requestAnimationFrame(frame);
        else resolve({
          frames: gaps.length,
          max_frame_gap_ms: Math.max(...gaps),
          long_tasks: window.__long.length,
          long_task_ms: window.__long.reduce((a, b) => a + b, 0),
          updates: +document.getElementById("updates").textContent - u0,
          max_redraw_ms: Math.max(0, ...window.selrollDrawMs),
          mean_redraw_ms: window.selrollDrawMs.reduce((a, b) => a + b, 0) / Math.max(1, window.selrollDrawMs.length),
          window_ms: ms,
        });
      }
      requestAnimationFrame(frame);
    }), measureMs);
    console.log(`ok   responsiveness over ${perf.window_ms} ms: ${perf.updates} updates, ${perf.frames} frames, ` +
      `largest frame gap ${perf.max_frame_gap_ms.toFixed(1)} ms, ${perf.long_tasks} long tasks (${perf.long_task_ms.toFixed(0)} ms), ` +
      `redraw ${perf.mean_redraw_ms.toFixed(1)} ms mean / ${perf.max_redraw_ms.toFixed(1)} ms max`);
    if (perf.updates < 1) fail("no update during the measurement");
    // A frozen page is a failure; the figures themselves are reported (the machine is shared).
    if (perf.max_frame_gap_ms > 5000) fail(`the main thread froze for ${perf.max_frame_gap_ms.toFixed(0)} ms`);

    // cancelled groups: wait for one to show (the gate cuts converged groups at K)
    try {
      await page.waitForSelector(".group-row.cancelled .cancel-marker", { timeout: 40000 });
      const m = await page.$eval(".group-row.cancelled .cancel-marker", (e) => e.textContent);
      if (!/K=\d+ d=[0-9.]+/.test(m)) fail(`cancel marker without K and d: ${m}`);
      else console.log(`ok   cancelled-group marker: ${m}`);
    } catch (e) {
      fail("no cancelled-group marker appeared within 40 s");
    }
    await page.screenshot({ path: `${outdir}/dashboard.png`, fullPage: true });
    console.log(`ok   screenshot ${outdir}/dashboard.png`);
    if (errors.length) fail("page errors: " + errors.join("; "));
    console.log("PERF " + JSON.stringify(perf));
  } finally {
    await browser.close();
  }
})().catch((e) => {
  fail(String(e && e.stack || e));
});
