// Notification settings from the web UI: alice opens them from "My account", turns e-mail off
// for failed jobs and sets a reminder lead time, and both survive a reload; "Send me a test"
// reaches her page over the live stream as a toast. Puts her preferences back afterwards for
// the files that share the system.
import { afterAll, beforeAll, expect, inject, it } from 'vitest'
import type { Browser } from 'playwright-core'
import { launch, screenshot, signedIn } from './browser.mjs'
import { apiCall, tokenOf } from './system'

const system = inject('system')
const base = system.url
let browser: Browser

beforeAll(async () => {
  browser = await launch()
})

afterAll(async () => {
  const alice = await tokenOf(base, 'alice')
  await apiCall(base, alice, 'PUT', '/me/notifications', {
    kinds: [{ kind: 'job_failed', email: true, chat: true, browser: true }],
    start_lead_min: 10,
  }).catch(() => undefined)
  await browser?.close()
})

it('saves preferences that survive a reload and shows a notification in the page', async () => {
  const alice = await signedIn(browser, base, 'alice')
  await alice.getByRole('link', { name: 'alice', exact: true }).click()
  await alice.waitForURL('**/account')
  await alice.getByTestId('notifications-link').click()
  await alice.waitForURL('**/account/notifications')

  const mail = alice.getByTestId('pref-job_failed-email')
  await expect.poll(() => mail.isChecked()).toBe(true) // the default: failed jobs by e-mail
  await mail.uncheck()
  await alice.getByTestId('start-lead').fill('7')
  await alice.getByTestId('save-notifications').click()
  await expect.poll(() => alice.getByRole('status').filter({ hasText: 'Saved.' }).count()).toBe(1)

  await alice.reload()
  await expect.poll(() => alice.getByTestId('start-lead').inputValue()).toBe('7')
  expect(await alice.getByTestId('pref-job_failed-email').isChecked()).toBe(false)
  expect(await alice.getByTestId('pref-job_failed-browser').isChecked()).toBe(true)

  await alice.getByTestId('test-notification').click()
  const toast = alice.getByTestId('notification-toast').filter({ hasText: 'Warden test notification' })
  await expect.poll(() => toast.count()).toBeGreaterThan(0)
  await expect
    .poll(() => alice.getByTestId('sent-list').textContent())
    .toContain('Warden test notification')
  await screenshot(alice, 'notifications')
})
