// The Queue page, live: bob opens it from the Jobs list, alice queues a job no host can hold
// (8 GPUs on hosts of 4), and bob sees it appear without a reload, with why it waits and no
// predicted start, and alice among the users. The job is deleted afterwards for the files that
// share the system.
import { afterAll, beforeAll, expect, inject, it } from 'vitest'
import type { Browser } from 'playwright-core'
import { launch, screenshot, signedIn } from './browser.mjs'
import { apiCall, gpus, tokenOf } from './system'

const system = inject('system')
const base = system.url
let browser: Browser
const made: number[] = []

beforeAll(async () => {
  browser = await launch()
})

afterAll(async () => {
  const alice = await tokenOf(base, 'alice')
  for (const id of made) {
    await apiCall(base, alice, 'POST', `/jobs/${id}/stop`).catch(() => undefined)
    await apiCall(base, alice, 'DELETE', `/jobs/${id}`).catch(() => undefined)
  }
  await browser?.close()
})

it('shows the queue in order with reasons and predicted starts, live', async () => {
  const alice = await tokenOf(base, 'alice')
  await gpus(base, alice, 8)
  const bob = await signedIn(browser, base, 'bob')
  await bob.goto('/jobs')
  await bob.getByRole('link', { name: 'Queue', exact: true }).click()
  await bob.waitForURL('**/jobs/queue')
  await expect.poll(() => bob.getByTestId('queue-policy').textContent()).toContain('Fair share')

  const big = await apiCall<{ id: number }>(base, alice, 'POST', '/jobs', {
    name: 'too-big', queued: true, max_runtime_s: 3600, tasks: [{ command: 'python train.py', gpu_count: 8 }],
  })
  made.push(big.id)
  const rows = bob.getByTestId('queue-row')
  await expect.poll(() => rows.count(), { timeout: 30_000 }).toBe(1)
  await expect.poll(() => rows.first().textContent(), { timeout: 30_000 }).toContain('no host has 8 GPUs')
  await expect.poll(() => bob.getByTestId('queue-start').first().textContent()).toBe('not within horizon')
  const users = bob.getByTestId('queue-user')
  await expect.poll(() => users.allTextContents()).toEqual(expect.arrayContaining([expect.stringContaining('alice')]))
  await screenshot(bob, 'queue')
})
