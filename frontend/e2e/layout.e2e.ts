// What a lab with 8-GPU hosts sees at 1440 px: a host's cards in one row with no figure broken,
// the calendar opening on the GPUs you may book and remembering your own choice per user, and
// booking titles readable. Against a system of its own: 2 hosts x 8 GPUs (the shared one has 4).
import { spawn, type ChildProcess } from 'node:child_process'
import { dirname, join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot, signedIn } from './browser.mjs'
import { apiCall, control, gpus, localDay, tokenOf, type Gpu } from './system'

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..')
let child: ChildProcess | undefined
let base = ''
let controlUrl = ''
let browser: Browser
let fleet: Gpu[]
const WIDE = { width: 1440, height: 900 }

const gpuOf = (host: string, index: number) => fleet.find((g) => g.host === host && g.index === index)!

beforeAll(async () => {
  child = spawn(join(repo, '.venv', 'bin', 'python'), ['-m', 'tests.e2e.web_system', '--hosts', '2', '--gpus', '8'], {
    cwd: repo,
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  const line = await new Promise<string>((resolve, reject) => {
    child!.once('exit', (code) => reject(new Error(`tests.e2e.web_system exited with ${code}`)))
    createInterface({ input: child!.stdout! }).once('line', resolve)
  })
  ;({ url: base, control: controlUrl } = JSON.parse(line) as { url: string; control: string })
  fleet = await gpus(base, await tokenOf(base, 'admin'), 16)
  browser = await launch()
})

afterAll(async () => {
  await browser?.close()
  if (child && child.exitCode === null) {
    const exited = new Promise((resolve) => child!.once('exit', resolve))
    child.kill('SIGTERM')
    await exited
  }
  child?.stdin?.destroy()
  child?.stdout?.destroy()
})

/** The calendar's GPUs, as "host GPU index" in the order shown. */
async function calendarGpus(page: Page): Promise<string[]> {
  await page.locator('[data-testid="calendar-column"]').first().waitFor()
  return page.evaluate(() => [
    ...new Set([...document.querySelectorAll<HTMLElement>('[data-testid="calendar-column"]')].map((c) => c.dataset.gpu!)),
  ])
}

describe('8 GPUs per host at 1440 px', () => {
  it('puts a host\'s 8 cards in one row and breaks no figure', async () => {
    // A full GPU: its memory reads 80.0 / 80.0 GiB.
    await control(controlUrl, 'POST', '/hosts/sim-001/processes', { gpu: 3, user: 'bob', command: 'python train.py', used_memory_mib: 81920 })
    const page = await signedIn(browser, base, 'alice', WIDE)
    await page.locator('[data-testid="gpu-card"]').nth(15).waitFor()
    await page.waitForFunction(() => document.querySelector('[data-host="sim-001"][data-index="3"]')?.textContent?.includes('80.0 / 80.0 GiB'))
    const layout = await page.evaluate(() => {
      const cards = [...document.querySelectorAll<HTMLElement>('[data-testid="gpu-card"]')]
      const rows = new Map<string, Set<number>>()
      for (const card of cards) {
        const tops = rows.get(card.dataset.host!) ?? new Set<number>()
        tops.add(Math.round(card.getBoundingClientRect().top))
        rows.set(card.dataset.host!, tops)
      }
      const broken = cards.flatMap((card) =>
        [...card.querySelectorAll('dd')]
          .filter((dd) => dd.getClientRects().length !== 1 || dd.getBoundingClientRect().height > 30 || dd.getBoundingClientRect().right > card.getBoundingClientRect().right)
          .map((dd) => `${card.dataset.host}:${card.dataset.index} ${dd.textContent}`),
      )
      return { cards: cards.length, rows: [...rows.values()].map((t) => t.size), broken, overflow: document.documentElement.scrollWidth - innerWidth }
    })
    await screenshot(page, 'layout-01-dashboard-8-gpus')
    expect(layout).toEqual({ cards: 16, rows: [1, 1], broken: [], overflow: 0 })
  })
})

describe('the calendar', () => {
  it('opens on every GPU you may book, and remembers your own choice per user', async () => {
    // bob may book sim-002 only: the rule for every user goes, one of his own comes.
    const admin = await tokenOf(base, 'admin')
    const rules = await apiCall<{ id: number; name: string }[]>(base, admin, 'GET', '/rules')
    for (const rule of rules) await apiCall(base, admin, 'DELETE', `/rules/${rule.id}`)
    await apiCall(base, admin, 'POST', '/rules', { name: 'bob on sim-002', users: ['bob'], hosts: ['sim-002'] })
    await apiCall(base, admin, 'POST', '/rules', { name: 'alice everywhere', users: ['alice'], all_gpus: true })

    const bob = await signedIn(browser, base, 'bob', WIDE)
    await bob.goto('/reservations')
    const sim002 = fleet.filter((g) => g.host === 'sim-002').map((g) => g.uuid)
    expect(await calendarGpus(bob)).toEqual(sim002)
    expect(await bob.getByRole('button', { name: 'Day', exact: true, pressed: true }).count()).toBe(1) // 8 GPUs: one day

    const alice = await signedIn(browser, base, 'alice', WIDE)
    await alice.goto('/reservations')
    expect(await calendarGpus(alice)).toHaveLength(16)
    // alice keeps two GPUs of sim-001 in view: unticks both hosts, ticks the two.
    await alice.getByText(/GPUs \(\d+ shown\)/).click()
    for (const [host, left] of [['sim-001', 8], ['sim-002', 0]] as const) {
      await alice.locator('legend label', { hasText: host }).locator('input').uncheck()
      await alice.getByText(`GPUs (${left} shown)`).waitFor()
    }
    await alice.getByText('Choose GPUs to show.').waitFor()
    for (const [index, shown] of [[0, 1], [5, 2]]) {
      await alice.locator('.panel').getByLabel(`sim-001 GPU ${index}`).check()
      await alice.getByText(`GPUs (${shown} shown)`).waitFor()
    }
    await alice.goto('/reservations') // no GPUs in the link: her own choice, remembered
    expect(await calendarGpus(alice)).toEqual([gpuOf('sim-001', 0).uuid, gpuOf('sim-001', 5).uuid])
    expect(await alice.getByRole('button', { name: 'Week', exact: true, pressed: true }).count()).toBe(1)

    await bob.reload() // his choice is his own
    expect(await calendarGpus(bob)).toEqual(sim002)
  })

  it('shows a booking\'s whole title', async () => {
    const title = 'ResNet-50 sweep with a learning-rate warm-up'
    // Tomorrow 10:00-12:00: one block on one day, whatever the time the test runs at.
    const start = new Date(Date.now() + 86_400_000)
    start.setHours(10, 0, 0, 0)
    const token = await tokenOf(base, 'alice')
    await apiCall(base, token, 'POST', '/reservations', {
      gpus: [gpuOf('sim-001', 0).uuid],
      start: start.toISOString(),
      end: new Date(start.getTime() + 2 * 3_600_000).toISOString(),
      title,
    })
    const alice = await signedIn(browser, base, 'alice', WIDE)
    await alice.goto(`/reservations?gpus=${gpuOf('sim-001', 0).uuid},${gpuOf('sim-001', 5).uuid}&week=${localDay(start)}`)
    const block = alice.locator('[data-testid="reservation-block"]', { hasText: 'ResNet-50' })
    await block.waitFor()
    await block.scrollIntoViewIfNeeded()
    const shown = await block.locator('.b-title').evaluate((el) => ({
      text: el.textContent,
      // every line of it inside the block: nothing cut at the side or the bottom
      fits: el.scrollWidth <= el.clientWidth && el.getBoundingClientRect().bottom <= el.parentElement!.getBoundingClientRect().bottom,
      lines: Math.round(el.getBoundingClientRect().height / parseFloat(getComputedStyle(el).lineHeight)),
    }))
    expect(shown.text).toBe(title)
    expect(shown.fits).toBe(true)
    expect(shown.lines).toBeGreaterThan(1) // wrapped, not cut with an ellipsis
    expect(await block.getAttribute('title')).toContain(title)
    await screenshot(alice, 'layout-02-calendar-title')
  })
})
