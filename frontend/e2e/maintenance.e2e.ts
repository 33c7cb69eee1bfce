// An admin drains a GPU for maintenance from the Hosts page (Drain: GPUs, from, until, reason),
// a week ahead so that nothing else of the shared system meets it; the calendar of that week
// shows the window as a shaded band with its reason, and a line above the grid from which the
// admin ends it. Cleans up after itself (the window ended) for the files that share the system.
import { afterAll, beforeAll, expect, inject, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot, signedIn } from './browser.mjs'
import { apiCall, gpus, localDay, tokenOf, type Gpu } from './system'

const system = inject('system')
const base = system.url
let browser: Browser
let admin: Page
let gpu: Gpu

// Next week's Wednesday, 08:00-12:00 local time.
const day = new Date()
day.setDate(day.getDate() + ((10 - day.getDay()) % 7 || 7) + 7)
const local = (hour: number) => `${localDay(day)}T${String(hour).padStart(2, '0')}:00`

beforeAll(async () => {
  browser = await launch()
  admin = await signedIn(browser, base, 'admin')
  gpu = (await gpus(base, await tokenOf(base, 'admin'), 8)).find((g) => g.host === 'sim-001' && g.index === 2)!
})

afterAll(async () => {
  const token = await tokenOf(base, 'admin')
  const windows = await apiCall<{ id: number; reason: string }[]>(base, token, 'GET', '/maintenance')
  for (const w of windows.filter((x) => x.reason === 'e2e: new fan')) {
    await apiCall(base, token, 'DELETE', `/maintenance/${w.id}`)
  }
  await browser?.close()
})

it('drains a GPU from the Hosts page and shows the window on the calendar', async () => {
  await admin.goto('/admin/hosts')
  await admin.getByRole('button', { name: 'Drain sim-001' }).click()
  const dialog = admin.getByRole('dialog', { name: 'Drain sim-001 for maintenance' })
  await dialog.getByLabel('GPUs', { exact: true }).fill('2')
  await dialog.getByLabel('From').fill(local(8))
  await dialog.getByLabel('Until').fill(local(12))
  await dialog.getByLabel('Reason').fill('e2e: new fan')
  await dialog.getByRole('button', { name: 'Drain' }).click()
  await expect.poll(() => dialog.getByTestId('drain-done').textContent(), { timeout: 15_000 }).toMatch(
    /sim-001:2 is drained\. No booking overlaps it\./,
  )
  await dialog.getByRole('button', { name: 'Done' }).click()

  await admin.goto(`/reservations?gpus=${gpu.uuid}&week=${localDay(day)}&view=week`)
  const band = admin.getByTestId('maintenance-band')
  await band.first().waitFor({ timeout: 15_000 })
  expect(await band.count()).toBe(1)
  expect(await band.first().getAttribute('title')).toBe('Maintenance: e2e: new fan')
  const notice = admin.getByTestId('maintenance-notice')
  expect(await notice.textContent()).toContain('sim-001:2 drained from')
  await screenshot(admin, '60-calendar-maintenance')

  await notice.getByRole('button', { name: /End/ }).click()
  await expect.poll(() => band.count(), { timeout: 15_000 }).toBe(0)
})
