// A fresh Warden's first steps in the browser: Warden's SSH key exists from `warden init` on
// and its dialog offers the line (Copy copies it) and a command that installs it; the empty
// dashboard's getting-started checklist ticks a step once it is done; the Help menu opens the
// documentation and the API docs. (A Warden of its own, as e2e/setup.e2e.ts starts it.)
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot } from './browser.mjs'
import { startFreshWarden, type FreshWarden } from './first-run'

const ADMIN_PASSWORD = 'first-admin-pw'
let warden: FreshWarden
let browser: Browser
let admin: Page

beforeAll(async () => {
  warden = await startFreshWarden()
  browser = await launch()
  const context = await browser.newContext({ baseURL: warden.base, viewport: { width: 1280, height: 800 } })
  admin = await context.newPage()
  await admin.goto(warden.link)
  await admin.getByLabel('Username').fill('root1')
  await admin.getByLabel('Password', { exact: true }).fill(ADMIN_PASSWORD)
  await admin.getByLabel('Password again').fill(ADMIN_PASSWORD)
  await admin.getByRole('button', { name: 'Create administrator' }).click()
  await admin.waitForURL((url) => url.pathname === '/')
})

afterAll(async () => {
  await browser?.close()
  await warden?.stop()
})

describe('Warden on its first run', () => {
  it('shows its own SSH key on the sign-in page, with a command that installs it; Copy copies the line', async () => {
    const context = await browser.newContext({ baseURL: warden.base, permissions: ['clipboard-read', 'clipboard-write'] })
    const page = await context.newPage()
    await page.goto('/login')
    await page.getByRole('button', { name: /SSH public key/ }).click()
    const line = (await page.getByTestId('ssh-public-key').textContent()) ?? ''
    expect(line).toMatch(/^ssh-ed25519 \S+ warden$/)
    const command = (await page.getByTestId('ssh-install-command').textContent()) ?? ''
    expect(command).toContain(`echo '${line}' >> ~/.ssh/authorized_keys`)
    await page.getByRole('button', { name: 'Copy the line' }).click()
    await page.getByText('Copied.').waitFor()
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(line)
    await page.getByRole('button', { name: 'Copy the command' }).click()
    await expect.poll(() => page.evaluate(() => navigator.clipboard.readText())).toBe(command)
    await screenshot(page, 'ssh-key-dialog')
    await context.close()
  })

  it('leads the admin with a checklist that ticks a step once it is done', async () => {
    const checklist = admin.getByTestId('getting-started')
    await checklist.waitFor()
    for (const step of ['host', 'people', 'alerts', 'book']) {
      expect(await checklist.locator(`[data-step="${step}"]`).getAttribute('data-done')).toBe('false')
    }
    await screenshot(admin, 'getting-started')
    // A colleague gets an account (elsewhere: the API): the step ticks itself on this page.
    const token = await admin.evaluate(async (password) => {
      const answer = await fetch('/api/v1/session', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ username: 'root1', password }),
      })
      return ((await answer.json()) as { access_token: string }).access_token
    }, ADMIN_PASSWORD)
    const made = await fetch(`${warden.base}/api/v1/users`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ username: 'erin', password: 'erin-password-1', email: 'erin@lab.example' }),
    })
    expect(made.status).toBe(201)
    await checklist.locator('[data-step="people"][data-done="true"]').waitFor({ timeout: 30_000 })
    expect(await checklist.locator('[data-step="host"]').getAttribute('data-done')).toBe('false')
  })

  it('has a Help menu that opens the documentation and the API docs', async () => {
    await admin.getByText('Help', { exact: true }).click()
    const docs = admin.getByRole('link', { name: 'Documentation' })
    expect(await docs.getAttribute('href')).toBe('/docs/')
    const opened = admin.context().waitForEvent('page')
    await admin.getByRole('link', { name: 'API docs' }).click()
    const apiDocs = await opened
    await apiDocs.locator('.opblock-tag').first().waitFor()
    expect(await apiDocs.locator('.opblock-tag', { hasText: 'system' }).count()).toBe(1)
    await apiDocs.close()
  })
})
