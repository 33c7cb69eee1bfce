// Usage reports in the browser: bob held a GPU for a few seconds (a booking made for him and
// ended at once, so other specs find every GPU free); the admin opens Reports from the nav,
// sees bob's row and the total, switches to per-host, and downloads the CSV, which parses back
// to the same rows. bob sees only his own row.
import { readFile } from 'node:fs/promises'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot, signedIn } from './browser.mjs'
import { apiCall, gpus, tokenOf } from './system'

const system = inject('system')
let browser: Browser
let admin: Page

beforeAll(async () => {
  const base = system.url
  const adminToken = await tokenOf(base, 'admin')
  const all = await gpus(base, adminToken, 8)
  const gpu = all.find((g) => g.index === 3 && g.host === all[all.length - 1]!.host) ?? all[all.length - 1]!
  const booked = await apiCall<{ id: number }>(base, adminToken, 'POST', '/reservations', {
    gpus: [gpu.uuid],
    start: new Date().toISOString(),
    duration_minutes: 30,
    title: 'report e2e',
    owner: 'bob',
  })
  await new Promise((r) => setTimeout(r, 2500)) // held for a moment: 0.0007 GPU-hours (figures have 4 decimals)
  await apiCall(base, adminToken, 'POST', `/reservations/${booked.id}/end`)
  browser = await launch()
  admin = await signedIn(browser, base, 'admin')
})

afterAll(async () => {
  await browser?.close()
})

function parseCsv(text: string): string[][] {
  // Warden's CSV quotes nothing these rows hold (names and numbers): split lines and commas.
  return text.trim().split('\n').map((line) => line.split(','))
}

describe('the usage report page', () => {
  it('shows an admin everyone, per user and per host', async () => {
    await admin.goto('/')
    await admin.getByRole('link', { name: 'Reports' }).click()
    await admin.waitForURL((url) => url.pathname === '/reports')
    const bob = admin.getByTestId('report-row').filter({ hasText: 'bob' })
    await bob.waitFor({ timeout: 30_000 })
    expect(await admin.getByTestId('report-total').textContent()).toMatch(/Total/)
    expect(await admin.getByTestId('report-bar').count()).toBeGreaterThan(0)
    await screenshot(admin, '60-reports-by-user')

    await admin.getByTestId('report-by').selectOption('host')
    await expect.poll(() => admin.locator('thead th').first().textContent()).toBe('Host')
    await expect.poll(() => admin.getByTestId('report-row').count()).toBeGreaterThan(0)
    await admin.getByTestId('report-by').selectOption('user')
    await bob.waitFor()
  })

  it('downloads the CSV, which parses back to the rows shown', async () => {
    const shown = await admin.getByTestId('report-row').locator('th').allTextContents()
    const [download] = await Promise.all([admin.waitForEvent('download'), admin.getByTestId('report-csv').click()])
    expect(download.suggestedFilename()).toMatch(/^warden-usage-user-\d{4}-\d{2}-\d{2}-\d{4}-\d{2}-\d{2}\.csv$/)
    const rows = parseCsv(await readFile((await download.path())!, 'utf8'))
    expect(rows[0]).toEqual([
      'user', 'reserved_gpu_hours', 'used_gpu_hours', 'idle_gpu_hours', 'idle_share',
      'unreserved_gpu_hours', 'violations_caused', 'violations_suffered', 'jobs',
    ])
    expect(rows.slice(1, -1).map((r) => r[0])).toEqual(shown)
    expect(rows[rows.length - 1]![0]).toBe('total')
    const bob = rows.find((r) => r[0] === 'bob')!
    expect(Number(bob[1])).toBeGreaterThan(0)
  })

  it('shows a user only their own figures', async () => {
    const page = await signedIn(browser, system.url, 'bob')
    await page.goto('/reports')
    await page.getByTestId('report-row').first().waitFor({ timeout: 30_000 })
    expect(await page.getByTestId('report-row').locator('th').allTextContents()).toEqual(['bob'])
    await page.context().close()
  })

  it('says what is wrong with a period before asking', async () => {
    await admin.getByTestId('report-start').fill('2026-12-01')
    await admin.getByTestId('report-end').fill('2026-11-01')
    await expect.poll(() => admin.getByRole('alert').first().textContent()).toMatch(/after the start/)
    expect(await admin.getByRole('button', { name: 'Show' }).isDisabled()).toBe(true)
  })
})
