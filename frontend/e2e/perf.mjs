// The dashboard under load, measured in Debian's Chromium (used by bench/web_ui.py):
//   node e2e/perf.mjs URL WARMUP_S MEASURE_S
// prints one JSON object: the JavaScript the first load transfers (gzip, from dist/*.gz, which
// the gateway sends), the GPU cards shown, samples received, the tab's main-thread busy time
// (CDP TaskDuration), the renderer's CPU (from /proc), frame intervals and long tasks.
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { launch, signIn } from './browser.mjs'

const [base, warmupS = '20', measureS = '60'] = process.argv.slice(2)
const dist = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist')

/** utime + stime (clock ticks) of every Chromium renderer process. */
function rendererTicks() {
  let ticks = 0
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8')
      if (!cmdline.includes('chromium') || !cmdline.includes('--type=renderer')) continue
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
      ticks += Number(fields[11]) + Number(fields[12])
    } catch {
      /* gone */
    }
  }
  return ticks
}
const TICKS_PER_S = 100 // USER_HZ on Linux

const browser = await launch()
try {
  const context = await browser.newContext({ baseURL: base, viewport: { width: 1600, height: 1000 } })
  await context.addInitScript(() => {
    // Count the host samples the page receives, and every frame and long task.
    const w = /** @type {any} */ (window)
    w.__samples = 0
    w.__frames = []
    w.__longTasks = []
    const Original = window.EventSource
    window.EventSource = class extends Original {
      constructor(url, init) {
        super(url, init)
        this.addEventListener('host.sampled', () => w.__samples++)
      }
    }
    const tick = (t) => {
      w.__frames.push(t)
      requestAnimationFrame(tick)
    }
    requestAnimationFrame(tick)
    new PerformanceObserver((list) => list.getEntries().forEach((e) => w.__longTasks.push(e.duration))).observe({ type: 'longtask', buffered: true })
  })
  const scripts = new Set()
  context.on('response', (r) => {
    const path = new URL(r.url()).pathname
    if (path.endsWith('.js')) scripts.add(path)
  })
  const page = await context.newPage()
  await signIn(page, 'admin')
  await page.waitForSelector('[data-testid="gpu-card"]', { timeout: 60_000 })
  const gz = (path) => {
    const file = join(dist, path)
    return existsSync(`${file}.gz`) ? statSync(`${file}.gz`).size : statSync(file).size
  }
  const initialJs = [...scripts].reduce((sum, p) => sum + gz(p), 0)
  await page.waitForTimeout(Number(warmupS) * 1000)

  const cdp = await page.context().newCDPSession(page)
  await cdp.send('Performance.enable')
  const busy = async () => (await cdp.send('Performance.getMetrics')).metrics.find((m) => m.name === 'TaskDuration').value
  await page.evaluate(() => {
    const w = /** @type {any} */ (window)
    w.__samples = 0
    w.__frames = []
    w.__longTasks = []
  })
  const busy0 = await busy()
  const ticks0 = rendererTicks()
  const t0 = Date.now()
  await page.waitForTimeout(Number(measureS) * 1000)
  const elapsed = (Date.now() - t0) / 1000
  const busy1 = await busy()
  const ticks1 = rendererTicks()
  const page_ = await page.evaluate(() => {
    const w = /** @type {any} */ (window)
    const f = w.__frames
    const gaps = f.slice(1).map((t, i) => t - f[i]).sort((a, b) => a - b)
    const q = (p) => (gaps.length ? gaps[Math.min(gaps.length - 1, Math.floor(p * gaps.length))] : null)
    return {
      cards: document.querySelectorAll('[data-testid="gpu-card"]').length,
      samples: w.__samples,
      frames: f.length,
      frame_p50_ms: q(0.5),
      frame_p99_ms: q(0.99),
      frame_max_ms: gaps.length ? gaps[gaps.length - 1] : null,
      frames_over_50ms: gaps.filter((g) => g > 50).length,
      long_tasks: w.__longTasks.length,
      long_task_max_ms: w.__longTasks.length ? Math.max(...w.__longTasks) : 0,
    }
  })
  console.log(
    JSON.stringify({
      initial_js_gzip_bytes: initialJs,
      initial_js_files: [...scripts].length,
      measured_s: elapsed,
      main_thread_busy_pct: (100 * (busy1 - busy0)) / elapsed,
      renderer_cpu_pct: (100 * (ticks1 - ticks0)) / TICKS_PER_S / elapsed,
      ...page_,
    }),
  )
} finally {
  await browser.close()
}
