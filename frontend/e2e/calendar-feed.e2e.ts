// The personal calendar feed from the web UI: alice makes her secret address on "My account",
// a calendar (here: fetch) reads it and finds her booking with its UID and UTC times, watching
// a GPU adds it to the address, and revoking makes the address answer 404. Cleans up after
// itself (the booking cancelled, the feed revoked) for the files that share the system.
import { afterAll, beforeAll, expect, inject, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot, signedIn } from './browser.mjs'
import { apiCall, gpus, tokenOf, type Gpu } from './system'

const system = inject('system')
const base = system.url
let browser: Browser
let alice: Page
let gpu: Gpu
let reservationId = 0

interface Created { id: number; start: string; end: string }
type Fields = Record<string, string>

/** The VEVENTs of an iCalendar text (lines unfolded, as RFC 5545 §3.1 says), by UID. */
function events(text: string): Map<string, Fields> {
  const lines = text.replace(/\r?\n[ \t]/g, '').split(/\r?\n/)
  const found = new Map<string, Fields>()
  let current: Fields | null = null
  for (const line of lines) {
    if (line === 'BEGIN:VEVENT') current = {}
    else if (line === 'END:VEVENT' && current) {
      found.set(current.UID, current)
      current = null
    } else if (current) {
      const colon = line.indexOf(':')
      current[line.slice(0, colon).split(';')[0]] = line.slice(colon + 1)
    }
  }
  return found
}

/** An iCalendar UTC time (20261124T090000Z) as a Date. */
function utc(value: string): Date {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(value)
  if (!m) throw new Error(`not a UTC time: ${value}`)
  return new Date(Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]))
}

beforeAll(async () => {
  browser = await launch()
  const admin = await tokenOf(base, 'admin')
  gpu = (await gpus(base, admin, 8)).find((g) => g.host === 'sim-001' && g.index === 2)!
  // Three days ahead, on the hour: clear of the other files' bookings.
  const start = new Date(Math.ceil(Date.now() / 3_600_000) * 3_600_000 + 3 * 86_400_000)
  const made = await apiCall<Created>(base, await tokenOf(base, 'alice'), 'POST', '/reservations', {
    gpus: [gpu.uuid], start: start.toISOString(), duration_minutes: 120,
    title: 'E2E feed run', description: 'for the calendar feed test',
  })
  reservationId = made.id
})

afterAll(async () => {
  const owner = await tokenOf(base, 'alice')
  if (reservationId) await apiCall(base, owner, 'DELETE', `/reservations/${reservationId}`)
  await apiCall(base, owner, 'DELETE', '/me/calendar-feed').catch(() => undefined)
  await browser?.close()
})

it('makes the feed on My account, serves it to a calendar, and revokes it', async () => {
  alice = await signedIn(browser, base, 'alice')
  await alice.getByRole('link', { name: 'alice', exact: true }).click()
  await alice.waitForURL('**/account')
  const panel = alice.getByRole('region', { name: 'Calendar feed' })
  await expect.poll(() => panel.getByTestId('feed-state').textContent()).toContain('no calendar feed')

  await panel.getByRole('button', { name: 'Make my feed address' }).click()
  const address = panel.getByTestId('feed-url')
  await expect.poll(() => address.inputValue()).toMatch(/\/api\/v1\/calendar\/[\w-]+\.ics$/)
  const url = await address.inputValue()
  await screenshot(alice, 'calendar-feed')

  const answer = await fetch(url)
  expect(answer.status).toBe(200)
  expect(answer.headers.get('content-type')).toContain('text/calendar')
  const text = await answer.text()
  expect(text).toMatch(/^BEGIN:VCALENDAR\r\n/)
  const mine = events(text).get(`reservation-${reservationId}@${new URL(url).hostname}`)
  expect(mine).toBeDefined()
  expect(mine!.SUMMARY).toBe(`E2E feed run (${gpu.host}:${gpu.index})`)
  expect(mine!.STATUS).toBe('CONFIRMED')
  const booked = await apiCall<Created>(base, await tokenOf(base, 'alice'), 'GET', `/reservations/${reservationId}`)
  expect(utc(mine!.DTSTART).getTime()).toBe(new Date(booked.start).getTime())
  expect(utc(mine!.DTEND).getTime()).toBe(new Date(booked.end).getTime())

  // Watching GPUs: the address says which, and the feed still answers.
  await panel.getByTestId('feed-watch').fill(`${gpu.host}:${gpu.index}, sim-002:0`)
  await expect.poll(() => address.inputValue()).toBe(`${url}?gpus=${gpu.host}:${gpu.index},sim-002:0`)
  expect((await fetch(await address.inputValue())).status).toBe(200)

  await panel.getByRole('button', { name: 'Revoke' }).click()
  await panel.getByRole('button', { name: 'Yes, revoke' }).click()
  await expect.poll(() => panel.getByTestId('feed-state').textContent()).toContain('no calendar feed')
  expect((await fetch(url)).status).toBe(404)
})
