// Accounts people run themselves, in the browser: an admin invites a colleague, who opens the
// one-time link, chooses a password, signs in with it and changes it on My account; then the
// admin deactivates them and their open tab is signed out.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { PASSWORD, launch, screenshot, signedIn } from './browser.mjs'
import { apiCall, tokenOf } from './system'

const system = inject('system')
const base = system.url
let browser: Browser
let admin: Page
let colleague: Page
let link = ''

beforeAll(async () => {
  browser = await launch()
  admin = await signedIn(browser, base, 'admin')
})

afterAll(async () => {
  await browser?.close()
})

async function signInAs(page: Page, username: string, password: string): Promise<void> {
  await page.goto('/login')
  await page.getByLabel('Username').fill(username)
  await page.getByLabel('Password').fill(password)
  await page.getByRole('button', { name: 'Sign in' }).click()
}

describe('an invited colleague', () => {
  it('is invited by an admin with a link to copy', async () => {
    await admin.goto('/admin/users')
    await admin.getByRole('button', { name: 'Invite', exact: true }).click()
    const dialog = admin.getByRole('dialog')
    await dialog.getByLabel('Username').fill('colleague')
    await dialog.getByLabel('E-mail').fill('colleague@lab.example')
    await dialog.getByRole('button', { name: 'Create invite link' }).click()
    const shown = admin.getByTestId('password-link')
    await shown.waitFor()
    link = await shown.inputValue()
    expect(link).toMatch(new RegExp(`^${base}/password/[\\w-]+$`))
    await screenshot(admin, 'accounts-invite-link')
    await admin.getByRole('button', { name: 'Done' }).click()
    await admin.getByTestId('status-invited').first().waitFor()
  })

  it('opens the link, chooses a password and lands signed in', async () => {
    const context = await browser.newContext({ baseURL: base, viewport: { width: 1280, height: 900 } })
    colleague = await context.newPage()
    await colleague.goto(link)
    await expect.poll(() => colleague.getByTestId('link-username').textContent()).toBe('colleague')
    await colleague.getByLabel('Password', { exact: true }).fill('colleague-first')
    await colleague.getByLabel('Password again').fill('colleague-first')
    await colleague.getByRole('button', { name: 'Set password and sign in' }).click()
    await colleague.waitForURL((url) => url.pathname === '/')
    await colleague.getByRole('heading', { name: 'Dashboard' }).waitFor()
    // The link worked once.
    await colleague.goto(link)
    await colleague.getByRole('alert').filter({ hasText: 'not valid' }).waitFor()
  })

  it('signs in with it and changes it on My account', async () => {
    await colleague.goto('/')
    await colleague.getByRole('button', { name: 'Sign out' }).click()
    await colleague.waitForURL(/\/login/)
    await signInAs(colleague, 'colleague', 'colleague-first')
    await colleague.waitForURL((url) => !url.pathname.startsWith('/login'))
    await colleague.goto('/account')
    await colleague.getByLabel('New password', { exact: true }).fill('colleague-second')
    await colleague.getByLabel('New password again').fill('colleague-second')
    await colleague.getByRole('button', { name: 'Change password' }).click()
    await colleague.getByRole('status').filter({ hasText: 'Password changed' }).waitFor()
    await screenshot(colleague, 'accounts-password-changed')
    // Still signed in, with the new password: the account page's API calls work.
    await colleague.reload()
    await colleague.getByRole('heading', { name: 'My account' }).waitFor()
    const old = await fetch(`${base}/api/v1/session`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ username: 'colleague', password: 'colleague-first' }),
    })
    expect(old.status).toBe(401)
  })

  it('is signed out when an admin deactivates the account', async () => {
    await admin.goto('/admin/users')
    await admin.getByRole('button', { name: 'Deactivate colleague' }).click()
    const dialog = admin.getByRole('dialog')
    await dialog.getByRole('button', { name: 'Deactivate' }).click()
    await admin.getByTestId('status-deactivated').first().waitFor()
    // The colleague's open tab goes to the sign-in page by itself (no click, no reload).
    await colleague.waitForURL(/\/login/, { timeout: 60_000 })
    await signInAs(colleague, 'colleague', 'colleague-second')
    await colleague.getByRole('alert').filter({ hasText: 'deactivated' }).waitFor()
    await screenshot(colleague, 'accounts-deactivated')
  })

  it('is asked for their own password first when an admin chose it', async () => {
    await apiCall(base, await tokenOf(base, 'admin'), 'POST', '/users', { username: 'handmade', email: 'handmade@lab.example', password: PASSWORD })
    const context = await browser.newContext({ baseURL: base, viewport: { width: 1280, height: 900 } })
    const page = await context.newPage()
    await signInAs(page, 'handmade', PASSWORD)
    await page.waitForURL((url) => url.pathname === '/account')
    await page.getByTestId('choose-password').waitFor()
    await page.goto('/reservations')
    await page.waitForURL((url) => url.pathname === '/account') // nothing else until then
    await page.getByLabel('New password', { exact: true }).fill('handmade-own')
    await page.getByLabel('New password again').fill('handmade-own')
    await page.getByRole('button', { name: 'Change password' }).click()
    await page.getByRole('status').filter({ hasText: 'Password changed' }).waitFor()
    await page.goto('/reservations')
    await page.waitForURL((url) => url.pathname === '/reservations')
    await context.close()
  })
})
