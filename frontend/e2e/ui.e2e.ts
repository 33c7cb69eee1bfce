// The web UI in Debian's Chromium against `warden run all` and a simulated fleet of 2 hosts x
// 4 GPUs. The tests run in order and share the system: each step builds on the one before, as
// a person would use it. Screenshots of every page go to frontend/test-results/.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot, signedIn } from './browser.mjs'
import { apiCall, control, gpus, localDay, tokenOf, type Gpu } from './system'

const system = inject('system')
const base = system.url
let browser: Browser
let alice: Page
let fleet: Gpu[]

const gpuOf = (host: string, index: number) => fleet.find((g) => g.host === host && g.index === index)!
const tomorrow = new Date(Date.now() + 86_400_000)

beforeAll(async () => {
  browser = await launch()
  fleet = await gpus(base, await tokenOf(base, 'admin'), 8)
})

afterAll(async () => {
  await browser?.close()
})

/** Drags in a calendar column from `fromHour` to `toHour` (it spans 00:00 to 24:00). */
async function dragInCalendar(page: Page, gpu: Gpu, day: string, fromHour: number, toHour: number): Promise<void> {
  const column = page.locator(`[data-testid="calendar-column"][data-gpu="${gpu.uuid}"][data-day="${day}"]`)
  await column.waitFor()
  // Bring 08:00-13:00 into view, then drag there.
  await column.evaluate((el, hour) => {
    const scroller = (function find(node: HTMLElement | null): HTMLElement | null {
      while (node && node !== document.body) {
        if (node.scrollHeight > node.clientHeight + 4 && getComputedStyle(node).overflowY !== 'visible') return node
        node = node.parentElement
      }
      return null
    })(el.parentElement)
    const rect = el.getBoundingClientRect()
    const target = rect.top + (rect.height * hour) / 24
    if (scroller) scroller.scrollTop += target - scroller.getBoundingClientRect().top - 40
    else window.scrollBy(0, target - 120)
  }, fromHour)
  const box = (await column.boundingBox())!
  const x = box.x + box.width / 2
  const y = (hour: number) => box.y + (box.height * hour) / 24 + 2
  await page.mouse.move(x, y(fromHour))
  await page.mouse.down()
  await page.mouse.move(x, y((fromHour + toHour) / 2), { steps: 5 })
  await page.mouse.move(x, y(toHour) - 4, { steps: 5 })
  await page.mouse.up()
}

describe('signing in', () => {
  it('refuses a wrong password with its reason and shows the SSH key to add', async () => {
    const page = await browser.newPage({ baseURL: base })
    await page.goto('/')
    await page.waitForURL(/\/login/)
    await page.getByRole('button', { name: /SSH public key/ }).click()
    await expect.poll(() => page.getByTestId('ssh-public-key').textContent()).toMatch(/^ssh-ed25519 /)
    await screenshot(page, '01-login-ssh-key')
    await page.getByRole('button', { name: 'Close' }).last().click()
    await page.getByLabel('Username').fill('alice')
    await page.getByLabel('Password').fill('not-the-password')
    await page.getByRole('button', { name: 'Sign in' }).click()
    await expect.poll(() => page.getByRole('alert').textContent()).toMatch(/password|credentials|invalid/i)
    await screenshot(page, '02-login-refused')
    await page.close()
  })

  it('signs in and lands on the dashboard', async () => {
    alice = await signedIn(browser, base, 'alice')
    expect(new URL(alice.url()).pathname).toBe('/')
  })
})

describe('dashboard', () => {
  it('shows every GPU live, with its figures', async () => {
    const cards = alice.getByTestId('gpu-card')
    await expect.poll(() => cards.count(), { timeout: 30_000 }).toBe(8)
    const card = alice.locator('[data-testid="gpu-card"][data-host="sim-001"][data-index="0"]')
    await expect.poll(() => card.textContent(), { timeout: 30_000 }).toMatch(/\d+%/)
    await alice.getByLabel('Filter').fill('sim-002')
    await expect.poll(() => cards.count()).toBe(4)
    await alice.getByLabel('Filter').fill('')
    await screenshot(alice, '03-dashboard')
  })

  it('keeps the charts a user arranges', async () => {
    const charts = alice.locator('article.chart')
    await alice.getByRole('button', { name: 'Add chart' }).click()
    await expect.poll(() => charts.count()).toBe(1)
    await alice.locator('[data-testid="gpu-card"][data-host="sim-002"][data-index="1"]').getByRole('button', { name: /Chart/ }).click()
    await expect.poll(() => charts.count()).toBe(2)
    const titles = () => charts.locator('h3').allTextContents()
    const [first, second] = await titles()
    await alice.getByRole('button', { name: `Move ${second} up` }).click()
    await expect.poll(titles).toEqual([second, first])
    await alice.getByRole('button', { name: '1 day' }).click()
    await alice.reload()
    await expect.poll(titles).toEqual([second, first])
    await expect.poll(() => charts.locator('canvas').count(), { timeout: 20_000 }).toBe(2)
    await screenshot(alice, '03b-dashboard-charts')
    await alice.getByRole('button', { name: `Remove ${second}` }).click()
    await alice.getByRole('button', { name: `Remove ${first}` }).click()
    await expect.poll(() => charts.count()).toBe(0)
  })
})

describe('reservations', () => {
  const day = localDay(tomorrow)

  it('makes a reservation by dragging in the calendar', async () => {
    const gpu = gpuOf('sim-001', 1)
    await alice.goto(`/reservations?gpus=${gpu.uuid}&week=${day}`)
    await dragInCalendar(alice, gpu, day, 9, 11)
    const dialog = alice.getByRole('dialog', { name: 'New reservation' })
    await dialog.waitFor()
    await dialog.getByLabel('Title').fill('E2E drag')
    await screenshot(alice, '04-calendar-new')
    await dialog.getByRole('button', { name: 'Reserve' }).click()
    await dialog.waitFor({ state: 'detached' })
    const block = alice.getByTestId('reservation-block').filter({ hasText: 'E2E drag' })
    await expect.poll(() => block.count()).toBe(1)
    const token = await tokenOf(base, 'alice')
    const { items } = await apiCall<{ items: { title: string; start: string; end: string }[] }>(
      base, token, 'GET', `/reservations?gpus=${gpu.uuid}&start=${new Date().toISOString()}&end=${new Date(Date.now() + 3 * 86_400_000).toISOString()}`,
    )
    const made = items.find((r) => r.title === 'E2E drag')!
    expect((new Date(made.end).getTime() - new Date(made.start).getTime()) / 3_600_000).toBe(2)
    expect(new Date(made.start).getHours()).toBe(9)
    await screenshot(alice, '05-calendar')
  })

  it('shows it in the long-term overview', async () => {
    const gpu = gpuOf('sim-001', 1)
    await alice.goto('/reservations/overview')
    const row = alice.locator(`[data-testid="overview-row"][data-gpu="${gpu.uuid}"]`)
    await expect.poll(() => row.textContent(), { timeout: 20_000 }).toContain('E2E drag')
    await screenshot(alice, '06-overview')
  })

  it('refuses an overlapping reservation with the reason', async () => {
    const bob = await signedIn(browser, base, 'bob')
    const gpu = gpuOf('sim-001', 1)
    await bob.goto(`/reservations?gpus=${gpu.uuid}&week=${day}`)
    await dragInCalendar(bob, gpu, day, 8, 10) // into alice's 09:00-11:00
    const dialog = bob.getByRole('dialog', { name: 'New reservation' })
    await dialog.getByLabel('Title').fill('Overlap')
    await dialog.getByRole('button', { name: 'Reserve' }).click()
    await expect.poll(() => dialog.getByRole('alert').textContent()).toMatch(/reserv|overlap|taken|conflict/i)
    await screenshot(bob, '07-calendar-refused')
    await bob.context().close()
  })
})

describe('jobs', () => {
  it('creates a torchrun job from the template and starts it', async () => {
    await alice.goto('/jobs/new')
    await alice.getByLabel('Name', { exact: true }).fill('e2e-torchrun')
    const template = alice.getByLabel('Template')
    const option = await template.locator('option', { hasText: /torchrun/i }).first().getAttribute('value')
    await template.selectOption(option!)
    await expect.poll(() => alice.getByTestId('task-row').count()).toBeGreaterThan(0)
    await expect.poll(() => alice.getByTestId('command-preview').textContent(), { timeout: 15_000 }).toMatch(/torchrun/)
    await screenshot(alice, '08-job-editor')
    await alice.getByRole('button', { name: 'Save' }).click()
    await alice.waitForURL(/\/jobs\/\d+$/)
    await alice.getByRole('button', { name: 'Start' }).click()
    await expect
      .poll(() => alice.getByTestId('job-status').textContent(), { timeout: 30_000 })
      .toMatch(/running|finished|succeeded|completed/i)
    await screenshot(alice, '09-job')
    await alice.goto('/jobs')
    await expect.poll(() => alice.getByTestId('job-row').filter({ hasText: 'e2e-torchrun' }).count()).toBe(1)
    await screenshot(alice, '10-jobs')
  })
})

describe('violations', () => {
  it('shows a violation live when someone else uses a reserved GPU', async () => {
    const token = await tokenOf(base, 'alice')
    await apiCall(base, token, 'POST', '/reservations', {
      gpus: ['sim-002:0'],
      start: new Date().toISOString(),
      duration_minutes: 60,
      title: 'Protected run',
    })
    await alice.goto('/')
    const card = alice.locator('[data-testid="gpu-card"][data-host="sim-002"][data-index="0"]')
    await expect.poll(() => card.textContent(), { timeout: 20_000 }).toContain('alice')
    await control(system.control, 'POST', '/hosts/sim-002/processes', { gpu: 0, user: 'bob', command: 'python steal.py' })
    await expect.poll(() => card.getByTestId('violation-badge').count(), { timeout: 30_000 }).toBe(1)
    await expect.poll(() => card.textContent()).toContain('bob')
    await screenshot(alice, '11-dashboard-violation')
    await alice.goto('/violations')
    const row = alice.getByTestId('violation-row').filter({ hasText: 'bob' })
    await expect.poll(() => row.count(), { timeout: 20_000 }).toBeGreaterThan(0)
    await screenshot(alice, '12-violations')
    await row.first().getByRole('link').first().click()
    await alice.getByTestId('violation-timeline').waitFor()
    await screenshot(alice, '13-violation')
  })
})

describe('admin and dark theme', () => {
  it('shows the admin pages to an admin', async () => {
    const admin = await signedIn(browser, base, 'admin')
    for (const [path, name] of [
      ['/admin/users', '14-admin-users'],
      ['/admin/groups', '15-admin-groups'],
      ['/admin/rules', '16-admin-rules'],
      ['/admin/hosts', '17-admin-hosts'],
    ]) {
      await admin.goto(path)
      await admin.waitForLoadState('networkidle').catch(() => undefined)
      await expect.poll(() => admin.locator('main h1').first().textContent()).toBeTruthy()
      await screenshot(admin, name)
    }
    await admin.context().close()
  })

  it('keeps the admin pages from plain users', async () => {
    await alice.goto('/admin/users')
    await alice.waitForURL((url) => url.pathname === '/')
  })

  it('switches to the dark theme and keeps it', async () => {
    await alice.getByRole('button', { name: /dark theme/ }).click()
    await alice.reload()
    expect(await alice.evaluate(() => document.documentElement.dataset.theme)).toBe('dark')
    await alice.waitForTimeout(1500)
    await screenshot(alice, '18-dashboard-dark')
    await alice.goto(`/reservations?gpus=${gpuOf('sim-001', 1).uuid}&week=${localDay(tomorrow)}`)
    await alice.waitForTimeout(1000)
    await screenshot(alice, '19-calendar-dark')
  })

  it('fits a laptop screen', async () => {
    await alice.setViewportSize({ width: 1280, height: 720 })
    await alice.goto('/')
    await alice.waitForTimeout(1000)
    const overflow = await alice.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)
    expect(overflow).toBeLessThanOrEqual(0)
    await screenshot(alice, '20-dashboard-laptop')
  })
})
