// GPU labels from the hardware in the web UI (the simulated fleet's GPUs are A100-SXM4-80GB):
// the Hosts page shows each host's GPU labels, and Find GPUs finds a slot by label and says which
// label no GPU carries.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import type { Browser, Page } from 'playwright-core'
import { launch, signedIn } from './browser.mjs'

const system = inject('system')
let browser: Browser
let admin: Page

beforeAll(async () => {
  browser = await launch()
  admin = await signedIn(browser, system.url, 'admin')
})

afterAll(async () => {
  await browser?.close()
})

describe('GPU labels', () => {
  it('shows the labels of each host’s GPUs on the Hosts page', async () => {
    await admin.goto('/admin/hosts')
    const chips = admin.getByTestId('host-row').first().getByTestId('gpu-label')
    await expect.poll(() => chips.allTextContents(), { timeout: 30_000 }).toEqual(['arch=ampere', 'memory=80GB', 'model=A100', 'model=A100-80GB'])
  })

  it('finds GPUs by label and names the label no GPU carries', async () => {
    await admin.goto('/reservations/find')
    const labels = admin.getByLabel('Labels')
    await labels.fill('model=A100-80GB')
    await admin.getByRole('button', { name: 'Find', exact: true }).click()
    await admin.getByRole('heading', { name: 'Earliest slot' }).waitFor()
    await labels.fill('arch=hopper')
    await admin.getByRole('button', { name: 'Find', exact: true }).click()
    await expect.poll(() => admin.getByText('no GPU labelled arch=hopper is offered').count(), { timeout: 10_000 }).toBe(1)
  })
})
