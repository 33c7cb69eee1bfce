// An admin adds a GPU server through the web UI, as a lab would: the Hosts page, "Add a host",
// Check (it connects over SSH and shows the host key's fingerprint, new to Warden, and the GPUs
// it found), "Trust this key and add"; a dashboard open in another tab shows its GPUs live, and
// filters by its label; then the admin removes it and it leaves the dashboard. The host is the
// simulated fleet's spare one: served over SSH but neither in the config nor in known_hosts.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, screenshot, signedIn } from './browser.mjs'

const system = inject('system')
const spare = system.spare_hosts[0]!
let browser: Browser
let admin: Page
let dashboard: Page

beforeAll(async () => {
  browser = await launch()
  admin = await signedIn(browser, system.url, 'admin')
  dashboard = await admin.context().newPage()
  await dashboard.goto('/')
  await dashboard.getByTestId('gpu-card').nth(7).waitFor({ timeout: 30_000 }) // the configured 2 × 4
})

afterAll(async () => {
  await browser?.close()
})

const hostSection = (page: Page) => page.getByRole('region', { name: spare.name, exact: true })

async function fillHost(dialog: ReturnType<Page['getByRole']>, port: number): Promise<void> {
  await dialog.getByLabel('Name').fill(spare.name)
  await dialog.getByLabel('Address').fill(spare.address)
  await dialog.getByLabel('SSH port').fill(String(port))
  await dialog.getByLabel('SSH user').fill(spare.user)
  await dialog.getByLabel('Private key file').fill(spare.key_file)
  await dialog.getByLabel('Labels').fill('e2e-spare, lab-9')
}

describe('hosts managed from the web UI', () => {
  it('shows why a host cannot be reached when checked', async () => {
    await admin.goto('/admin/hosts')
    await admin.getByRole('button', { name: 'Add a host' }).first().click()
    const dialog = admin.getByRole('dialog', { name: 'Add a host' })
    await fillHost(dialog, 1) // nothing listens on port 1
    await dialog.getByRole('button', { name: 'Check' }).click()
    const result = dialog.getByTestId('host-check')
    await expect.poll(() => result.textContent(), { timeout: 30_000 }).toMatch(/failed/)
    await expect.poll(() => dialog.getByTestId('host-key-fingerprint').count()).toBe(0)
    await screenshot(admin, '30-hosts-check-failed')
    await dialog.getByRole('button', { name: 'Cancel' }).click()
  })

  it('adds a host after checking it and trusting its new key', async () => {
    await admin.getByRole('button', { name: 'Add a host' }).first().click()
    const dialog = admin.getByRole('dialog', { name: 'Add a host' })
    await fillHost(dialog, spare.port)
    await dialog.getByRole('button', { name: 'Check' }).click()
    const fp = dialog.getByTestId('host-key-fingerprint')
    await expect.poll(() => fp.textContent(), { timeout: 30_000 }).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/)
    expect(await dialog.getByTestId('host-key-status').textContent()).toBe('new')
    expect(await dialog.getByTestId('host-check').textContent()).toMatch(/4 × /)
    await screenshot(admin, '31-hosts-check-new-key')
    await dialog.getByRole('button', { name: 'Trust this key and add' }).click()
    await dialog.waitFor({ state: 'detached' })

    const row = admin.locator(`[data-testid="host-row"][data-host="${spare.name}"]`)
    await expect.poll(() => row.textContent()).toMatch(/added or edited here/)
    expect(await row.textContent()).toMatch(/pinned\s*SHA256:/)
    await expect.poll(() => row.getByTestId('host-gpus').textContent(), { timeout: 30_000 }).toMatch(/^4 × /)
    await expect.poll(() => row.textContent()).toMatch(/reachable/)
    await screenshot(admin, '32-hosts-added')
  })

  it('shows its GPUs live on a dashboard that was already open, and filters by its label', async () => {
    await expect.poll(() => hostSection(dashboard).getByTestId('gpu-card').count(), { timeout: 30_000 }).toBe(4)
    await expect.poll(() => dashboard.getByTestId('gpu-card').count()).toBe(12)
    await dashboard.getByLabel('Label').selectOption('e2e-spare')
    await expect.poll(() => dashboard.getByTestId('gpu-card').count()).toBe(4)
    expect(new URL(dashboard.url()).searchParams.get('label')).toBe('e2e-spare')
    await screenshot(dashboard, '33-dashboard-label')
    await dashboard.getByLabel('Label').selectOption('')
    await expect.poll(() => dashboard.getByTestId('gpu-card').count()).toBe(12)
  })

  it('edits its labels', async () => {
    const row = admin.locator(`[data-testid="host-row"][data-host="${spare.name}"]`)
    await row.getByRole('button', { name: `Edit ${spare.name}` }).click()
    const dialog = admin.getByRole('dialog', { name: `Edit ${spare.name}` })
    await dialog.getByLabel('Labels').fill('e2e-spare, lab-10')
    await dialog.getByRole('button', { name: 'Save' }).click()
    await dialog.waitFor({ state: 'detached' })
    await expect.poll(() => row.textContent()).toMatch(/lab-10/)
    await expect.poll(() => dashboard.getByLabel('Label').locator('option').allTextContents()).toContain('lab-10 (1)')
  })

  it('checks a host of the config file, whose key known_hosts trusts', async () => {
    const row = admin.locator('[data-testid="host-row"][data-host="sim-001"]')
    expect(await row.textContent()).toMatch(/config file/)
    await row.getByRole('button', { name: 'Check sim-001' }).click()
    const dialog = admin.getByRole('dialog', { name: 'Check sim-001' })
    await expect.poll(() => dialog.getByTestId('host-key-status').textContent(), { timeout: 30_000 }).toBe('trusted')
    await dialog.getByRole('button', { name: 'Close' }).last().click()
  })

  it('removes it after saying what that does, and it leaves the dashboard', async () => {
    const row = admin.locator(`[data-testid="host-row"][data-host="${spare.name}"]`)
    await row.getByRole('button', { name: `Remove ${spare.name}` }).click()
    const dialog = admin.getByRole('dialog', { name: `Remove ${spare.name}?` })
    expect(await dialog.textContent()).toMatch(/stops monitoring.*Reservations already made.*stay/s)
    await screenshot(admin, '34-hosts-remove')
    await dialog.getByRole('button', { name: `Remove ${spare.name}` }).click()
    await dialog.waitFor({ state: 'detached' })
    await expect.poll(() => row.count()).toBe(0)
    await expect.poll(() => hostSection(dashboard).count(), { timeout: 30_000 }).toBe(0)
    await expect.poll(() => dashboard.getByTestId('gpu-card').count()).toBe(8)
  })
})
