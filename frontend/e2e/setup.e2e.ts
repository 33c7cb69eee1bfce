// The first run in the browser: a Warden of its own with no administrator (`warden run all`,
// stdin not a terminal, a fresh data directory) prints a one-time set-up link; opened in
// Chromium it creates the first administrator and lands signed in on the dashboard. The link
// then refuses to be used again. (The system of e2e/global-setup.ts is not used here.)
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Browser } from 'playwright-core'
import { launch, screenshot } from './browser.mjs'
import { startFreshWarden, type FreshWarden } from './first-run'

let warden: FreshWarden
let link = ''
let browser: Browser

beforeAll(async () => {
  warden = await startFreshWarden()
  link = warden.link
  // As under `make run`: no terminal, so no prompt; it says the link is coming.
  expect(warden.init).toMatch(/no admin yet: .*set-up link/)
  browser = await launch()
})

afterAll(async () => {
  await browser?.close()
  await warden?.stop()
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
