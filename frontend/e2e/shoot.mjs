// Screenshot one page of a running Warden, for looking at it while building:
//   node e2e/shoot.mjs URL_PATH NAME [USER] [dark]
// against WARDEN_URL (default http://127.0.0.1:8080); writes test-results/NAME.png and prints
// the page's console errors.
import { launch, screenshot, signedIn } from './browser.mjs'

const [path = '/', name = 'page', user = 'alice', mode = 'light'] = process.argv.slice(2)
const base = process.env.WARDEN_URL ?? 'http://127.0.0.1:8080'
const browser = await launch()
try {
  const page = await signedIn(browser, base, user)
  page.on('console', (m) => m.type() === 'error' && console.error('console:', m.text()))
  page.on('pageerror', (e) => console.error('pageerror:', e.message))
  if (mode === 'dark') await page.evaluate(() => localStorage.setItem('warden.theme', 'dark'))
  await page.goto(path)
  await page.waitForTimeout(Number(process.env.WAIT_MS ?? 2500))
  await screenshot(page, name)
  console.log(`test-results/${name}.png`)
} finally {
  await browser.close()
}
