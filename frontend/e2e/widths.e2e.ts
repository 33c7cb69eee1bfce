// Every main page on a phone (390 px) and a desktop (1440 px): nothing wider than the screen
// (no sideways scrolling of the page; a wide table scrolls inside its own card), and on the
// phone the navigation folded behind one Menu button. Against the shared system (2 hosts x 4 GPUs).
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot, signedIn } from './browser.mjs'
import { gpus, tokenOf } from './system'

const base = inject('system').url
let browser: Browser

const PAGES = [
  '/', '/reservations', '/reservations/overview', '/reservations/find', '/jobs', '/jobs/new',
  '/violations', '/reports', '/account', '/admin/users', '/admin/hosts',
]
const PHONE = { width: 390, height: 844 }
const DESKTOP = { width: 1440, height: 900 }

beforeAll(async () => {
  browser = await launch()
})

afterAll(async () => {
  await browser?.close()
})

/** What sticks out past the right edge: the page's own overflow and the widest element. */
async function overflowOf(page: Page, path: string) {
  await page.goto(path)
  await page.locator('main h1').first().waitFor()
  await page.waitForLoadState('networkidle')
  return page.evaluate(() => {
    // inside a box that scrolls sideways of its own, or a closed <details>: not the page's width
    const scrolls = (el: HTMLElement) => {
      for (let up = el.parentElement; up && up !== document.body; up = up.parentElement) {
        if (['auto', 'scroll'].includes(getComputedStyle(up).overflowX)) return true
      }
      return false
    }
    const wide = [...document.querySelectorAll<HTMLElement>('body *')]
      .filter((el) => el.getBoundingClientRect().right > innerWidth + 1 && el.getClientRects().length > 0)
      // (an absolutely placed one may escape such a box: listed, to say what widened the page)
      .filter((el) => getComputedStyle(el).position === 'absolute' || !scrolls(el))
      .filter((el) => !el.parentElement?.closest('details:not([open])'))
      .slice(0, 3)
      .map((el) => `${el.tagName.toLowerCase()}.${[...el.classList].join('.')} ${Math.round(el.getBoundingClientRect().right)}`)
    return { page: location.pathname, overflow: document.documentElement.scrollWidth - innerWidth, wide }
  })
}

describe.each([
  ['phone', PHONE],
  ['desktop', DESKTOP],
])('every main page on a %s', (name, viewport) => {
  it('fits the width of the screen', async () => {
    const page = await signedIn(browser, base, 'admin', viewport)
    const found = []
    for (const path of PAGES) {
      found.push(await overflowOf(page, path))
      await screenshot(page, `widths-${name}-${path.replaceAll('/', '_') || 'root'}`)
    }
    // the pages wider than the screen, with what sticks out of each
    expect(found.filter((f) => f.overflow > 0)).toEqual([])
    await page.context().close()
  })
})

describe('the navigation on a phone', () => {
  it('is one row with a Menu button that opens every link and closes on the next page', async () => {
    const page = await signedIn(browser, base, 'admin', PHONE)
    await page.goto('/jobs')
    await page.locator('main h1').waitFor()
    const header = page.locator('header.topbar')
    const height = await header.evaluate((el) => el.getBoundingClientRect().height)
    expect(height).toBeLessThan(PHONE.height * 0.1) // one row, not three
    const nav = page.getByRole('navigation', { name: 'Main' })
    expect(await nav.isVisible()).toBe(false)

    const menu = page.getByRole('button', { name: /Menu/ })
    await menu.click()
    expect(await menu.getAttribute('aria-expanded')).toBe('true')
    const links = await nav.getByRole('link').allTextContents()
    expect(links).toEqual(expect.arrayContaining(['Dashboard', 'Calendar', 'Jobs', 'Violations', 'Admin']))
    for (const link of await nav.getByRole('link').all()) expect(await link.isVisible()).toBe(true)
    expect(await page.getByRole('button', { name: 'Sign out' }).isVisible()).toBe(true)
    await screenshot(page, 'widths-phone-menu-open')

    await nav.getByRole('link', { name: 'Violations' }).click()
    await page.waitForURL('**/violations')
    expect(await nav.isVisible()).toBe(false)
    expect(await menu.getAttribute('aria-expanded')).toBe('false')
    await page.context().close()
  })
})

describe('the calendar', () => {
  it.each([
    ['phone', PHONE],
    ['desktop', DESKTOP],
  ])('opens on a %s with today and the now-line in view, the past shaded', async (_name, viewport) => {
    // Two GPUs a day for the whole week: 14 columns, wider than a phone.
    const fleet = await gpus(base, await tokenOf(base, 'admin'), 8)
    const page = await signedIn(browser, base, 'alice', viewport)
    await page.goto(`/reservations?view=week&gpus=${fleet[0]!.uuid},${fleet[1]!.uuid}`)
    const now = page.locator('.column.today .now').first()
    await now.waitFor({ state: 'attached' })
    await page.waitForTimeout(300) // the grid's first scroll follows its first paint
    const seen = await page.evaluate(() => {
      const scroller = document.querySelector<HTMLElement>('.scroller')!.getBoundingClientRect()
      const line = document.querySelector<HTMLElement>('.column.today .now')!.getBoundingClientRect()
      return {
        lineInView: line.left >= scroller.left && line.right <= scroller.right + 1 && line.top >= scroller.top && line.bottom <= scroller.bottom,
        todayShaded: document.querySelector('.column.today .past') !== null,
      }
    })
    await screenshot(page, `widths-calendar-${_name}`)
    expect(seen.lineInView).toBe(true)
    expect(seen.todayShaded).toBe(true)
    await page.context().close()
  })
})
