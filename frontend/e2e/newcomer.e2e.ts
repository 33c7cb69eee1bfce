// A newcomer's first hour, in the browser, on a Warden of its own with a fresh data directory:
// `warden db upgrade` and `warden run all` started with standard input not a terminal and no
// account at all (tests/e2e/web_system.py --fresh, as `make run` runs them) print a one-time
// set-up link; it creates the first administrator; the dashboard's empty state leads to the
// Hosts page; a simulated GPU server (served over SSH, in neither the config nor known_hosts)
// is checked, its key trusted and added; its GPUs show live on the dashboard. Nothing is
// restarted on the way. (The system of e2e/global-setup.ts is not used here.)
import { readFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot } from './browser.mjs'
import { startSystem, type Running } from './start'

// The banner line that holds the link (services/gateway/setup_link.py LINK_PREFIX).
const LINK = /set-up link: (http:\/\/\S+\/setup\?token=[A-Za-z0-9_-]+)/

let running: Running
let browser: Browser
let page: Page
let link = ''

beforeAll(async () => {
  running = await startSystem(['--fresh', '--hosts', '0', '--spare-hosts', '1', '--gpus', '4'])
  // The gateway prints the banner once the reservations service says no admin exists.
  for (let i = 0; i < 200 && !link; i++) {
    link = LINK.exec(readFileSync(running.system.log, 'utf8'))?.[1] ?? ''
    if (!link) await new Promise((r) => setTimeout(r, 300))
  }
  if (!link) throw new Error(`no set-up link in ${running.system.log} after 60 s`)
  browser = await launch()
  const context = await browser.newContext({ viewport: { width: 1440, height: 900 } })
  page = await context.newPage()
})

afterAll(async () => {
  await browser?.close()
  await running?.stop()
})

describe('a newcomer, from nothing to live GPUs', () => {
  it('gets a set-up link from `warden run all` without a terminal, on the port it serves', () => {
    expect(new URL(link).origin).toBe(running.system.url)
  })

  it('creates the first administrator with the link and lands on an empty dashboard that says what to do', async () => {
    await page.goto(link)
    await page.getByRole('heading', { name: 'Create the first administrator' }).waitFor()
    await page.getByLabel('Username').fill('lab-admin')
    await page.getByLabel('Password', { exact: true }).fill('newcomer-pw-1')
    await page.getByLabel('Password again').fill('newcomer-pw-1')
    await page.getByRole('button', { name: 'Create administrator' }).click()
    await page.waitForURL((url) => url.pathname === '/')
    const empty = page.getByTestId('no-hosts')
    await expect.poll(() => empty.textContent(), { timeout: 30_000 }).toMatch(/No hosts are monitored yet/)
    await screenshot(page, '40-newcomer-empty-dashboard')
  })

  it('follows the empty state to the Hosts page and adds a host, trusting its new key', async () => {
    const spare = running.system.spare_hosts[0]!
    await page.getByTestId('no-hosts').getByRole('link', { name: 'Add a host' }).click()
    await page.waitForURL((url) => url.pathname === '/admin/hosts')
    await page.getByRole('button', { name: 'Add a host' }).first().click()
    const dialog = page.getByRole('dialog', { name: 'Add a host' })
    await dialog.getByLabel('Name').fill('gpu-01')
    await dialog.getByLabel('Address').fill(spare.address)
    await dialog.getByLabel('SSH port').fill(String(spare.port))
    await dialog.getByLabel('SSH user').fill(spare.user)
    await dialog.getByLabel('Private key file').fill(spare.key_file)
    await dialog.getByRole('button', { name: 'Check' }).click()
    await expect.poll(() => dialog.getByTestId('host-key-status').textContent(), { timeout: 30_000 }).toBe('new')
    expect(await dialog.getByTestId('host-check').textContent()).toMatch(/4 × /)
    await screenshot(page, '41-newcomer-check')
    await dialog.getByRole('button', { name: 'Trust this key and add' }).click()
    await dialog.waitFor({ state: 'detached' })
    await page.locator('[data-testid="host-row"][data-host="gpu-01"]').waitFor()
  })

  it('sees its GPUs live on the dashboard', async () => {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Dashboard' }).click()
    const cards = page.getByRole('region', { name: 'gpu-01', exact: true }).getByTestId('gpu-card')
    await expect.poll(() => cards.count(), { timeout: 30_000 }).toBe(4)
    await expect.poll(() => cards.first().textContent(), { timeout: 30_000 }).toMatch(/\d+%/)
    await screenshot(page, '42-newcomer-live')
  })
})
