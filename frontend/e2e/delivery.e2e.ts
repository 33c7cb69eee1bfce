// Squatters are told, out of the box, with no TOML edited and no restart, on a Warden of its own
// (tests/e2e/web_system.py --default-steps: the escalation steps `warden init` writes) with a
// real SMTP server (tests/support/mail_sink.py, aiosmtpd) and a real HTTP receiver for the
// Slack-style webhook. Fresh, a squat's e-mail and chat steps read "skipped" (never pending)
// and the admin sees that violations reach nobody; the admin sets up SMTP and the webhook on
// the Settings page and tests both; the next squat reaches the owner and the offender by
// e-mail, the chat channel and the offender's terminal (the simulated host's tty, written by
// the host's management user). (The system of e2e/global-setup.ts is not used here.)
import { spawn, type ChildProcess } from 'node:child_process'
import { createServer, type Server } from 'node:http'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createInterface } from 'node:readline'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot, signedIn } from './browser.mjs'
import { startSystem, type Running } from './start'
import { apiCall, control, gpus, tokenOf } from './system'

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
const HOOK_PATH = '/services/T0/B0/chat-TOKEN-e2e'

let running: Running
let browser: Browser
let admin: Page
let sink: ChildProcess
let smtpPort = 0
const mails: { to: string[]; subject: string }[] = []
let receiver: Server
let hookUrl = ''
const posts: string[] = []

async function startMailSink(): Promise<void> {
  sink = spawn(join(repo, '.venv', 'bin', 'python'), ['-m', 'tests.support.mail_sink'], {
    cwd: repo,
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const lines = createInterface({ input: sink.stdout! })
  smtpPort = await new Promise<number>((resolve) => {
    lines.on('line', (line) => {
      const parsed = JSON.parse(line) as { port?: number; to?: string[]; subject?: string }
      if (parsed.port) resolve(parsed.port)
      else mails.push({ to: parsed.to ?? [], subject: parsed.subject ?? '' })
    })
  })
}

async function startReceiver(): Promise<void> {
  receiver = createServer((request, response) => {
    let body = ''
    request.on('data', (chunk) => (body += chunk))
    request.on('end', () => {
      if (request.url === HOOK_PATH) posts.push(body)
      response.end('ok')
    })
  })
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve))
  const address = receiver.address()
  if (!address || typeof address === 'string') throw new Error('the receiver has no port')
  hookUrl = `http://127.0.0.1:${address.port}${HOOK_PATH}`
}

/** alice books GPU `index` of the host; bob logs in there and runs a process on it. bob's tty. */
async function squat(index: number): Promise<string> {
  const host = running.system.hosts[0]!
  const alice = await tokenOf(running.system.url, 'alice')
  await gpus(running.system.url, alice, 4)
  await apiCall(running.system.url, alice, 'POST', '/reservations', {
    gpus: [`${host}:${index}`],
    start: new Date().toISOString(),
    duration_minutes: 60,
    title: 'Protected run',
  })
  const { tty } = await control<{ tty: string }>(running.system.control, 'POST', `/hosts/${host}/logins`, { user: 'bob' })
  await control(running.system.control, 'POST', `/hosts/${host}/processes`, { gpu: index, user: 'bob', command: 'python squat.py' })
  return tty
}

async function ttyMessages(tty: string): Promise<string[]> {
  const host = running.system.hosts[0]!
  const { sessions } = await control<{ sessions: { tty: string; messages: string[] }[] }>(running.system.control, 'GET', `/hosts/${host}/ttys`)
  return sessions.find((s) => s.tty === tty)?.messages ?? []
}

/** The last step of the incident on GPU `index` of the host, as the Violations page shows it. */
function lastStepOf(page: Page, index: number) {
  const gpu = `${running.system.hosts[0]!}:${index}`
  return page.getByTestId('violation-row').filter({ hasText: gpu }).getByTestId('last-step')
}

beforeAll(async () => {
  await Promise.all([startMailSink(), startReceiver()])
  running = await startSystem(['--hosts', '1', '--gpus', '4', '--default-steps'])
  browser = await launch()
  admin = await signedIn(browser, running.system.url, 'admin')
})

afterAll(async () => {
  await browser?.close()
  await running?.stop()
  sink?.kill('SIGTERM')
  receiver?.close()
})

describe('squatters are told, set up in the browser', () => {
  it('fresh: the admin is told violations reach nobody, and a squat is skipped, not pending', async () => {
    await expect.poll(() => admin.getByTestId('delivery-banner').textContent(), { timeout: 30_000 }).toContain('Violations reach nobody')
    const tty = await squat(1)
    await admin.goto('/violations')
    const step = lastStepOf(admin, 1)
    await expect.poll(() => step.textContent(), { timeout: 30_000 }).toContain('skipped')
    expect(await step.getAttribute('title')).toMatch(/no chat webhook is set up/)
    await expect.poll(() => ttyMessages(tty), { timeout: 30_000 }).toHaveLength(1) // the terminal works already
    await screenshot(admin, '50-delivery-skipped')
  })

  it("the Hosts page says the host's login writes warnings on terminals (group tty)", async () => {
    const host = running.system.hosts[0]!
    await admin.goto('/admin/hosts')
    await admin.locator(`[data-testid="host-row"][data-host="${host}"]`).getByRole('button', { name: `Check ${host}` }).click()
    const dialog = admin.getByRole('dialog', { name: `Check ${host}` })
    await expect.poll(() => dialog.getByTestId('host-terminals').textContent(), { timeout: 30_000 }).toContain('in group tty')
    expect(await dialog.getByTestId('host-terminals').textContent()).toContain('writes')
    await dialog.getByRole('button', { name: 'Close' }).last().click()
    await admin.goto('/')
  })

  it('sets up e-mail and a chat webhook on the Settings page and tests both', async () => {
    await admin.getByTestId('delivery-banner').getByRole('link', { name: 'Settings' }).click()
    await admin.waitForURL('**/admin/settings')
    await expect.poll(() => admin.getByTestId('smtp-source').textContent()).toBe('Not set up.')
    await admin.getByTestId('smtp-host').fill('127.0.0.1')
    await admin.getByTestId('smtp-port').fill(String(smtpPort))
    await admin.getByTestId('smtp-security').selectOption('none')
    await admin.getByTestId('smtp-from').fill('warden@lab.example')
    await admin.getByTestId('save-smtp').click()
    await expect.poll(() => admin.getByTestId('smtp-source').textContent()).toContain('Saved here')
    await admin.getByTestId('test-email').click()
    await expect.poll(() => admin.getByTestId('test-outcomes').textContent()).toContain('admin@lab.example: sent')
    await expect.poll(() => mails.filter((m) => m.to.includes('admin@lab.example')).length).toBeGreaterThan(0)

    await admin.getByTestId('hook-name').fill('lab-chat')
    await admin.getByTestId('hook-url').fill(hookUrl)
    await admin.getByTestId('add-hook').click()
    await expect.poll(() => admin.getByTestId('webhooks').textContent()).toContain('http://127.0.0.1/…')
    expect(await admin.getByTestId('webhooks').textContent()).not.toContain('TOKEN')
    await admin.getByTestId('test-webhook').click()
    await expect.poll(() => admin.getByTestId('test-outcomes').textContent()).toContain('lab-chat: sent')
    expect(posts.some((p) => p.includes('Warden test message'))).toBe(true)
    await expect.poll(() => admin.getByTestId('delivery-banner').count()).toBe(0)
    await screenshot(admin, '51-delivery-settings')
  })

  it('the next squat reaches the owner and the offender by e-mail, chat and terminal', async () => {
    const tty = await squat(2)
    const to = (address: string) => mails.filter((m) => m.to.includes(address) && m.subject.includes('GPU 2'))
    await expect.poll(() => to('bob@lab.example').length, { timeout: 30_000 }).toBeGreaterThan(0)
    await expect.poll(() => to('alice@lab.example').length, { timeout: 30_000 }).toBeGreaterThan(0)
    await expect.poll(() => posts.filter((p) => p.includes('bob')).length, { timeout: 30_000 }).toBeGreaterThan(0)
    await expect.poll(() => ttyMessages(tty), { timeout: 30_000 }).toHaveLength(1)
    expect((await ttyMessages(tty))[0]).toContain('alice')
    await admin.goto('/violations')
    await expect.poll(() => lastStepOf(admin, 2).textContent(), { timeout: 30_000 }).toContain('done')
    await screenshot(admin, '52-delivery-reached')
  })
})
