// Self-signup by SSH key in the browser. A Warden of its own with `[auth] ssh_signup = true`
// (tests/e2e/web_system.py --ssh-signup) against one simulated host: on it every Unix user
// exists and holds Warden's key, so the proof (Warden logging in as the person, `id -un`)
// succeeds; the refusals of a real sshd (key not installed, unknown user) are covered by
// tests/e2e/test_api_signup.py. The shared system of e2e/global-setup.ts has signup off.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot } from './browser.mjs'
import { startSystem, type Running } from './start'
import { control } from './system'

const shared = inject('system')
let running: Running
let browser: Browser

beforeAll(async () => {
  running = await startSystem(['--hosts', '1', '--gpus', '1', '--ssh-signup'])
  browser = await launch()
})

afterAll(async () => {
  await browser?.close()
  await running?.stop()
})

async function fillForm(page: Page, username: string): Promise<void> {
  await page.getByLabel('Username').fill(username)
  await page.getByLabel('E-mail').fill(`${username}@example.org`)
  await page.getByLabel('Password', { exact: true }).fill('signup-password')
  await page.getByLabel('Password again').fill('signup-password')
  await page.getByLabel('Host with the key').selectOption(running.system.hosts[0])
}

describe('self-signup by SSH key', () => {
  it('is linked from sign-in and shows the key line to add', async () => {
    const page = await browser.newPage({ baseURL: running.system.url })
    await page.goto('/login')
    await page.getByRole('link', { name: 'Sign up with your SSH key' }).click()
    await page.getByRole('heading', { name: 'Sign up with your SSH key' }).waitFor()
    const key = (await (await fetch(`${running.system.url}/api/v1/ssh-key`)).json()) as { public_key: string }
    expect((await page.getByTestId('signup-key').textContent())?.trim()).toBe(key.public_key)
    await page.close()
  })

  it('says why when the host cannot be reached', async () => {
    const host = running.system.hosts[0]
    const page = await browser.newPage({ baseURL: running.system.url })
    await page.goto('/signup')
    await fillForm(page, 'latecomer')
    await control(running.system.control, 'POST', `/hosts/${host}/down`, { down: true })
    try {
      await page.getByRole('button', { name: 'Sign up' }).click()
      await page.getByRole('alert').filter({ hasText: `${host} cannot be reached` }).waitFor()
    } finally {
      await control(running.system.control, 'POST', `/hosts/${host}/down`, { down: false })
    }
    await page.close()
  })

  it('creates the account and lands signed in', async () => {
    const context = await browser.newContext({ baseURL: running.system.url, viewport: { width: 1280, height: 900 } })
    const page = await context.newPage()
    await page.goto('/signup')
    await fillForm(page, 'newcomer')
    await screenshot(page, 'signup-form')
    await page.getByRole('button', { name: 'Sign up' }).click()
    await page.waitForURL((url) => url.pathname === '/')
    await page.getByRole('heading', { name: 'Dashboard' }).waitFor()
    const login = await fetch(`${running.system.url}/api/v1/session`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ username: 'newcomer', password: 'signup-password' }),
    })
    expect(login.status).toBe(201)
    expect(((await login.json()) as { user: { roles: string[] } }).user.roles).toEqual(['user'])
    await context.close()
  })

  it('is neither linked nor offered where it is off', async () => {
    const page = await browser.newPage({ baseURL: shared.url })
    // Once the page has asked whether signup is on (and heard "no"), no link is shown.
    const asked = page.waitForResponse((r) => new URL(r.url()).pathname === '/api/v1/signup')
    await page.goto('/login')
    expect(((await (await asked).json()) as { enabled: boolean }).enabled).toBe(false)
    await page.getByRole('button', { name: 'Sign in' }).waitFor()
    expect(await page.getByTestId('signup-link').count()).toBe(0)
    await page.goto('/signup')
    await page.getByText('Signing up by SSH key is not enabled here').waitFor()
    await page.close()
  })
})
