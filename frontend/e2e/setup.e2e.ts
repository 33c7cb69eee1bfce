// The first run in the browser: a Warden of its own with no administrator (`warden run all`,
// stdin not a terminal, a fresh data directory) prints a one-time set-up link; opened in
// Chromium it creates the first administrator and lands signed in on the dashboard. The link
// then refuses to be used again. (The system of e2e/global-setup.ts is not used here.)
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Browser } from 'playwright-core'
import { launch, screenshot } from './browser.mjs'

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
const python = join(repo, '.venv', 'bin', 'python')
// The line of the gateway's banner that holds the link (services/gateway/setup_link.py).
const LINK = /set-up link: (http:\/\/\S+\/setup\?token=[A-Za-z0-9_-]+)/

let tmp: string
let child: ChildProcess | undefined
let output = ''
let link = ''
let browser: Browser

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port
      server.close(() => resolve(port))
    })
  })
}

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'warden-setup-e2e-'))
  const port = await freePort()
  const env: Record<string, string> = {}
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith('WARDEN_') && value !== undefined) env[key] = value
  Object.assign(env, {
    HOME: tmp,
    XDG_CONFIG_HOME: join(tmp, 'config'),
    XDG_DATA_HOME: join(tmp, 'data'),
    PYTHONUNBUFFERED: '1',
    WARDEN_GATEWAY_PORT: String(port),
    WARDEN_MONITOR_LOCAL_NVML: 'off',
  })
  const config = join(tmp, 'warden.toml')
  const warden = (...args: string[]) => [python, ['-m', 'services.cli', ...args, '--config', config]] as const
  // As `make run` does it: init (no terminal: no prompt), then every service in one process.
  const init = spawnSync(...warden('init', '--data-dir', join(tmp, 'state')), { cwd: repo, env, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' })
  if (init.status !== 0) throw new Error(`warden init failed: ${init.stdout}${init.stderr}`)
  expect(init.stdout).toMatch(/no admin yet: .*set-up link/)
  child = spawn(...warden('run', 'all'), { cwd: repo, env, stdio: ['ignore', 'pipe', 'pipe'] })
  link = await new Promise<string>((resolve, reject) => {
    const seen = (chunk: Buffer) => {
      output += chunk.toString()
      const found = LINK.exec(output)
      if (found) resolve(found[1])
    }
    child!.stdout!.on('data', seen)
    child!.stderr!.on('data', seen)
    child!.once('exit', (code) => reject(new Error(`warden run all exited with ${code}:\n${output}`)))
  })
  browser = await launch()
})

afterAll(async () => {
  await browser?.close()
  if (child && child.exitCode === null) {
    const exited = new Promise((resolve) => child!.once('exit', resolve))
    child.kill('SIGTERM')
    await exited
  }
  if (tmp) rmSync(tmp, { recursive: true, force: true })
})

describe('the first run', () => {
  it('prints a link on loopback with the port it listens on', () => {
    expect(link).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/setup\?token=/)
  })

  it('says on the sign-in page that the set-up is to be done', async () => {
    const page = await browser.newPage({ baseURL: new URL(link).origin })
    await page.goto('/login')
    await page.getByTestId('setup-hint').waitFor()
    await page.getByRole('link', { name: /how to create the first administrator/ }).click()
    await page.getByText('setup-link').first().waitFor()
    await page.close()
  })

  it('creates the first administrator from the link and lands signed in on the dashboard', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
    const page = await context.newPage()
    await page.goto(link)
    await page.getByRole('heading', { name: 'Create the first administrator' }).waitFor()
    await page.getByLabel('Username').fill('root1')
    await page.getByLabel('Password', { exact: true }).fill('first-admin-pw')
    await page.getByLabel('Password again').fill('first-admin-pX')
    await page.getByRole('button', { name: 'Create administrator' }).click()
    await page.getByText('The two passwords differ.').waitFor()
    await page.getByLabel('Password again').fill('first-admin-pw')
    await screenshot(page, 'setup-form')
    await page.getByRole('button', { name: 'Create administrator' }).click()
    await page.waitForURL((url) => url.pathname === '/')
    await page.getByRole('heading', { name: 'Dashboard' }).waitFor()
    // Signed in as the new admin: the admin pages open.
    await page.goto(new URL('/admin/users', link).href)
    await page.getByRole('cell', { name: 'root1 (you)' }).waitFor()
    await page.getByRole('cell', { name: 'root1@localhost' }).waitFor() // the e-mail left out
    await context.close()
  })

  it('refuses the link once the administrator exists', async () => {
    const page = await browser.newPage()
    await page.goto(link)
    await page.getByText('The first administrator exists already').waitFor()
    const answer = await fetch(new URL('/api/v1/setup', link), {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ token: new URL(link).searchParams.get('token'), username: 'intruder', password: 'another-password' }),
    })
    expect(answer.status).toBe(409)
    await page.close()
  })
})
