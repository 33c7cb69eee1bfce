// The documentation's screenshots (docs/images/*.png), taken by `make screenshots`:
//   node e2e/screenshots.mjs OUT_DIR
// Starts a Warden of its own (tests/e2e/web_system.py: `warden run all` serving frontend/dist
// against a simulated fleet over SSH, accounts admin, alice and bob), books a few GPUs, has bob
// squat on one of alice's, and shoots the pages in Debian's Chromium. Not a test: a test run
// never writes into docs/.
import { spawn } from 'node:child_process'
import { mkdirSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { PASSWORD, launch, signedIn } from './browser.mjs'

const out = resolve(process.argv[2] ?? 'test-results/docs')
const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
const HOSTS = 3
const GPUS = 4

/** `python -m tests.e2e.web_system`, once its gateway answers: [system, child]. */
async function start() {
  const child = spawn(
    join(repo, '.venv', 'bin', 'python'),
    ['-m', 'tests.e2e.web_system', '--hosts', String(HOSTS), '--gpus', String(GPUS)],
    { cwd: repo, stdio: ['pipe', 'pipe', 'inherit'] },
  )
  const lines = createInterface({ input: child.stdout })
  const system = await new Promise((ok, fail) => {
    child.once('exit', (code) => fail(new Error(`tests.e2e.web_system exited with ${code}`)))
    lines.once('line', (line) => ok(JSON.parse(line)))
  })
  return [system, child]
}

async function call(base, token, method, path, body) {
  const headers = { 'Content-Type': 'application/json' }
  if (token) headers.Authorization = `Bearer ${token}`
  const answer = await fetch(`${base}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await answer.text()
  if (!answer.ok) throw new Error(`${method} ${path}: ${answer.status} ${text}`)
  return text ? JSON.parse(text) : null
}

async function tokenOf(base, username) {
  const answer = await call(base, null, 'POST', '/api/v1/session', { username, password: PASSWORD })
  return answer.access_token
}

/** Every GPU, once the monitor has seen all of them. */
async function allGpus(base, token) {
  for (let i = 0; i < 120; i++) {
    const { gpus } = await call(base, token, 'GET', '/api/v1/gpus')
    if (gpus.length >= HOSTS * GPUS) return gpus
    await new Promise((r) => setTimeout(r, 500))
  }
  throw new Error('the monitor did not see every GPU within 60 s')
}

async function seed(system) {
  const base = system.url
  const [alice, bob] = [await tokenOf(base, 'alice'), await tokenOf(base, 'bob')]
  await allGpus(base, alice)
  const [h1, h2, h3] = system.hosts
  const hour = 3600_000
  const now = Date.now()
  const book = (token, gpus, startIn, hours, title) =>
    call(base, token, 'POST', '/api/v1/reservations', {
      gpus,
      start: new Date(now + startIn).toISOString(),
      duration_minutes: hours * 60,
      title,
    })
  await book(alice, [`${h1}:0`, `${h1}:1`], 0, 6, 'Pretraining, week 2')
  await book(bob, [`${h2}:0`], 0, 3, 'Evaluation suite')
  await book(bob, [`${h1}:2`, `${h1}:3`], 26 * hour, 8, 'Ablations')
  await book(alice, [`${h3}:0`, `${h3}:1`, `${h3}:2`, `${h3}:3`], 50 * hour, 12, 'Long run')
  await call(system.control, null, 'POST', `/hosts/${h1}/processes`, {
    gpu: 1,
    user: 'bob',
    command: 'python notebook.py',
  })
  await call(system.control, null, 'POST', `/hosts/${h1}/processes`, {
    gpu: 0,
    user: 'alice',
    command: 'python train.py',
  })
}

async function shoot(browser, base, user, path, name, wait = 3000) {
  const page = await signedIn(browser, base, user)
  await page.goto(path)
  await page.waitForTimeout(wait)
  await page.screenshot({ path: join(out, `${name}.png`) })
  await page.context().close()
  console.log(join(out, `${name}.png`))
}

const [system, child] = await start()
const browser = await launch()
try {
  mkdirSync(out, { recursive: true })
  await seed(system)
  await new Promise((r) => setTimeout(r, 6000)) // a poll or two: the squat shows as a violation
  await shoot(browser, system.url, 'alice', '/', 'dashboard')
  await shoot(browser, system.url, 'alice', '/reservations/overview', 'overview')
  await shoot(browser, system.url, 'alice', '/violations', 'violations')
  await shoot(browser, system.url, 'admin', '/admin/hosts', 'admin-hosts')
} finally {
  await browser.close()
  child.kill('SIGTERM')
}
