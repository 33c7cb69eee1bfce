// Booking a GPU that someone else uses right now: the reservation is made, and the calendar
// then says who runs what there (non-blocking, dismissible). Cleans up after itself (the
// process stopped, the reservation ended) for the files that share the system.
import { afterAll, beforeAll, expect, inject, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot, signedIn } from './browser.mjs'
import { apiCall, control, gpus, localDay, tokenOf, type Gpu } from './system'

const system = inject('system')
const base = system.url
let browser: Browser
let alice: Page
let gpu: Gpu
let pid = 0
let reservationId = 0

interface GpuState extends Gpu { processes: { pid: number }[]; sampled_at: string | null }

beforeAll(async () => {
  browser = await launch()
  gpu = (await gpus(base, await tokenOf(base, 'admin'), 8)).find((g) => g.host === 'sim-002' && g.index === 3)!
})

afterAll(async () => {
  if (pid) await control(system.control, 'DELETE', `/hosts/sim-002/processes/${pid}`)
  if (reservationId) {
    // It starts at the next whole minute: cancelled before then, ended once it runs.
    const owner = await tokenOf(base, 'alice')
    await apiCall(base, owner, 'DELETE', `/reservations/${reservationId}`).catch(() =>
      apiCall(base, owner, 'POST', `/reservations/${reservationId}/end`))
  }
  await browser?.close()
})

function localMinute(date: Date): string {
  const pad = (n: number) => String(n).padStart(2, '0')
  return `${localDay(date)}T${pad(date.getHours())}:${pad(date.getMinutes())}`
}

it('books a GPU in use now and shows who runs what there', async () => {
  const admin = await tokenOf(base, 'admin')
  ;({ pid } = await control<{ pid: number }>(system.control, 'POST', '/hosts/sim-002/processes', {
    gpu: 3, user: 'bob', command: 'python squat.py',
  }))
  // Warden has seen it, and polled twice more since (the reservations service reads the same
  // polls as the gateway).
  const state = async () => (await apiCall<{ gpus: GpuState[] }>(base, admin, 'GET', '/gpus')).gpus.find((g) => g.uuid === gpu.uuid)!
  let seenAt = ''
  await expect.poll(async () => {
    const now = await state()
    if (now.processes.some((p) => p.pid === pid)) seenAt ||= now.sampled_at ?? ''
    return seenAt
  }, { timeout: 30_000 }).not.toBe('')
  let later = 0
  await expect.poll(async () => {
    const now = await state()
    if (now.sampled_at && now.sampled_at > seenAt) { seenAt = now.sampled_at; later += 1 }
    return later
  }, { timeout: 30_000 }).toBeGreaterThanOrEqual(2)

  alice = await signedIn(browser, base, 'alice')
  // The next whole minute: "now" (within a minute), and never in the past when it is sent.
  const start = new Date(Math.ceil(Date.now() / 60_000) * 60_000)
  await alice.goto(`/reservations?gpus=${gpu.uuid}&week=${localDay(start)}`)
  await alice.getByRole('button', { name: 'New reservation' }).click()
  const dialog = alice.getByRole('dialog', { name: 'New reservation' })
  await dialog.getByLabel('Title').fill('E2E in use now')
  await dialog.getByLabel('Start').fill(localMinute(start))
  await dialog.getByLabel('End').fill(localMinute(new Date(start.getTime() + 3_600_000)))
  const created = alice.waitForResponse((r) => r.url().endsWith('/api/v1/reservations') && r.request().method() === 'POST')
  await dialog.getByRole('button', { name: 'Reserve' }).click()
  const answer = await created
  expect(answer.status()).toBe(201)
  reservationId = ((await answer.json()) as { id: number }).id

  const notice = alice.getByTestId('booking-warnings')
  await notice.waitFor()
  const text = await notice.textContent()
  expect(text).toContain('sim-002:3')
  expect(text).toContain(`bob runs python squat.py (pid ${pid})`)
  await screenshot(alice, 'booking-warning')
  await notice.getByRole('button', { name: 'Dismiss' }).click()
  await expect.poll(() => notice.count()).toBe(0)
})
