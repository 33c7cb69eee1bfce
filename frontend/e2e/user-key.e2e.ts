// The Hosts page tells, per host, whether Warden's key logs in there as a user (what jobs and
// terminal warnings need): the admin opens "Warden's key" on a host of the simulated fleet,
// names a user and sees the monitor's answer for that host, in words.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot, signedIn } from './browser.mjs'

const system = inject('system')
const host = system.hosts[0]!
let browser: Browser
let admin: Page

beforeAll(async () => {
  browser = await launch()
  admin = await signedIn(browser, system.url, 'admin')
})

afterAll(async () => {
  await browser?.close()
})

describe("Warden's key on a host", () => {
  it('says for a user whether it logs in there', async () => {
    await admin.goto('/admin/hosts')
    await admin.getByRole('button', { name: `Warden's key on ${host}` }).click()
    const dialog = admin.getByRole('dialog', { name: `Warden's key on ${host}` })
    expect(await dialog.getByLabel('Unix user').inputValue()).toBe('admin') // the signed-in admin by default
    await dialog.getByLabel('Unix user').fill('alice')
    await dialog.getByRole('button', { name: 'Check' }).click()
    const result = dialog.getByTestId('user-key-result')
    // The simulated hosts take Warden's key for any user, as a host would once they added it.
    await expect.poll(() => result.textContent(), { timeout: 30_000 }).toContain(`Works: logged in to ${host} as alice`)
    await screenshot(admin, 'hosts-user-key')
  })
})
