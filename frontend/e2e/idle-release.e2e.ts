// Idle reservations given back, in the browser: an admin's rule gives alice's bookings on one
// GPU an idle policy in seconds (idle after 3 s, released 20 s after the notice); alice books
// that idle simulated GPU now, sees the prompt on her dashboard with "I still need it" and
// "Release now", does nothing, and the reservation ends: its page says so and the GPU is free
// for bob at once. The admin's rules page counts it. Cleans up its rule for the other files.
import { afterAll, beforeAll, expect, inject, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot, signedIn } from './browser.mjs'
import { apiCall, gpus, tokenOf, type Gpu } from './system'

const system = inject('system')
const base = system.url
let browser: Browser
let alice: Page
let gpu: Gpu
let ruleId = 0
let bobsId = 0

interface Created { id: number; start: string; end: string; status: string }

beforeAll(async () => {
  browser = await launch()
  const admin = await tokenOf(base, 'admin')
  gpu = (await gpus(base, admin, 8)).find((g) => g.host === 'sim-002' && g.index === 2)!
  const rule = await apiCall<{ id: number }>(base, admin, 'POST', '/rules', {
    name: 'E2E idle policy',
    users: ['alice'],
    gpus: [gpu.uuid],
    idle_policy: { below_util_percent: 5, below_memory_mib: 1024, for_minutes: 0.05, grace_minutes: 0.34, snooze_minutes: 10 },
  })
  ruleId = rule.id
})

afterAll(async () => {
  const admin = await tokenOf(base, 'admin')
  if (ruleId) await apiCall(base, admin, 'DELETE', `/rules/${ruleId}`)
  if (bobsId) await apiCall(base, await tokenOf(base, 'bob'), 'DELETE', `/reservations/${bobsId}`).catch(() => undefined)
  await browser?.close()
})

it('prompts the owner of an idle booking, and with no answer gives the GPU back', async () => {
  const owner = await tokenOf(base, 'alice')
  const booked = await apiCall<Created>(base, owner, 'POST', '/reservations', {
    gpus: [gpu.uuid], start: new Date().toISOString(), duration_minutes: 60, title: 'E2E idle run',
  })
  alice = await signedIn(browser, base, 'alice')
  const prompt = alice.getByTestId('idle-notice').filter({ hasText: 'E2E idle run' })
  await expect.poll(() => prompt.count(), { timeout: 60_000 }).toBe(1)
  await expect.poll(() => prompt.getByRole('button', { name: 'I still need it' }).isVisible()).toBe(true)
  expect(await prompt.getByRole('button', { name: 'Release now' }).isVisible()).toBe(true)
  await screenshot(alice, 'idle-prompt')

  // Nothing is clicked: the grace runs out, the prompt goes and the reservation has ended.
  await expect.poll(() => prompt.count(), { timeout: 60_000 }).toBe(0)
  await alice.goto(`${base}/reservations/${booked.id}`)
  await expect.poll(() => alice.locator('.badge').first().textContent(), { timeout: 30_000 }).toBe('ended')
  const ended = await apiCall<Created>(base, owner, 'GET', `/reservations/${booked.id}`)
  expect(new Date(ended.end).getTime()).toBeLessThan(new Date(booked.end).getTime())

  // The GPU is free at once: bob books it from the moment it was released.
  const bobs = await apiCall<Created>(base, await tokenOf(base, 'bob'), 'POST', '/reservations', {
    gpus: [gpu.uuid], start: ended.end, duration_minutes: 30, title: 'E2E after idle',
  })
  bobsId = bobs.id
  expect(bobs.status).toBe('active')

  // The admin sees it counted.
  const admin = await signedIn(browser, base, 'admin')
  await admin.goto(`${base}/admin/rules`)
  const row = admin.getByTestId('idle-stats').getByRole('row').filter({ hasText: 'alice' })
  await expect.poll(() => row.textContent(), { timeout: 30_000 }).toMatch(/alice\s*1\s*0\s*0\s*1/)
  await admin.close()
})

it('opens a notice link signed out, and a link Warden did not sign does nothing', async () => {
  const page = await browser.newPage()
  await page.goto(`${base}/idle/1.1.${'0'.repeat(32)}?action=release`)
  await expect.poll(() => page.getByRole('heading', { name: 'Idle reservation' }).isVisible()).toBe(true)
  await expect.poll(() => page.getByText('no idle notice has this link').isVisible(), { timeout: 15_000 }).toBe(true)
  expect(await page.getByRole('button', { name: 'Release now' }).count()).toBe(0)
  expect(page.url()).toContain('/idle/') // not sent to the sign-in page
  await page.close()
})
