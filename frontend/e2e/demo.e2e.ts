// `warden demo` as a newcomer meets it: started on its own (data dir, port), it prints a login;
// signed in with it in Chromium, the dashboard shows the GPUs, the jobs page alice's running
// and bob's queued job, the violations page the seeded open violation with its timeline.
// (The shared system of global-setup.ts is not used here.)
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot } from './browser.mjs'

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
// "  alice / <password>" lines of the block `warden demo` prints at every start.
const LOGIN_RE = /^ {2}([a-z]+) +\/ (\S+)/gm

let child: ChildProcess | undefined
let dataDir: string
let output = ''
let base: string
let logins: Record<string, string> = {}
let browser: Browser

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
}

async function until<T>(what: string, probe: () => T | undefined | Promise<T | undefined>, seconds = 90): Promise<T> {
  for (let i = 0; i < seconds * 4; i++) {
    if (child?.exitCode !== null) throw new Error(`warden demo exited (${child?.exitCode}):\n${output}`)
    const found = await probe()
    if (found !== undefined) return found
    await new Promise((r) => setTimeout(r, 250))
  }
  throw new Error(`no ${what} after ${seconds} s:\n${output.slice(-4000)}`)
}

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'warden-demo-e2e-'))
  const port = await freePort()
  const env: NodeJS.ProcessEnv = { ...process.env, WARDEN_GATEWAY_PORT: String(port), HOME: dataDir, PYTHONUNBUFFERED: '1' }
  delete env.WARDEN_CONFIG // the demo writes and reads its own config
  child = spawn(
    join(repo, '.venv', 'bin', 'warden'),
    ['demo', '--hosts', '2', '--gpus-per-host', '4', '--watch', '0', '--data-dir', join(dataDir, 'demo')],
    {
      cwd: repo,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  )
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()))
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()))
  // The block: "Sign in at http://127.0.0.1:PORT as any of ...", then a line per account.
  base = await until('login block', () => {
    const found = /^Sign in at (http:\/\/\S+) as any of/m.exec(output)
    if (!found) return undefined
    const block = output.slice(found.index)
    logins = Object.fromEntries([...block.matchAll(LOGIN_RE)].map((m) => [m[1], m[2]]))
    return 'admin' in logins && 'alice' in logins && 'bob' in logins ? found[1] : undefined
  })
  expect(base).toBe(`http://127.0.0.1:${port}`)
  await until('the web UI', async () => {
    try {
      return (await fetch(`${base}/api/v1/health`)).ok ? true : undefined
    } catch {
      return undefined
    }
  })
  browser = await launch()
}, 180_000)

afterAll(async () => {
  await browser?.close()
  if (child && child.exitCode === null) {
    const exited = new Promise((resolve) => child!.once('exit', resolve))
    child.kill('SIGTERM')
    let timer: ReturnType<typeof setTimeout> | undefined
    await Promise.race([exited, new Promise((resolve) => (timer = setTimeout(resolve, 30_000)))])
    clearTimeout(timer)
    if (child.exitCode === null) child.kill('SIGKILL')
  }
  child?.stdout?.destroy()
  child?.stderr?.destroy()
  if (dataDir) rmSync(dataDir, { recursive: true, force: true })
})

/** Signs in through the login form with the password the demo printed. */
async function signedInAs(username: string): Promise<Page> {
  const context = await browser.newContext({ baseURL: base, viewport: { width: 1440, height: 900 } })
  const page = await context.newPage()
  await page.goto('/login')
  await page.getByLabel('Username').fill(username)
  await page.getByLabel('Password').fill(logins[username])
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.waitForURL((url) => !url.pathname.startsWith('/login'))
  return page
}

describe('make demo', () => {
  it('prints logins that sign in: the dashboard shows the GPUs', async () => {
    const admin = await signedInAs('admin')
    expect(new URL(admin.url()).pathname).toBe('/')
    const cards = admin.getByTestId('gpu-card')
    await expect.poll(() => cards.count(), { timeout: 30_000 }).toBe(8)
    await expect.poll(() => cards.first().textContent(), { timeout: 30_000 }).toMatch(/\d+%/)
    await screenshot(admin, 'demo-01-dashboard')
  })

  it('shows the seeded jobs and the open violation with its timeline to alice', async () => {
    const alice = await signedInAs('alice')
    await alice.goto('/jobs')
    const rows = alice.getByTestId('job-row')
    await expect.poll(() => rows.filter({ hasText: 'pretrain-7b (demo)' }).textContent(), { timeout: 60_000 }).toMatch(/running/i)
    await alice.getByLabel('Show').selectOption('all') // bob's job is not hers
    await expect.poll(() => rows.filter({ hasText: 'eval-sweep (demo)' }).textContent(), { timeout: 30_000 }).toMatch(/queued/i)
    await screenshot(alice, 'demo-02-jobs')
    await alice.goto('/violations')
    const row = alice.getByTestId('violation-row').filter({ hasText: 'zoe' })
    await expect.poll(() => row.count(), { timeout: 60_000 }).toBeGreaterThan(0)
    await screenshot(alice, 'demo-03-violations')
    await row.first().getByRole('link').first().click()
    await alice.getByTestId('violation-timeline').waitFor()
    await screenshot(alice, 'demo-04-violation')
  })
})
