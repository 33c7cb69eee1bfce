// Debian's Chromium driven by playwright-core (these machines cannot download browsers).
import { chromium } from 'playwright-core'
import { mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

export const PASSWORD = 'pw-12345678'
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
export const RESULTS = join(dirname(fileURLToPath(import.meta.url)), '..', 'test-results')

/** @returns {Promise<import('playwright-core').Browser>} */
export function launch() {
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-dev-shm-usage'] })
}

/**
 * A new page of `base`, signed in through the login form as `username`.
 * @param {import('playwright-core').Browser} browser
 * @param {string} base
 * @param {string} username
 * @returns {Promise<import('playwright-core').Page>}
 */
export async function signedIn(browser, base, username, viewport = { width: 1440, height: 900 }) {
  const context = await browser.newContext({ baseURL: base, viewport })
  const page = await context.newPage()
  await signIn(page, username)
  return page
}

/** Signs `page` (whose context has a baseURL) in through the login form.
 * @param {import('playwright-core').Page} page @param {string} username */
export async function signIn(page, username) {
  await page.goto('/login')
  await page.getByLabel('Username').fill(username)
  await page.getByLabel('Password').fill(PASSWORD)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.waitForURL((url) => !url.pathname.startsWith('/login'))
}

/** frontend/test-results/<name>.png, for checking by eye. */
/** @param {import('playwright-core').Page} page @param {string} name */
export async function screenshot(page, name) {
  mkdirSync(RESULTS, { recursive: true })
  await page.screenshot({ path: join(RESULTS, `${name}.png`), fullPage: true })
}
